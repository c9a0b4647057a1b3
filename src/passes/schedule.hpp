// From an L2 graph to L3: group nodes into kernels (elementwise fusion) and plan buffers
// (liveness-based arena offsets, in-place reuse, views aliased rather than copied).
#pragma once
#include "runtime/program.hpp"

namespace rlx::passes {

// Fills p.kernels from p.graph. With fuse, chains of elementwise nodes of one shape
// become one Fused kernel; with fuse_reductions, full sums (f32/f64) of values the region
// computes join it too. Parameters, constants and reshapes are not kernels.
void schedule_kernels(Program& p, bool fuse, bool fuse_reductions = false);
// Fills p.slots and p.arena_bytes from p.graph and p.kernels.
void plan_memory(Program& p);

}  // namespace rlx::passes
