#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ out, float a, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = a * x[i];
}

__global__ void axpy_inplace_kernel(float* __restrict__ out, const float* __restrict__ y, float b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] += b * y[i];
}

extern "C" int scale_launch(const float* x, float* out, float a, int64_t n, void* stream) {
  scale_kernel<<<1056, 256, 0, (cudaStream_t)stream>>>(x, out, a, n);
  return (int)cudaGetLastError();
}

extern "C" int axpy_inplace_launch(float* out, const float* y, float b, int64_t n, void* stream) {
  axpy_inplace_kernel<<<1056, 256, 0, (cudaStream_t)stream>>>(out, y, b, n);
  return (int)cudaGetLastError();
}
