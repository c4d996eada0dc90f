#include <cublas_v2.h>
#include <cudnn.h>
#include <cuda_runtime.h>

// Side stream for the epilogue, joined back to the caller's stream before returning.
static cudaStream_t side = nullptr;

extern "C" int launch_sgemm(const float* a, const float* b, float* c, int m, int n, int k, void* stream) {
  static cublasHandle_t handle = nullptr;
  if (!handle) cublasCreate(&handle);
  cublasSetStream(handle, (cudaStream_t)stream);
  cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);
  const float alpha = 1.f, beta = 0.f;
  // row-major C = A B computed as column-major C^T = B^T A^T
  cublasStatus_t st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, n, a, k, &beta, c, n);
  cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_32F, n, a, CUDA_R_32F, k, &beta, c,
               CUDA_R_32F, n, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : 1;
}

__global__ void relu_inplace(float* y, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    y[i] = y[i] > 0.f ? y[i] : 0.f;
}

extern "C" int launch_conv_relu(const float* x, const float* w, float* y, int n, int c, int h, int wd, int k,
                                int r, int s, void* stream) {
  static cudnnHandle_t h_ = nullptr;
  if (!h_) cudnnCreate(&h_);
  cudnnSetStream(h_, (cudaStream_t)stream);
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t fd;
  cudnnConvolutionDescriptor_t cd;
  cudnnCreateTensorDescriptor(&xd);
  cudnnCreateTensorDescriptor(&yd);
  cudnnCreateFilterDescriptor(&fd);
  cudnnCreateConvolutionDescriptor(&cd);
  cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, wd);
  cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, s);
  cudnnSetConvolution2dDescriptor(cd, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH);
  int on, oc, oh, ow;
  cudnnGetConvolution2dForwardOutputDim(cd, xd, fd, &on, &oc, &oh, &ow);
  cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow);
  size_t ws_bytes = 0;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnGetConvolutionForwardWorkspaceSize(h_, xd, fd, cd, yd, algo, &ws_bytes);
  void* ws = nullptr;
  if (ws_bytes) cudaMallocAsync(&ws, ws_bytes, (cudaStream_t)stream);
  const float alpha = 1.f, beta = 0.f;
  cudnnStatus_t st = cudnnConvolutionForward(h_, &alpha, xd, x, fd, w, cd, algo, ws, ws_bytes, &beta, yd, y);
  if (ws) cudaFreeAsync(ws, (cudaStream_t)stream);
  // epilogue on a side stream, joined back with an event
  if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaEvent_t ready, done;
  cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  cudaEventRecord(ready, (cudaStream_t)stream);
  cudaStreamWaitEvent(side, ready, 0);
  long total = (long)on * oc * oh * ow;
  relu_inplace<<<256, 256, 0, side>>>(y, total);
  cudaEventRecord(done, side);
  cudaStreamWaitEvent((cudaStream_t)stream, done, 0);
  cudaEventDestroy(ready);
  cudaEventDestroy(done);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(fd);
  cudnnDestroyConvolutionDescriptor(cd);
  return st == CUDNN_STATUS_SUCCESS ? 0 : 1;
}
