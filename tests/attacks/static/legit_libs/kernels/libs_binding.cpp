#include "cuda_agent_binding.h"

extern "C" int launch_sgemm(const float* a, const float* b, float* c, int m, int n, int k, void* stream);
extern "C" int launch_conv_relu(const float* x, const float* w, float* y, int n, int c, int h, int wd, int k,
                                int r, int s, void* stream);

at::Tensor sgemm(const at::Tensor& a, const at::Tensor& b) {
  CA_CHECK_INPUT(a);
  CA_CHECK_INPUT(b);
  auto c = at::zeros({a.size(0), b.size(1)}, a.options());
  CA_CHECK_LAUNCH(launch_sgemm(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                               (int)a.size(0), (int)b.size(1), (int)a.size(1), cuda_agent_stream()));
  return c;
}

at::Tensor conv_relu(const at::Tensor& x, const at::Tensor& w) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(w);
  auto y = at::empty({x.size(0), w.size(0), x.size(2) - w.size(2) + 1, x.size(3) - w.size(3) + 1}, x.options());
  CA_CHECK_LAUNCH(launch_conv_relu(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(0),
                                   (int)x.size(1), (int)x.size(2), (int)x.size(3), (int)w.size(0), (int)w.size(2),
                                   (int)w.size(3), cuda_agent_stream()));
  return y;
}

CUDA_AGENT_OPS(m) {
  m.def("sgemm", &sgemm);
  m.def("conv_relu", &conv_relu);
}
