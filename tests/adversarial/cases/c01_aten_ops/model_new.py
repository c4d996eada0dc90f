import torch
import torch.nn as nn

aten = torch.ops.aten


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))

    def forward(self, x):
        swish = aten.mul.Tensor(x, aten.sigmoid.default(x))
        return aten.mul.Tensor(swish, self.scale)
