// From an L2 graph to L3: group nodes into kernels (elementwise fusion) and plan buffers
// (liveness-based arena offsets, in-place reuse, views aliased rather than copied).
#pragma once
#include <functional>
#include <optional>

#include "passes/l3.hpp"

namespace rlx::passes {

// The device's answer to "do you run this matmul epilogue as one kernel?" (compile()
// passes Device::fuses_matmul_epilogue).
using FusesEpilogue = std::function<bool(const MatmulEpilogue& e, const ir::Graph& g)>;

// Fills p.kernels from p.graph. With fuse, chains of elementwise nodes of one shape
// become one Fused kernel; with fuse_reductions, full sums (f32/f64) of values the region
// computes join it too. With epilogues, a matmul whose result only feeds a bias add (then
// maybe relu) becomes one MatmulEpilogue kernel where epilogues says yes. Parameters,
// constants and reshapes are not kernels; control kernels get no programs here (the
// runtime compiles their regions).
void schedule_kernels(Schedule& p, bool fuse, bool fuse_reductions = false, const FusesEpilogue& epilogues = {});
// The epilogue of matmul node `id` in g (see MatmulEpilogue), when the graph has one: the
// matmul's only reader is an add of a bias of shape [n] or [1, ..., n] that exists where the
// matmul runs (a parameter, a constant or a value computed before it), all of one float
// dtype; a relu (maximum with a zero constant) joins when it is the add's only reader.
// Neither the matmul's nor (with relu) the add's result is a graph result.
std::optional<MatmulEpilogue> find_matmul_epilogue(const ir::Graph& g, int32_t id);
// Fills p.slots and p.arena_bytes from p.graph and p.kernels.
void plan_memory(Schedule& p);
// The (parameter, result) pairs of Schedule::donations that p's kernels and slots allow.
std::vector<std::pair<int32_t, int32_t>> safe_donations(const Schedule& p);

}  // namespace rlx::passes
