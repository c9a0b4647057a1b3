// The cpu device's chunked executor for elementwise regions: one pass over memory.
//
// The region's flat index space is cut into chunks of kChunk elements; threads take
// contiguous runs of chunks. For each chunk the region's nodes run in order, each as one
// vectorized kernel call (ew_kernels.hpp) over small per-thread scratch buffers that stay
// in L1/L2; only the region's outputs are written to memory. Inputs are read in place
// when they have the region's layout and compute type, converted (f16/bf16) or gathered
// through their strides otherwise; scalar inputs are passed as scalars. f16/bf16 values
// are computed in f32 and rounded to their type after every node, exactly as if each
// node had stored its result, so a fused region gives the node-by-node result.
#pragma once
#include <span>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "runtime/device.hpp"

namespace rlx::cpu {

// Elements per chunk.
inline constexpr int64_t kChunk = 2048;

// True when node n (an elementwise op) has a chunk kernel for its dtypes.
bool elementwise_supported(const ir::Node& n, const std::vector<DType>& input_dtypes);

// Runs `nodes` (SSA order; every node produces `shape`) over `in` (the tensors of
// `inputs`, broadcastable to `shape`) and writes `outputs` (values of nodes, or of
// inputs) into `out` (contiguous, preallocated, shaped `shape`).
// `sums` (runtime/device.hpp) are full sums over the region's values, written when the
// region has run. Partial sums are kept per chunk, in double, and added in chunk order, so
// the result does not depend on how threads split the work.
void run_elementwise(const std::vector<const ir::Node*>& nodes, const std::vector<ir::Value>& inputs,
                     const std::vector<ir::Value>& outputs, const Shape& shape, std::span<const Tensor> in,
                     std::span<Tensor> out, const std::vector<FusedSum>& sums = {});

}  // namespace rlx::cpu
