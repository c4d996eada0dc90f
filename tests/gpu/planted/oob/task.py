import torch
import torch.nn as nn


class Model(nn.Module):
    """out = 2 x (memory-bound)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0


n = 1_000_000  # not a multiple of the allocation granularity: a read past the end lands in slack


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
