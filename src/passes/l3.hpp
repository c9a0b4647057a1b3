// L3 as the passes produce it: an L2 graph scheduled into kernels (fused elementwise
// regions, single ops, matmuls with a bias epilogue, control flow) with its buffer plan.
// Nothing here knows a device: runtime/program.hpp's Program extends a Schedule with what
// only the runtime knows (the device, the constants placed on it, the dispatch report, the
// compiled regions of control kernels). These are public names (rlx::Kernel, ...); user
// code reaches them through runtime/program.hpp.
#pragma once
#include <cstdint>
#include <vector>

#include "core/shape.hpp"
#include "ir/graph.hpp"

namespace rlx {

// Where a value lives at run time.
struct BufferSlot {
  enum Kind { Param, Const, Arena, View, Result, Internal } kind = Internal;  // Internal: lives only inside a fused kernel
  int64_t offset = 0;   // Arena: byte offset in the arena
  int64_t bytes = 0;
  int32_t index = -1;   // Param: parameter index; Const: constant-pool index; Result: result index
  ir::Value alias;      // View: the value this one views (reshape)
};

// A chain of elementwise nodes that the executor runs as one kernel: `nodes` in SSA
// order, all producing `shape`; `inputs` come from outside the region (any shape that
// broadcasts to `shape`), `outputs` are the region's values used outside it.
struct FusedRegion {
  const ir::Graph* graph = nullptr;
  std::vector<int32_t> nodes;
  std::vector<ir::Value> inputs;
  std::vector<ir::Value> outputs;
  Shape shape;
};

// A matmul whose result only feeds an add of a bias broadcast along its last dim (shape
// [n] or [1, ..., n]), optionally followed by relu (maximum with a zero constant): one
// kernel (a library call with a bias epilogue) on devices that take it. The kernel's
// inputs are the matmul's two operands, the bias and, with relu, the zero constant.
struct MatmulEpilogue {
  enum Activation { None, Relu };
  int32_t matmul = -1, add = -1, relu = -1;  // node ids (relu: -1 without one)
  Activation activation = None;
  ir::Value bias;  // the add's operand that is not the matmul's result
  ir::Value zero;  // Relu: the constant the maximum takes
  std::vector<int32_t> nodes() const;  // matmul, add[, relu]
  void drop_activation();               // the bias only (a relu found after it runs on its own)
};

struct Kernel {
  enum Kind { Fused, Single, Control, HostStaged, MatmulEpilogue } kind = Single;
  std::vector<int32_t> nodes;  // L2 node ids, in order
  std::vector<ir::Value> inputs;
  std::vector<ir::Value> outputs;
  FusedRegion region;            // Fused: what the device runs
  rlx::MatmulEpilogue epilogue;  // MatmulEpilogue: its nodes; inputs are positional
};

// The L2 graph actually executed, its kernels in execution order and its buffer plan.
struct Schedule {
  ir::Graph graph;
  std::vector<Kernel> kernels;
  std::vector<std::vector<BufferSlot>> slots;  // [node id][result index]
  int64_t arena_bytes = 0;
  // (parameter index, result index): the result may be written over the parameter's buffer
  // when a caller passes the same tensor for both (Executor::run_into), as an elementwise
  // kernel writes over a dying arena input — the kernel making the result is the
  // parameter's last use and reads it element for element. An iteration that replaces its
  // state (a Krylov step's x, r, p) then updates it in place: no second buffer, no
  // write-allocate of a fresh one.
  std::vector<std::pair<int32_t, int32_t>> donations;
  bool donates(size_t param, size_t result) const {
    for (auto [pi, ri] : donations)
      if (size_t(pi) == param && size_t(ri) == result) return true;
    return false;
  }
  const BufferSlot& slot(ir::Value v) const { return slots.at(size_t(v.node)).at(size_t(v.index)); }
};

}  // namespace rlx
