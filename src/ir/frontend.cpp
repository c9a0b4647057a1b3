#include "ir/frontend.hpp"

#include <cmath>
#include <filesystem>

#include "core/error.hpp"
#include "ir/op_registry.hpp"

namespace rlx {

namespace {
thread_local std::vector<ir::Location> g_scopes;  // innermost last

ir::Graph* graph_of(const std::vector<Var>& in) {
  ir::Graph* g = nullptr;
  for (auto& v : in) {
    if (!v.defined()) throw InputError("an operand is an undefined Var");
    if (g && v.graph() != g) throw InputError("operands belong to different graphs");
    g = v.graph();
  }
  return g;
}

std::vector<Var> wrap(ir::Graph* g, const std::vector<ir::Value>& vs) {
  std::vector<Var> r;
  for (auto v : vs) r.emplace_back(g, v);
  return r;
}
}  // namespace

ir::Location to_location(const SrcLoc& s) {
  if (!g_scopes.empty()) return g_scopes.back();
  ir::Location l;
  l.file = std::filesystem::path(s.file_name()).filename().string();
  l.line = int(s.line());
  return l;
}

LocationScope::LocationScope(ir::Location l) { g_scopes.push_back(std::move(l)); }
LocationScope::~LocationScope() { g_scopes.pop_back(); }

std::vector<Var> op_multi(const std::string& name, const std::vector<Var>& in, ir::Attrs attrs,
                          std::vector<std::shared_ptr<ir::Graph>> regions, SrcLoc loc) {
  ir::Graph* g = graph_of(in);
  if (!g) throw InputError("op '" + name + "' needs at least one operand to know its graph");
  std::vector<ir::Value> vs;
  for (auto& v : in) vs.push_back(v.value());
  auto out = g->add_multi(&ir::OpRegistry::get().at(name), vs, std::move(attrs), to_location(loc), std::move(regions));
  return wrap(g, out);
}

Var op(const std::string& name, const std::vector<Var>& in, ir::Attrs attrs, SrcLoc loc) {
  auto r = op_multi(name, in, std::move(attrs), {}, loc);
  if (r.size() != 1) throw InputError("op '" + name + "' has several results; use op_multi");
  return r[0];
}

static Var source(ir::Graph& g, const std::string& name, ir::Attrs attrs, SrcLoc loc) {
  return Var(&g, g.add(&ir::OpRegistry::get().at(name), {}, std::move(attrs), to_location(loc)));
}

Var input(ir::Graph& g, const std::string& name, DType t, Shape s, SrcLoc loc) {
  return Var(&g, g.add_param(name, {t, std::move(s)}, to_location(loc)));
}

void output(ir::Graph& g, const std::vector<Var>& results) {
  for (auto& v : results) {
    if (v.graph() != &g) throw InputError("an output belongs to another graph");
    g.results.push_back(v.value());
  }
}

Var constant(ir::Graph& g, const Tensor& value, SrcLoc loc) {
  return source(g, "constant", {{"value", value.is_host() ? value.contiguous() : value.to(host_allocator())}}, loc);
}

Var scalar(ir::Graph& g, double v, DType t, SrcLoc loc) { return constant(g, scalar_tensor(t, v), loc); }
Var scalar_like(const Var& like, double v, SrcLoc loc) { return scalar(*like.graph(), v, like.dtype(), loc); }

#define RLX_UNARY(fn) \
  Var fn(const Var& x, SrcLoc loc) { return op(#fn, {x}, {}, loc); }
RLX_UNARY(neg) RLX_UNARY(abs) RLX_UNARY(exp) RLX_UNARY(log) RLX_UNARY(sqrt) RLX_UNARY(rsqrt)
RLX_UNARY(sin) RLX_UNARY(cos) RLX_UNARY(tanh) RLX_UNARY(erf) RLX_UNARY(recip) RLX_UNARY(floor)
RLX_UNARY(ceil) RLX_UNARY(round) RLX_UNARY(sign) RLX_UNARY(logical_not)
RLX_UNARY(real) RLX_UNARY(imag) RLX_UNARY(conj)
#undef RLX_UNARY
#define RLX_BINARY(fn) \
  Var fn(const Var& a, const Var& b, SrcLoc loc) { return op(#fn, {a, b}, {}, loc); }
RLX_BINARY(add) RLX_BINARY(sub) RLX_BINARY(mul) RLX_BINARY(div) RLX_BINARY(pow) RLX_BINARY(maximum)
RLX_BINARY(minimum) RLX_BINARY(eq) RLX_BINARY(ne) RLX_BINARY(lt) RLX_BINARY(le) RLX_BINARY(gt) RLX_BINARY(ge)
RLX_BINARY(logical_and) RLX_BINARY(logical_or) RLX_BINARY(make_complex)
#undef RLX_BINARY

Var where(const Var& c, const Var& a, const Var& b, SrcLoc loc) { return op("where", {c, a, b}, {}, loc); }
Var cast(const Var& x, DType t, SrcLoc loc) { return op("cast", {x}, {{"dtype", t}}, loc); }

Var operator+(VarAt a, const Var& b) { return add(a.var, b, a.loc); }
Var operator-(VarAt a, const Var& b) { return sub(a.var, b, a.loc); }
Var operator*(VarAt a, const Var& b) { return mul(a.var, b, a.loc); }
Var operator/(VarAt a, const Var& b) { return div(a.var, b, a.loc); }
Var operator-(VarAt a) { return neg(a.var, a.loc); }
Var operator+(VarAt a, double b) { return add(a.var, scalar_like(a.var, b, a.loc), a.loc); }
Var operator-(VarAt a, double b) { return sub(a.var, scalar_like(a.var, b, a.loc), a.loc); }
Var operator*(VarAt a, double b) { return mul(a.var, scalar_like(a.var, b, a.loc), a.loc); }
Var operator/(VarAt a, double b) { return div(a.var, scalar_like(a.var, b, a.loc), a.loc); }
Var operator+(double a, VarAt b) { return add(scalar_like(b.var, a, b.loc), b.var, b.loc); }
Var operator-(double a, VarAt b) { return sub(scalar_like(b.var, a, b.loc), b.var, b.loc); }
Var operator*(double a, VarAt b) { return mul(scalar_like(b.var, a, b.loc), b.var, b.loc); }
Var operator/(double a, VarAt b) { return div(scalar_like(b.var, a, b.loc), b.var, b.loc); }

static ir::Attrs reduce_attrs(std::vector<int64_t> axes, bool keepdims) {
  return {{"axes", std::move(axes)}, {"keepdims", keepdims}};
}
Var sum(const Var& x, std::vector<int64_t> axes, bool kd, SrcLoc loc) { return op("sum", {x}, reduce_attrs(axes, kd), loc); }
Var prod(const Var& x, std::vector<int64_t> axes, bool kd, SrcLoc loc) { return op("prod", {x}, reduce_attrs(axes, kd), loc); }
Var max(const Var& x, std::vector<int64_t> axes, bool kd, SrcLoc loc) { return op("max", {x}, reduce_attrs(axes, kd), loc); }
Var min(const Var& x, std::vector<int64_t> axes, bool kd, SrcLoc loc) { return op("min", {x}, reduce_attrs(axes, kd), loc); }
Var argmax(const Var& x, int64_t axis, bool kd, SrcLoc loc) {
  return op("argmax", {x}, {{"axis", axis}, {"keepdims", kd}}, loc);
}
Var cumsum(const Var& x, int64_t axis, bool exclusive, bool reverse, SrcLoc loc) {
  return op("cumsum", {x}, {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}}, loc);
}

Sorted sort(const Var& x, int64_t axis, bool descending, SrcLoc loc) {
  auto r = op_multi("sort", {x}, {{"axis", axis}, {"descending", descending}}, {}, loc);
  return {r[0], r[1]};
}
Var argsort(const Var& x, int64_t axis, bool descending, SrcLoc loc) { return sort(x, axis, descending, loc).indices; }

Var matmul(const Var& a, const Var& b, bool ta, bool tb, SrcLoc loc) {
  return op("matmul", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}, loc);
}
Projected project_out(const Var& V, const Var& w, const Var& h, SrcLoc loc) {
  auto r = op_multi("project_out", {V, w, h}, {}, {}, loc);
  return {r[0], r[1]};
}

Var reshape(const Var& x, Shape s, SrcLoc loc) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ShapeError("reshape target " + shape_str(s) + " has more than one -1");
      infer = int(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    int64_t n = numel(x.shape());
    if (known == 0 || n % known != 0)
      throw ShapeError("cannot reshape " + shape_str(x.shape()) + " to " + shape_str(s));
    s[size_t(infer)] = n / known;
  }
  return op("reshape", {x}, {{"shape", s}}, loc);
}
Var permute(const Var& x, std::vector<int64_t> perm, SrcLoc loc) { return op("permute", {x}, {{"perm", perm}}, loc); }
Var transpose(const Var& x, SrcLoc loc) {
  int r = x.rank();
  if (r < 2) throw ShapeError("transpose needs rank >= 2, got " + shape_str(x.shape()));
  std::vector<int64_t> p(static_cast<size_t>(r), 0);
  for (int i = 0; i < r; ++i) p[size_t(i)] = i;
  std::swap(p[size_t(r - 1)], p[size_t(r - 2)]);
  return permute(x, p, loc);
}
Var broadcast_to(const Var& x, Shape s, SrcLoc loc) { return op("broadcast_to", {x}, {{"shape", s}}, loc); }

Var slice(const Var& x, std::vector<int64_t> starts, std::vector<int64_t> stops, std::vector<int64_t> steps,
          SrcLoc loc) {
  size_t n = size_t(x.rank());
  if (steps.empty()) steps.assign(n, 1);
  if (starts.size() != n || stops.size() != n || steps.size() != n)
    throw ShapeError("slice needs one start/stop/step per axis of " + shape_str(x.shape()));
  for (size_t i = 0; i < n; ++i) {
    int64_t d = x.shape()[i];
    auto norm = [d](int64_t v) { return std::clamp(v < 0 ? v + d : v, int64_t(0), d); };
    starts[i] = norm(starts[i]);
    stops[i] = std::max(starts[i], norm(stops[i]));
    // A step past the sliced range takes its first element only: the same slice with a step
    // the gradient's padding (step - 1 per element) can be sized by.
    if (steps[i] > 1 && steps[i] > stops[i] - starts[i]) steps[i] = std::max<int64_t>(1, stops[i] - starts[i]);
  }
  return op("slice", {x}, {{"starts", starts}, {"stops", stops}, {"steps", steps}}, loc);
}
Var concat(const std::vector<Var>& xs, int64_t axis, SrcLoc loc) { return op("concat", xs, {{"axis", axis}}, loc); }
Var pad(const Var& x, std::vector<int64_t> low, std::vector<int64_t> high, double value, SrcLoc loc) {
  return op("pad", {x}, {{"low", low}, {"high", high}, {"value", value}}, loc);
}
Var gather(const Var& x, const Var& idx, int64_t axis, SrcLoc loc) { return op("gather", {x, idx}, {{"axis", axis}}, loc); }
Var scatter_add(const Var& x, const Var& idx, const Var& u, int64_t axis, SrcLoc loc) {
  return op("scatter_add", {x, idx, u}, {{"axis", axis}}, loc);
}
Var update_slice(const Var& x, const Var& block, const Var& start, int64_t axis, SrcLoc loc) {
  return op("update_slice", {x, block, start}, {{"axis", axis}}, loc);
}

Var iota(ir::Graph& g, Shape s, int64_t axis, DType t, SrcLoc loc) {
  return source(g, "iota", {{"shape", s}, {"axis", axis}, {"dtype", t}}, loc);
}
Var rng_uniform(ir::Graph& g, Shape s, DType t, uint64_t seed, double low, double high, SrcLoc loc) {
  return source(g, "rng_uniform", {{"shape", s}, {"dtype", t}, {"seed", int64_t(seed)}, {"low", low}, {"high", high}}, loc);
}
Var rng_normal(ir::Graph& g, Shape s, DType t, uint64_t seed, double mean, double stddev, SrcLoc loc) {
  return source(g, "rng_normal", {{"shape", s}, {"dtype", t}, {"seed", int64_t(seed)}, {"mean", mean}, {"stddev", stddev}},
                loc);
}

Var host_call(int64_t fn, const std::vector<Var>& in, DType t, Shape s, SrcLoc loc) {
  if (in.empty()) throw InputError("host_call: the front end needs an input to find the graph (op() on a graph takes none)");
  return op("host_call", in, {{"fn", fn}, {"dtype", t}, {"shape", std::move(s)}}, loc);
}

Var rng_uniform(const Var& key, Shape s, DType t, uint64_t seed, double low, double high, SrcLoc loc) {
  return op("rng_uniform", {key}, {{"shape", s}, {"dtype", t}, {"seed", int64_t(seed)}, {"low", low}, {"high", high}}, loc);
}
Var rng_normal(const Var& key, Shape s, DType t, uint64_t seed, double mean, double stddev, SrcLoc loc) {
  return op("rng_normal", {key}, {{"shape", s}, {"dtype", t}, {"seed", int64_t(seed)}, {"mean", mean}, {"stddev", stddev}},
            loc);
}

static std::shared_ptr<ir::Graph> build_region(const std::string& name, const std::vector<TensorType>& types,
                                               const RegionFn& fn) {
  auto g = std::make_shared<ir::Graph>();
  g->name = name;
  std::vector<Var> args;
  for (size_t i = 0; i < types.size(); ++i)
    args.emplace_back(g.get(), g->add_param(name.substr(0, 1) + std::to_string(i), types[i]));
  output(*g, fn(args));
  return g;
}

std::vector<Var> while_loop(const std::vector<Var>& init, const RegionFn& cond, const RegionFn& body, SrcLoc loc) {
  std::vector<TensorType> types;
  for (auto& v : init) types.push_back(v.type());
  auto c = build_region("cond", types, cond);
  auto b = build_region("body", types, body);
  return op_multi("while", init, {}, {c, b}, loc);
}

std::vector<Var> if_then_else(const Var& pred, const std::vector<Var>& args, const RegionFn& then_fn,
                              const RegionFn& else_fn, SrcLoc loc) {
  std::vector<TensorType> types;
  for (auto& v : args) types.push_back(v.type());
  auto t = build_region("then", types, then_fn);
  auto e = build_region("else", types, else_fn);
  std::vector<Var> in{pred};
  in.insert(in.end(), args.begin(), args.end());
  return op_multi("if", in, {}, {t, e}, loc);
}

// ---- L1 ----
Var linear(const Var& x, const Var& w, std::optional<Var> b, SrcLoc loc) {
  std::vector<Var> in{x, w};
  if (b) in.push_back(*b);
  return op("linear", in, {}, loc);
}
Var relu(const Var& x, SrcLoc loc) { return op("relu", {x}, {}, loc); }
Var gelu(const Var& x, const std::string& approximate, SrcLoc loc) {
  return op("gelu", {x}, {{"approximate", approximate}}, loc);
}
Var silu(const Var& x, SrcLoc loc) { return op("silu", {x}, {}, loc); }
Var sigmoid(const Var& x, SrcLoc loc) { return op("sigmoid", {x}, {}, loc); }
Var softmax(const Var& x, int64_t axis, SrcLoc loc) { return op("softmax", {x}, {{"axis", axis}}, loc); }
Var log_softmax(const Var& x, int64_t axis, SrcLoc loc) { return op("log_softmax", {x}, {{"axis", axis}}, loc); }
Var logsumexp(const Var& x, int64_t axis, bool keepdims, SrcLoc loc) {
  return op("logsumexp", {x}, {{"axis", axis}, {"keepdims", keepdims}}, loc);
}
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps, SrcLoc loc) {
  return op("layer_norm", {x, gamma, beta}, {{"eps", eps}}, loc);
}
Var rms_norm(const Var& x, const Var& gamma, double eps, SrcLoc loc) {
  return op("rms_norm", {x, gamma}, {{"eps", eps}}, loc);
}
Var mse(const Var& p, const Var& t, SrcLoc loc) { return op("mse", {p, t}, {}, loc); }
Var bce_with_logits(const Var& logits, const Var& targets, SrcLoc loc) {
  return op("bce_with_logits", {logits, targets}, {}, loc);
}
Var dropout(const Var& x, const Var& key, double p, uint64_t seed, SrcLoc loc) {
  return op("dropout", {x, key}, {{"p", p}, {"seed", int64_t(seed)}}, loc);
}
Var cross_entropy(const Var& logits, const Var& labels, double label_smoothing, SrcLoc loc) {
  if (label_smoothing != 0.0) return op("cross_entropy", {logits, labels}, {{"label_smoothing", label_smoothing}}, loc);
  return op("cross_entropy", {logits, labels}, {}, loc);
}
Var attention(const Var& q, const Var& k, const Var& v, const std::string& mask, std::optional<Var> bias, SrcLoc loc,
              const std::string& layout) {
  std::vector<Var> in{q, k, v};
  if (bias) in.push_back(*bias);
  if (layout == "hld") return op("attention", in, {{"mask", mask}}, loc);
  return op("attention", in, {{"mask", mask}, {"layout", layout}}, loc);
}
Var conv2d(const Var& x, const Var& w, std::optional<Var> b, const Conv2dOptions& o, SrcLoc loc) {
  std::vector<Var> in{x, w};
  if (b) in.push_back(*b);
  auto ints = [](const std::array<int64_t, 2>& v) { return std::vector<int64_t>{v[0], v[1]}; };
  return op("conv2d", in,
            {{"stride", ints(o.stride)}, {"padding", ints(o.padding)}, {"dilation", ints(o.dilation)}, {"groups", o.groups}},
            loc);
}
static ir::Attrs pool_attrs(std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> p) {
  const bool default_stride = s[0] == 0 && s[1] == 0;
  return {{"kernel", std::vector<int64_t>{k[0], k[1]}},
          {"stride", default_stride ? std::vector<int64_t>{} : std::vector<int64_t>{s[0], s[1]}},
          {"padding", std::vector<int64_t>{p[0], p[1]}}};
}
Var max_pool2d(const Var& x, std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> p, SrcLoc loc) {
  return op("max_pool2d", {x}, pool_attrs(k, s, p), loc);
}
Var avg_pool2d(const Var& x, std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> p, SrcLoc loc) {
  return op("avg_pool2d", {x}, pool_attrs(k, s, p), loc);
}
BatchNormResult batch_norm(const Var& x, const Var& gamma, const Var& beta, const Var& running_mean,
                           const Var& running_var, bool training, double momentum, double eps, SrcLoc loc) {
  std::vector<Var> r = op_multi("batch_norm", {x, gamma, beta, running_mean, running_var},
                                {{"training", training}, {"momentum", momentum}, {"eps", eps}}, {}, loc);
  return {r[0], r[1], r[2]};
}

}  // namespace rlx
