# Honest: L2/98 with the weights under other names (w, b) than the reference's (matmul.weight,
# matmul.bias), drawn as nn.Linear draws them: the same values after the same seed.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

constexpr int TILE = 16;

static void check_matrix(const torch::Tensor& t, const char* what) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.dim() == 2,
                what, " must be a contiguous 2-D float32 CUDA tensor");
}

// C (M, N) = A (M, K) @ B (K, N), shared-memory tiles of 16 x 16, FP32 accumulation
__global__ void matmul_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                              int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        const int ka = t + threadIdx.x, kb = t + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(int64_t)row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(int64_t)kb * N + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(int64_t)row * N + col] = acc;
}

// Y (M, N) = X (M, K) @ W (N, K)^T + bias (N), optionally followed by ReLU (nn.Linear's layout)
__global__ void linear_kernel(const float* __restrict__ X, const float* __restrict__ W,
                              const float* __restrict__ bias, float* __restrict__ Y,
                              int M, int N, int K, bool relu) {
    __shared__ float Xs[TILE][TILE];
    __shared__ float Ws[TILE][TILE + 1];  // +1: the transposed reads below hit distinct banks
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int wrow = blockIdx.x * TILE + threadIdx.y;  // the row of W this thread loads
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        const int k = t + threadIdx.x;
        Xs[threadIdx.y][threadIdx.x] = (row < M && k < K) ? X[(int64_t)row * K + k] : 0.0f;
        Ws[threadIdx.y][threadIdx.x] = (wrow < N && k < K) ? W[(int64_t)wrow * K + k] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += Xs[threadIdx.y][kk] * Ws[threadIdx.x][kk];
        __syncthreads();
    }
    if (row < M && col < N) {
        float v = acc + bias[col];
        if (relu) v = v > 0.0f ? v : 0.0f;
        Y[(int64_t)row * N + col] = v;
    }
}

// out[r] = max_g scale * gelu(mean(Y[r, g*P : (g+1)*P])): AvgPool1d(P), exact GELU, scale, max
// over the row. One block per row; a shared-memory tree for the max.
__global__ void pool_gelu_scale_max_kernel(const float* __restrict__ Y, float* __restrict__ out,
                                           int N, int P, float scale) {
    __shared__ float best[256];
    const int r = blockIdx.x;
    const int groups = N / P;
    const float* y = Y + (int64_t)r * N;
    float m = -INFINITY;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < P; ++i) s += y[g * P + i];
        const float v = s / P;
        const float gelu = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        m = fmaxf(m, gelu * scale);
    }
    best[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) best[threadIdx.x] = fmaxf(best[threadIdx.x], best[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) out[r] = best[0];
}

torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
    check_matrix(a, "A");
    check_matrix(b, "B");
    TORCH_CHECK(a.size(1) == b.size(0), "inner dimensions differ");
    const int M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({M, N}, a.options());
    const dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}

torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor bias, bool relu) {
    check_matrix(x, "x");
    check_matrix(w, "weight");
    TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == torch::kFloat32 && bias.is_contiguous()
                && bias.dim() == 1 && bias.size(0) == w.size(0), "bias must be a contiguous float32 (N,) CUDA tensor");
    TORCH_CHECK(x.size(1) == w.size(1), "in_features differ");
    const int M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    const dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), M, N, K, relu);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

torch::Tensor pool_gelu_scale_max(torch::Tensor y, int64_t pool, double scale) {
    check_matrix(y, "y");
    TORCH_CHECK(pool >= 1 && y.size(1) >= pool, "pool size out of range");
    const int M = y.size(0), N = y.size(1);
    auto out = torch::empty({M}, y.options());
    if (M == 0) return out;
    pool_gelu_scale_max_kernel<<<M, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), out.data_ptr<float>(), N, (int)pool, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
cpp_source = """
torch::Tensor matmul(torch::Tensor a, torch::Tensor b);
torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor bias, bool relu);
torch::Tensor pool_gelu_scale_max(torch::Tensor y, int64_t pool, double scale);
"""

gemm = load_inline(
    name="kbc_cuda_gemm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matmul", "linear", "pool_gelu_scale_max"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, pool_kernel_size, scale_factor):
        super().__init__()
        lin = nn.Linear(in_features, out_features)  # the reference's draws, in its order
        self.w = nn.Parameter(lin.weight.detach().clone())
        self.b = nn.Parameter(lin.bias.detach().clone())
        self.pool = pool_kernel_size
        self.scale = scale_factor

    def forward(self, x):
        y = gemm.linear(x, self.w, self.b, False)
        return gemm.pool_gelu_scale_max(y, self.pool, self.scale)
