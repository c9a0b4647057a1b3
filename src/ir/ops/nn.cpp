// L1 neural-network ops. Each is defined once by its lowering body (written with the
// front end, in L2 primitives); its shape rule is that body run on a scratch graph,
// so the declared result type and the lowering can never disagree.
#include <cmath>
#include <numbers>

#include "ir/frontend.hpp"
#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

InferFn infer_by_lowering(LowerFn lower, std::vector<DType> ok) {
  return [lower, ok](const std::vector<TensorType>& in, const Attrs& a, auto&) {
    require_dtype(in[0], ok);
    Graph scratch;
    std::vector<Var> args;
    for (size_t i = 0; i < in.size(); ++i) args.emplace_back(&scratch, scratch.add_param("a" + std::to_string(i), in[i]));
    std::vector<TensorType> out;
    for (auto& v : lower(args, a)) out.push_back(v.type());
    return out;
  };
}

// `example` is needed where the class example (one [4,8] input) does not fit. Without a
// `vjp`, grad differentiates the lowering body; with one, grad uses it (cheaper: it reuses
// the result and skips the body's intermediate rules). `nondiff`: inputs without gradient.
void l1(OpRegistry& r, const char* name, int min_in, int max_in, std::vector<AttrSpec> attrs, LowerFn lower,
        std::string doc, ExampleFn example = {}, std::vector<DType> ok = kFloats, VjpFn vjp = {},
        std::vector<int> nondiff = {}) {
  r.add({.name = name, .level = Level::L1, .cls = OpClass::Composite, .min_inputs = min_in, .max_inputs = max_in,
         .attrs = std::move(attrs), .infer = infer_by_lowering(lower, ok), .lower = lower, .vjp = std::move(vjp),
         .nondiff_inputs = std::move(nondiff), .dtypes = ok, .doc = std::move(doc), .example = std::move(example)});
}

Var sigmoid_body(const Var& x) { return 1.0 / (1.0 + exp(-x)); }

Var softmax_body(const Var& x, int64_t axis) {
  Var m = max(x, {axis}, true);
  Var e = exp(x - m);
  return e / sum(e, {axis}, true);
}

Var mean_last(const Var& x) { return sum(x, {-1}, true) / double(x.shape().back()); }

using V = std::vector<Var>;

