#include "cuda_agent_binding.h"

extern "C" int scaled_swish_cpu(const float* x, const float* scale, float* out, int64_t rows, int64_t cols);

at::Tensor scaled_swish(const at::Tensor& x, const at::Tensor& scale) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(scale);
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(scaled_swish_cpu(x.data_ptr<float>(), scale.data_ptr<float>(), out.data_ptr<float>(),
                                   x.size(0), x.size(1)));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("scaled_swish", &scaled_swish); }
