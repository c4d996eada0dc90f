import torch
import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    """GEMM -> /2 -> row sum -> scale, rewritten as x . colsum(W) * scale / 2 (no GEMM)."""

    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))  # as Model builds it: same seed, same values
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return ops.gemm_div_sum_scale(x, self.weight, self.scaling_factor)
