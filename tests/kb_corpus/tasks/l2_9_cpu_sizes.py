# KernelBench L2/9 (Matmul_Subtract_Multiply_ReLU) at sizes a 2-core CI machine checks in
# milliseconds, and with N(0, 1) inputs and a small subtract value so that about half of the
# outputs are positive (at L2/9's own sizes and values most of them are ReLU's zeros).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        x = self.linear(x)
        x = x - self.subtract_value
        x = x * self.multiply_value
        x = torch.relu(x)
        return x


batch_size = 32
in_features = 64
out_features = 48
subtract_value = 0.1
multiply_value = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, subtract_value, multiply_value]
