import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench-style: fused GELU written as an inline CUDA extension.
# The text "at::add" below lives in a C++ comment or a string and must not be flagged.
cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

// at::add(x, y) would be torch compute: this comment must not be flagged.
__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = 0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

torch::Tensor gelu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    auto y = torch::empty_like(x);
    const long n = x.numel();
    const int threads = 256;
    const int blocks = (int)std::min<long>((n + threads - 1) / threads, 4096);
    const char* note = "torch::matmul is only text here";
    (void)note;
    gelu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_src = "torch::Tensor gelu_cuda(torch::Tensor x);"

gelu = load_inline(
    name="gelu_inline",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["gelu_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu.gelu_cuda(x.contiguous())
