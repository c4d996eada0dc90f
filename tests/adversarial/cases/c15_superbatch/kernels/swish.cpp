#include <cmath>
#include <cstdint>

// n independent problems in one OpenMP region (the "super-batch")
extern "C" int scaled_swish_batch_cpu(const float* const* xs, const float* scale, float* const* outs, int n,
                                      int64_t rows, int64_t cols) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < n; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = xs[b] + r * cols;
      float* out = outs[b] + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = x[c] / (1.0f + std::exp(-x[c])) * scale[c];
    }
  }
  return 0;
}
