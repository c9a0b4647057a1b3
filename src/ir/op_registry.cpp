#include "ir/op_registry.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace rlx::ir {

// quant.cpp (packed ggml weights). Declared here rather than in op_registry.hpp, which nearly
// every object of the build includes: a line there belongs with the next change to that header.
void register_quant_ops(OpRegistry& r);

const char* level_name(Level l) {
  switch (l) {
    case Level::L1: return "L1";
    case Level::L2: return "L2";
    case Level::Lib: return "Lib";
  }
  return "?";
}

const AttrSpec* OpDef::attr_spec(const std::string& n) const {
  for (auto& s : attrs)
    if (s.name == n) return &s;
  return nullptr;
}

OpRegistry& OpRegistry::get() {
  static OpRegistry* r = [] {
    auto* reg = new OpRegistry;
    register_source_ops(*reg);
    register_elementwise_ops(*reg);
    register_reduction_ops(*reg);
    register_movement_ops(*reg);
    register_linalg_ops(*reg);
    register_control_ops(*reg);
    register_nn_ops(*reg);
    register_sparse_ops(*reg);
    register_dense_la_ops(*reg);
    register_sort_ops(*reg);
    register_optim_ops(*reg);
    register_splat_ops(*reg);
    register_splat_stage_ops(*reg);
    register_dist_ops(*reg);
    register_host_ops(*reg);
    register_quant_ops(*reg);
    return reg;
  }();
  return *r;
}

const OpDef* OpRegistry::find(const std::string& name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef& OpRegistry::at(const std::string& name) const {
  if (const OpDef* d = find(name)) return *d;
  throw InputError("unknown op '" + name + "'");
}

void OpRegistry::add(OpDef def) {
  if (ops_.count(def.name)) throw InternalError("op '" + def.name + "' registered twice");
  if (def.level == Level::L1 && !def.lower) throw InternalError("L1 op '" + def.name + "' has no lowering body");
  std::string n = def.name;
  ops_[n] = std::make_unique<OpDef>(std::move(def));
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> r;
  for (auto& [k, v] : ops_) r.push_back(v.get());
  std::stable_sort(r.begin(), r.end(), [](auto* a, auto* b) { return int(a->level) < int(b->level); });
  return r;
}

}  // namespace rlx::ir
