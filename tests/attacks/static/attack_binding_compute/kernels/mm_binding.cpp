#include "cuda_agent_binding.h"
#include <torch/extension.h>

// Class 2: the "kernel" is torch itself; the comment at::matmul is not reported.
at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  auto c = torch::mm(a, b);
  const char* s = "at::relu(";
  return c.relu();
}

CUDA_AGENT_OPS(m) { m.def("mm", &mm); }
