// Fused swish * scale on the CPU: one pass over x, OpenMP over rows.
#include <cmath>
#include <cstdint>

extern "C" int scaled_swish_cpu(const float* x, const float* scale, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* orow = out + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      float v = xr[c];
      orow[c] = v / (1.0f + std::exp(-v)) * scale[c];
    }
  }
  return 0;
}
