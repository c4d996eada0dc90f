import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(x) * self.scale
