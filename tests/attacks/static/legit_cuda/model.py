import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer followed by bias add, scaling and ReLU."""

    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.linear(x) * self.scale)


batch, in_features, out_features, scale = 512, 1024, 2048, 0.5


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
