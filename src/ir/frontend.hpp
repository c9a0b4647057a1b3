// The C++ front end: build IR by writing ordinary expressions.
//
//   ir::Graph g;
//   auto x = rlx::input(g, "x", DType::F32, {128, 512});
//   auto y = rlx::gelu(rlx::matmul(x, w) + b);
//   rlx::output(g, {y});
//
// Every call records the caller's file and line on the node it creates, so errors and
// dispatch reports point at the user's code. Lowering bodies use the same functions.
#pragma once
#include <array>
#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace rlx {

using SrcLoc = std::source_location;

class Var {
 public:
  Var() = default;
  Var(ir::Graph* g, ir::Value v) : g_(g), v_(v) {}
  ir::Graph* graph() const { return g_; }
  ir::Value value() const { return v_; }
  bool defined() const { return g_ != nullptr; }
  const TensorType& type() const { return g_->type(v_); }
  DType dtype() const { return type().dtype; }
  const Shape& shape() const { return type().shape; }
  int rank() const { return int(shape().size()); }

 private:
  ir::Graph* g_ = nullptr;
  ir::Value v_;
};

ir::Location to_location(const SrcLoc& s);

// Generic node creation (what every helper below calls).
Var op(const std::string& name, const std::vector<Var>& in, ir::Attrs attrs = {}, SrcLoc loc = SrcLoc::current());
std::vector<Var> op_multi(const std::string& name, const std::vector<Var>& in, ir::Attrs attrs = {},
                          std::vector<std::shared_ptr<ir::Graph>> regions = {}, SrcLoc loc = SrcLoc::current());
// Where lowering bodies stamp the L1 node's location onto the nodes they create.
struct LocationScope {
  explicit LocationScope(ir::Location l);
  ~LocationScope();
  LocationScope(const LocationScope&) = delete;
  LocationScope& operator=(const LocationScope&) = delete;
};

Var input(ir::Graph& g, const std::string& name, DType t, Shape s, SrcLoc loc = SrcLoc::current());
void output(ir::Graph& g, const std::vector<Var>& results);
Var constant(ir::Graph& g, const Tensor& value, SrcLoc loc = SrcLoc::current());
Var scalar(ir::Graph& g, double v, DType t, SrcLoc loc = SrcLoc::current());
Var scalar_like(const Var& like, double v, SrcLoc loc = SrcLoc::current());  // shape [], like's dtype

// ---- L2 elementwise (NumPy broadcasting for binary ops; operands share a dtype) ----
#define RLX_UNARY(fn) Var fn(const Var& x, SrcLoc loc = SrcLoc::current());
RLX_UNARY(neg) RLX_UNARY(abs) RLX_UNARY(exp) RLX_UNARY(log) RLX_UNARY(sqrt) RLX_UNARY(rsqrt)
RLX_UNARY(sin) RLX_UNARY(cos) RLX_UNARY(tanh) RLX_UNARY(erf) RLX_UNARY(recip) RLX_UNARY(floor)
RLX_UNARY(ceil) RLX_UNARY(round) RLX_UNARY(sign) RLX_UNARY(logical_not)
RLX_UNARY(real) RLX_UNARY(imag) RLX_UNARY(conj)
#undef RLX_UNARY
#define RLX_BINARY(fn) Var fn(const Var& a, const Var& b, SrcLoc loc = SrcLoc::current());
RLX_BINARY(add) RLX_BINARY(sub) RLX_BINARY(mul) RLX_BINARY(div) RLX_BINARY(pow) RLX_BINARY(maximum)
RLX_BINARY(minimum) RLX_BINARY(eq) RLX_BINARY(ne) RLX_BINARY(lt) RLX_BINARY(le) RLX_BINARY(gt) RLX_BINARY(ge)
RLX_BINARY(logical_and) RLX_BINARY(logical_or) RLX_BINARY(make_complex)
#undef RLX_BINARY
Var where(const Var& cond, const Var& a, const Var& b, SrcLoc loc = SrcLoc::current());
Var cast(const Var& x, DType t, SrcLoc loc = SrcLoc::current());

// Operators record the user's line through VarAt: C++ gives operators no default
// arguments, but the implicit conversion to VarAt captures the call site.
struct VarAt {
  const Var& var;
  SrcLoc loc;
  VarAt(const Var& v, SrcLoc l = SrcLoc::current()) : var(v), loc(l) {}  // NOLINT: implicit on purpose
};
Var operator+(VarAt a, const Var& b);
Var operator-(VarAt a, const Var& b);
Var operator*(VarAt a, const Var& b);
Var operator/(VarAt a, const Var& b);
Var operator-(VarAt a);
Var operator+(VarAt a, double b);
Var operator-(VarAt a, double b);
Var operator*(VarAt a, double b);
Var operator/(VarAt a, double b);
Var operator+(double a, VarAt b);
Var operator-(double a, VarAt b);
Var operator*(double a, VarAt b);
Var operator/(double a, VarAt b);

