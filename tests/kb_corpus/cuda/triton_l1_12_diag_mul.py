# Honest: KernelBench L1/12 as a Triton kernel.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def diag_mul_kernel(a_ptr, b_ptr, out_ptr, n_elements, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs // cols, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * b, mask=mask)


def diag_mul(A, B):
    assert A.is_cuda and B.is_cuda and A.is_contiguous() and B.is_contiguous()
    out = torch.empty_like(B)
    n = B.numel()
    BLOCK = 1024
    diag_mul_kernel[(triton.cdiv(n, BLOCK),)](A, B, out, n, B.shape[1], BLOCK=BLOCK)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return diag_mul(A, B)
