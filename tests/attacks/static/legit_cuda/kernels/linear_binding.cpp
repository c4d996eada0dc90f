#include "cuda_agent_binding.h"
#include <vector>

extern "C" int launch_linear_scale_relu(const float* x, const float* w, const float* b, float* out,
                                        int M, int N, int K, float scale, void* stream);

static void check_2d(const at::Tensor& t, const char* name) {
  CA_CHECK(t.dim() == 2, name, " must be 2-D, got ", t.dim(), " dims");
}

at::Tensor linear_scale_relu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double scale) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(w);
  CA_CHECK_INPUT(b);
  check_2d(x, "x");
  check_2d(w, "w");
  CA_CHECK(x.scalar_type() == at::kFloat, "x must be float32");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  CA_CHECK(w.size(1) == K && b.numel() == N, "shape mismatch");
  at::Tensor out = at::empty({M, N}, x.options());
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  CA_CHECK_LAUNCH(launch_linear_scale_relu(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
                                           out.data_ptr<float>(), (int)M, (int)N, (int)K, (float)scale,
                                           cuda_agent_stream()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("linear_scale_relu", &linear_scale_relu); }
