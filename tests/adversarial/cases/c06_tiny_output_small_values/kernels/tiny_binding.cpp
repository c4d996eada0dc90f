#include "cuda_agent_binding.h"

extern "C" int almost_zero_cpu(const float* x, float* out, int64_t n);

at::Tensor almost_zero(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(almost_zero_cpu(x.data_ptr<float>(), out.data_ptr<float>(), x.numel()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("almost_zero", &almost_zero); }
