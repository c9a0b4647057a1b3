// L1 neural-network ops. Each is defined once by its lowering body (written with the
// front end, in L2 primitives); its shape rule is that body run on a scratch graph,
// so the declared result type and the lowering can never disagree.
#include <array>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <numbers>

#include "core/rotary.hpp"
#include "ir/frontend.hpp"
#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

InferFn rules::infer_by_lowering(LowerFn lower, std::vector<DType> ok, bool same_dtype) {
  return [lower, ok, same_dtype](const std::vector<TensorType>& in, const Attrs& a, auto&) {
    require_dtype(in[0], ok);
    if (same_dtype) require_same_dtype(in);
    Graph scratch;
    std::vector<Var> args;
    for (size_t i = 0; i < in.size(); ++i) args.emplace_back(&scratch, scratch.add_param("a" + std::to_string(i), in[i]));
    std::vector<TensorType> out;
    for (auto& v : lower(args, a)) out.push_back(v.type());
    return out;
  };
}

namespace {


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
// The attention weights softmax(q k^T scale + bias [causal]) that the lowering and the VJP share.
Var attention_probs(const V& in, const Attrs& a) {
  const Var &q = in[0], &k = in[1];
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
  // The softmax op rather than its body: where attention itself is not native (a prefill's
  // grouped query attention over broadcast key heads, on cuda) the scores then take one
  // native softmax pass instead of five elementwise and reduction passes.
  return softmax(s, -1);
}
// layout "lhd" takes q [.., Lq, H, D], k [.., Lk, H, D], v [.., Lk, H, Dv] and gives
// [.., Lq, H, Dv]: the order a projection's [N, L, E] output has once E is split into heads,
// so a model needs no copies into [.., H, L, D] and back (a device's kernel reads the rows
// in place; the lowering swaps the axes itself). "hld", the default, is [.., H, L, D].
bool attention_lhd(const Attrs& a) {
  const std::string& layout = a.get_string("layout");
  if (layout != "hld" && layout != "lhd") throw InputError("layout must be \"hld\" or \"lhd\", got \"" + layout + "\"");
  return layout == "lhd";
}
// The [.., L, H, D] <-> [.., H, L, D] swap of the last-but-one two axes.
Var swap_heads(const Var& x) {
  if (x.rank() < 3) throw InputError("attention with layout \"lhd\" needs [.., L, H, D] operands, got " + x.type().str());
  std::vector<int64_t> perm(size_t(x.rank()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
  std::swap(perm[perm.size() - 3], perm[perm.size() - 2]);
  return permute(x, perm);
}
V attention_body(const V& in, const Attrs& a) {
  if (!attention_lhd(a)) return {matmul(attention_probs(in, a), in[2])};
  // The axes swapped around an "hld" attention op (not its body): a device with a native
  // hld kernel but none for lhd still runs that kernel.
  V t{swap_heads(in[0]), swap_heads(in[1]), swap_heads(in[2])};
  if (in.size() == 4) t.push_back(in[3]);
  return {swap_heads(op("attention", t, {{"mask", a.get_string("mask")}, {"scale", a.get_float("scale")}}))};
}
// With P the weights: dV = P^T g, dP = g V^T, dS = P (dP - rowsum(dP P)); dQ = dS K scale,
// dK = dS^T Q scale, dbias = dS. P is recomputed once; masked entries have P = 0, so dS = 0.
V attention_hld_vjp(const V& in, const V& g, const Attrs& a);
V attention_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  if (!attention_lhd(a)) return attention_hld_vjp(in, g, a);
  V t{swap_heads(in[0]), swap_heads(in[1]), swap_heads(in[2])};
  if (in.size() == 4) t.push_back(in[3]);
  V r = attention_hld_vjp(t, {swap_heads(g[0])}, a);
  for (size_t i = 0; i < 3; ++i) r[i] = swap_heads(r[i]);
  return r;
}
V attention_hld_vjp(const V& in, const V& g, const Attrs& a) {
  const Var &q = in[0], &k = in[1], &v = in[2];
  double scale = a.get_float("scale");
  if (scale == 0.0) scale = 1.0 / std::sqrt(double(q.shape().back()));
  Var p = attention_probs(in, a);
  Var dv = matmul(p, g[0], true, false);
  Var dp = matmul(g[0], v, false, true);
  Var ds = p * (dp - sum(dp * p, {-1}, true));
  V r{vjp::unbroadcast(matmul(ds, k) * scale, q.shape()), vjp::unbroadcast(matmul(ds, q, true, false) * scale, k.shape()),
      vjp::unbroadcast(dv, v.shape())};
  if (in.size() == 4) r.push_back(vjp::unbroadcast(ds, in[3].shape()));
  return r;
}
// gelu's derivative in its erf form, 0.5 (1 + erf(x / sqrt 2)) + x phi(x), or in the tanh form
// with t = tanh(u), u = c (x + 0.044715 x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 0.044715 x^2).
V gelu_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  const Var& x = in[0];
  if (a.get_string("approximate") == "tanh") {
    const double c = std::sqrt(2.0 / std::numbers::pi);
    Var t = tanh(c * (x + 0.044715 * x * x * x));
    return {g[0] * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x))};
  }
  Var cdf = 0.5 * (1.0 + erf(x * (1.0 / std::numbers::sqrt2)));
  Var pdf = exp(-0.5 * x * x) * (1.0 / std::sqrt(2 * std::numbers::pi));
  return {g[0] * (cdf + x * pdf)};
}
V softmax_vjp(const V&, const V& out, const V& g, const Attrs& a) {
  const Var& y = out[0];
  return {y * (g[0] - sum(g[0] * y, {a.get_int("axis")}, true))};
}
V log_softmax_vjp(const V&, const V& out, const V& g, const Attrs& a) {
  return {g[0] - exp(out[0]) * sum(g[0], {a.get_int("axis")}, true)};
}
// (softmax(logits) - onehot(labels)) * g / N; the labels carry no gradient.
// The target distribution of cross_entropy: one-hot labels, smoothed with weight eps towards
// the uniform distribution over the C classes (PyTorch's label_smoothing).
Var ce_target(const Var& logits, const Var& labels, double eps) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  Var classes = iota(*logits.graph(), logits.shape(), 1, labels.dtype());
  Var onehot = cast(eq(classes, reshape(labels, {n, 1})), logits.dtype());
  return eps == 0.0 ? onehot : onehot * (1.0 - eps) + eps / double(c);
}
double ce_smoothing(const Attrs& a) {
  const double eps = a.get_float("label_smoothing");
  if (!(eps >= 0.0 && eps <= 1.0)) throw InputError("label_smoothing must lie in [0, 1], got " + std::to_string(eps));
  return eps;
}
// (softmax(logits) - q) * g / N, q the target distribution; the labels carry no gradient.
V cross_entropy_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  const Var &logits = in[0], &labels = in[1];
  const int64_t n = logits.shape()[0];
  Var scale = g[0] * (1.0 / double(std::max<int64_t>(1, n)));
  return {(softmax_body(logits, 1) - ce_target(logits, labels, ce_smoothing(a))) * scale, Var()};
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


