#include "runtime/device.hpp"

#include "core/error.hpp"
#include "ir/op_registry.hpp"

namespace rlx {

void Device::run_fused(const FusedRegion& r, std::span<const Tensor> in, std::span<Tensor> out) {
  // Node by node, with whole-size temporaries for values internal to the region.
  const ir::Graph& g = *r.graph;
  std::vector<std::pair<ir::Value, Tensor>> env;
  for (size_t i = 0; i < r.inputs.size(); ++i) env.push_back({r.inputs[i], in[i]});
  for (size_t i = 0; i < r.outputs.size(); ++i) env.push_back({r.outputs[i], out[i]});
  auto lookup = [&](ir::Value v) -> Tensor* {
    for (auto& [k, t] : env)
      if (k == v) return &t;
    return nullptr;
  };
  for (int32_t id : r.nodes) {
    const ir::Node& n = g.nodes[size_t(id)];
    std::vector<Tensor> args;
    for (auto v : n.inputs) args.push_back(*lookup(v));
    Tensor* dst = lookup({id, 0});
    if (!dst) {
      env.push_back({{id, 0}, Tensor::empty(n.out().dtype, n.out().shape, allocator())});
      dst = &env.back().second;
    }
    Tensor o = *dst;
    run_node(n, args, std::span<Tensor>(&o, 1));
  }
}

void Device::run_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g, std::span<const Tensor> in,
                                 std::span<Tensor> out) {
  // Node by node: the matmul and the add write whole-size temporaries.
  const ir::Node &mm = g.nodes.at(size_t(e.matmul)), &add = g.nodes.at(size_t(e.add));
  auto temporary = [&](const ir::Node& n) { return Tensor::empty(n.out().dtype, n.out().shape, allocator()); };
  Tensor prod = temporary(mm);
  run_node(mm, in.subspan(0, 2), std::span<Tensor>(&prod, 1));
  Tensor sum = e.relu >= 0 ? temporary(add) : out[0];
  const Tensor add_in[2] = {add.inputs[0] == ir::Value{mm.id, 0} ? prod : in[2],
                            add.inputs[1] == ir::Value{mm.id, 0} ? prod : in[2]};
  run_node(add, add_in, std::span<Tensor>(&sum, 1));
  if (e.relu < 0) return;
  const ir::Node& relu = g.nodes.at(size_t(e.relu));
  const Tensor relu_in[2] = {relu.inputs[0] == ir::Value{add.id, 0} ? sum : in[3],
                             relu.inputs[1] == ir::Value{add.id, 0} ? sum : in[3]};
  run_node(relu, relu_in, out);
}

FusedSplit split_fused_sums(const FusedRegion& r, std::span<Tensor> out) {
  FusedSplit s;
  for (size_t o = 0; o < r.outputs.size(); ++o) {
    if (r.graph->nodes.at(size_t(r.outputs[o].node)).op->name == "sum") continue;
    s.outputs.push_back(r.outputs[o]);
    s.out.push_back(out[o]);
  }
  for (int32_t id : r.nodes) {
    const ir::Node& n = r.graph->nodes.at(size_t(id));
    if (n.op->name != "sum") {
      s.nodes.push_back(&n);
      continue;
    }
    const DType t = n.out().dtype;
    if (t != DType::F32 && t != DType::F64) s.sums_f32_or_f64 = false;
    for (size_t o = 0; o < r.outputs.size(); ++o)
      if (r.outputs[o] == ir::Value{id, 0}) s.sums.push_back({n.inputs[0], out[o]});
  }
  return s;
}

DeviceRegistry& DeviceRegistry::get() {
  static DeviceRegistry* r = [] {
    auto reg = std::make_unique<DeviceRegistry>();  // (freed if a device's construction throws)
    register_builtin_devices(*reg);
    return reg.release();
  }();
  return *r;
}

void DeviceRegistry::add(std::unique_ptr<Device> d) {
  if (find(d->name())) throw InternalError("device '" + d->name() + "' registered twice");
  devices_.push_back(std::move(d));
}

Device* DeviceRegistry::find(const std::string& name) const {
  for (auto& d : devices_)
    if (d->name() == name) return d.get();
  return nullptr;
}

Device& DeviceRegistry::at(const std::string& name) const {
  if (Device* d = find(name)) return *d;
  std::string known;
  for (auto& d : devices_) known += (known.empty() ? "" : ", ") + d->name();
  throw InputError("unknown device '" + name + "' (available: " + known + ")");
}

std::vector<Device*> DeviceRegistry::all() const {
  std::vector<Device*> r;
  for (auto& d : devices_) r.push_back(d.get());
  return r;
}

void require_runnable(const Device& d) {
  if (std::string why = d.unavailable(); !why.empty())
    throw InputError("device '" + d.name() + "' cannot run programs here: " + why);
}

passes::Evaluator evaluator_for(Device& d) {
  return [&d](const ir::Node& n, const ir::Graph& g, const std::vector<Tensor>& args) -> std::optional<std::vector<Tensor>> {
    if (!d.supports(n, g).ok) return std::nullopt;
    std::vector<Tensor> res;
    for (auto& t : n.outputs) res.push_back(Tensor::empty(t.dtype, t.shape, d.allocator()));
    d.run_node(n, args, res);
    for (Tensor& r : res) r = r.to(host_allocator());
    return res;
  };
}

Device& DeviceRegistry::runnable_at(const std::string& name) const {
  Device& d = at(name);
  require_runnable(d);
  return d;
}

std::vector<Device*> DeviceRegistry::runnable() const {
  std::vector<Device*> r;
  for (auto& d : devices_)
    if (d->unavailable().empty()) r.push_back(d.get());
  return r;
}

}  // namespace rlx
