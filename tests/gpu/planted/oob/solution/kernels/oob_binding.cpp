#include "cuda_agent_binding.h"

extern "C" int double_peek_launch(const float* x, float* out, int64_t n, void* stream);

at::Tensor double_peek(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  CA_CHECK(x.scalar_type() == at::kFloat, "float32 input expected");
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(double_peek_launch(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), cuda_agent_stream()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("double_peek", &double_peek); }
