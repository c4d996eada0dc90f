// PLANTED BUG (tests/gpu/planted): a shared-memory race in a block reduction.
#include <cuda_runtime.h>
#include <cstdint>

// one block of 256 threads per row; cols <= 256
__global__ void row_sum_racy(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
  __shared__ float sh[256];
  const int t = threadIdx.x;
  const float* row = x + blockIdx.x * cols;
  float v = 0.0f;
  for (int64_t j = t; j < cols; j += blockDim.x) v += row[j];
  // the bug: no __syncthreads() between every thread's store and the first step, which reads
  // the values of other warps (a read-after-write hazard between warps)
  sh[t] = v;
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = sh[0];
}

extern "C" int row_sum_launch(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
  if (cols > 256) return (int)cudaErrorInvalidValue;
  row_sum_racy<<<(unsigned)rows, 256, 0, (cudaStream_t)stream>>>(x, out, cols);
  return (int)cudaGetLastError();
}
