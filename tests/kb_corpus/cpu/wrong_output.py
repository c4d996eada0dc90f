# Wrong: the kernel is called without the multiply (mul=1.0); the output is off by 1.5x
# wherever it is positive. Both rule sets must reject it.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

// relu((x @ w^T + b - sub) * mul); x (B, K), w (N, K), b (N): float32, contiguous, CPU
torch::Tensor linear_sub_mul_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b, double sub, double mul) {
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && b.dim() == 1, "x, w must be 2-D and b 1-D");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32
                && b.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "contiguous only");
    const int64_t rows = x.size(0), K = x.size(1), N = w.size(0);
    TORCH_CHECK(w.size(1) == K && b.size(0) == N, "shape mismatch");
    auto out = torch::empty({rows, N}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float s = static_cast<float>(sub), m = static_cast<float>(mul);
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            const float* xr = xp + i * K;
            const float* wr = wp + j * K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc += xr[k] * wr[k];
            const float v = (acc + bp[j] - s) * m;
            op[i * N + j] = v > 0.0f ? v : 0.0f;
        }
    }
    return out;
}

// relu((y - sub) * mul), elementwise; y float32, contiguous, CPU
torch::Tensor sub_mul_relu(torch::Tensor y, double sub, double mul) {
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && y.is_contiguous(), "contiguous float32 only");
    auto out = torch::empty_like(y);
    const float* yp = y.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float s = static_cast<float>(sub), m = static_cast<float>(mul);
    const int64_t n = y.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = (yp[i] - s) * m;
        op[i] = v > 0.0f ? v : 0.0f;
    }
    return out;
}
"""

ext = load_inline(
    name="kbc_cpu_linear",
    cpp_sources=cpp_source,
    functions=["linear_sub_mul_relu", "sub_mul_relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        return ext.linear_sub_mul_relu(x, self.linear.weight, self.linear.bias, self.subtract_value, 1.0)
