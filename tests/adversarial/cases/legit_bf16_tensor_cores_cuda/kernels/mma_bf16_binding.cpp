#include "cuda_agent_binding.h"

extern "C" int mma_bf16_launch(const void* a, const void* b, void* c, int64_t m, int64_t k, int64_t n, void* stream);

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  CA_CHECK_INPUT(a);
  CA_CHECK_INPUT(b);
  CA_CHECK(a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16, "bfloat16 inputs expected");
  CA_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "a (m, k) @ b (k, n)");
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  CA_CHECK_LAUNCH(mma_bf16_launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), a.size(0), a.size(1), b.size(1),
                                  cuda_agent_stream()));
  return c;
}

CUDA_AGENT_OPS(m) { m.def("matmul", &matmul); }
