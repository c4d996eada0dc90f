#include "cuda_agent_binding.h"
#include <ATen/ops/mul.h>
#include <ATen/ops/sigmoid.h>

at::Tensor scaled_swish(const at::Tensor& x, const at::Tensor& scale) {
  CA_CHECK_INPUT(x);
  return at::mul(at::mul(x, at::sigmoid(x)), scale);
}

CUDA_AGENT_OPS(m) { m.def("scaled_swish", &scaled_swish); }
