#include "cuda_agent_binding.h"

extern "C" int row_scale_launch(const float* a, const float* b, float* out, int64_t rows, int64_t cols,
                                void* stream);

// out = diag(a) @ b
at::Tensor diag_matmul(const at::Tensor& a, const at::Tensor& b) {
  CA_CHECK_INPUT(a);
  CA_CHECK_INPUT(b);
  CA_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "float32 inputs expected");
  CA_CHECK(a.dim() == 1 && b.dim() == 2 && a.size(0) == b.size(0), "a: (N,), b: (N, M)");
  at::Tensor out = at::empty_like(b);
  CA_CHECK_LAUNCH(row_scale_launch(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
                                   b.size(0), b.size(1), cuda_agent_stream()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("diag_matmul", &diag_matmul); }