// ---- convolution and pooling: the windows gathered once (im2col), then reduced ----

// A 2-D window over the last two axes of NCHW: kernel, stride, padding, dilation per axis.
struct Window2d {
  std::array<int64_t, 2> k, s, p, d;
};

std::array<int64_t, 2> pair_of(const Attrs& a, const char* name, int64_t least) {
  const std::vector<int64_t>& v = a.get_ints(name);
  if (v.size() != 2)
    throw InputError(std::string(name) + " must hold 2 values (height, width), got " + std::to_string(v.size()));
  if (v[0] < least || v[1] < least)
    throw InputError(std::string(name) + " must be >= " + std::to_string(least) + ", got [" + std::to_string(v[0]) +
                     "," + std::to_string(v[1]) + "]");
  return {v[0], v[1]};
}

void require_nchw(const Var& x) {
  if (x.rank() != 4) throw InputError("input must be [N, C, H, W], got " + shape_str(x.shape()));
}

// PyTorch's output extent: floor((in + 2p - d(k - 1) - 1) / s) + 1.
int64_t window_count(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, const char* axis) {
  const int64_t span = d * (k - 1) + 1, avail = in + 2 * p;
  if (avail < span)
    throw InputError(std::string("the ") + axis + " window spans " + std::to_string(span) + " (kernel " +
                     std::to_string(k) + ", dilation " + std::to_string(d) + ") but the padded input has " +
                     std::to_string(avail));
  return (avail - span) / s + 1;
}

