import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))

    def forward(self, x):
        return torch.mul(torch.mul(x, torch.sigmoid(x)), self.scale)
