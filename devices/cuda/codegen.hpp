// Generated kernels for elementwise regions: each fused L3 region (or single elementwise
// node) becomes CUDA source, compiled by NVRTC for the GPU in hand and cached in memory
// and on disk by a hash of the source. Semantics per node are the reference device's:
// every node's result is rounded to its dtype, integers wrap, float -> int saturates.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "runtime/device.hpp"

namespace rlx::cuda {

// Empty when the generator can emit node n; otherwise why not.
std::string elementwise_unsupported(const ir::Node& n, const ir::Graph& g);
bool is_elementwise_op(const std::string& op);

// Runs `nodes` (SSA order, all producing `shape`) as one kernel. `inputs` name the
// region's outside values (any shape broadcasting to `shape`, strided views allowed),
// `outputs` the values written (contiguous, full shape). `sums` are completed too.
void run_elementwise(const std::vector<const ir::Node*>& nodes, const std::vector<ir::Value>& inputs, const std::vector<ir::Value>& outputs, const Shape& shape,
                     std::span<const Tensor> in, std::span<Tensor> out, const std::vector<FusedSum>& sums = {});

// The source the generator emits for a region (for tests and `--explain`-style dumps).
// input_kinds: 0 contiguous, 1 one element, 2 strided.
std::string elementwise_source(const std::vector<const ir::Node*>& nodes, const std::vector<ir::Value>& inputs,
                               const std::vector<DType>& input_dtypes, const std::vector<ir::Value>& outputs,
                               const std::vector<int>& input_kinds, int rank, bool wide_index,
                               const std::vector<ir::Value>& sum_operands, const std::vector<DType>& sum_dtypes,
                               bool vector = false);

// Tuning knobs for experiments (`rlx-bench cuda --only sweep`); the defaults are what the
// device runs with. unroll: elements per thread per grid-stride trip when no operand is
// strided; fmad: let NVRTC contract a*b+c (breaks the per-node rounding of the IR, so it
// is off for real work); vector: with no strided operand and every pointer aligned, a
// thread's `unroll` elements are neighbours moved as one pack of up to 16 bytes (instead of
// elements a grid stride apart).
struct CodegenOptions {
  int unroll = 4;
  bool fmad = false;
  bool vector = true;
};
void set_codegen_options(const CodegenOptions& o);
CodegenOptions codegen_options();

// NVRTC: source -> cubin for sm_<cc> (no GPU needed); empty with *log set on failure.
// A source whose first line is "// fmad" is compiled with FMA contraction.
std::string nvrtc_compile(const std::string& src, int cc, std::string* log);

std::string compiler_description();  // "NVRTC 13.0 for sm_90, cache <dir>"
int compute_capability();  // e.g. 90

}  // namespace rlx::cuda