// The flat positions in the padded [hp, wp] plane that windows() gathers, (i*kw + j)*Ho*Wo +
// oh*Wo + ow -> (oh*sh + i*dh)*wp + ow*sw + j*dw. Equal windows share one tensor: CSE merges
// constants by their buffer, so the gather that grad's copy of the lowering recomputes in the
// backward becomes the forward's.
Tensor window_index(const Window2d& w, int64_t hp, int64_t wp, const std::array<int64_t, 2>& out) {
  static std::mutex mu;
  static std::map<std::vector<int64_t>, Tensor> cache;
  const std::vector<int64_t> key{hp, wp, w.k[0], w.k[1], w.s[0], w.s[1], w.d[0], w.d[1]};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const bool wide = hp * wp > INT32_MAX;
  Tensor idx = Tensor::empty(wide ? DType::I64 : DType::I32, {w.k[0] * w.k[1] * out[0] * out[1]});
  int64_t e = 0;
  for (int64_t i = 0; i < w.k[0]; ++i)
    for (int64_t j = 0; j < w.k[1]; ++j)
      for (int64_t oh = 0; oh < out[0]; ++oh)
        for (int64_t ow = 0; ow < out[1]; ++ow, ++e) {
          const int64_t at = (oh * w.s[0] + i * w.d[0]) * wp + ow * w.s[1] + j * w.d[1];
          if (wide)
            idx.data<int64_t>()[e] = at;
          else
            idx.data<int32_t>()[e] = int32_t(at);
        }
  if (cache.size() >= 256) cache.clear();  // a bound on what distinct shapes keep alive
  cache.emplace(key, idx);
  return idx;
}

// x [N, C, H, W] -> [N, C, kh*kw, Ho*Wo], element (n, c, i*kw + j, oh*Wo + ow) being the padded
// input at (oh*sh + i*dh, ow*sw + j*dw). One gather over the flattened padded plane with a
// constant index: one L2 node forward, one scatter_add backward, whatever the kernel size.
Var windows(const Var& x, const Window2d& w, double pad_value, std::array<int64_t, 2>& out) {
  require_nchw(x);
  const Shape& s = x.shape();
  const int64_t n = s[0], c = s[1];
  out = {window_count(s[2], w.k[0], w.s[0], w.p[0], w.d[0], "height"),
         window_count(s[3], w.k[1], w.s[1], w.p[1], w.d[1], "width")};
  const int64_t kk = w.k[0] * w.k[1], l = out[0] * out[1];
  if (kk == 1 && w.s == std::array<int64_t, 2>{1, 1} && w.p == std::array<int64_t, 2>{0, 0})
    return reshape(x, {n, c, 1, l});  // a 1x1 window at stride 1 is the input itself
  Var xp = w.p[0] || w.p[1] ? pad(x, {0, 0, w.p[0], w.p[1]}, {0, 0, w.p[0], w.p[1]}, pad_value) : x;
  const int64_t hp = s[2] + 2 * w.p[0], wp = s[3] + 2 * w.p[1];
  Var cols = gather(reshape(xp, {n, c, hp * wp}), constant(*x.graph(), window_index(w, hp, wp, out)), 2);
  return reshape(cols, {n, c, kk, l});
}

// The windows as an im2col matrix [N, C*kh*kw, Ho*Wo] (per group: [N, g, C/g*kh*kw, L]) times
// the weight viewed as [O, C/g*kh*kw]: one batched matmul for all groups.
V conv2d_body(const V& in, const Attrs& a) {
  const Var &x = in[0], &w = in[1];
  require_nchw(x);
  if (w.rank() != 4) throw InputError("weight must be [out, in/groups, kh, kw], got " + shape_str(w.shape()));
  const int64_t groups = a.get_int("groups");
  const int64_t n = x.shape()[0], c = x.shape()[1], o = w.shape()[0], cg = w.shape()[1];
  if (groups < 1 || c % groups || o % groups)
    throw InputError("groups " + std::to_string(groups) + " must divide the input channels (" + std::to_string(c) +
                     ") and the output channels (" + std::to_string(o) + ")");
  if (cg != c / groups)
    throw InputError("weight " + shape_str(w.shape()) + " has " + std::to_string(cg) +
                     " input channels per group; the input has " + std::to_string(c) + " in " +
                     std::to_string(groups) + " group(s)");
  if (in.size() == 3 && in[2].shape() != Shape{o})
    throw InputError("bias must be [" + std::to_string(o) + "], got " + shape_str(in[2].shape()));
  const Window2d win{{w.shape()[2], w.shape()[3]}, pair_of(a, "stride", 1), pair_of(a, "padding", 0),
                     pair_of(a, "dilation", 1)};
  std::array<int64_t, 2> out;
  Var cols = windows(x, win, 0.0, out);
  const int64_t k = cg * win.k[0] * win.k[1], l = out[0] * out[1];
  Var y = groups == 1 ? matmul(reshape(w, {o, k}), reshape(cols, {n, k, l}))
                      : matmul(reshape(w, {groups, o / groups, k}), reshape(cols, {n, groups, k, l}));
  y = reshape(y, {n, o, out[0], out[1]});
  if (in.size() == 3) y = y + reshape(in[2], {o, 1, 1});
  return {y};
}