// ---- L2 reductions and scan (empty axes: all) ----
Var sum(const Var& x, std::vector<int64_t> axes = {}, bool keepdims = false, SrcLoc loc = SrcLoc::current());
Var prod(const Var& x, std::vector<int64_t> axes = {}, bool keepdims = false, SrcLoc loc = SrcLoc::current());
Var max(const Var& x, std::vector<int64_t> axes = {}, bool keepdims = false, SrcLoc loc = SrcLoc::current());
Var min(const Var& x, std::vector<int64_t> axes = {}, bool keepdims = false, SrcLoc loc = SrcLoc::current());
Var argmax(const Var& x, int64_t axis, bool keepdims = false, SrcLoc loc = SrcLoc::current());
Var cumsum(const Var& x, int64_t axis, bool exclusive = false, bool reverse = false, SrcLoc loc = SrcLoc::current());

// ---- library primitive sort (stable; NaNs last, -0 == +0; see the op's doc in src/ir/ops/sort.cpp) ----
struct Sorted {
  Var values;
  Var indices;  // i64, positions along the axis
};
Sorted sort(const Var& x, int64_t axis = -1, bool descending = false, SrcLoc loc = SrcLoc::current());
Var argsort(const Var& x, int64_t axis = -1, bool descending = false, SrcLoc loc = SrcLoc::current());  // sort's indices

// ---- L2 matmul: a[..., M, K] @ b[..., K, N], batch dimensions broadcast ----
Var matmul(const Var& a, const Var& b, bool transpose_a = false, bool transpose_b = false,
           SrcLoc loc = SrcLoc::current());

// ---- L1 project_out: u = w - V^T h, c = conj(V) u (V [k, n], w [n, m], h [k, m]) ----
struct Projected {
  Var u;  // w with its components along V's rows (coefficients h) removed
  Var c;  // conj(V) u: the components left, for a second Gram-Schmidt pass
};
Projected project_out(const Var& V, const Var& w, const Var& h, SrcLoc loc = SrcLoc::current());

// ---- L2 movement ----
Var reshape(const Var& x, Shape s, SrcLoc loc = SrcLoc::current());  // one -1 allowed
Var permute(const Var& x, std::vector<int64_t> perm, SrcLoc loc = SrcLoc::current());
Var transpose(const Var& x, SrcLoc loc = SrcLoc::current());  // swaps the last two axes
Var broadcast_to(const Var& x, Shape s, SrcLoc loc = SrcLoc::current());
// Python-style slice on every axis: negative starts/stops count from the end; step >= 1.
Var slice(const Var& x, std::vector<int64_t> starts, std::vector<int64_t> stops, std::vector<int64_t> steps = {},
          SrcLoc loc = SrcLoc::current());
Var concat(const std::vector<Var>& xs, int64_t axis, SrcLoc loc = SrcLoc::current());
Var pad(const Var& x, std::vector<int64_t> low, std::vector<int64_t> high, double value = 0.0,
        SrcLoc loc = SrcLoc::current());
// numpy.take(x, idx, axis): out shape x[:axis] + idx + x[axis+1:]; indices i32/i64, in range.
Var gather(const Var& x, const Var& idx, int64_t axis, SrcLoc loc = SrcLoc::current());
// The adjoint of gather: out = x, then out[.., idx[j], ..] += updates[.., j, ..].
Var scatter_add(const Var& x, const Var& idx, const Var& updates, int64_t axis, SrcLoc loc = SrcLoc::current());
// x with `block` written at index `start` (an i32/i64 scalar) of `axis`; the rest of x unchanged.
Var update_slice(const Var& x, const Var& block, const Var& start, int64_t axis, SrcLoc loc = SrcLoc::current());

// ---- L2 sources ----
Var iota(ir::Graph& g, Shape s, int64_t axis, DType t, SrcLoc loc = SrcLoc::current());
// Counter-based: value i depends only on (seed, i), so every device draws the same numbers.
Var rng_uniform(ir::Graph& g, Shape s, DType t, uint64_t seed, double low = 0.0, double high = 1.0,
                SrcLoc loc = SrcLoc::current());
Var rng_normal(ir::Graph& g, Shape s, DType t, uint64_t seed, double mean = 0.0, double stddev = 1.0,
               SrcLoc loc = SrcLoc::current());
// Keyed draws: `key` (i64[], e.g. a step counter carried on the device) is mixed into the
// seed (core/rng.hpp rng_keyed_seed), so one compiled program draws new numbers per key.
Var rng_uniform(const Var& key, Shape s, DType t, uint64_t seed, double low = 0.0, double high = 1.0,
                SrcLoc loc = SrcLoc::current());
