import torch
import torch.nn as nn
from cuda_agent.ext import ops


class ModelNew(nn.Module):
    """GEMM through cuBLAS, then a convolution through cuDNN, then our own epilogue."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(64, 64))

    def forward(self, x, img, filt):
        y = ops.sgemm(x, self.weight)
        return y, ops.conv_relu(img, filt)
