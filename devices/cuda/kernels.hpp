// The cuda device's hand-written kernels: reductions (reduce.cu), the scan (scan.cu), data
// movement (movement.cu), gather/scatter (gather_scatter.cu) and sources (sources.cu);
// kernels.cuh holds what those files share. Inputs are device tensors and may be strided
// views; outputs are contiguous and preallocated. Every call is ordered on stream() and
// returns without synchronizing. Semantics are the reference device's
// (devices/reference/*.cpp), dtype for dtype.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/standard_kernels.hpp"

namespace rlx::cuda {

// runtime/standard_kernels.hpp: reduce is deterministic (the same inputs give the same
// bits on every run).
RLX_DECLARE_STANDARD_KERNELS

}  // namespace rlx::cuda
