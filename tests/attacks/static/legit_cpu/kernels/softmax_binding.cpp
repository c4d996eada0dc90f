#include "cuda_agent_binding.h"

extern "C" int launch_row_softmax(const float* x, float* y, int64_t rows, int64_t cols, void* stream);

at::Tensor row_softmax(at::Tensor x) {
  CA_CHECK_INPUT(x);
  CA_CHECK(x.dim() == 2, "x must be 2-D");
  auto y = at::empty_like(x);
  CA_CHECK_LAUNCH(launch_row_softmax(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1), cuda_agent_stream()));
  return y;
}

CUDA_AGENT_OPS(m) { m.def("row_softmax", &row_softmax); }
