import torch
import torch.nn as nn


class Model(nn.Module):
    """Leaky ReLU with a fixed negative slope."""

    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, self.negative_slope)


batch = 128
features = 8192
negative_slope = 0.01


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [negative_slope]
