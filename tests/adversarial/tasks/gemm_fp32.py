import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for square FP32 matrices (KernelBench level-1 style, small)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


n = 1024


def get_inputs():
    return [torch.randn(n, n), torch.randn(n, n)]


def get_init_inputs():
    return []
