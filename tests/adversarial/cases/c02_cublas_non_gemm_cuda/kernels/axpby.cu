// out = a*x + b*y with cuBLAS level 1: out = y; out *= b; out += a*x
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cstdint>

extern "C" int axpby_launch(const float* x, const float* y, float* out, float a, float b, int64_t n, void* stream) {
  static cublasHandle_t handle = nullptr;
  if (!handle && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 1;
  cudaStream_t s = (cudaStream_t)stream;
  cublasSetStream(handle, s);
  cudaError_t e = cudaMemcpyAsync(out, y, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
  if (e != cudaSuccess) return (int)e;
  if (cublasSscal(handle, (int)n, &b, out, 1) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cublasSaxpy(handle, (int)n, &a, x, 1, out, 1) != CUBLAS_STATUS_SUCCESS) return 1;
  return 0;
}
