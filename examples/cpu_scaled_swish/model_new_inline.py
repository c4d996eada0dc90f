"""The same fused swish * scale as solution/, as one KernelBench-style file: the kernel is built
with torch.utils.cpp_extension.load_inline when the file is imported (the format the field
publishes kernels in).  `cuda-agent check` builds it once through its cache and reuses the
build while the source is unchanged."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor scaled_swish(torch::Tensor x, torch::Tensor scale) {
  TORCH_CHECK(x.is_contiguous() && scale.is_contiguous() && x.scalar_type() == torch::kFloat);
  auto out = torch::empty_like(x);
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const float* xp = x.data_ptr<float>();
  const float* sp = scale.data_ptr<float>();
  float* op = out.data_ptr<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = xp[r * cols + c];
      op[r * cols + c] = v / (1.0f + std::exp(-v)) * sp[c];
    }
  return out;
}
"""

ext = load_inline("scaled_swish_inline", cpp_sources=CPP, functions=["scaled_swish"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))  # as Model builds it: same seed, same values

    def forward(self, x):
        return ext.scaled_swish(x.contiguous(), self.scale)
