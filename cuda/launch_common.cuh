// Helpers every .cu file of cuda/ shares: launch geometry and a grid-stride loop.
// Invariant: every kernel covers [0, n) with 64-bit indices whatever the grid size, so a
// launcher may cap the grid (one pass of resident blocks) without losing elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.h"

namespace tandem::cuda::launch {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU many times over; beyond it, threads loop.
constexpr int64_t kMaxBlocks = 1 << 16;

inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

}  // namespace tandem::cuda::launch

// i runs over [0, n) across the whole grid.
#define TANDEM_GRID_STRIDE_LOOP(i, n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);          \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
