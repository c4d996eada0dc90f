#include "cuda_agent_binding.h"

extern "C" int scale_launch(const float* x, float* out, float a, int64_t n, void* stream);
extern "C" int axpy_inplace_launch(float* out, const float* y, float b, int64_t n, void* stream);

at::Tensor scale(const at::Tensor& x, double a) {
  CA_CHECK_INPUT(x);
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(scale_launch(x.data_ptr<float>(), out.data_ptr<float>(), (float)a, x.numel(), cuda_agent_stream()));
  return out;
}

// out += b * y, in place
void axpy_(at::Tensor out, const at::Tensor& y, double b) {
  CA_CHECK_INPUT(out);
  CA_CHECK_INPUT(y);
  CA_CHECK(out.numel() == y.numel(), "out and y must have the same size");
  CA_CHECK_LAUNCH(axpy_inplace_launch(out.data_ptr<float>(), y.data_ptr<float>(), (float)b, y.numel(),
                                      cuda_agent_stream()));
}

CUDA_AGENT_OPS(m) {
  m.def("scale", &scale);
  m.def("axpy_(Tensor(a!) out, Tensor y, float b) -> ()", &axpy_);
}
