# L1/12 whose CUDA source does not compile (a missing ';'): a failed build, no fallback.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void diag_mul_kernel(const float* a, const float* b, float* out, int64_t n, int64_t cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i / cols] * b[i]
}

torch::Tensor diag_mul(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(b);
    const int64_t n = b.numel();
    diag_mul_kernel<<<(unsigned)((n + 255) / 256), 256>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, b.size(1));
    return out;
}
"""
cpp_source = "torch::Tensor diag_mul(torch::Tensor a, torch::Tensor b);"

diag = load_inline(
    name="kbc_cuda_broken",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["diag_mul"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return diag.diag_mul(A, B)
