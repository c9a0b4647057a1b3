// L3: a compiled program for one device: the legalized L2 graph, the kernel list
// (fused elementwise regions, single ops, matmuls with a bias epilogue, control flow),
// and the buffer plan.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dispatch/report.hpp"
#include "ir/graph.hpp"
#include "runtime/device.hpp"

namespace rlx {


struct CompileOptions {
  Policy policy{};  // PreferNative
  bool fold_constants = true;
  bool cse = true;
  bool fuse = true;
  // Ops treated as having no native kernel on the device (to exercise lowerings,
  // rewrites and host staging; `rlx compile --deny OP,...`).
  std::vector<std::string> deny_native;
};

// Where a value lives at run time.
struct BufferSlot {
  enum Kind { Param, Const, Arena, View, Result, Internal } kind = Internal;  // Internal: lives only inside a fused kernel
  int64_t offset = 0;   // Arena: byte offset in the arena
  int64_t bytes = 0;
  int32_t index = -1;   // Param: parameter index; Const: constant-pool index; Result: result index
  ir::Value alias;      // View: the value this one views (reshape)
};

struct Kernel {
  enum Kind { Fused, Single, Control, HostStaged, MatmulEpilogue } kind = Single;
  std::vector<int32_t> nodes;  // L2 node ids, in order
  std::vector<ir::Value> inputs;
  std::vector<ir::Value> outputs;
  std::vector<std::shared_ptr<struct Program>> sub;  // Control: compiled regions
  FusedRegion region;                                // Fused: what the device runs
  rlx::MatmulEpilogue epilogue;                      // MatmulEpilogue: its nodes; inputs are positional
};

struct Program {
  std::string device;
  ir::Graph graph;  // the L2 graph actually executed
  std::vector<Kernel> kernels;
  std::vector<std::vector<BufferSlot>> slots;  // [node id][result index]
  std::vector<Tensor> constants;               // on the device
  int64_t arena_bytes = 0;
  DispatchReport report;
  const BufferSlot& slot(ir::Value v) const { return slots.at(size_t(v.node)).at(size_t(v.index)); }
};

}  // namespace rlx
