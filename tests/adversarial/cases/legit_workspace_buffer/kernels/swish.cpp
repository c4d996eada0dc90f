#include <cmath>
#include <cstdint>

// two passes through a caller-provided scratch buffer: sigmoid first, then x * s * scale
extern "C" int scaled_swish_two_pass_cpu(const float* x, const float* scale, float* scratch, float* out,
                                         int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) scratch[i] = 1.0f / (1.0f + std::exp(-x[i]));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = x[r * cols + c] * scratch[r * cols + c] * scale[c];
  return 0;
}
