// What the .cu files of the cuda device share on the device side: launch shapes for
// grid-stride kernels and the element offset of a linear index through a strided view.
// CUDA-only (include from .cu files).
#pragma once
#include <algorithm>

#include "devices/cuda/common.hpp"

namespace rlx::cuda {

constexpr long long kMaxGrid = 1LL << 30;  // grids above this loop (grid-stride)

__host__ __device__ constexpr long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// Blocks for `work` items at `per_block` items a block: at least 1, at most kMaxGrid.
inline unsigned grid_for(long long work, long long per_block) {
  return unsigned(std::clamp<long long>(ceil_div(work, per_block), 1, kMaxGrid));
}

// Element offset of linear index i (row-major over v.shape) through v.strides.
__device__ inline long long view_offset(const View& v, long long i) {
  if (v.rank == 0) return 0;
  if (v.rank == 1) return i * v.strides[0];
  long long off = 0;
  for (int d = v.rank - 1; d > 0; --d) {
    const long long s = v.shape[d];
    const long long q = i / s;
    off += (i - q * s) * v.strides[d];
    i = q;
  }
  return off + i * v.strides[0];
}

}  // namespace rlx::cuda
