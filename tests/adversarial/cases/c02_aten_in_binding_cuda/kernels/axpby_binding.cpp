#include "cuda_agent_binding.h"
#include <ATen/ops/add.h>
#include <ATen/ops/mul.h>

at::Tensor axpby(const at::Tensor& x, const at::Tensor& y, double a, double b) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(y);
  return at::add(at::mul(x, a), at::mul(y, b));
}

CUDA_AGENT_OPS(m) { m.def("axpby", &axpby); }
