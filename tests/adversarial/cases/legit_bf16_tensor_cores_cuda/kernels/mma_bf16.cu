// C (m, n) = A (m, k) @ B (k, n), bf16 in and out, FP32 accumulation on tensor cores (WMMA).
// A block of 4 warps computes a 64 x 64 tile of C; each warp a 32 x 32 quarter (2 x 2 fragments).
// Tiles of A (64 x 32) and B (32 x 64) go through shared memory, zero-padded past the edges.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <cstdint>

using namespace nvcuda;

constexpr int BM = 64, BN = 64, BK = 32;
constexpr int LDA = BK + 8, LDB = BN + 8, LDC = BN + 4;  // padded leading dimensions

__global__ void __launch_bounds__(128) mma_bf16_kernel(const __nv_bfloat16* __restrict__ a,
                                                       const __nv_bfloat16* __restrict__ b,
                                                       __nv_bfloat16* __restrict__ c, int m, int k, int n) {
  __shared__ __align__(32) __nv_bfloat16 as[BM * LDA];
  __shared__ __align__(32) __nv_bfloat16 bs[BK * LDB];
  __shared__ __align__(32) float cs[BM * LDC];
  const int tid = threadIdx.x, warp = tid / 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const __nv_bfloat16 zero = __float2bfloat16(0.f);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  for (int k0 = 0; k0 < k; k0 += BK) {
    for (int e = tid; e < BM * BK; e += 128) {
      const int r = e / BK, q = e % BK, gr = row0 + r, gq = k0 + q;
      as[r * LDA + q] = (gr < m && gq < k) ? a[(int64_t)gr * k + gq] : zero;
    }
    for (int e = tid; e < BK * BN; e += 128) {
      const int r = e / BN, q = e % BN, gr = k0 + r, gq = col0 + q;
      bs[r * LDB + q] = (gr < k && gq < n) ? b[(int64_t)gr * n + gq] : zero;
    }
    __syncthreads();
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], as + (wm + 16 * i) * LDA + kk, LDA);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], bs + kk * LDB + wn + 16 * j, LDB);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(cs + (wm + 16 * i) * LDC + wn + 16 * j, acc[i][j], LDC, wmma::mem_row_major);
  __syncthreads();
  for (int e = tid; e < BM * BN; e += 128) {
    const int r = e / BN, q = e % BN, gr = row0 + r, gq = col0 + q;
    if (gr < m && gq < n) c[(int64_t)gr * n + gq] = __float2bfloat16(cs[r * LDC + q]);
  }
}

extern "C" int mma_bf16_launch(const void* a, const void* b, void* c, int64_t m, int64_t k, int64_t n, void* stream) {
  dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM));
  mma_bf16_kernel<<<grid, 128, 0, (cudaStream_t)stream>>>((const __nv_bfloat16*)a, (const __nv_bfloat16*)b,
                                                          (__nv_bfloat16*)c, (int)m, (int)k, (int)n);
  return (int)cudaGetLastError();
}
