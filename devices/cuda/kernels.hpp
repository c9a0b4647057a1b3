// The cuda device's hand-written kernels (kernels.cu): reductions, the scan, data
// movement, gather/scatter and sources. Inputs are device tensors and may be strided
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
