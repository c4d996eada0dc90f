import torch
import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))
        self._scratch = torch.empty(256 * features)  # sized for the usual batch; not a buffer or parameter

    def forward(self, x):
        if self._scratch.numel() < x.numel() or self._scratch.device != x.device:
            self._scratch = torch.empty(x.numel(), device=x.device)
        return ops.scaled_swish_scratch(x, self.scale, self._scratch)
