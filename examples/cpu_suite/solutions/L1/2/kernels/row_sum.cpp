// Row sums on the CPU: one row per iteration, a float accumulator per row (as torch's own
// float32 sum accumulates in float), OpenMP over rows.
#include <cstdint>

extern "C" int row_sum_cpu(const float* x, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < cols; ++c) acc += xr[c];
    out[r] = acc;
  }
  return 0;
}
