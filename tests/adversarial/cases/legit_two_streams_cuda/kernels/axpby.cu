// Two streams, correctly synchronised: current -> side (inputs ready), side -> current (result ready).
#include <cuda_runtime.h>
#include <cstdint>

__global__ void axpby_kernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                             float a, float b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = a * x[i] + b * y[i];
}

extern "C" int axpby_launch(const float* x, const float* y, float* out, float a, float b, int64_t n, void* stream) {
  static cudaStream_t side = nullptr;
  static cudaEvent_t ready = nullptr, done = nullptr;
  if (!side) {
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  }
  cudaStream_t current = (cudaStream_t)stream;
  const int64_t first = n / 2;
  cudaEventRecord(ready, current);
  cudaStreamWaitEvent(side, ready, 0);
  axpby_kernel<<<528, 256, 0, current>>>(x, y, out, a, b, first);
  axpby_kernel<<<528, 256, 0, side>>>(x + first, y + first, out + first, a, b, n - first);
  cudaEventRecord(done, side);
  cudaStreamWaitEvent(current, done, 0);  // the join: the current stream sees all the work
  return (int)cudaGetLastError();
}
