import torch
import torch.nn as nn


class Model(nn.Module):
    """A 3x3 convolution, stride 1, padding 1, no bias, FP32 (NCHW)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


batch = 8
in_channels = 32
out_channels = 64
height = 56
width = 56


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
