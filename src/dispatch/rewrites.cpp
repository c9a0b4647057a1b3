#include "dispatch/rewrites.hpp"

#include "ir/op_registry.hpp"
#include "ir/ops/splat_stages.hpp"
#include "passes/autodiff.hpp"

namespace rlx {

namespace {

bool has_dtype(const ir::Node& n, const ir::Graph& g, DType t) {
  for (auto v : n.inputs)
    if (g.type(v).dtype == t) return true;
  for (auto& o : n.outputs)
    if (o.dtype == t) return true;
  return false;
}

// Compute in f32 what was asked in a 16-bit float: widen the inputs, run the op, round
// the results back once. f32 holds every f16/bf16 value exactly, so nothing is lost on
// the way in, and the single rounding on the way out is what a native kernel does.
RewriteRule promote_rule(DType half, const char* name) {
  RewriteRule r;
  r.name = name;
  r.lossless = true;
  r.summary = std::string("compute ") + dtype_name(half) + " ops in f32 (widen inputs, round results once)";
  r.applies = [half](const ir::Node& n, const ir::Graph& g) {
    if (n.op->name == "cast" || n.attrs.has("dtype") || n.attrs.has("value")) return false;
    if (n.op->cls == ir::OpClass::Control || n.op->cls == ir::OpClass::Source) return false;
    if (!has_dtype(n, g, half)) return false;
    for (DType d : n.op->dtypes)
      if (d == DType::F32) return true;
    return false;
  };
  r.build = [half](const ir::Node& n, const std::vector<Var>& in) {
    std::vector<Var> wide;
    for (auto& v : in) wide.push_back(v.dtype() == half ? cast(v, DType::F32) : v);
    auto out = op_multi(n.op->name, wide, n.attrs);
    for (size_t i = 0; i < out.size(); ++i)
      if (n.outputs[i].dtype == half) out[i] = cast(out[i], half);
    return out;
  };
  return r;
}

// (Ar + iAi)(Br + iBi) = (ArBr - AiBi) + i(ArBi + AiBr): four real matmuls.
RewriteRule complex_matmul_rule() {
  RewriteRule r;
  r.name = "complex-as-real-pairs";
  r.lossless = true;
  r.summary = "c64 matmul as four f32 matmuls on the real and imaginary parts";
  r.applies = [](const ir::Node& n, const ir::Graph& g) {
    return n.op->name == "matmul" && g.type(n.inputs[0]).dtype == DType::C64;
  };
  r.build = [](const ir::Node& n, const std::vector<Var>& in) {
    bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
    Var ar = real(in[0]), ai = imag(in[0]), br = real(in[1]), bi = imag(in[1]);
    Var re = matmul(ar, br, ta, tb) - matmul(ai, bi, ta, tb);
    Var im = matmul(ar, bi, ta, tb) + matmul(ai, br, ta, tb);
    return std::vector<Var>{make_complex(re, im)};
  };
  return r;
}

// A matmul over packed weights as the weights decoded to f32 (the dequantize op), then an
// f32 matmul: the values are the op's own (the exact f32 dequantized weights), only the
// decoded copy costs memory (4 bytes per weight), so it is lossless.
RewriteRule dequant_then_matmul_rule() {
  RewriteRule r;
  r.name = "dequant-then-matmul";
  r.lossless = true;
  r.summary = "packed weights decoded to f32 by dequantize, then an f32 matmul";
  r.applies = [](const ir::Node& n, const ir::Graph&) { return n.op->name == "matmul_packed"; };
  r.build = [](const ir::Node& n, const std::vector<Var>& in) {
    const int64_t k = n.attrs.get_int("k");
    const Var& x = in[0];
    Var w = op("dequantize", {in[1]}, n.attrs);
    Shape out = x.shape();
    out.back() = in[1].shape()[0];
    Var y = matmul(reshape(x, {numel(x.shape()) / k, k}), w, false, true);
    return std::vector<Var>{reshape(y, out)};
  };
  return r;
}

// splat_render and its backward as the staged pipeline (docs/splat.md, "The stages as ops"):
// the native kernels' arithmetic in separate ops, so a device with the stage kernels and
// without the fused ones renders tiled rather than through the dense O(H W N) lowering.
// The intersection list has the node's `capacity` (a render with more intersections is an
// InputError naming the count at run time); without one (0) it is the bound N x tiles, which
// the values cannot exceed, and past 2^31 - 1 entries the rule does not apply and says so:
// IR types are static, so the list cannot be sized by the count. The backward is the stages'
// VJPs (grad of the staged forward).
RewriteRule splat_stages_rule() {
  RewriteRule r;
  r.name = "splat-stages";
  r.lossless = true;
  r.before_lowering = true;
  r.summary = "splat_render as its stage ops (project, sh_to_rgb, tile counts/keys, sort, ranges, composite)";
  r.applies = [](const ir::Node& n, const ir::Graph&) {
    return n.op->name == "splat_render" || n.op->name == "splat_render_backward";
  };
  r.build = [](const ir::Node& n, const std::vector<Var>& in) {
    const int64_t given = n.attrs.has("capacity") ? n.attrs.get_int("capacity") : 0;
    const int64_t cap = given > 0 ? given
                                  : ir::splat_capacity_bound(in[0].shape()[0], n.attrs.get_int("width"),
                                                             n.attrs.get_int("height"), int64_t(INT32_MAX));
    const ir::SplatStages s = ir::splat_stages({in.begin(), in.begin() + 7}, n.attrs, cap);
    if (n.op->name == "splat_render") return std::vector<Var>{s.image, s.alpha, s.depth};
    return vjp({s.image, s.alpha, s.depth}, {in[7], in[8], in[9]}, {in[0], in[1], in[2], in[3], in[4], in[6]});
  };
  return r;
}

}  // namespace

const std::vector<RewriteRule>& rewrite_rules() {
  static const std::vector<RewriteRule> rules = {promote_rule(DType::F16, "promote-f16-to-f32"),
                                                 promote_rule(DType::BF16, "promote-bf16-to-f32"),
                                                 complex_matmul_rule(), dequant_then_matmul_rule(),
                                                 splat_stages_rule()};
  return rules;
}

}  // namespace rlx
