#include <cmath>
#include <cstdint>

extern "C" int swish_cpu(const float* x, float* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
  return 0;
}

extern "C" int scale_rows_inplace_cpu(float* y, const float* scale, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] *= scale[c];
  return 0;
}
