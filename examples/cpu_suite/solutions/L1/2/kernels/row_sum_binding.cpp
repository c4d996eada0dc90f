#include "cuda_agent_binding.h"

extern "C" int row_sum_cpu(const float* x, float* out, int64_t rows, int64_t cols);

at::Tensor row_sum(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  CA_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2, "float32 (rows, cols) only");
  at::Tensor out = at::empty({x.size(0)}, x.options());
  CA_CHECK_LAUNCH(row_sum_cpu(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1)));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("row_sum", &row_sum); }
