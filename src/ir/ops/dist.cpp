// The collectives: library primitives that move data between the processes of a
// communicator (src/dist). Each names its communicator by the attribute `comm` (an id
// resolved in the running process, dist::Communicator::by_id) and the halo ops name a
// planned exchange by `plan` (dist::HaloExchange::by_id); docs/distributed.md says why the
// handle is an attribute. Attributes also carry what the shape rules need and cannot ask a
// communicator for (the rank count of all_gather and reduce_scatter, the halo's counts), so
// a graph is checked and printed without one. Every collective is stateful (never folded or
// merged: each call is a message every rank must match) and declares the bytes it moves per
// call (`comm_bytes`), which the dispatch report prints. On one process each is the identity
// the mathematics gives (a sum over one rank is the value). No derivatives: a collective's
// adjoint depends on how the caller's loss is spread over the ranks.
#include "core/checked.hpp"
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

const std::vector<DType> kCollective = {DType::F32, DType::F64, DType::C64, DType::I32, DType::I64};

int64_t bytes(const TensorType& t) { return int64_t(dtype_storage_bytes(t.dtype, numel(t.shape))); }

void check_op(const TensorType& x, const Attrs& a) {
  const std::string op = a.get_string("op");
  if (op != "sum" && op != "max" && op != "min")
    throw InputError("op must be sum, max or min, got '" + op + "'");
  if (x.dtype == DType::C64 && op != "sum") throw InputError("a " + op + " over c64 values is not defined");
}

int64_t positive(const Attrs& a, const char* name) {
  const int64_t v = a.get_int(name);
  if (v < 1) throw InputError(std::string(name) + " must be >= 1, got " + std::to_string(v));
  return v;
}

int64_t count(const Attrs& a, const char* name) {
  const int64_t v = a.get_int(name);
  if (v < 0) throw InputError(std::string(name) + " must be >= 0, got " + std::to_string(v));
  return v;
}

AttrSpec comm_attr() { return {"comm", AttrKind::Int, true}; }
AttrSpec op_attr() { return {"op", AttrKind::String, false, std::string("sum")}; }

// The halo ops' checks: a vector in, and the counts the plan sends and receives.
void check_halo(const TensorType& x, const Attrs& a, const char* what) {
  require_dtype(x, kCollective, what);
  if (x.shape.size() != 1) throw InputError(std::string(what) + " must be a vector, got " + shape_str(x.shape));
  count(a, "sends");
  count(a, "receives");
  if (a.get_int("plan") < 0) throw InputError("plan must be >= 0");
}

std::vector<AttrSpec> halo_attrs() {
  return {{"plan", AttrKind::Int, true}, {"sends", AttrKind::Int, true}, {"receives", AttrKind::Int, true}};
}
// halo_begin's: the halo attributes, and `packed` — x is already the [sends] entries in send
// order (gathered on x's device, so that a device whose collectives are host-staged copies
// those entries to the host rather than the whole vector).
std::vector<AttrSpec> halo_begin_attrs() {
  std::vector<AttrSpec> a = halo_attrs();
  a.push_back({"packed", AttrKind::Bool, false, false});
  return a;
}

int64_t element_bytes(DType t, int64_t n) { return int64_t(dtype_storage_bytes(t, n)); }

}  // namespace

