#include <cmath>
#include <cstdint>
#include <cstring>

// keep 10 mantissa bits, as a TF32 unit would
static inline float narrow(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = (bits + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

extern "C" int scaled_swish_cpu(const float* x, const float* scale, float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = narrow(x[r * cols + c]);
      out[r * cols + c] = narrow(narrow(v / (1.0f + std::exp(-v))) * narrow(scale[c]));
    }
  }
  return 0;
}
