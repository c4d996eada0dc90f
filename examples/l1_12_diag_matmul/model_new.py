import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    """diag(A) @ B as one row-scaling kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ops.diag_matmul(A, B)