void register_dist_ops(OpRegistry& r) {
  // Every rank's x combined elementwise (sum, max or min); every rank gets the result.
  r.add({.name = "all_reduce", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = {comm_attr(), op_attr()},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kCollective, "all_reduce input");
           check_op(in[0], a);
           return std::vector<TensorType>{in[0]};
         },
         .not_differentiable = true,
         .stateful = true,
         .dtypes = kCollective,
         .doc = "elementwise sum/max/min of x over the ranks of `comm`, on every rank",
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{op("all_reduce", {x.in(t, {4, 8})}, {{"comm", int64_t(0)}})}; },
         .comm_bytes = [](const std::vector<TensorType>& in, const Attrs&) { return bytes(in[0]); }});
  // Every rank's x [n, ...] stacked in rank order: [ranks * n, ...] on every rank.
  r.add({.name = "all_gather", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = {comm_attr(), {"ranks", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kCollective, "all_gather input");
           require_rank_at_least(in[0], 1, "all_gather input");
           TensorType o = in[0];
           o.shape[0] = checked_mul(o.shape[0], positive(a, "ranks"), "all_gather result");
           return std::vector<TensorType>{o};
         },
         .not_differentiable = true,
         .stateful = true,
         .dtypes = kCollective,
         .doc = "every rank's x stacked along axis 0 in rank order (attribute ranks = the communicator's size)",
         .example = [](ExampleInputs& x, DType t) {
           return std::vector<Var>{op("all_gather", {x.in(t, {3, 2})}, {{"comm", int64_t(0)}, {"ranks", int64_t(1)}})};
         },
         .comm_bytes = [](const std::vector<TensorType>& in, const Attrs& a) { return bytes(in[0]) * a.get_int("ranks"); }});
  // x [ranks * n, ...] on every rank; rank r gets block r of the elementwise reduction.
  r.add({.name = "reduce_scatter", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = {comm_attr(), {"ranks", AttrKind::Int, true}, op_attr()},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kCollective, "reduce_scatter input");
           require_rank_at_least(in[0], 1, "reduce_scatter input");
           check_op(in[0], a);
           const int64_t p = positive(a, "ranks");
           if (in[0].shape[0] % p != 0)
             throw InputError("reduce_scatter: axis 0 (" + std::to_string(in[0].shape[0]) + ") is not a multiple of the " +
                              std::to_string(p) + " ranks");
           TensorType o = in[0];
           o.shape[0] /= p;
           return std::vector<TensorType>{o};
         },
         .not_differentiable = true,
         .stateful = true,
         .dtypes = kCollective,
         .doc = "the ranks' x reduced elementwise (sum/max/min), rank r keeping block r of axis 0",
         .example = [](ExampleInputs& x, DType t) {
           return std::vector<Var>{op("reduce_scatter", {x.in(t, {4, 2})}, {{"comm", int64_t(0)}, {"ranks", int64_t(1)}})};
         },
         .comm_bytes = [](const std::vector<TensorType>& in, const Attrs&) { return bytes(in[0]); }});
  // Rank `root`'s x on every rank.
  r.add({.name = "broadcast", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = {comm_attr(), {"root", AttrKind::Int, false, int64_t(0)}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kCollective, "broadcast input");
           if (a.get_int("root") < 0) throw InputError("root must be >= 0");
           return std::vector<TensorType>{in[0]};
         },
         .not_differentiable = true,
         .stateful = true,
         .dtypes = kCollective,
         .doc = "rank root's x on every rank of `comm`",
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{op("broadcast", {x.in(t, {4, 8})}, {{"comm", int64_t(0)}})}; },
         .comm_bytes = [](const std::vector<TensorType>& in, const Attrs&) { return bytes(in[0]); }});
  // all_reduce in two halves, so that work can run while the reduction is in flight (the
  // pipelined Krylov methods): all_reduce_begin copies x and starts the reduction (result: x,
  // the token that orders the end after it), all_reduce_end takes that token, waits and gives
  // the reduced values. `slot` pairs them within the process (a number the front end gives
  // each pair; MPI matches the ranks' reductions by their order, as for every collective).
  r.add({.name = "all_reduce_begin", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = {comm_attr(), op_attr(), {"slot", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kCollective, "all_reduce_begin input");
           check_op(in[0], a);
           return std::vector<TensorType>{in[0]};
         },
         .not_differentiable = true,
         .stateful = true,
         .dtypes = kCollective,
         .doc = "starts an all_reduce of x over `comm` (sum/max/min) -> x, the token all_reduce_end takes",
         .example = [](ExampleInputs& x, DType t) {
           Var token = op("all_reduce_begin", {x.in(t, {4, 8})}, {{"comm", int64_t(0)}, {"slot", int64_t(0)}});
           return std::vector<Var>{token, op("all_reduce_end", {token}, {{"comm", int64_t(0)}, {"slot", int64_t(0)}})};
         },
         .comm_bytes = [](const std::vector<TensorType>& in, const Attrs&) { return bytes(in[0]); }});
  r.add({.name = "all_reduce_end", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = {comm_attr(), {"slot", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs&, auto&) {
           require_dtype(in[0], kCollective, "all_reduce_end input");
           return std::vector<TensorType>{in[0]};
         },
         .not_differentiable = true,
         .stateful = true,
         .order_only_inputs = {0},  // the kernel takes its state from the plan/slot, not the token
         .dtypes = kCollective,
         .doc = "waits for the all_reduce its all_reduce_begin token started -> the reduced values",
         .example = [](ExampleInputs& x, DType t) {
           Var token = op("all_reduce_begin", {x.in(t, {4, 8})}, {{"comm", int64_t(0)}, {"slot", int64_t(0)}});
           return std::vector<Var>{op("all_reduce_end", {token}, {{"comm", int64_t(0)}, {"slot", int64_t(0)}})};
         },
         .comm_bytes = [](const std::vector<TensorType>&, const Attrs&) { return int64_t(0); }});
  // The neighbour exchange of a distributed vector, in two halves so that work can run
  // between them: halo_begin packs x's entries that neighbours need (result: those entries,
  // [sends], in send order) and starts the messages; halo_end takes that result (which
  // orders it after halo_begin) and waits, giving the entries received [receives].
  // Plan 0 exists in every process: a loopback sending entries 3, 0, 2 of x to itself.
  r.add({.name = "halo_begin", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = halo_begin_attrs(),
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           check_halo(in[0], a, "halo_begin input");
           if (a.get_bool("packed") && in[0].shape[0] != a.get_int("sends"))
             throw InputError("halo_begin with packed=true takes the [" + std::to_string(a.get_int("sends")) +
                              "] entries sent, got " + shape_str(in[0].shape));
           return std::vector<TensorType>{{in[0].dtype, {a.get_int("sends")}}};
         },
         .not_differentiable = true,
         .stateful = true,
         .dtypes = kCollective,
         .doc = "packs the entries of x a halo plan sends and starts its messages -> [sends]; packed: x is those "
                "entries already, in send order",
         .example = [](ExampleInputs& x, DType t) {
           const Attrs h{{"plan", int64_t(0)}, {"sends", int64_t(3)}, {"receives", int64_t(3)}};
           Var begun = op("halo_begin", {x.in(t, {4})}, h);
           Var got = op("halo_end", {begun}, h);
           Attrs hp = h;
           hp.set("packed", true);
           Var begun_packed = op("halo_begin", {x.in(t, {3})}, hp);
           return std::vector<Var>{begun, got, begun_packed, op("halo_end", {begun_packed}, h)};
         },
         .comm_bytes = [](const std::vector<TensorType>& in, const Attrs& a) { return element_bytes(in[0].dtype, a.get_int("sends")); }});
  r.add({.name = "halo_end", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = halo_attrs(),
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           check_halo(in[0], a, "halo_end input");
           if (in[0].shape[0] != a.get_int("sends"))
             throw InputError("halo_end takes halo_begin's [" + std::to_string(a.get_int("sends")) + "] result, got " +
                              shape_str(in[0].shape));
           return std::vector<TensorType>{{in[0].dtype, {a.get_int("receives")}}};
         },
         .not_differentiable = true,
         .stateful = true,
         .order_only_inputs = {0},  // the kernel takes its state from the plan/slot, not the token
         .dtypes = kCollective,
         .doc = "waits for a halo plan's messages -> the entries received [receives]",
         .example = [](ExampleInputs& x, DType t) {
           Var packed = op("halo_begin", {x.in(t, {4})}, {{"plan", int64_t(0)}, {"sends", int64_t(3)}, {"receives", int64_t(3)}});
           return std::vector<Var>{op("halo_end", {packed}, {{"plan", int64_t(0)}, {"sends", int64_t(3)}, {"receives", int64_t(3)}})};
         },
         .comm_bytes = [](const std::vector<TensorType>& in, const Attrs& a) { return element_bytes(in[0].dtype, a.get_int("receives")); }});
}

}  // namespace rlx::ir
