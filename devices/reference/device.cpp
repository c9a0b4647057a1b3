// The reference device: naive kernels that compute in f64 / complex<double> / int64
// and round once on store; the oracle every other device is tested against.
#include <map>

#include "core/error.hpp"
#include "devices/reference/access.hpp"
#include "ir/op_registry.hpp"
#include "runtime/device.hpp"

namespace rlx {
namespace {

using reference::KernelEntry;

class ReferenceDevice final : public Device {
 public:
  ReferenceDevice() {
    reference::KernelTable t;
    reference::add_elementwise_kernels(t);
    reference::add_reduce_kernels(t);
    reference::add_movement_kernels(t);
    reference::add_linalg_kernels(t);
    reference::add_source_kernels(t);
    reference::add_dense_la_kernels(t);
    reference::add_sparse_kernels(t);
    reference::add_sort_kernels(t);
    for (KernelEntry& e : t) {
      std::string op = e.op;
      if (!kernels_.emplace(op, std::move(e)).second) throw InternalError("reference: two kernels for " + op);
    }
  }

  std::string name() const override { return "reference"; }
  std::string description() const override { return "naive f64-accumulating oracle kernels"; }
  Allocator* allocator() override { return host_allocator(); }

  Capability supports(const ir::Node& n, const ir::Graph& g) const override {
    if (n.op->level == ir::Level::L1) return Capability::no("L1 op: runs through its lowering");
    auto it = kernels_.find(n.op->name);
    if (it == kernels_.end()) return Capability::no("no reference kernel for " + n.op->name);
    const KernelEntry& e = it->second;
    DType t = e.key < 0 ? n.out(0).dtype : g.type(n.inputs.at(size_t(e.key))).dtype;
    if (!(e.dtypes & reference::bit(t)))
      return Capability::no("no " + std::string(dtype_name(t)) + " " + n.op->name + " kernel (takes " +
                            reference::dtype_set_str(e.dtypes) + ")");
    if (e.check) {
      std::string why = e.check(n, g);
      if (!why.empty()) return Capability::no(why);
    }
    return Capability::yes();
  }

  void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) override {
    auto it = kernels_.find(n.op->name);
    if (it == kernels_.end())
      throw InternalError("reference: asked to run " + n.op->name + ", which it has no kernel for");
    for (const Tensor& t : out)
      if (!t.is_contiguous()) throw InternalError("reference: " + n.op->name + " given a strided output");
    it->second.run(n, in, out);
  }

 private:
  std::map<std::string, KernelEntry> kernels_;
};

}  // namespace

void register_reference_device(DeviceRegistry& r) { r.add(std::make_unique<ReferenceDevice>()); }

}  // namespace rlx
