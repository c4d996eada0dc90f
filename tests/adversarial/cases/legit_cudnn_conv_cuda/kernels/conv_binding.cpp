// 3x3 convolution, stride 1, padding 1, through cuDNN in FP32 (FMA math: no TF32).
#include "cuda_agent_binding.h"
#include <cudnn.h>

#define DNN_OK(call)                                                                           \
  do {                                                                                         \
    cudnnStatus_t _s = (call);                                                                 \
    CA_CHECK(_s == CUDNN_STATUS_SUCCESS, "cuDNN error ", cudnnGetErrorString(_s), ": " #call); \
  } while (0)

static cudnnHandle_t dnn() {
  static cudnnHandle_t h = nullptr;
  if (!h) DNN_OK(cudnnCreate(&h));
  DNN_OK(cudnnSetStream(h, (cudaStream_t)cuda_agent_stream()));
  return h;
}

static bool gemm_like(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}

at::Tensor conv3x3(const at::Tensor& x, const at::Tensor& w) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(w);
  CA_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "float32 only");
  CA_CHECK(x.dim() == 4 && w.dim() == 4 && w.size(1) == x.size(1), "x (N, C, H, W), w (K, C, 3, 3)");
  cudnnHandle_t h = dnn();
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  DNN_OK(cudnnCreateTensorDescriptor(&xd));
  DNN_OK(cudnnCreateTensorDescriptor(&yd));
  DNN_OK(cudnnCreateFilterDescriptor(&wd));
  DNN_OK(cudnnCreateConvolutionDescriptor(&cd));
  DNN_OK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)x.size(0), (int)x.size(1),
                                    (int)x.size(2), (int)x.size(3)));
  DNN_OK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)w.size(0), (int)w.size(1),
                                    (int)w.size(2), (int)w.size(3)));
  DNN_OK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  DNN_OK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  int n = 0, c = 0, oh = 0, ow = 0;
  DNN_OK(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &c, &oh, &ow));
  DNN_OK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, oh, ow));
  at::Tensor y = at::empty({n, c, oh, ow}, x.options());

  constexpr int kMaxAlgos = 8;
  cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
  int found = 0;
  DNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, kMaxAlgos, &found, perf));
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  for (int i = 0; i < found; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH && gemm_like(perf[i].algo)) {
      algo = perf[i].algo;
      break;
    }
  }
  size_t ws_bytes = 0;
  DNN_OK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws_bytes));
  at::Tensor ws = at::empty({(int64_t)ws_bytes + 1}, x.options().dtype(at::kByte));
  const float one = 1.f, zero = 0.f;
  DNN_OK(cudnnConvolutionForward(h, &one, xd, x.data_ptr(), wd, w.data_ptr(), cd, algo, ws.data_ptr(), ws_bytes,
                                 &zero, yd, y.data_ptr()));
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return y;
}

CUDA_AGENT_OPS(m) { m.def("conv3x3", &conv3x3); }
