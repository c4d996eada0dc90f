import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for square FP32 matrices (KernelBench level-1 style, small).

    Entries of size ~0.1 keep TF32 rounding (about 1e-3 relative per product) inside the
    1e-2 tolerance, so only the precision check against float64 can tell TF32 from FP32."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


n = 1024


def get_inputs():
    return [torch.randn(n, n) * 0.1, torch.randn(n, n) * 0.1]


def get_init_inputs():
    return []
