import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def forward(self, x):
        return ops.almost_zero(x)
