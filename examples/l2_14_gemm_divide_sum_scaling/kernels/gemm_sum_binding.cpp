#include "cuda_agent_binding.h"

extern "C" int gemm_div_sum_scale_launch(const float* x, const float* w, float* wsum, float* out,
                                         int64_t batch, int64_t in, int64_t hidden, float scale, void* stream);

// sum(x @ w.T / 2, dim=1, keepdim=True) * scale, without the GEMM
at::Tensor gemm_div_sum_scale(const at::Tensor& x, const at::Tensor& w, double scale) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(w);
  CA_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "float32 inputs expected");
  CA_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "x: (B, in), w: (hidden, in)");
  at::Tensor wsum = at::empty({w.size(1)}, x.options());
  at::Tensor out = at::empty({x.size(0), 1}, x.options());
  CA_CHECK_LAUNCH(gemm_div_sum_scale_launch(x.data_ptr<float>(), w.data_ptr<float>(), wsum.data_ptr<float>(),
                                            out.data_ptr<float>(), x.size(0), x.size(1), w.size(0),
                                            (float)scale, cuda_agent_stream()));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("gemm_div_sum_scale", &gemm_div_sum_scale); }
