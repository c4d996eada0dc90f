#include "cuda_agent_binding.h"

extern "C" int swish_cpu(const float* x, float* out, int64_t n);
extern "C" int scale_rows_inplace_cpu(float* y, const float* scale, int64_t rows, int64_t cols);

at::Tensor swish(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(swish_cpu(x.data_ptr<float>(), out.data_ptr<float>(), x.numel()));
  return out;
}

// y *= scale (broadcast over rows), in place
void scale_rows_(at::Tensor y, const at::Tensor& scale) {
  CA_CHECK_INPUT(y);
  CA_CHECK_INPUT(scale);
  CA_CHECK(y.dim() == 2 && scale.numel() == y.size(1), "y (rows, cols), scale (cols)");
  CA_CHECK_LAUNCH(scale_rows_inplace_cpu(y.data_ptr<float>(), scale.data_ptr<float>(), y.size(0), y.size(1)));
}

CUDA_AGENT_OPS(m) {
  m.def("swish", &swish);
  m.def("scale_rows_(Tensor(a!) y, Tensor scale) -> ()", &scale_rows_);
}