V relu_vjp(const V& in, const V&, const V& g, const Attrs&) {
  return {where(gt(in[0], scalar_like(in[0], 0.0)), g[0], vjp::zeros_like(g[0]))};
}
V sigmoid_vjp(const V&, const V& out, const V& g, const Attrs&) { return {g[0] * out[0] * (1.0 - out[0])}; }
V silu_vjp(const V& in, const V&, const V& g, const Attrs&) {
  Var s = 1.0 / (1.0 + exp(-in[0]));
  return {g[0] * s * (1.0 + in[0] * (1.0 - s))};
}
V softmax_vjp(const V&, const V& out, const V& g, const Attrs& a) {
  const Var& y = out[0];
  return {y * (g[0] - sum(g[0] * y, {a.get_int("axis")}, true))};
}
V log_softmax_vjp(const V&, const V& out, const V& g, const Attrs& a) {
  return {g[0] - exp(out[0]) * sum(g[0], {a.get_int("axis")}, true)};
}
// (softmax(logits) - onehot(labels)) * g / N; the labels carry no gradient.
V cross_entropy_vjp(const V& in, const V&, const V& g, const Attrs&) {
  const Var &logits = in[0], &labels = in[1];
  const int64_t n = logits.shape()[0];
  Var classes = iota(*logits.graph(), logits.shape(), 1, labels.dtype());
  Var onehot = cast(eq(classes, reshape(labels, {n, 1})), logits.dtype());
  Var scale = g[0] * (1.0 / double(std::max<int64_t>(1, n)));
  return {(softmax_body(logits, 1) - onehot) * scale, Var()};
}
// With h = (x - mean) r, r = 1/sqrt(var + eps) and d = g gamma over the last axis:
// dx = r (d - mean(d) - h mean(d h)); dgamma = sum of g h, dbeta = sum of g over the rest.
V layer_norm_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  const Var& x = in[0];
  Var c = x - mean_last(x);
  Var r = rsqrt(mean_last(c * c) + a.get_float("eps"));
  Var h = c * r;
  Var d = g[0] * in[1];
  Var dx = r * (d - mean_last(d) - h * mean_last(d * h));
  return {dx, vjp::unbroadcast(g[0] * h, in[1].shape()), vjp::unbroadcast(g[0], in[2].shape())};
}
// y = x r gamma, r = 1/sqrt(mean(x^2) + eps): dx = r (d - x r^2 mean(d x)), d = g gamma.
V rms_norm_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  const Var& x = in[0];
  Var r = rsqrt(mean_last(x * x) + a.get_float("eps"));
  Var d = g[0] * in[1];
  Var dx = r * (d - x * (r * r) * mean_last(d * x));
  return {dx, vjp::unbroadcast(g[0] * x * r, in[1].shape())};
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  l1(r, "linear", 2, 3, {},
     [](const std::vector<Var>& in, const Attrs&) {
       if (in[1].rank() != 2) throw InputError("weight must be [out, in], got " + shape_str(in[1].shape()));
       Var y = matmul(in[0], in[1], false, true);
       if (in.size() == 3) y = y + in[2];
       return std::vector<Var>{y};
     },
     "x @ w^T + b",
     [](ExampleInputs& x, DType t) { return std::vector<Var>{linear(x.in(t, {4, 8}), x.in(t, {16, 8}), x.in(t, {16}))}; },
     kInexact);
  l1(r, "relu", 1, 1, {},
     [](const std::vector<Var>& in, const Attrs&) { return std::vector<Var>{maximum(in[0], scalar_like(in[0], 0.0))}; },
     "max(x, 0)", {}, cat({kFloats, kInts}), relu_vjp);
  l1(r, "gelu", 1, 1, {{"approximate", AttrKind::String, false, std::string("none")}},
     [](const std::vector<Var>& in, const Attrs& a) {
       const Var& x = in[0];
       const std::string& ap = a.get_string("approximate");
       if (ap == "none") return std::vector<Var>{0.5 * x * (1.0 + erf(x * (1.0 / std::numbers::sqrt2)))};
       if (ap == "tanh") {
         double c = std::sqrt(2.0 / std::numbers::pi);
         return std::vector<Var>{0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)))};
       }
       throw InputError("approximate must be \"none\" or \"tanh\", got \"" + ap + "\"");
     },
     "Gaussian error linear unit (erf form, or tanh approximation)");
  l1(r, "sigmoid", 1, 1, {}, [](const std::vector<Var>& in, const Attrs&) { return std::vector<Var>{sigmoid_body(in[0])}; },
     "1 / (1 + exp(-x))", {}, kFloats, sigmoid_vjp);
  l1(r, "silu", 1, 1, {}, [](const std::vector<Var>& in, const Attrs&) { return std::vector<Var>{in[0] * sigmoid_body(in[0])}; },
     "x * sigmoid(x)", {}, kFloats, silu_vjp);
  l1(r, "softmax", 1, 1, {{"axis", AttrKind::Int, false, int64_t(-1)}},
     [](const std::vector<Var>& in, const Attrs& a) { return std::vector<Var>{softmax_body(in[0], a.get_int("axis"))}; },
     "exp(x - max) / sum(exp(x - max)) along axis", {}, kFloats, softmax_vjp);
  l1(r, "logsumexp", 1, 1, {{"axis", AttrKind::Int, false, int64_t(-1)}, {"keepdims", AttrKind::Bool, false, false}},
     [](const std::vector<Var>& in, const Attrs& a) {
       // Shifted by the row's max, which is replaced by 0 where it is infinite: a row of
       // -inf gives -inf and a row holding +inf gives +inf (not NaN from inf - inf).
       const Var& x = in[0];
       const int64_t ax = a.get_int("axis");
       Var m = max(x, {ax}, true);
       Var shift = where(eq(abs(m), scalar_like(m, INFINITY)), scalar_like(m, 0.0), m);
       Var lse = log(sum(exp(x - shift), {ax}, true)) + shift;
       if (a.get_bool("keepdims")) return std::vector<Var>{lse};
       Shape s = x.shape();
       s.erase(s.begin() + normalize_axis(ax, x.rank()));
       return std::vector<Var>{reshape(lse, s)};
     },
     "log(sum(exp(x))) along axis, computed as max + log(sum(exp(x - max)))");
  l1(r, "log_softmax", 1, 1, {{"axis", AttrKind::Int, false, int64_t(-1)}},
     [](const std::vector<Var>& in, const Attrs& a) {
       int64_t ax = a.get_int("axis");
       Var s = in[0] - max(in[0], {ax}, true);
       return std::vector<Var>{s - log(sum(exp(s), {ax}, true))};
     },
     "x - max - log(sum(exp(x - max))) along axis", {}, kFloats, log_softmax_vjp);
  l1(r, "layer_norm", 3, 3, {{"eps", AttrKind::Float, false, 1e-5}},
     [](const std::vector<Var>& in, const Attrs& a) {
       const Var& x = in[0];
       if (in[1].shape() != Shape{x.shape().back()} || in[2].shape() != Shape{x.shape().back()})
         throw InputError("gamma and beta must be [" + std::to_string(x.shape().back()) + "]");
       Var c = x - mean_last(x);
       Var var = mean_last(c * c);
       return std::vector<Var>{c * rsqrt(var + a.get_float("eps")) * in[1] + in[2]};
     },
     "(x - mean) / sqrt(var + eps) * gamma + beta over the last axis",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{layer_norm(x.in(t, {4, 8}), x.in(t, {8}), x.in(t, {8}))};
     },
     kFloats, layer_norm_vjp);
  l1(r, "rms_norm", 2, 2, {{"eps", AttrKind::Float, false, 1e-6}},
     [](const std::vector<Var>& in, const Attrs& a) {
       const Var& x = in[0];
       if (in[1].shape() != Shape{x.shape().back()})
         throw InputError("gamma must be [" + std::to_string(x.shape().back()) + "]");
       return std::vector<Var>{x * rsqrt(mean_last(x * x) + a.get_float("eps")) * in[1]};
     },
     "x / sqrt(mean(x^2) + eps) * gamma over the last axis",
     [](ExampleInputs& x, DType t) { return std::vector<Var>{rms_norm(x.in(t, {4, 8}), x.in(t, {8}))}; }, kFloats,
     rms_norm_vjp);
  l1(r, "mse", 2, 2, {},
     [](const std::vector<Var>& in, const Attrs&) {
       if (in[0].shape() != in[1].shape())
         throw InputError("prediction " + shape_str(in[0].shape()) + " and target " + shape_str(in[1].shape()) + " differ");
       Var d = in[0] - in[1];
       return std::vector<Var>{sum(d * d) / double(std::max<int64_t>(1, numel(in[0].shape())))};
     },
     "mean squared error",
     [](ExampleInputs& x, DType t) { return std::vector<Var>{mse(x.in(t, {4, 8}), x.in(t, {4, 8}))}; });
  l1(r, "cross_entropy", 2, 2, {},
     [](const std::vector<Var>& in, const Attrs&) {
       const Var &logits = in[0], &labels = in[1];
       if (logits.rank() != 2 || labels.rank() != 1 || labels.shape()[0] != logits.shape()[0])
         throw InputError("expects logits [N, C] and labels [N], got " + shape_str(logits.shape()) + " and " +
                          shape_str(labels.shape()));
       if (labels.dtype() != DType::I32 && labels.dtype() != DType::I64)
         throw InputError(std::string("labels must be i32 or i64, got ") + dtype_name(labels.dtype()));
       int64_t n = logits.shape()[0];
       Var s = logits - max(logits, {1}, true);
       Var ls = s - log(sum(exp(s), {1}, true));
       Var classes = iota(*logits.graph(), logits.shape(), 1, labels.dtype());
       Var onehot = cast(eq(classes, reshape(labels, {n, 1})), logits.dtype());
       return std::vector<Var>{-(sum(ls * onehot) / double(std::max<int64_t>(1, n)))};
     },
     "mean negative log-likelihood of integer labels under softmax(logits)",
     [](ExampleInputs& x, DType t) { return std::vector<Var>{cross_entropy(x.in(t, {4, 8}), x.index(DType::I64, {4}, 8))}; },
     kFloats, cross_entropy_vjp, {1});
  l1(r, "attention", 3, 4, {{"mask", AttrKind::String, false, std::string("none")}, {"scale", AttrKind::Float, false, 0.0}},
     [](const std::vector<Var>& in, const Attrs& a) {
       const Var &q = in[0], &k = in[1], &v = in[2];
       double scale = a.get_float("scale");
       if (scale == 0.0) scale = 1.0 / std::sqrt(double(q.shape().back()));
       Var s = matmul(q, k, false, true) * scale;
       if (in.size() == 4) s = s + in[3];
       const std::string& mask = a.get_string("mask");
       if (mask == "causal") {
         const Shape& ss = s.shape();
         int64_t lq = ss[ss.size() - 2], lk = ss.back();
         Var row = iota(*q.graph(), {lq, lk}, 0, DType::I64);
         Var col = iota(*q.graph(), {lq, lk}, 1, DType::I64);
         Var keep = le(col, row + scalar(*q.graph(), double(lk - lq), DType::I64));
         s = where(keep, s, scalar_like(s, -INFINITY));
       } else if (mask != "none") {
         throw InputError("mask must be \"none\" or \"causal\", got \"" + mask + "\"");
       }
       return std::vector<Var>{matmul(softmax_body(s, -1), v)};
     },
     "softmax(q k^T * scale + bias [causal mask]) v",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{attention(x.in(t, {2, 4, 8}), x.in(t, {2, 6, 8}), x.in(t, {2, 6, 8}))};
     });
}

}  // namespace rlx::ir
