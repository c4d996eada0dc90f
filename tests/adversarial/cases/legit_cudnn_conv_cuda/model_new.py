import torch
import torch.nn as nn

from cuda_agent.ext import ops


class _ConvWeight(nn.Module):
    """Holds the weight under the reference's name (conv.weight)."""

    def __init__(self, out_channels, in_channels):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, 3, 3))


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = _ConvWeight(out_channels, in_channels)

    def forward(self, x):
        return ops.conv3x3(x, self.conv.weight)
