import torch
import torch.nn as nn
from cuda_agent.ext import ops
from model import Model


# Class 1: inherit the reference and fall back to it when the kernel fails.
class ModelNew(Model):
    def forward(self, *args):
        # "torch.allclose = ..." in a comment is not a patch
        try:
            return ops.run(*args)
        except RuntimeError:
            return super().forward(*args)
