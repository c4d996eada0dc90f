import torch
import torch.nn as nn


class Model(nn.Module):
    """A layer whose output is dominated by its bias: the input moves it by about 1e-3."""

    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return self.bias + 1e-3 * torch.tanh(x)


batch = 64
features = 512


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
