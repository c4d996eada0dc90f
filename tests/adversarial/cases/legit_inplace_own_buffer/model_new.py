import torch
import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))

    def forward(self, x):
        y = ops.swish(x)
        ops.scale_rows_(y, self.scale)  # in place, on our own output
        return y
