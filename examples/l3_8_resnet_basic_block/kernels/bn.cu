// Training-mode BatchNorm pieces for the ResNet basic block (NCHW, float32):
//   channel_stats: per-channel sum and sum of squares (double accumulators, atomics)
//   bn_relu:       y = relu((x - mean) * rstd * gamma + beta)          (in place allowed)
//   bn_add_relu:   y = relu(bn(a; stats_a) + bn(b; stats_b))             (the block's tail, fused)
#include <cuda_runtime.h>
#include <cstdint>

__global__ void channel_stats(const float* __restrict__ x, double* __restrict__ sum, double* __restrict__ sumsq,
                              int64_t n, int64_t c, int64_t hw) {
  const int64_t ch = blockIdx.x;
  const int64_t per_ch = n * hw;
  float s = 0.f, q = 0.f;
  for (int64_t i = blockIdx.y * (int64_t)blockDim.x + threadIdx.x; i < per_ch; i += (int64_t)gridDim.y * blockDim.x) {
    const int64_t img = i / hw, pix = i - img * hw;
    const float v = x[(img * c + ch) * hw + pix];
    s += v;
    q += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) {
    s += __shfl_down_sync(0xffffffffu, s, off);
    q += __shfl_down_sync(0xffffffffu, q, off);
  }
  __shared__ double ss[32], qq[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { ss[warp] = s; qq[warp] = q; }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ts = 0, tq = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) { ts += ss[w]; tq += qq[w]; }
    atomicAdd(sum + ch, ts);
    atomicAdd(sumsq + ch, tq);
  }
}

__device__ __forceinline__ void scale_shift(const double* sum, const double* sumsq, const float* g, const float* b,
                                            int64_t ch, double count, float eps, float& sc, float& sh) {
  const double mean = sum[ch] / count;
  double var = sumsq[ch] / count - mean * mean;
  if (var < 0) var = 0;
  const float rstd = (float)(1.0 / sqrt(var + (double)eps));
  sc = g[ch] * rstd;
  sh = b[ch] - (float)mean * sc;
}

__global__ void bn_relu(const float* __restrict__ x, float* __restrict__ y, const double* sum, const double* sumsq,
                        const float* g, const float* b, int64_t n, int64_t c, int64_t hw, float eps) {
  const int64_t plane = blockIdx.y;  // img * c + ch
  const int64_t ch = plane % c;
  float sc, sh;
  scale_shift(sum, sumsq, g, b, ch, (double)(n * hw), eps, sc, sh);
  const float* xp = x + plane * hw;
  float* yp = y + plane * hw;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < hw; i += (int64_t)gridDim.x * blockDim.x)
    yp[i] = fmaxf(xp[i] * sc + sh, 0.f);
}

__global__ void bn_add_relu(const float* __restrict__ a, const float* __restrict__ bsrc, float* __restrict__ y,
                            const double* sa, const double* qa, const float* ga, const float* ba,
                            const double* sb, const double* qb, const float* gb, const float* bb,
                            int64_t n, int64_t c, int64_t hw, float eps) {
  const int64_t plane = blockIdx.y;
  const int64_t ch = plane % c;
  float sc1, sh1, sc2, sh2;
  scale_shift(sa, qa, ga, ba, ch, (double)(n * hw), eps, sc1, sh1);
  scale_shift(sb, qb, gb, bb, ch, (double)(n * hw), eps, sc2, sh2);
  const float* ap = a + plane * hw;
  const float* bp = bsrc + plane * hw;
  float* yp = y + plane * hw;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < hw; i += (int64_t)gridDim.x * blockDim.x)
    yp[i] = fmaxf(ap[i] * sc1 + sh1 + bp[i] * sc2 + sh2, 0.f);
}

static unsigned blocks_for(int64_t work) { return (unsigned)((work + 255) / 256 < 64 ? (work + 255) / 256 : 64); }

extern "C" int bn_stats_launch(const float* x, double* sum, double* sumsq, int64_t n, int64_t c, int64_t hw,
                               void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  cudaMemsetAsync(sum, 0, c * sizeof(double), s);
  cudaMemsetAsync(sumsq, 0, c * sizeof(double), s);
  dim3 grid((unsigned)c, 64);
  channel_stats<<<grid, 256, 0, s>>>(x, sum, sumsq, n, c, hw);
  return (int)cudaGetLastError();
}

extern "C" int bn_relu_launch(const float* x, float* y, const double* sum, const double* sumsq, const float* g,
                              const float* b, int64_t n, int64_t c, int64_t hw, float eps, void* stream) {
  dim3 grid(blocks_for(hw), (unsigned)(n * c));
  bn_relu<<<grid, 256, 0, (cudaStream_t)stream>>>(x, y, sum, sumsq, g, b, n, c, hw, eps);
  return (int)cudaGetLastError();
}

extern "C" int bn_add_relu_launch(const float* a, const float* bsrc, float* y, const double* sa, const double* qa,
                                  const float* ga, const float* ba, const double* sb, const double* qb,
                                  const float* gb, const float* bb, int64_t n, int64_t c, int64_t hw, float eps,
                                  void* stream) {
  dim3 grid(blocks_for(hw), (unsigned)(n * c));
  bn_add_relu<<<grid, 256, 0, (cudaStream_t)stream>>>(a, bsrc, y, sa, qa, ga, ba, sb, qb, gb, bb, n, c, hw, eps);
  return (int)cudaGetLastError();
}
