# Honest: KernelBench L1/12, diag(A) @ B as one elementwise CUDA kernel (load_inline).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

// C = diag(A) @ B without the N x N matrix: C[i, j] = A[i] * B[i, j]
// (no __restrict__: diag_mul_inplace passes b as out)
__global__ void diag_mul_kernel(const float* a, const float* b, float* out, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = a[i / cols] * b[i];
    }
}

static void check_inputs(const torch::Tensor& a, const torch::Tensor& b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 expected");
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "contiguous tensors expected");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0), "A (N,) and B (N, M) expected");
}

static void launch(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& out) {
    const int64_t n = b.numel();
    if (n == 0) return;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 1 << 20);
    diag_mul_kernel<<<(unsigned)blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, b.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor diag_mul(torch::Tensor a, torch::Tensor b) {
    check_inputs(a, b);
    auto out = torch::empty_like(b);
    launch(a, b, out);
    return out;
}

// the same product written over B (saves an allocation; B is lost)
torch::Tensor diag_mul_inplace(torch::Tensor a, torch::Tensor b) {
    check_inputs(a, b);
    launch(a, b, b);
    return b;
}
"""
cpp_source = """
torch::Tensor diag_mul(torch::Tensor a, torch::Tensor b);
torch::Tensor diag_mul_inplace(torch::Tensor a, torch::Tensor b);
"""

diag = load_inline(
    name="kbc_cuda_diag",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["diag_mul", "diag_mul_inplace"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return diag.diag_mul(A, B)
