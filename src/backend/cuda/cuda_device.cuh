// Device-side helpers of the CUDA backend's kernels: launch sizes, grid-stride loops, warp and
// block reductions. Included only by .cu files of src/backend/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_context.h"

// After a kernel launch: a bad configuration shows up here, not at the next synchronisation.
#define MOTLEY_CUDA_LAUNCHED() MOTLEY_CUDA_CHECK(cudaGetLastError())

#define MOTLEY_GRID_STRIDE(i, n)                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace motley::backend::cuda {

inline constexpr int kThreads = 256;

// Blocks for n elements at `threads` per block (at least 1; grid-stride loops cover the rest).
inline unsigned int Blocks(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  constexpr int64_t kMax = 1 << 20;
  return static_cast<unsigned int>(b < 1 ? 1 : (b > kMax ? kMax : b));
}

// One block per row: the row count as a grid size.
inline unsigned int RowBlocks(int64_t rows) {
  MOTLEY_CHECK(rows >= 0 && rows <= 0x7fffffff, "cuda: too many rows for one launch");
  return static_cast<unsigned int>(rows < 1 ? 1 : rows);
}

template <typename T>
__device__ inline T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffU, v, o);
  return v;
}
__device__ inline float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffU, v, o));
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `shared` holds 32 T. Has __syncthreads: every thread of the block must call it.
template <typename T>
__device__ inline T BlockSum(T v, T* shared) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpSum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return WarpSum(lane < warps ? shared[lane] : T(0));
}
__device__ inline float BlockMax(float v, float* shared) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return WarpMax(lane < warps ? shared[lane] : -INFINITY);
}

}  // namespace motley::backend::cuda
