// Swish * scale on the CPU, one pass over x, OpenMP over rows.
#include <cmath>
#include <cstdint>

extern "C" int scaled_swish_cpu(const float* x, const float* scale, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c];
      out[r * cols + c] = v / (1.0f + std::exp(-v)) * scale[c];
    }
  }
  return 0;
}
