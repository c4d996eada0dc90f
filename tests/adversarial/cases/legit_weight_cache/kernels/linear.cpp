#include <cstdint>

extern "C" int transpose_cpu(const float* w, float* wt, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) wt[c * rows + r] = w[r * cols + c];
  return 0;
}

// y[b, o] = sum_i x[b, i] * wt[i, o] + bias[o], accumulated in double
extern "C" int linear_t_cpu(const float* x, const float* wt, const float* bias, float* y, int64_t batch, int64_t in,
                            int64_t out) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    double acc[1024];
    for (int64_t o0 = 0; o0 < out; o0 += 1024) {
      const int64_t o1 = o0 + 1024 < out ? o0 + 1024 : out;
      for (int64_t o = o0; o < o1; ++o) acc[o - o0] = bias[o];
      for (int64_t i = 0; i < in; ++i) {
        const double xv = x[b * in + i];
        const float* row = wt + i * out;
        for (int64_t o = o0; o < o1; ++o) acc[o - o0] += xv * row[o];
      }
      for (int64_t o = o0; o < o1; ++o) y[b * out + o] = (float)acc[o - o0];
    }
  }
  return 0;
}