Var rng_normal(const Var& key, Shape s, DType t, uint64_t seed, double mean = 0.0, double stddev = 1.0,
               SrcLoc loc = SrcLoc::current());

// ---- library: a call into the running program (src/runtime/host_function.hpp) ----
// The result of host function `fn` (HostFunction::id(); 0: the identity) on `in` (one or more
// inputs), declared as t[s].
Var host_call(int64_t fn, const std::vector<Var>& in, DType t, Shape s, SrcLoc loc = SrcLoc::current());

// ---- L2 structured control flow ----
// cond(vars...) -> bool[]; body(vars...) -> new vars (same types). Returns the final vars.
using RegionFn = std::function<std::vector<Var>(const std::vector<Var>&)>;
std::vector<Var> while_loop(const std::vector<Var>& init, const RegionFn& cond, const RegionFn& body,
                            SrcLoc loc = SrcLoc::current());
std::vector<Var> if_then_else(const Var& pred, const std::vector<Var>& args, const RegionFn& then_fn,
                              const RegionFn& else_fn, SrcLoc loc = SrcLoc::current());

// ---- L1 ops (each has a lowering body into the ops above) ----
Var linear(const Var& x, const Var& w, std::optional<Var> b = std::nullopt, SrcLoc loc = SrcLoc::current());  // x @ w^T + b
Var relu(const Var& x, SrcLoc loc = SrcLoc::current());
Var gelu(const Var& x, const std::string& approximate = "none", SrcLoc loc = SrcLoc::current());  // "none"|"tanh"
Var silu(const Var& x, SrcLoc loc = SrcLoc::current());
Var sigmoid(const Var& x, SrcLoc loc = SrcLoc::current());
Var softmax(const Var& x, int64_t axis = -1, SrcLoc loc = SrcLoc::current());
Var log_softmax(const Var& x, int64_t axis = -1, SrcLoc loc = SrcLoc::current());
Var logsumexp(const Var& x, int64_t axis = -1, bool keepdims = false, SrcLoc loc = SrcLoc::current());
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5, SrcLoc loc = SrcLoc::current());
Var rms_norm(const Var& x, const Var& gamma, double eps = 1e-6, SrcLoc loc = SrcLoc::current());
Var mse(const Var& pred, const Var& target, SrcLoc loc = SrcLoc::current());  // mean over all elements
// logits [N, C], labels [N] (i32/i64): mean negative log-likelihood.
// label_smoothing eps: the target puts 1 - eps on the label and eps / C on every class.
Var cross_entropy(const Var& logits, const Var& labels, double label_smoothing = 0.0, SrcLoc loc = SrcLoc::current());
// Mean binary cross-entropy of targets (same type, in [0, 1]) under sigmoid(logits).
Var bce_with_logits(const Var& logits, const Var& targets, SrcLoc loc = SrcLoc::current());
// Inverted dropout of x with probability p: which elements drop is the counter RNG's draw
// for (seed, key), the same on every device; key i64[] (nn::Model::step_key per step).
Var dropout(const Var& x, const Var& key, double p, uint64_t seed = 0, SrcLoc loc = SrcLoc::current());
// q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv]; mask "none" | "causal"; optional additive bias [.., Lq, Lk].
// layout "lhd": q [..., Lq, H, D], k [..., Lk, H, D], v [..., Lk, H, Dv] -> [..., Lq, H, Dv] (the bias
// still [.., H, Lq, Lk]): heads split from a projection's features without moving them.
Var attention(const Var& q, const Var& k, const Var& v, const std::string& mask = "none",
              std::optional<Var> bias = std::nullopt, SrcLoc loc = SrcLoc::current(), const std::string& layout = "hld");
// x [N, C, H, W], w [O, C/groups, kh, kw], b [O]: PyTorch's conv2d, lowered through im2col.
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
Var conv2d(const Var& x, const Var& w, std::optional<Var> b = std::nullopt, const Conv2dOptions& o = {},
           SrcLoc loc = SrcLoc::current());
// Pooling over kh x kw windows of x [N, C, H, W]; a stride of {0, 0} means the kernel. Max pads
// with -inf; average counts the zero padding (count_include_pad).
Var max_pool2d(const Var& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
               std::array<int64_t, 2> padding = {0, 0}, SrcLoc loc = SrcLoc::current());
Var avg_pool2d(const Var& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
               std::array<int64_t, 2> padding = {0, 0}, SrcLoc loc = SrcLoc::current());
// x [N, C, ...] normalized per channel (gamma, beta and the running statistics [C]). training:
// by the batch's statistics, with the running ones updated (PyTorch's rule); otherwise by the
// running statistics, which come back unchanged.
struct BatchNormResult {
  Var y, running_mean, running_var;
};
BatchNormResult batch_norm(const Var& x, const Var& gamma, const Var& beta, const Var& running_mean,
                           const Var& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                           SrcLoc loc = SrcLoc::current());

}  // namespace rlx
