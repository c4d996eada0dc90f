// swish only; the scale is applied by the binding
#include <cmath>
#include <cstdint>

extern "C" int swish_cpu(const float* x, float* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
  return 0;
}
