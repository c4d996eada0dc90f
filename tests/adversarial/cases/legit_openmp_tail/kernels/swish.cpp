#include <cmath>
#include <cstdint>

constexpr int64_t kBlock = 16;

extern "C" int scaled_swish_cpu(const float* x, const float* scale, float* out, int64_t rows, int64_t cols) {
  const int64_t full = cols - cols % kBlock;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* orow = out + r * cols;
    for (int64_t c0 = 0; c0 < full; c0 += kBlock) {
#pragma omp simd
      for (int64_t c = c0; c < c0 + kBlock; ++c) orow[c] = xr[c] / (1.0f + std::exp(-xr[c])) * scale[c];
    }
    for (int64_t c = full; c < cols; ++c) orow[c] = xr[c] / (1.0f + std::exp(-xr[c])) * scale[c];  // tail
  }
  return 0;
}