// Stride defaults to the kernel; padding is at most half the kernel (PyTorch's rule), so
// every window holds an input element.
Window2d pool_window(const Attrs& a) {
  const auto k = pair_of(a, "kernel", 1);
  const auto s = a.get_ints("stride").empty() ? k : pair_of(a, "stride", 1);
  const auto p = pair_of(a, "padding", 0);
  if (2 * p[0] > k[0] || 2 * p[1] > k[1])
    throw InputError("padding must be at most half the kernel, got padding [" + std::to_string(p[0]) + "," +
                     std::to_string(p[1]) + "] for kernel [" + std::to_string(k[0]) + "," + std::to_string(k[1]) + "]");
  return {k, s, p, {1, 1}};
}

V pool_body(const V& in, const Attrs& a, bool is_max) {
  const Var& x = in[0];
  require_nchw(x);
  const Window2d win = pool_window(a);
  std::array<int64_t, 2> out;
  Var cols = windows(x, win, is_max ? -INFINITY : 0.0, out);
  Var y = is_max ? max(cols, {2}) : sum(cols, {2}) / double(win.k[0] * win.k[1]);
  return {reshape(y, {x.shape()[0], x.shape()[1], out[0], out[1]})};
}

// ---- batch normalization over every axis but the channels (axis 1) ----

struct BnAxes {
  int64_t c = 0, count = 0;  // channels; elements per channel
  std::vector<int64_t> axes;  // reduced: all but 1
  Shape channel_shape;        // [1, C, 1, ...]: a per-channel vector broadcast against x
};

BnAxes bn_axes(const V& in) {
  const Var& x = in[0];
  if (x.rank() < 2) throw InputError("input must be [N, C, ...], got " + shape_str(x.shape()));
  BnAxes b;
  b.c = x.shape()[1];
  b.count = b.c ? numel(x.shape()) / b.c : 0;
  const char* names[] = {"gamma", "beta", "running_mean", "running_var"};
  for (size_t i = 1; i < 5; ++i)
    if (in[i].shape() != Shape{b.c})
      throw InputError(std::string(names[i - 1]) + " must be [" + std::to_string(b.c) + "], got " +
                       shape_str(in[i].shape()));
  b.channel_shape = Shape(size_t(x.rank()), 1);
  b.channel_shape[1] = b.c;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != 1) b.axes.push_back(d);
  return b;
}

// Training: y from the batch's mean and biased variance; the running statistics move toward
// the batch's with rate `momentum`, the variance unbiased (count / (count - 1)), as PyTorch.
// Inference: y from the running statistics, returned unchanged.
V batch_norm_body(const V& in, const Attrs& a) {
  const BnAxes b = bn_axes(in);
  const Var &x = in[0], &rm = in[3], &rv = in[4];
  const double eps = a.get_float("eps"), m = a.get_float("momentum");
  Var gamma = reshape(in[1], b.channel_shape), beta = reshape(in[2], b.channel_shape);
  if (!a.get_bool("training")) {
    Var r = rsqrt(reshape(rv, b.channel_shape) + eps);
    return {(x - reshape(rm, b.channel_shape)) * r * gamma + beta, rm, rv};
  }
  if (b.count < 2)
    throw InputError("training needs more than one value per channel, got input " + shape_str(x.shape()));
  Var mean = sum(x, b.axes, true) / double(b.count);
  Var xc = x - mean;
  Var var = sum(xc * xc, b.axes, true) / double(b.count);
  Var y = xc * rsqrt(var + eps) * gamma + beta;
  Var new_rm = rm * (1.0 - m) + reshape(mean, {b.c}) * m;
  Var new_rv = rv * (1.0 - m) + reshape(var, {b.c}) * (m * double(b.count) / double(b.count - 1));
  return {y, new_rm, new_rv};
}

