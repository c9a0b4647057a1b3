// L3: a compiled program for one device: the legalized L2 graph, the kernel list
// (fused elementwise regions, single ops, matmuls with a bias epilogue, control flow),
// and the buffer plan (Kernel, BufferSlot, FusedRegion, MatmulEpilogue, Schedule:
// passes/l3.hpp), with the device's constants and the dispatch report.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/report.hpp"
#include "ir/graph.hpp"
#include "passes/l3.hpp"
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

// The passes' Schedule (graph, kernels, buffer plan: passes/l3.hpp) with what only the
// runtime knows.
struct Program : Schedule {
  std::string device;
  std::vector<Tensor> constants;  // the constant pool, on the device
  DispatchReport report;
  // A control kernel's regions compiled for the device, one program per region of its
  // node, by the control node's id.
  std::map<int32_t, std::vector<std::shared_ptr<Program>>> regions;
  // Kernel k's compiled regions (none unless k is a control kernel).
  const std::vector<std::shared_ptr<Program>>& regions_of(const Kernel& k) const {
    static const std::vector<std::shared_ptr<Program>> none;
    auto it = k.nodes.size() == 1 ? regions.find(k.nodes[0]) : regions.end();
    return it == regions.end() ? none : it->second;
  }
};

}  // namespace rlx
