import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish (x * sigmoid(x)) followed by a learned per-feature scale: a small fused layer."""

    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x * torch.sigmoid(x) * self.scale


batch = 256
features = 4096


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