// With xh = (x - mean) r and d = g gamma: dx = r (d - mean(d) - xh mean(d xh)), dgamma = sum(g xh),
// dbeta = sum(g) over all but the channels. The running statistics' cotangents (zeros unless
// a loss reads them) add m/count g_rm and 2 m/(count - 1) (x - mean) g_rv to dx and pass
// (1 - m) of themselves to the old statistics. Inference: y is affine in x, rm and rv.
V batch_norm_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  const BnAxes b = bn_axes(in);
  const Var &x = in[0], &rm = in[3], &rv = in[4];
  const double eps = a.get_float("eps"), m = a.get_float("momentum");
  const Shape& cs = b.channel_shape;
  auto per_channel = [&](const Var& v) { return reshape(sum(v, b.axes), {b.c}); };
  Var gy = g[0].defined() ? g[0] : vjp::zeros_like(x);
  Var grm = g[1].defined() ? g[1] : vjp::zeros_like(rm), grv = g[2].defined() ? g[2] : vjp::zeros_like(rv);
  Var gamma = reshape(in[1], cs);
  Var dbeta = per_channel(gy);
  if (!a.get_bool("training")) {
    Var r = rsqrt(rv + eps);
    Var xc = x - reshape(rm, cs);
    Var gxc = per_channel(gy * xc);
    return {gy * (gamma * reshape(r, cs)), gxc * r, dbeta, grm - in[1] * r * dbeta,
            grv + gxc * in[1] * (r * r * r) * -0.5};
  }
  const double cnt = double(b.count);
  Var xc = x - sum(x, b.axes, true) / cnt;
  Var r = rsqrt(sum(xc * xc, b.axes, true) / cnt + eps);
  Var xh = xc * r;
  Var dgamma = per_channel(gy * xh);
  Var dx = gamma * r * (gy - reshape(dbeta, cs) / cnt - xh * (reshape(dgamma, cs) / cnt)) +
           reshape(grm * (m / cnt), cs) + xc * reshape(grv * (2 * m / (cnt - 1)), cs);
  return {dx, dgamma, dbeta, grm * (1.0 - m), grv * (1.0 - m)};
}

// ---- rotary embedding and grouped-query attention: a decoder layer's attention pieces ----

// The inverse frequencies [1, D/2] of a head of D features as a constant; equal (theta, D)
// share one tensor, so CSE merges the constants of a model's layers.
Tensor rotary_frequencies(double theta, int64_t d) {
  static std::mutex mu;
  static std::map<std::pair<double, int64_t>, Tensor> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find({theta, d}); it != cache.end()) return it->second;
  Tensor inv = Tensor::empty(DType::F32, {1, d / 2});
  for (int64_t i = 0; i < d / 2; ++i) inv.data<float>()[i] = rotary_inverse_frequency(theta, d, i);
  if (cache.size() >= 64) cache.clear();  // a bound on what distinct shapes keep alive
  cache.emplace(std::pair{theta, d}, inv);
  return inv;
}

