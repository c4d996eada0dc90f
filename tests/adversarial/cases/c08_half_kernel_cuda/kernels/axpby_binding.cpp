#include "cuda_agent_binding.h"

extern "C" int axpby_launch(const float* x, const float* y, float* out, float a, float b, int64_t n, void* stream);

at::Tensor axpby(const at::Tensor& x, const at::Tensor& y, double a, double b) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(y);
  CA_CHECK(x.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat, "float32 inputs expected");
  CA_CHECK(x.sizes() == y.sizes(), "x and y must have the same shape");
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(axpby_launch(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), (float)a, (float)b,
                               x.numel(), cuda_agent_stream()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("axpby", &axpby); }
