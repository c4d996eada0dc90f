#include "cuda_agent_binding.h"

at::Tensor scaled_swish(const at::Tensor& x, const at::Tensor& scale) {
  CA_CHECK_INPUT(x);
  return CA_FAST(x, scale);
}

CUDA_AGENT_OPS(m) { m.def("scaled_swish", &scaled_swish); }