// x [..., T, heads, D] at positions [T]: each feature pair (i, i + D/2) turned by the angle
// position * inv_i, computed in f32 from the positions as f32 (transformers' rounding);
// cos and sin rounded to x's dtype, then x cos + rotate_half(x) sin with rotate_half(x) =
// (-x[D/2:], x[:D/2]).
V rotary_body(const V& in, const Attrs& a) {
  const Var &x = in[0], &positions = in[1];
  if (x.rank() < 3 || x.shape().back() % 2)
    throw InputError("x must be [..., T, heads, D] with D even, got " + x.type().str());
  const int64_t t = x.shape()[size_t(x.rank() - 3)], d = x.shape().back(), half = d / 2;
  if (positions.rank() != 1 || positions.shape()[0] != t ||
      (positions.dtype() != DType::I64 && positions.dtype() != DType::I32))
    throw InputError("positions must be i32 or i64 [" + std::to_string(t) + "], got " + positions.type().str());
  const double theta = a.get_float("theta");
  if (!(theta > 1)) throw InputError("theta must be above 1, got " + std::to_string(theta));
  Graph& g = *x.graph();
  Var angles = reshape(cast(positions, DType::F32), {t, 1}) * constant(g, rotary_frequencies(theta, d));  // [T, D/2]
  angles = concat({angles, angles}, 1);
  Shape bs(size_t(x.rank()), 1);
  bs[size_t(x.rank() - 3)] = t;
  bs.back() = d;
  // f64 x: the f32 angle's cosine and sine taken in f64 and rounded once to f32 — the value
  // the reference's f32 cos gives, and one a device's f32 cosf (within an ulp or two) need not
  // give, which f64's tolerances would see (its gradient runs this body).
  auto trig = [&](bool cosine) {
    auto f = [&](const Var& v) { return cosine ? cos(v) : sin(v); };
    return x.dtype() == DType::F64 ? cast(cast(f(cast(angles, DType::F64)), DType::F32), DType::F64)
                                   : cast(f(angles), x.dtype());
  };
  Var c = reshape(trig(true), bs);
  Var s = reshape(trig(false), bs);
  std::vector<int64_t> lo(size_t(x.rank()), 0), hi(x.shape().begin(), x.shape().end());
  hi.back() = half;
  Var x1 = slice(x, lo, hi, {});
  lo.back() = half;
  hi.back() = d;
  Var x2 = slice(x, lo, hi, {});
  Var rotated = concat({neg(x2), x1}, x.rank() - 1);
  return {add(mul(x, c), mul(rotated, s))};
}

