#include "cuda_agent_binding.h"

extern "C" int scaled_swish_two_pass_cpu(const float* x, const float* scale, float* scratch, float* out,
                                         int64_t rows, int64_t cols);

at::Tensor scaled_swish_scratch(const at::Tensor& x, const at::Tensor& scale, at::Tensor scratch) {
  CA_CHECK_INPUT(x);
  CA_CHECK_INPUT(scale);
  CA_CHECK(scratch.numel() >= x.numel(), "scratch too small");
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(scaled_swish_two_pass_cpu(x.data_ptr<float>(), scale.data_ptr<float>(), scratch.data_ptr<float>(),
                                            out.data_ptr<float>(), x.size(0), x.size(1)));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("scaled_swish_scratch(Tensor x, Tensor scale, Tensor(a!) scratch) -> Tensor", &scaled_swish_scratch); }
