import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self, alpha, beta):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x, y):
        out = ops.scale(x, self.alpha)
        ops.axpy_(out, y, self.beta)  # in place on our own buffer
        return out
