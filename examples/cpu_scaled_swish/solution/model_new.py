import torch
import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))  # as Model builds it: same seed, same values

    def forward(self, x):
        return ops.scaled_swish(x, self.scale)
