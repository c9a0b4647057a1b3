#include "nn/layers.hpp"

#include <cmath>

#include "core/error.hpp"

namespace rlx::nn {

Var linear(Model& m, const std::string& name, const Var& x, int64_t out, bool bias, SrcLoc loc) {
  if (x.rank() < 1) throw InputError("linear '" + name + "': the input is a scalar");
  const int64_t in = x.shape().back();
  const double bound = 1.0 / std::sqrt(double(std::max<int64_t>(in, 1)));
  Model::Scope scope(m, name);
  Var w = m.param("weight", {out, in}, Init::uniform(-bound, bound), loc);
  if (!bias) return rlx::linear(x, w, std::nullopt, loc);
  Var b = m.param("bias", {out}, Init::uniform(-bound, bound), loc);
  return rlx::linear(x, w, b, loc);
}

Var embedding(Model& m, const std::string& name, const Var& indices, int64_t vocab, int64_t dim, SrcLoc loc) {
  Model::Scope scope(m, name);
  Var table = m.param("weight", {vocab, dim}, Init::normal(0, 1), loc);
  return gather(table, indices, 0, loc);
}

Var layer_norm(Model& m, const std::string& name, const Var& x, double eps, SrcLoc loc) {
  const int64_t d = x.shape().back();
  Model::Scope scope(m, name);
  Var gamma = m.param("weight", {d}, Init::ones(), loc);
  Var beta = m.param("bias", {d}, Init::zeros(), loc);
  return rlx::layer_norm(x, gamma, beta, eps, loc);
}

Var rms_norm(Model& m, const std::string& name, const Var& x, double eps, SrcLoc loc) {
  const int64_t d = x.shape().back();
  Model::Scope scope(m, name);
  Var gamma = m.param("weight", {d}, Init::ones(), loc);
  return rlx::rms_norm(x, gamma, eps, loc);
}

Var mlp(Model& m, const std::string& name, const Var& x, const std::vector<int64_t>& sizes, SrcLoc loc) {
  if (sizes.size() < 2) throw InputError("mlp '" + name + "': needs at least the input and output sizes");
  if (x.shape().back() != sizes[0])
    throw InputError("mlp '" + name + "': the input has " + std::to_string(x.shape().back()) + " features, sizes say " +
                     std::to_string(sizes[0]));
  Model::Scope scope(m, name);
  Var h = x;
  for (size_t i = 1; i < sizes.size(); ++i) {
    h = linear(m, std::to_string(i - 1), h, sizes[i], true, loc);
    if (i + 1 < sizes.size()) h = relu(h, loc);
  }
  return h;
}

Var conv2d(Model& m, const std::string& name, const Var& x, int64_t out, std::array<int64_t, 2> kernel,
           const Conv2dOptions& o, bool bias, SrcLoc loc) {
  if (x.rank() != 4) throw InputError("conv2d '" + name + "': the input must be [N, C, H, W], got " + shape_str(x.shape()));
  const int64_t c = x.shape()[1];
  if (o.groups < 1 || c % o.groups || out % o.groups)
    throw InputError("conv2d '" + name + "': groups " + std::to_string(o.groups) + " must divide the input channels (" +
                     std::to_string(c) + ") and the output channels (" + std::to_string(out) + ")");
  const int64_t fan_in = c / o.groups * kernel[0] * kernel[1];
  const double bound = 1.0 / std::sqrt(double(std::max<int64_t>(fan_in, 1)));
  Model::Scope scope(m, name);
  Var w = m.param("weight", {out, c / o.groups, kernel[0], kernel[1]}, Init::uniform(-bound, bound), loc);
  std::optional<Var> b;
  if (bias) b = m.param("bias", {out}, Init::uniform(-bound, bound), loc);
  return rlx::conv2d(x, w, b, o, loc);
}

Var max_pool2d(const Var& x, int64_t kernel, int64_t stride, int64_t padding, SrcLoc loc) {
  return rlx::max_pool2d(x, {kernel, kernel}, {stride, stride}, {padding, padding}, loc);
}

Var avg_pool2d(const Var& x, int64_t kernel, int64_t stride, int64_t padding, SrcLoc loc) {
  return rlx::avg_pool2d(x, {kernel, kernel}, {stride, stride}, {padding, padding}, loc);
}

Var batch_norm(Model& m, const std::string& name, const Var& x, bool training, double momentum, double eps,
               SrcLoc loc) {
  if (x.rank() < 2) throw InputError("batch_norm '" + name + "': the input must be [N, C, ...], got " + shape_str(x.shape()));
  const int64_t c = x.shape()[1];
  Model::Scope scope(m, name);
  Var gamma = m.param("weight", {c}, Init::ones(), loc);
  Var beta = m.param("bias", {c}, Init::zeros(), loc);
  Var mean = m.buffer("running_mean", {c}, Init::zeros(), loc);
  Var var = m.buffer("running_var", {c}, Init::ones(), loc);
  BatchNormResult r = rlx::batch_norm(x, gamma, beta, mean, var, training, momentum, eps, loc);
  if (training) {
    m.update_buffer(mean, r.running_mean);
    m.update_buffer(var, r.running_var);
  }
  return r.y;
}

Var multi_head_attention(Model& m, const std::string& name, const Var& x, const Var& kv, int64_t heads, bool causal,
                         std::optional<Var> key_padding_mask, const AttentionNames& names, SrcLoc loc) {
  const std::string full = m.scoped(name);  // (before the scope below adds it again)
  auto fail = [&](const std::string& what) { throw InputError("multi_head_attention '" + full + "': " + what); };
  if (x.rank() != 3 || kv.rank() != 3)
    fail("queries and keys must be [N, L, E], got " + shape_str(x.shape()) + " and " + shape_str(kv.shape()));
  const int64_t n = x.shape()[0], lq = x.shape()[1], e = x.shape()[2], lk = kv.shape()[1];
  if (kv.shape()[0] != n || kv.shape()[2] != e)
    fail("keys " + shape_str(kv.shape()) + " do not match queries " + shape_str(x.shape()));
  if (heads < 1 || e % heads) fail(std::to_string(heads) + " heads do not divide the " + std::to_string(e) + " features");
  const int64_t d = e / heads;
  Model::Scope scope(m, name);
  // [N, L, E] -> [N, L, heads, d], attended in that layout ("lhd"): no copies into
  // [N, heads, L, d] and back where the device's kernel reads the heads in place.
  auto split = [&](const Var& t, int64_t len) { return reshape(t, {n, len, heads, d}, loc); };
  auto project = [&](const std::string& p, const Var& in) {
    return names.project ? names.project(m, p, in, e, loc) : linear(m, p, in, e, true, loc);
  };
  Var q = split(project(names.q, x), lq);
  Var k = split(project(names.k, kv), lk);
  Var v = split(project(names.v, kv), lk);
  std::optional<Var> bias;
  if (key_padding_mask) {
    const Var& pad = *key_padding_mask;
    if (pad.type() != TensorType{DType::Bool, {n, lk}})
      fail("key_padding_mask must be " + TensorType{DType::Bool, {n, lk}}.str() + ", got " + pad.type().str());
    ir::Graph& g = *x.graph();
    const Shape s{n, 1, 1, lk};
    bias = where(reshape(pad, s, loc), broadcast_to(scalar(g, -INFINITY, x.dtype(), loc), s, loc),
                 broadcast_to(scalar(g, 0.0, x.dtype(), loc), s, loc), loc);
  }
  Var o = attention(q, k, v, causal ? "causal" : "none", bias, loc, "lhd");
  return project(names.out, reshape(o, {n, lq, e}, loc));
}

Var rotary_embedding(const Var& x, const Var& positions, double theta, SrcLoc loc) {
  if (x.rank() < 3 || x.shape().back() % 2)
    throw InputError("rotary_embedding: x must be [..., T, heads, D] with D even, got " + x.type().str());
  const int64_t t = x.shape()[size_t(x.rank() - 3)];
  if (positions.rank() != 1 || positions.shape()[0] != t || (positions.dtype() != DType::I64 && positions.dtype() != DType::I32))
    throw InputError("rotary_embedding: positions must be i64 [" + std::to_string(t) + "], got " + positions.type().str());
  if (!(theta > 1)) throw InputError("rotary_embedding: theta must be above 1, got " + std::to_string(theta));
  // One op: its lowering is the slices and concatenations of rotate-half; devices with a
  // native kernel run it as one pass over x.
  return op("rotary_embedding", {x, positions}, {{"theta", theta}}, loc);
}

Var grouped_query_attention(const Var& q, const Var& k, const Var& v, bool causal, std::optional<Var> bias, SrcLoc loc) {
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    throw InputError("grouped_query_attention: q, k, v must be [B, heads, L, D], got " + q.type().str() + ", " +
                     k.type().str() + ", " + v.type().str());
  const int64_t b = q.shape()[0], h = q.shape()[1], d = q.shape()[3];
  const int64_t kv = k.shape()[1], s = k.shape()[2], dv = v.shape()[3];
  if (k.shape()[0] != b || v.shape()[0] != b || v.shape()[1] != kv || v.shape()[2] != s || k.shape()[3] != d || kv < 1 ||
      h % kv)
    throw InputError("grouped_query_attention: q " + q.type().str() + " does not fit k " + k.type().str() + " and v " +
                     v.type().str() + " (the key/value heads must divide the query heads)");
  std::vector<Var> in{q, k, v};
  if (bias) in.push_back(*bias);
  // One op: its lowering is `attention` over [B, KV, H / KV, T, D] against [B, KV, 1, S, D];
  // the cuda device runs small T (decoding) as one kernel, and the cpu (from 16 queries) and cuda
  // `attention` kernels take that lowering's broadcast k and v as they are.
  return op("grouped_query_attention", in, {{"mask", std::string(causal ? "causal" : "none")}}, loc);
}

Var dropout(Model& m, const std::string& name, const Var& x, double p, bool training, SrcLoc loc) {
  if (!(p >= 0.0 && p < 1.0)) throw InputError("dropout '" + m.scoped(name) + "': p must lie in [0, 1), got " + std::to_string(p));
  if (!training || p == 0.0) return x;
  return rlx::dropout(x, m.step_key(loc), p, name_hash(m.scoped(name)), loc);
}

Var flatten(const Var& x, SrcLoc loc) {
  if (x.rank() < 1) throw InputError("flatten: the input is a scalar");
  int64_t rest = 1;
  for (size_t d = 1; d < x.shape().size(); ++d) rest *= x.shape()[d];
  return reshape(x, {x.shape()[0], rest}, loc);
}

Var lenet(Model& m, const std::string& name, const Var& x, SrcLoc loc) {
  if (x.rank() != 4 || x.shape()[1] != 1 || x.shape()[2] != 28 || x.shape()[3] != 28)
    throw InputError("lenet '" + name + "': the input must be [N, 1, 28, 28], got " + shape_str(x.shape()));
  Model::Scope scope(m, name);
  Var h = max_pool2d(relu(conv2d(m, "conv1", x, 6, {5, 5}, {.padding = {2, 2}}, true, loc), loc), 2, 0, 0, loc);
  h = max_pool2d(relu(conv2d(m, "conv2", h, 16, {5, 5}, {}, true, loc), loc), 2, 0, 0, loc);
  h = relu(linear(m, "fc1", flatten(h, loc), 120, true, loc), loc);
  h = relu(linear(m, "fc2", h, 84, true, loc), loc);
  return linear(m, "fc3", h, 10, true, loc);
}

}  // namespace rlx::nn
