// ResNet basic block, training-mode BatchNorm (batch statistics, as the reference runs):
// three cuDNN convolutions (FP32 FMA math, no TF32) + custom statistics / normalize / fused tail kernels.
#include "cuda_agent_binding.h"
#include <cudnn.h>

extern "C" int bn_stats_launch(const float* x, double* sum, double* sumsq, int64_t n, int64_t c, int64_t hw, void* s);
extern "C" int bn_relu_launch(const float* x, float* y, const double* sum, const double* sumsq, const float* g,
                              const float* b, int64_t n, int64_t c, int64_t hw, float eps, void* s);
extern "C" int bn_add_relu_launch(const float* a, const float* bsrc, float* y, const double* sa, const double* qa,
                                  const float* ga, const float* ba, const double* sb, const double* qb,
                                  const float* gb, const float* bb, int64_t n, int64_t c, int64_t hw, float eps,
                                  void* s);

#define DNN(call)                                                                  \
  do {                                                                             \
    cudnnStatus_t _st = (call);                                                    \
    CA_CHECK(_st == CUDNN_STATUS_SUCCESS, "cuDNN: ", cudnnGetErrorString(_st), " in " #call); \
  } while (0)

static cudnnHandle_t handle() {
  static cudnnHandle_t h = nullptr;
  if (!h) DNN(cudnnCreate(&h));
  DNN(cudnnSetStream(h, (cudaStream_t)cuda_agent_stream()));
  return h;
}

// y = conv2d(x, w), no bias
static at::Tensor conv(const at::Tensor& x, const at::Tensor& w, int64_t stride, int64_t pad) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(w);
  cudnnHandle_t h = handle();
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  DNN(cudnnCreateTensorDescriptor(&xd));
  DNN(cudnnCreateTensorDescriptor(&yd));
  DNN(cudnnCreateFilterDescriptor(&wd));
  DNN(cudnnCreateConvolutionDescriptor(&cd));
  DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, x.size(0), x.size(1), x.size(2), x.size(3)));
  DNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, w.size(0), w.size(1), w.size(2), w.size(3)));
  DNN(cudnnSetConvolution2dDescriptor(cd, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  DNN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  int n, c, hh, ww;
  DNN(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &c, &hh, &ww));
  DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hh, ww));
  at::Tensor y = at::empty({n, c, hh, ww}, x.options());
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int found = 0;
  DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &found, perf));
  cudnnConvolutionFwdAlgo_t algo = perf[0].algo;
  size_t ws_bytes = 0;
  for (int i = 0; i < found; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH) { algo = perf[i].algo; break; }
  }
  DNN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws_bytes));
  at::Tensor ws = at::empty({(int64_t)ws_bytes + 1}, x.options().dtype(at::kByte));
  const float one = 1.f, zero = 0.f;
  DNN(cudnnConvolutionForward(h, &one, xd, x.data_ptr(), wd, w.data_ptr(), cd, algo, ws.data_ptr(), ws_bytes, &zero,
                              yd, y.data_ptr()));
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return y;
}

static std::pair<at::Tensor, at::Tensor> stats(const at::Tensor& y) {
  at::Tensor sum = at::empty({y.size(1)}, y.options().dtype(at::kDouble));
  at::Tensor sq = at::empty({y.size(1)}, y.options().dtype(at::kDouble));
  CA_CHECK_LAUNCH(bn_stats_launch(y.data_ptr<float>(), sum.data_ptr<double>(), sq.data_ptr<double>(), y.size(0),
                                  y.size(1), y.size(2) * y.size(3), cuda_agent_stream()));
  return {sum, sq};
}

at::Tensor basic_block(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& g1, const at::Tensor& b1,
                       const at::Tensor& w2, const at::Tensor& g2, const at::Tensor& b2, const at::Tensor& wd,
                       const at::Tensor& gd, const at::Tensor& bd, int64_t stride, double eps) {
  CA_CHECK(x.scalar_type() == at::kFloat, "float32 input expected");
  at::Tensor y1 = conv(x, w1, stride, 1);
  auto s1 = stats(y1);
  const int64_t n = y1.size(0), c = y1.size(1), hw = y1.size(2) * y1.size(3);
  CA_CHECK_LAUNCH(bn_relu_launch(y1.data_ptr<float>(), y1.data_ptr<float>(), s1.first.data_ptr<double>(),
                                 s1.second.data_ptr<double>(), g1.data_ptr<float>(), b1.data_ptr<float>(), n, c, hw,
                                 (float)eps, cuda_agent_stream()));
  at::Tensor y2 = conv(y1, w2, 1, 1);
  auto s2 = stats(y2);
  at::Tensor yd = conv(x, wd, stride, 0);
  auto sd = stats(yd);
  at::Tensor out = at::empty_like(y2);
  CA_CHECK_LAUNCH(bn_add_relu_launch(y2.data_ptr<float>(), yd.data_ptr<float>(), out.data_ptr<float>(),
                                     s2.first.data_ptr<double>(), s2.second.data_ptr<double>(), g2.data_ptr<float>(),
                                     b2.data_ptr<float>(), sd.first.data_ptr<double>(), sd.second.data_ptr<double>(),
                                     gd.data_ptr<float>(), bd.data_ptr<float>(), n, c, hw, (float)eps,
                                     cuda_agent_stream()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("basic_block", &basic_block); }
