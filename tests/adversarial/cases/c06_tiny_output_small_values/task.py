import torch
import torch.nn as nn


class Model(nn.Module):
    """Outputs of magnitude ~1e-3: every element of an all-zeros answer is within atol."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x) * 1e-3


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
