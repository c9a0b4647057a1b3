// A device's kernels, one table keyed by op: what each kernel accepts (the dtypes of a key
// operand, plus an optional check over shapes and attributes) and the function that runs
// it. A device's supports() and run_node() are this table's; nothing else decides them.
//
//   KernelTable t("cpu");
//   t.add({"sum", kNumeric, 0, run_sum});                    // key: input 0's dtype
//   t.add({"iota", kRealNumeric, -1, run_iota});             // key: the result's dtype
//   t.add({"spmv_csr", csr_supported, run_spmv});            // a library kernel's own predicate
//   for_each_op(ir::OpClass::Elementwise, [&](const ir::OpDef& op) { t.add({op.name, ...}); });
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/op_registry.hpp"
#include "runtime/device.hpp"
#include "runtime/standard_kernels.hpp"

namespace rlx {

using KernelFn = std::function<void(const ir::Node&, std::span<const Tensor>, std::span<Tensor>)>;
// Extra conditions beyond the key dtype: "" when the kernel takes the node, else why not.
using KernelCheck = std::function<std::string(const ir::Node&, const ir::Graph&)>;
using SupportFn = std::function<Capability(const ir::Node&, const ir::Graph&)>;

// A set of dtypes as a bit mask.
using DTypeSet = uint32_t;
constexpr DTypeSet bit(DType t) { return DTypeSet(1) << unsigned(t); }
constexpr DTypeSet kBool = bit(DType::Bool);
constexpr DTypeSet kInts = bit(DType::I8) | bit(DType::U8) | bit(DType::I32) | bit(DType::I64);
constexpr DTypeSet kFloats = bit(DType::F16) | bit(DType::BF16) | bit(DType::F32) | bit(DType::F64);
constexpr DTypeSet kC64 = bit(DType::C64);
constexpr DTypeSet kNumeric = kInts | kFloats | kC64;
constexpr DTypeSet kRealNumeric = kInts | kFloats;
constexpr DTypeSet kInexact = kFloats | kC64;
constexpr DTypeSet kAllButI4 = kBool | kNumeric;
constexpr DTypeSet kAll = kAllButI4 | bit(DType::I4);
std::string dtype_set_str(DTypeSet s);  // "i8 u8 i32"

struct KernelEntry {
  std::string op;
  DTypeSet dtypes = kAll;  // accepted dtypes of the key operand
  int key = 0;             // the input whose dtype is checked; -1: the first result
  KernelFn run;
  KernelCheck check;  // may be empty
};

// A kernel that judges the node itself (library calls: shapes, index types, sizes).
struct PredicateKernel {
  std::string op;
  SupportFn supports;
  KernelFn run;
};

class KernelTable {
 public:
  explicit KernelTable(std::string device) : device_(std::move(device)) {}
  // Throws InternalError when op already has a kernel.
  void add(KernelEntry e);
  void add(PredicateKernel k);
  // A further condition on op's kernel (a device's limit on top of a shared registration).
  void restrict(const std::string& op, KernelCheck check);

  const KernelEntry* find(const std::string& op) const;
  std::vector<std::string> ops() const;
  // An L1 op without an entry runs through its lowering; otherwise the entry's dtype set and check decide.
  Capability supports(const ir::Node& n, const ir::Graph& g) const;
  // Runs n's kernel; InternalError when there is none or an output is strided.
  void run(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) const;

 private:
  std::string device_;
  std::map<std::string, KernelEntry> kernels_;
};

// Registers a device's implementations of the shared kernel signatures
// (runtime/standard_kernels.hpp) under their ops: sum prod max min argmax cumsum permute
// broadcast_to slice concat pad gather scatter_add update_slice iota rng_uniform rng_normal.
void add_standard_kernels(KernelTable& t, const StandardKernels& k);

// The sparse library family (src/ir/ops/sparse.cpp) as a compiled device implements it:
// one predicate for the CSR ops, one per tiled-layout op, and the five kernels.
struct SparseKernels {
  SupportFn csr_supported, tiled_supported, tile_csr_supported;
  KernelFn spmv_csr, spmm_csr, sptrsv_csr, spmv_tiled, tile_csr;
};
void add_sparse_family(KernelTable& t, const SparseKernels& k);

// Calls f(def) for every registered op of class c (e.g. every elementwise op): a device
// claims a whole class without typing its op names out.
void for_each_op(ir::OpClass c, const std::function<void(const ir::OpDef&)>& f);

}  // namespace rlx
