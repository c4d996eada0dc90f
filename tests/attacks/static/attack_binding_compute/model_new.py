import torch
import torch.nn as nn
from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ops.mm(a, b)
