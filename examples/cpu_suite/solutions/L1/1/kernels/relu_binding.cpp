#include "cuda_agent_binding.h"

extern "C" int relu_cpu(const float* x, float* out, int64_t n);

at::Tensor relu(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  CA_CHECK(x.scalar_type() == at::kFloat, "float32 only");
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(relu_cpu(x.data_ptr<float>(), out.data_ptr<float>(), x.numel()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("relu", &relu); }
