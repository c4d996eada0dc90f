import torch
import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # same initialisation as the reference
        self._refresh()

    def _key(self):
        w = self.linear.weight
        return (w.data_ptr(), w._version, w.device)

    def _refresh(self):
        self._wt = ops.transpose(self.linear.weight.detach())  # (in, out): rows of x meet contiguous columns
        self._wt_key = self._key()

    def forward(self, x):
        if self._wt_key != self._key():  # weights loaded or moved since: derive again
            self._refresh()
        return ops.linear_t(x, self._wt, self.linear.bias)
