#include "runtime/kernel_table.hpp"

#include "core/error.hpp"
#include "ir/op_registry.hpp"
#include "ir/ops/semantics.hpp"

namespace rlx {

std::string dtype_set_str(DTypeSet s) {
  std::string r;
  for (DType t : kAllDTypes)
    if (s & bit(t)) r += (r.empty() ? "" : " ") + std::string(dtype_name(t));
  return r;
}

void KernelTable::add(KernelEntry e) {
  std::string op = e.op;
  if (!kernels_.emplace(op, std::move(e)).second) throw InternalError(device_ + ": two kernels for " + op);
}

void KernelTable::add(PredicateKernel k) {
  SupportFn supports = std::move(k.supports);
  add(KernelEntry{k.op, kAll, -1, std::move(k.run), [supports](const ir::Node& n, const ir::Graph& g) {
                    Capability c = supports(n, g);
                    return c.ok ? std::string() : c.why;
                  }});
}

void KernelTable::restrict(const std::string& op, KernelCheck check) {
  auto it = kernels_.find(op);
  if (it == kernels_.end()) throw InternalError(device_ + ": restrict(" + op + "): no such kernel");
  KernelCheck before = std::move(it->second.check);
  it->second.check = [before, check](const ir::Node& n, const ir::Graph& g) {
    std::string why = before ? before(n, g) : std::string();
    return why.empty() ? check(n, g) : why;
  };
}

const KernelEntry* KernelTable::find(const std::string& op) const {
  auto it = kernels_.find(op);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelTable::ops() const {
  std::vector<std::string> r;
  for (const auto& [op, _] : kernels_) r.push_back(op);
  return r;
}

Capability KernelTable::supports(const ir::Node& n, const ir::Graph& g) const {
  const KernelEntry* e = find(n.op->name);
  // An L1 op runs through its lowering unless the device has a kernel of its own for it.
  if (!e && n.op->level == ir::Level::L1) return Capability::no("L1 op: runs through its lowering");
  if (!e) return Capability::no("no " + device_ + " kernel for " + n.op->name);
  if (e->key >= int(n.inputs.size())) return Capability::no(n.op->name + " has no input " + std::to_string(e->key));
  const DType t = e->key < 0 ? n.out(0).dtype : g.type(n.inputs[size_t(e->key)]).dtype;
  if (!(e->dtypes & bit(t)))
    return Capability::no("no " + std::string(dtype_name(t)) + " " + n.op->name + " kernel on " + device_ + " (takes " +
                          dtype_set_str(e->dtypes) + ")");
  if (e->check) {
    std::string why = e->check(n, g);
    if (!why.empty()) return Capability::no(why);
  }
  return Capability::yes();
}

void KernelTable::run(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) const {
  const KernelEntry* e = find(n.op->name);
  if (!e) throw InternalError(device_ + ": asked to run " + n.op->name + ", which it has no kernel for");
  for (const Tensor& t : out)
    if (!t.is_contiguous()) throw InternalError(device_ + ": " + n.op->name + " given a strided output");
  e->run(n, in, out);
}

void add_standard_kernels(KernelTable& t, const StandardKernels& k) {
  auto axis_of = [](const ir::Node& n, int rank) { return normalize_axis(n.attrs.get_int("axis"), rank); };
  auto reduction = [&](const char* op, ReduceOp r, DTypeSet dtypes) {
    t.add({op, dtypes, 0, [f = k.reduce, r](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
             f(r, in[0], ir::reduce_axes(n, in[0].rank()), out[0]);
           }});
  };
  reduction("sum", ReduceOp::Sum, kNumeric);
  reduction("prod", ReduceOp::Prod, kNumeric);
  reduction("max", ReduceOp::Max, kRealNumeric);
  reduction("min", ReduceOp::Min, kRealNumeric);
  t.add({"argmax", kRealNumeric, 0, [f = k.argmax, axis_of](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], axis_of(n, in[0].rank()), out[0]);
         }});
  t.add({"cumsum", kNumeric, 0, [f = k.cumsum, axis_of](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], axis_of(n, in[0].rank()), n.attrs.get_bool("exclusive"), n.attrs.get_bool("reverse"), out[0]);
         }});
  t.add({"permute", kAllButI4, 0, [f = k.permute](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], n.attrs.get_ints("perm"), out[0]);
         }});
  t.add({"broadcast_to", kAllButI4, 0,
         [f = k.broadcast_to](const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) { f(in[0], out[0]); }});
  t.add({"slice", kAllButI4, 0, [f = k.slice](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], n.attrs.get_ints("starts"), slice_steps(n.attrs.get_ints("steps"), out[0].shape()), out[0]);
         }});
  t.add({"concat", kAllButI4, 0, [f = k.concat, axis_of](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in, axis_of(n, out[0].rank()), out[0]);
         }});
  t.add({"pad", kAllButI4, 0, [f = k.pad](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], n.attrs.get_ints("low"), n.attrs.get_float("value"), out[0]);
         }});
  t.add({"gather", kAllButI4, 0, [f = k.gather, axis_of](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], in[1], axis_of(n, in[0].rank()), out[0]);
         }});
  t.add({"scatter_add", kNumeric, 0,
         [f = k.scatter_add, axis_of](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], in[1], in[2], axis_of(n, in[0].rank()), out[0]);
         }});
  t.add({"update_slice", kAllButI4, 0,
         [f = k.update_slice, axis_of](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(in[0], in[1], in[2], axis_of(n, in[0].rank()), out[0]);
         }});
  t.add({"iota", kRealNumeric, -1, [f = k.iota, axis_of](const ir::Node& n, std::span<const Tensor>, std::span<Tensor> out) {
           f(out[0].rank() ? axis_of(n, out[0].rank()) : 0, out[0]);
         }});
  t.add({"rng_uniform", kFloats, -1, [f = k.rng_uniform](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(uint64_t(n.attrs.get_int("seed")), in.empty() ? nullptr : &in[0], n.attrs.get_float("low"),
             n.attrs.get_float("high"), out[0]);
         }});
  t.add({"rng_normal", kFloats, -1, [f = k.rng_normal](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           f(uint64_t(n.attrs.get_int("seed")), in.empty() ? nullptr : &in[0], n.attrs.get_float("mean"),
             n.attrs.get_float("stddev"), out[0]);
         }});
}

void add_sparse_family(KernelTable& t, const SparseKernels& k) {
  t.add(PredicateKernel{"spmv_csr", k.csr_supported, k.spmv_csr});
  t.add(PredicateKernel{"spmm_csr", k.csr_supported, k.spmm_csr});
  t.add(PredicateKernel{"sptrsv_csr", k.csr_supported, k.sptrsv_csr});
  t.add(PredicateKernel{"spmv_tiled", k.tiled_supported, k.spmv_tiled});
  t.add(PredicateKernel{"tile_csr", k.tile_csr_supported, k.tile_csr});
}

void for_each_op(ir::OpClass c, const std::function<void(const ir::OpDef&)>& f) {
  for (const ir::OpDef* def : ir::OpRegistry::get().all())
    if (def->cls == c) f(*def);
}

}  // namespace rlx
