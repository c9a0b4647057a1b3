// The op registry: each op is declared exactly once, with its level, arity, attribute
// schema, shape/dtype rule, lowering body (L1) and VJP slot (filled by autodiff).
#pragma once
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace rlx {
class Var;
}

namespace rlx::ir {

enum class Level { L1, L2, Lib };  // Lib: a library primitive (L2 with no decomposition)
const char* level_name(Level l);

// How an op touches elements; drives fusion and the CPU device's chunked executor.
enum class OpClass { Elementwise, Reduction, Scan, Matmul, Movement, Source, Control, Composite, Library };

struct AttrSpec {
  std::string name;
  AttrKind kind;
  bool required = false;
  AttrValue fallback{};  // used when !required and the attribute is absent
};

using InferFn = std::function<std::vector<TensorType>(const std::vector<TensorType>& in, const Attrs& attrs,
                                                      const std::vector<std::shared_ptr<Graph>>& regions)>;
// An L1 op's definition in terms of other ops, written with the front end.
using LowerFn = std::function<std::vector<Var>(const std::vector<Var>& in, const Attrs& attrs)>;
// Slot for reverse-mode rules: cotangents of inputs from cotangents of outputs.
using VjpFn = std::function<std::vector<Var>(const std::vector<Var>& in, const std::vector<Var>& out,
                                             const std::vector<Var>& grad_out, const Attrs& attrs)>;

// Inputs for an op's example (OpDef::example). `rlx ops` makes them plain graph inputs to
// probe each device's routes; the op suite (tests/ops) gives them random values in the range
// asked for and runs the example on every device against the reference device.
struct ValueRange {
  double lo = -2, hi = 2;     // floats, and each part of c64
  int64_t ilo = -9, ihi = 9;  // ints, clamped to the dtype; u8 shifts [ilo, ihi] to start at 0
  bool nonzero = false;       // no zeros (floats: |x| >= 0.1)
  double quantum = 0;         // floats: round to multiples of this (ties, exact halves)
};
class ExampleInputs {
 public:
  virtual ~ExampleInputs() = default;
  virtual Graph& graph() = 0;
  virtual Var in(DType t, Shape s, const ValueRange& r = {}) = 0;
  virtual Var index(DType t, Shape s, int64_t extent) = 0;  // uniform in [0, extent)
  virtual Var fixed(const Tensor& value) = 0;               // an input with exactly these values
};
// One small, valid use of the op whose key dtype (first input, or result for sources) is t:
// the values it returns are the graph's results.
using ExampleFn = std::function<std::vector<Var>(ExampleInputs& in, DType t)>;

struct OpDef {
  std::string name;
  Level level = Level::L2;
  OpClass cls = OpClass::Elementwise;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: variadic
  std::vector<AttrSpec> attrs;
  InferFn infer;
  LowerFn lower;  // required for L1
  // Autodiff (passes/autodiff.hpp). vjp: the inputs' cotangents from the results' (an
  // undefined Var where none flows; L1 ops without one differentiate through `lower`).
  VjpFn vjp;
  // Inputs through which no gradient flows by definition (a where's condition, indices).
  std::vector<int> nondiff_inputs;
  // No derivative (comparisons, argmax, integer-only ops, rng): grad through it is an error.
  bool not_differentiable = false;
  bool stateful = false;      // never CSE'd or folded (rng)
  // The result may take this input's buffer when the input dies at the node (same shape and
  // dtype, not also another operand): every device's kernel reads element i of it before it
  // writes element i of the result. spmv_csr's y0: an accumulation into y stays in place, as
  // a distributed SpMV's off-diagonal product (few rows) then touches only its own rows.
  int inplace_input = -1;
  // Inputs whose values no kernel of the op reads: they only order the node after their
  // producer (halo_end after its halo_begin, all_reduce_end after its begin). A host-staged
  // node copies none of them to the host, so it does not wait for the device work queued
  // before it (the end of an exchange then waits on the network while the device computes).
  std::vector<int> order_only_inputs;
  bool float_only = false;    // documentation aid for coverage tables
  std::vector<DType> dtypes;  // the dtypes the op is defined for (of its first input / result)
  std::string doc;
  // Written beside the declaration for ops the class examples below do not fit; `rlx ops`
  // probes with it and the op suite runs it (an op without one fails tests/dispatch).
  ExampleFn example;
  // Ops that move data between processes (the collectives, src/ir/ops/dist.cpp): the bytes
  // one call moves for this rank, from the input types and attributes; the dispatch report
  // prints it per node. Empty for every other op.
  std::function<int64_t(const std::vector<TensorType>& in, const Attrs& attrs)> comm_bytes;
  const AttrSpec* attr_spec(const std::string& n) const;
};

// def.example, else its class's: elementwise ops by arity on [4,8] operands, reductions
// over axis 1 of [4,8], one-input L1 ops on [4,8]; empty when neither exists.
ExampleFn example_of(const OpDef& def);

class OpRegistry {
 public:
  static OpRegistry& get();  // registers the built-in ops on first use
  const OpDef* find(const std::string& name) const;
  const OpDef& at(const std::string& name) const;  // throws InputError("unknown op ...")
  void add(OpDef def);                             // throws on a duplicate name
  std::vector<const OpDef*> all() const;           // sorted by level then name

 private:
  std::map<std::string, std::unique_ptr<OpDef>> ops_;
};

// Built-in op families, one function per file under src/ir/ops/.
void register_elementwise_ops(OpRegistry& r);
void register_reduction_ops(OpRegistry& r);
void register_movement_ops(OpRegistry& r);
void register_source_ops(OpRegistry& r);
void register_linalg_ops(OpRegistry& r);
void register_control_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);
void register_sparse_ops(OpRegistry& r);
void register_dense_la_ops(OpRegistry& r);
void register_sort_ops(OpRegistry& r);
void register_optim_ops(OpRegistry& r);
void register_splat_ops(OpRegistry& r);
void register_splat_stage_ops(OpRegistry& r);
void register_dist_ops(OpRegistry& r);
void register_host_ops(OpRegistry& r);

}  // namespace rlx::ir
