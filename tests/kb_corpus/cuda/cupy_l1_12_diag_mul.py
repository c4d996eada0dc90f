# Honest: KernelBench L1/12 as a CuPy RawKernel (NVRTC), on torch's current stream, on the
# tensors' memory through DLPack (no copies).
import cupy as cp
import numpy as np
import torch
import torch.nn as nn

_kernel = cp.RawKernel(r"""
extern "C" __global__
void diag_mul(const float* a, const float* b, float* out, long long n, long long cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i / cols] * b[i];
}
""", "diag_mul")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        assert A.is_contiguous() and B.is_contiguous()
        out = torch.empty_like(B)
        n = B.numel()
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            _kernel(((n + 255) // 256,), (256,),
                    (cp.from_dlpack(A), cp.from_dlpack(B), cp.from_dlpack(out), np.int64(n), np.int64(B.shape[1])))
        return out
