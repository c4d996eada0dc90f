# Caught build failure: the extension does not compile (a misspelt type), the try/except
# swallows the error and forward falls back to torch. KernelBench's protocol passes it (torch
# computed the right numbers); the result must still record that the build failed and that no
# custom kernel ran; strict rejects it.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

broken_source = r"""
#include <torch/extension.h>

torch::Tensor scaled_relu(torch::Tensor y, double mul) {
    Tensr out = torch::empty_like(y);  // does not compile: no type Tensr
    return out;
}
"""

try:
    ext = load_inline(
        name="kbc_cpu_broken",
        cpp_sources=broken_source,
        functions=["scaled_relu"],
        verbose=False,
    )
except Exception:
    ext = None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        y = F.linear(x, self.linear.weight, self.linear.bias)
        if ext is None:
            return torch.relu((y - self.subtract_value) * self.multiply_value)
        return ext.scaled_relu(y - self.subtract_value, self.multiply_value)