// q [B, H, T, D] against k [B, KV, S, D] and v [B, KV, S, Dv], H a multiple of KV: query head
// h reads key/value head h / (H / KV). As `attention` over [B, KV, H / KV, T, D] and
// [B, KV, 1, S, D] (matmul broadcasts the group axis, so k and v are not copied per head);
// the bias broadcasts to the scores [B, KV, H / KV, T, S].
V grouped_query_attention_body(const V& in, const Attrs& a) {
  const Var &q = in[0], &k = in[1], &v = in[2];
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    throw InputError("q, k, v must be [B, heads, L, D], got " + q.type().str() + ", " + k.type().str() + ", " +
                     v.type().str());
  const int64_t b = q.shape()[0], h = q.shape()[1], t = q.shape()[2], d = q.shape()[3];
  const int64_t kv = k.shape()[1], s = k.shape()[2], dv = v.shape()[3];
  if (k.shape()[0] != b || v.shape()[0] != b || v.shape()[1] != kv || v.shape()[2] != s || k.shape()[3] != d ||
      kv < 1 || h % kv)
    throw InputError("q " + q.type().str() + " does not fit k " + k.type().str() + " and v " + v.type().str() +
                     " (the key/value heads must divide the query heads)");
  if (in.size() == 4 && in[3].rank() > 5)
    throw InputError("the bias must broadcast to [B, KV, H / KV, T, S], got " + in[3].type().str());
  const int64_t groups = h / kv;
  V args{reshape(q, {b, kv, groups, t, d}), reshape(k, {b, kv, 1, s, d}), reshape(v, {b, kv, 1, s, dv})};
  if (in.size() == 4) args.push_back(in[3]);
  Var o = op("attention", args, {{"mask", a.get_string("mask")}, {"scale", a.get_float("scale")}});
  return {reshape(o, {b, h, t, dv})};
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
     "Gaussian error linear unit (erf form, or tanh approximation)", {}, kFloats, gelu_vjp);
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
  l1(r, "cross_entropy", 2, 2, {{"label_smoothing", AttrKind::Float, false, 0.0}},
     [](const std::vector<Var>& in, const Attrs& a) {
       const Var &logits = in[0], &labels = in[1];
       if (logits.rank() != 2 || labels.rank() != 1 || labels.shape()[0] != logits.shape()[0])
         throw InputError("expects logits [N, C] and labels [N], got " + shape_str(logits.shape()) + " and " +
                          shape_str(labels.shape()));
       if (labels.dtype() != DType::I32 && labels.dtype() != DType::I64)
         throw InputError(std::string("labels must be i32 or i64, got ") + dtype_name(labels.dtype()));
       int64_t n = logits.shape()[0];
       Var s = logits - max(logits, {1}, true);
       Var ls = s - log(sum(exp(s), {1}, true));
       Var q = ce_target(logits, labels, ce_smoothing(a));
       return std::vector<Var>{-(sum(ls * q) / double(std::max<int64_t>(1, n)))};
     },
     "mean cross-entropy of integer labels (one-hot, or smoothed by label_smoothing towards uniform) under "
     "softmax(logits)",
     [](ExampleInputs& x, DType t) {
       Var logits = x.in(t, {4, 8}), labels = x.index(DType::I64, {4}, 8);
       return std::vector<Var>{cross_entropy(logits, labels), cross_entropy(logits, labels, 0.1)};
     },
     kFloats, cross_entropy_vjp, {1});
  // mean(max(x, 0) - x y + log(1 + exp(-|x|))): log(1 + exp(x)) - x y without overflow for
  // large |x| (PyTorch's BCEWithLogitsLoss). Through its lowering, the derivative at x = 0 is
  // max's shared tie (1/2) plus abs's 0: sigmoid(0) - y, the true one.
  l1(r, "bce_with_logits", 2, 2, {},
     [](const std::vector<Var>& in, const Attrs&) {
       const Var &x = in[0], &y = in[1];
       if (x.type() != y.type())
         throw InputError("logits " + x.type().str() + " and targets " + y.type().str() + " differ");
       Var l = maximum(x, scalar_like(x, 0.0)) - x * y + log(1.0 + exp(-abs(x)));
       return std::vector<Var>{sum(l) / double(std::max<int64_t>(1, numel(x.shape())))};
     },
     "mean binary cross-entropy of targets in [0, 1] under sigmoid(logits), computed from the logits",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{bce_with_logits(x.in(t, {4, 8}), x.in(t, {4, 8}, {.lo = 0, .hi = 1}))};
     });
  // x where a draw u(seed, key) >= p, scaled by 1 / (1 - p), else 0 (inverted dropout). The
  // draw is in f64 for f64 x and f32 otherwise (a 16-bit uniform would bias the keep rate).
  l1(r, "dropout", 2, 2, {{"p", AttrKind::Float, true}, {"seed", AttrKind::Int, false, int64_t(0)}},
     [](const std::vector<Var>& in, const Attrs& a) {
       const Var &x = in[0], &key = in[1];
       const double p = a.get_float("p");
       if (!(p >= 0.0 && p < 1.0)) throw InputError("p must lie in [0, 1), got " + std::to_string(p));
       if (key.type() != TensorType{DType::I64, {}}) throw InputError("the key must be i64[], got " + key.type().str());
       const DType ut = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
       Var u = rng_uniform(key, x.shape(), ut, uint64_t(a.get_int("seed")));
       return std::vector<Var>{where(ge(u, scalar_like(u, p)), x * (1.0 / (1.0 - p)), scalar_like(x, 0.0))};
     },
     "inverted dropout: x / (1 - p) where the counter RNG's draw for (seed, key) is at least p, else 0",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{dropout(x.in(t, {4, 8}), x.in(DType::I64, {}), 0.25, 7)};
     },
     kFloats, {}, {1});
  l1(r, "attention", 3, 4,
     {{"mask", AttrKind::String, false, std::string("none")},
      {"scale", AttrKind::Float, false, 0.0},
      {"layout", AttrKind::String, false, std::string("hld")}},
     attention_body,
     "softmax(q k^T * scale + bias [causal mask]) v; layout hld: q [.., H, Lq, D] (default), lhd: q [.., Lq, H, D] "
     "(k, v and the result alike; the bias in the scores' [.., H, Lq, Lk] either way)",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{attention(x.in(t, {2, 4, 8}), x.in(t, {2, 6, 8}), x.in(t, {2, 6, 8})),
                               attention(x.in(t, {2, 4, 3, 8}), x.in(t, {2, 6, 3, 8}), x.in(t, {2, 6, 3, 8}), "causal",
                                         std::nullopt, SrcLoc::current(), "lhd")};
     },
     kFloats, attention_vjp);
  l1(r, "rotary_embedding", 2, 2, {{"theta", AttrKind::Float, true}}, rotary_body,
     "rotary position embedding (rotate-half: GPT-NeoX, Llama and Qwen in transformers) of x [..., T, heads, D] at "
     "positions [T] (i32/i64): pair (i, i + D/2) turned by position * theta^(-2i/D), the angles in f32",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{op("rotary_embedding", {x.in(t, {2, 3, 2, 8}), x.index(DType::I64, {3}, 64)},
                                  {{"theta", 10000.0}})};
     },
     kFloats, {}, {1});
  l1(r, "grouped_query_attention", 3, 4,
     {{"mask", AttrKind::String, false, std::string("none")}, {"scale", AttrKind::Float, false, 0.0}},
     grouped_query_attention_body,
     "attention of q [B, H, T, D] over k [B, KV, S, D], v [B, KV, S, Dv], query head h reading key/value head "
     "h / (H / KV); bias broadcast to [B, KV, H / KV, T, S]; causal: query i sees keys j <= i + S - T",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{op("grouped_query_attention", {x.in(t, {1, 4, 2, 8}), x.in(t, {1, 2, 6, 8}),
                                                              x.in(t, {1, 2, 6, 8})})};
     });
  l1(r, "conv2d", 2, 3,
     {{"stride", AttrKind::Ints, false, std::vector<int64_t>{1, 1}},
      {"padding", AttrKind::Ints, false, std::vector<int64_t>{0, 0}},
      {"dilation", AttrKind::Ints, false, std::vector<int64_t>{1, 1}},
      {"groups", AttrKind::Int, false, int64_t(1)}},
     conv2d_body,
     "2-D convolution (cross-correlation, as PyTorch) of x [N, C, H, W] with w [O, C/groups, kh, kw] and bias [O]; "
     "lowers through im2col: one gather of the padded windows into [N, C*kh*kw, Ho*Wo], one batched matmul over "
     "the groups",
     [](ExampleInputs& x, DType t) {
       return std::vector<Var>{conv2d(x.in(t, {2, 4, 7, 6}), x.in(t, {6, 2, 3, 2}), x.in(t, {6}),
                                      {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2})};
     });
  const std::vector<AttrSpec> pool_attrs = {{"kernel", AttrKind::Ints, true},
                                            {"stride", AttrKind::Ints, false, std::vector<int64_t>{}},
                                            {"padding", AttrKind::Ints, false, std::vector<int64_t>{0, 0}}};
  l1(r, "max_pool2d", 1, 1, pool_attrs, [](const V& in, const Attrs& a) { return pool_body(in, a, true); },
     "max over the kernel's windows of x [N, C, H, W], padded with -inf (stride: the kernel unless given); lowers "
     "through the gathered windows (im2col) and max, whose gradient splits ties equally",
     [](ExampleInputs& x, DType t) { return std::vector<Var>{max_pool2d(x.in(t, {2, 3, 7, 6}), {3, 2}, {2, 2}, {1, 1})}; });
  l1(r, "avg_pool2d", 1, 1, pool_attrs, [](const V& in, const Attrs& a) { return pool_body(in, a, false); },
     "mean over the kernel's windows of x [N, C, H, W], the zero padding counted (count_include_pad, PyTorch's "
     "default); lowers through the gathered windows (im2col) and sum",
     [](ExampleInputs& x, DType t) { return std::vector<Var>{avg_pool2d(x.in(t, {2, 3, 7, 6}), {3, 2}, {2, 2}, {1, 1})}; });
  l1(r, "batch_norm", 5, 5,
     {{"training", AttrKind::Bool, false, true},
      {"momentum", AttrKind::Float, false, 0.1},
      {"eps", AttrKind::Float, false, 1e-5}},
     batch_norm_body,
     "x [N, C, ...] normalized per channel, times gamma plus beta -> (y, running_mean', running_var'); training: "
     "by the batch's mean and biased variance, the running statistics updated as PyTorch (unbiased variance); "
     "inference: by the running statistics, returned unchanged",
     [](ExampleInputs& x, DType t) {
       const ValueRange positive{.lo = 0.5, .hi = 2};
       Var in = x.in(t, {4, 3, 5, 2}), gamma = x.in(t, {3}), beta = x.in(t, {3});
       Var rm = x.in(t, {3}), rv = x.in(t, {3}, positive);
       BatchNormResult train = batch_norm(in, gamma, beta, rm, rv, true, 0.1, 1e-5);
       BatchNormResult eval = batch_norm(in, gamma, beta, rm, rv, false, 0.1, 1e-5);
       return std::vector<Var>{train.y, train.running_mean, train.running_var, eval.y};
     },
     kFloats, batch_norm_vjp);
}

}  // namespace rlx::ir
