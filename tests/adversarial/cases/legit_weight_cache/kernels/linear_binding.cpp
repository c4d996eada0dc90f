#include "cuda_agent_binding.h"

extern "C" int transpose_cpu(const float* w, float* wt, int64_t rows, int64_t cols);
extern "C" int linear_t_cpu(const float* x, const float* wt, const float* bias, float* y, int64_t batch, int64_t in,
                            int64_t out);

at::Tensor transpose(const at::Tensor& w) {
  CA_CHECK_INPUT(w);
  at::Tensor wt = at::empty({w.size(1), w.size(0)}, w.options());
  CA_CHECK_LAUNCH(transpose_cpu(w.data_ptr<float>(), wt.data_ptr<float>(), w.size(0), w.size(1)));
  return wt;
}

at::Tensor linear_t(const at::Tensor& x, const at::Tensor& wt, const at::Tensor& bias) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(wt);
  CA_CHECK_INPUT(bias);
  CA_CHECK(x.dim() == 2 && wt.dim() == 2 && x.size(1) == wt.size(0) && bias.numel() == wt.size(1), "shapes");
  at::Tensor y = at::empty({x.size(0), wt.size(1)}, x.options());
  CA_CHECK_LAUNCH(linear_t_cpu(x.data_ptr<float>(), wt.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                               x.size(0), x.size(1), wt.size(1)));
  return y;
}

CUDA_AGENT_OPS(m) {
  m.def("transpose", &transpose);
  m.def("linear_t", &linear_t);
}
