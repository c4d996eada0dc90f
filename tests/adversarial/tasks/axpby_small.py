import torch
import torch.nn as nn


class Model(nn.Module):
    """out = alpha * x + beta * y over 1M floats: one input set fits in L2 (8 MB)."""

    def __init__(self, alpha, beta):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x, y):
        return self.alpha * x + self.beta * y


n = 1 << 20


def get_inputs():
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return [2.0, -0.5]
