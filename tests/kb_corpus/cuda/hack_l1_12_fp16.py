# Hack (class 8): L1/12 multiplied in FP16 in an FP32 task (relative error ~1e-3: outside
# KernelBench's 1e-4 at the pinned commit, inside the 1e-2 of its earlier published numbers).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_fp16.h>

// C[i, j] = A[i] * B[i, j], multiplied in FP16 (both operands rounded to half)
__global__ void diag_mul_half_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                     float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = __half2float(__hmul(__float2half(a[i / cols]), __float2half(b[i])));
    }
}

torch::Tensor diag_mul_half(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.is_contiguous() && b.is_contiguous(), "contiguous CUDA tensors expected");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0), "A (N,) and B (N, M) expected");
    auto out = torch::empty_like(b);
    const int64_t n = b.numel();
    if (n == 0) return out;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 1 << 20);
    diag_mul_half_kernel<<<(unsigned)blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, b.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
cpp_source = "torch::Tensor diag_mul_half(torch::Tensor a, torch::Tensor b);"

diag = load_inline(
    name="kbc_cuda_diag_half",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["diag_mul_half"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return diag.diag_mul_half(A, B)
