// PLANTED BUG (tests/gpu/planted): reads one element past the end of x.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void double_peek(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) {
    // the next element is "peeked at" for a check that never matches: right numbers, but the
    // last thread reads x[n], outside the buffer
    float next = x[i + 1];
    out[i] = next == 1234.5678f ? 0.0f : 2.0f * x[i];
  }
}

extern "C" int double_peek_launch(const float* x, float* out, int64_t n, void* stream) {
  double_peek<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(x, out, n);
  return (int)cudaGetLastError();
}
