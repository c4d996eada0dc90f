// Shared helpers for the kernels.  No torch here.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#define TILE_M 64
#define TILE_N 64
#define TILE_K 16
#define THREAD_M 4
#define THREAD_N 4

__device__ __forceinline__ float relu_scale(float v, float scale) {
  v *= scale;
  return v > 0.f ? v : 0.f;
}

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }
