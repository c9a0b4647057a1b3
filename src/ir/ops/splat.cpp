// Gaussian splatting (docs/splat.md): splat_render, an L1 op with native kernels (reference,
// cpu) and a dense common-IR lowering, and splat_render_backward, the library primitive
// registered as its VJP. The kernels share splat_math.hpp; the lowering below is written
// from L2 primitives alone and follows the same rules.
#include <cmath>
#include <limits>

#include "core/checked.hpp"
#include "ir/ops/splat_math.hpp"
#include "ir/ops/splat_stages.hpp"
#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

const std::vector<DType> kSplatTypes = {DType::F32, DType::F64};

// Checks splat_render's seven inputs and attributes; returns the three result types.
std::vector<TensorType> check_render(const std::vector<TensorType>& in, const Attrs& a) {
  require_dtype(in[0], kSplatTypes, "means");
  const DType t = in[0].dtype;
  const char* names[] = {"means", "log_scales", "quats", "opacity_logits", "sh", "viewmat", "background"};
  for (size_t i = 1; i < 7; ++i)
    if (in[i].dtype != t)
      throw InputError(std::string(names[i]) + " dtype " + dtype_name(in[i].dtype) + " differs from means' " +
                       dtype_name(t));
  if (in[0].shape.size() != 2 || in[0].shape[1] != 3) throw InputError("means must be [N, 3], got " + shape_str(in[0].shape));
  const int64_t n = in[0].shape[0];
  auto need = [&](size_t i, const Shape& s) {
    if (in[i].shape != s) throw InputError(std::string(names[i]) + " must be " + shape_str(s) + ", got " + shape_str(in[i].shape));
  };
  need(1, {n, 3});
  need(2, {n, 4});
  need(3, {n});
  if (in[4].shape.size() != 3 || in[4].shape[0] != n || in[4].shape[2] != 3)
    throw InputError("sh must be [N, K, 3], got " + shape_str(in[4].shape));
  const int64_t k = in[4].shape[1];
  if (k != 1 && k != 4 && k != 9 && k != 16)
    throw InputError("sh must have K = 1, 4, 9 or 16 coefficients (degree 0..3), got " + std::to_string(k));
  need(5, {4, 4});
  need(6, {3});
  const int64_t w = a.get_int("width"), h = a.get_int("height");
  if (w < 1 || h < 1 || w > (int64_t(1) << 24) || h > (int64_t(1) << 24))
    throw InputError("width and height must lie in [1, 2^24], got " + std::to_string(w) + " x " + std::to_string(h));
  checked_mul(checked_mul(w, h, "splat_render image"), 3, "splat_render image");
  for (const char* f : {"fx", "fy", "cx", "cy"})
    if (!std::isfinite(a.get_float(f))) throw InputError(std::string(f) + " must be finite");
  if (a.get_float("fx") == 0 || a.get_float("fy") == 0) throw InputError("fx and fy must be non-zero");
  if (a.has("capacity") && a.get_int("capacity") < 0)
    throw InputError("capacity must be at least 1 (or 0: the bound N x tiles), got " + std::to_string(a.get_int("capacity")));
  return {{t, {h, w, 3}}, {t, {h, w}}, {t, {h, w}}};
}

// The camera, and `capacity`: the most (Gaussian, tile) intersections a render may have on the
// staged route (the length of the list the splat-stages rewrite gives splat_tile_keys; 0, the
// default, is the bound N x tiles). IR types are static, so the staged list cannot be sized
// by the count itself; the fused kernels size theirs by the count and do not read it.
const std::vector<AttrSpec> kRenderAttrs = {{"width", AttrKind::Int, true},  {"height", AttrKind::Int, true},
                                            {"fx", AttrKind::Float, true},   {"fy", AttrKind::Float, true},
                                            {"cx", AttrKind::Float, true},   {"cy", AttrKind::Float, true},
                                            {"capacity", AttrKind::Int, false, int64_t(0)}};

// ---------------------------------------------------------------- the dense lowering

Var column(const Var& x, int64_t k) {  // x[:, k] of [n, d] as [n]
  const int64_t n = x.shape()[0];
  return reshape(slice(x, {0, k}, {n, k + 1}), {n});
}
Var as_column(const Var& v) { return reshape(v, {v.shape()[0], 1}); }
Var columns(const std::vector<Var>& cs) {  // [n] each -> [n, cs.size()]
  std::vector<Var> parts;
  for (const Var& c : cs) parts.push_back(as_column(c));
  return concat(parts, 1);
}
// True per row where every element of x [n, ...] satisfies ok.
Var all_rows(const Var& ok, DType t) {
  std::vector<int64_t> axes;
  for (int d = 1; d < ok.rank(); ++d) axes.push_back(d);
  Graph& g = *ok.graph();
  return eq(sum(cast(logical_not(ok), t), axes), scalar(g, 0.0, t));
}

// The per-Gaussian quantities of the projection (docs/splat.md), all [n].
struct DenseProjection {
  Var u, v, a, b, c, depth, opacity, det, x0, x1, y0, y1, visible;
};

DenseProjection project_dense(const Var& means, const Var& log_scales, const Var& quats, const Var& ologit,
                              const Var& view, const Attrs& at) {
  Graph& g = *means.graph();
  const DType t = means.dtype();
  const int64_t n = means.shape()[0];
  auto c = [&](double v) { return scalar(g, v, t); };
  const double fx = at.get_float("fx"), fy = at.get_float("fy"), cx = at.get_float("cx"), cy = at.get_float("cy");
  const int64_t tiles_x = (at.get_int("width") + splat::kTile - 1) / splat::kTile;
  const int64_t tiles_y = (at.get_int("height") + splat::kTile - 1) / splat::kTile;

  // Rotation of the normalised quaternion; a (near) zero one is the identity.
  Var n2 = sum(quats * quats, {1}, true);
  Var q_ok = ge(n2, c(splat::kMinQuatNorm * splat::kMinQuatNorm));
  Var ident = broadcast_to(constant(g, example_tensor(t, {1, 4}, {1, 0, 0, 0})), {n, 4});
  Var qn = where(q_ok, quats / sqrt(where(q_ok, n2, c(1))), ident);
  Var w = column(qn, 0), x = column(qn, 1), y = column(qn, 2), z = column(qn, 3);
  Var rot = reshape(columns({1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y),
                             2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x),
                             2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)}),
                    {n, 3, 3});
  Var m3 = rot * reshape(exp(log_scales), {n, 1, 3});  // R diag(s)

  Var rv = slice(view, {0, 0}, {3, 3}), tv = reshape(slice(view, {0, 3}, {3, 4}), {1, 3});
  Var cp = matmul(means, rv, false, true) + tv;
  Var px = column(cp, 0), py = column(cp, 1), pz = column(cp, 2);
  Var iz = recip(pz);
  Var j00 = fx * iz, j02 = -(fx * px) * iz * iz, j11 = fy * iz, j12 = -(fy * py) * iz * iz;
  auto view_row = [&](int64_t r) { return slice(rv, {r, 0}, {r + 1, 3}); };  // [1, 3]
  Var t0 = as_column(j00) * view_row(0) + as_column(j02) * view_row(2);
  Var t1 = as_column(j11) * view_row(1) + as_column(j12) * view_row(2);
  Var gm = matmul(reshape(concat({t0, t1}, 1), {n, 2, 3}), m3);  // (J R_V) R_q S
  Var cov = matmul(gm, gm, false, true);                          // [n, 2, 2]
  auto entry = [&](int64_t i, int64_t j) { return reshape(slice(cov, {0, i, j}, {n, i + 1, j + 1}), {n}); };
  Var a = entry(0, 0) + splat::kBlur, b = entry(0, 1), cc = entry(1, 1) + splat::kBlur;
  Var det = a * cc - b * b;

  DenseProjection p;
  Var safe_det = where(gt(det, c(0)), det, c(1));
  p.a = cc / safe_det;
  p.b = -b / safe_det;
  p.c = a / safe_det;
  p.det = det;
  p.u = fx * px * iz + cx;
  p.v = fy * py * iz + cy;
  p.depth = pz;
  p.opacity = recip(1.0 + exp(-ologit));
  Var mid = 0.5 * (a + cc);
  Var lambda = mid + sqrt(maximum(mid * mid - det, c(0.1)));
  Var radius = ceil(3.0 * sqrt(lambda));
  // Tile bounds as native kernels compute them (splat_math.hpp tile_rect): the floor of a
  // position in tiles, clamped to [0, tiles].
  auto tile = [&](const Var& e, int64_t hi) { return minimum(maximum(floor(e), c(0)), c(double(hi))); };
  const double k = splat::kTile;
  p.x0 = tile((p.u - radius) / k, tiles_x);
  p.x1 = tile((p.u + radius) / k + 1.0, tiles_x);
  p.y0 = tile((p.v - radius) / k, tiles_y);
  p.y1 = tile((p.v + radius) / k + 1.0, tiles_y);
  const double inf = std::numeric_limits<double>::infinity();
  auto finite = [&](const Var& e) { return lt(abs(e), c(inf)); };
  p.visible = logical_and(logical_and(gt(pz, c(splat::kNearZ)), logical_and(finite(px), finite(py))),
                          logical_and(logical_and(gt(det, c(0)), le(det, c(splat::kMaxDet))),
                                      logical_and(logical_and(finite(p.u), finite(p.v)),
                                                  logical_and(lt(p.x0, p.x1), lt(p.y0, p.y1)))));
  return p;
}

// The SH colour [n, 3] of means seen from the camera of `view`.
Var colour_dense(const Var& means, const Var& sh, const Var& view) {
  Graph& g = *means.graph();
  const DType t = means.dtype();
  const int64_t n = means.shape()[0], k = sh.shape()[1];
  Var rv = slice(view, {0, 0}, {3, 3}), tv = slice(view, {0, 3}, {3, 4});
  Var centre = reshape(-matmul(rv, tv, true, false), {1, 3});  // -R^T t
  Var d = means - centre;
  Var len2 = sum(d * d, {1}, true);
  Var pos = gt(len2, scalar(g, 0.0, t));
  Var dir = where(pos, d / sqrt(where(pos, len2, scalar(g, 1.0, t))),
                  broadcast_to(constant(g, example_tensor(t, {1, 3}, {0, 0, 1})), {n, 3}));
  Var x = column(dir, 0), y = column(dir, 1), z = column(dir, 2);
  std::vector<Var> basis{broadcast_to(scalar(g, 0.28209479177387814, t), {n})};
  if (k > 1) {
    const double c1 = 0.4886025119029199;
    basis.insert(basis.end(), {-c1 * y, c1 * z, -c1 * x});
  }
  if (k > 4) {
    Var xx = x * x, yy = y * y, zz = z * z;
    basis.insert(basis.end(), {1.0925484305920792 * (x * y), -1.0925484305920792 * (y * z),
                               0.31539156525252005 * (2.0 * zz - xx - yy), -1.0925484305920792 * (x * z),
                               0.5462742152960396 * (xx - yy)});
    if (k > 9)
      basis.insert(basis.end(), {-0.5900435899266435 * y * (3.0 * xx - yy), 2.890611442640554 * (x * y * z),
                                 -0.4570457994644658 * y * (4.0 * zz - xx - yy),
                                 0.3731763325901154 * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
                                 -0.4570457994644658 * x * (4.0 * zz - xx - yy), 1.445305721320277 * z * (xx - yy),
                                 -0.5900435899266435 * x * (xx - 3.0 * yy)});
  }
  Var pre = sum(reshape(columns(basis), {n, k, 1}) * sh, {1}) + 0.5;
  return maximum(pre, scalar(g, 0.0, t));
}

// splat_render from L2 primitives: every pixel against every Gaussian ([H*W, N] matrices),
// front to back by a stable argsort of the f32 depths, transmittance as an exclusive cumsum
// of log(1 - α); docs/splat.md says why the stop rule is then a mask.
std::vector<Var> render_dense(const std::vector<Var>& in, const Attrs& at) {
  const Var &means = in[0], &log_scales = in[1], &quats = in[2], &ologit = in[3], &sh = in[4], &view = in[5],
            &bg = in[6];
  Graph& g = *means.graph();
  const DType t = means.dtype();
  const int64_t n = means.shape()[0], w = at.get_int("width"), h = at.get_int("height"), pixels = w * h;
  auto c = [&](double v) { return scalar(g, v, t); };
  if (n == 0)
    return {broadcast_to(reshape(bg, {1, 1, 3}), {h, w, 3}), broadcast_to(c(0), {h, w}), broadcast_to(c(0), {h, w})};

  // Which Gaussians are drawn: decided on the inputs as given (no gradient flows through a
  // comparison). The differentiable pass then runs on inputs where every culled Gaussian is
  // replaced by a harmless one (one unit in front of the camera), so no NaN or infinity of a
  // culled Gaussian reaches a derivative.
  const double inf = std::numeric_limits<double>::infinity();
  Var ok = logical_and(logical_and(all_rows(lt(abs(means), c(inf)), t), all_rows(lt(log_scales, c(inf)), t)),
                       logical_and(all_rows(lt(abs(quats), c(inf)), t),
                                   logical_and(lt(abs(ologit), c(inf)), all_rows(lt(abs(sh), c(inf)), t))));
  Var visible = logical_and(ok, project_dense(means, log_scales, quats, ologit, view, at).visible);
  Var vis2 = as_column(visible);
  Var rv = slice(view, {0, 0}, {3, 3}), tv = slice(view, {0, 3}, {3, 4});
  Var ahead = reshape(matmul(rv, constant(g, example_tensor(t, {3, 1}, {0, 0, 1})) - tv, true, false), {1, 3});
  Var m_s = where(vis2, means, broadcast_to(ahead, {n, 3}));
  Var ls_s = where(vis2, log_scales, c(0));
  Var q_s = where(vis2, quats, broadcast_to(constant(g, example_tensor(t, {1, 4}, {1, 0, 0, 0})), {n, 4}));
  Var o_s = where(visible, ologit, c(0));
  Var sh_s = where(reshape(visible, {n, 1, 1}), sh, c(0));
  DenseProjection p = project_dense(m_s, ls_s, q_s, o_s, view, at);
  Var rgb = colour_dense(m_s, sh_s, view);

  // Front to back: ascending f32 depth, ties by index (the native kernels' key order).
  Var order = argsort(cast(p.depth, DType::F32), 0);
  auto by_depth = [&](const Var& e) { return reshape(gather(e, order, 0), {1, n}); };
  Var u = by_depth(p.u), v = by_depth(p.v), ca = by_depth(p.a), cb = by_depth(p.b), cc = by_depth(p.c);
  Var opacity = by_depth(p.opacity), z = by_depth(p.depth);
  Var x0 = by_depth(p.x0), x1 = by_depth(p.x1), y0 = by_depth(p.y0), y1 = by_depth(p.y1);
  Var vis = reshape(gather(visible, order, 0), {1, n});
  Var colours = gather(rgb, order, 0);  // [n, 3]

  // Pixel centres and their tiles, [P, 1].
  Var col = reshape(iota(g, {h, w}, 1, t), {pixels, 1}), row = reshape(iota(g, {h, w}, 0, t), {pixels, 1});
  Var cxp = col + 0.5, cyp = row + 0.5;
  Var tx = floor(col / double(splat::kTile)), ty = floor(row / double(splat::kTile));
  Var in_tile = logical_and(logical_and(ge(tx, x0), lt(tx, x1)), logical_and(ge(ty, y0), lt(ty, y1)));

  Var dx = u - cxp, dy = v - cyp;  // [P, n]
  Var power = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy;
  Var alpha = minimum(opacity * exp(-power), c(splat::kMaxAlpha));
  Var keep = logical_and(logical_and(vis, in_tile), ge(alpha, c(splat::kMinAlpha)));
  Var a_kept = where(keep, alpha, c(0));
  Var log_t = log(1.0 - a_kept);
  Var added = logical_and(keep, ge(exp(cumsum(log_t, 1)), c(splat::kMinTransmittance)));
  Var weight = where(added, a_kept * exp(cumsum(log_t, 1, true)), c(0));
  Var t_final = exp(sum(where(added, log_t, c(0)), {1}, true));  // [P, 1]
  Var image = matmul(weight, colours) + t_final * reshape(bg, {1, 3});
  Var wsum = sum(weight, {1}), dsum = sum(weight * z, {1});
  Var any = gt(wsum, c(0));
  Var depth = where(any, dsum / where(any, wsum, c(1)), c(0));
  return {reshape(image, {h, w, 3}), reshape(1.0 - t_final, {h, w}), reshape(depth, {h, w})};
}

}  // namespace

// A small scene in front of an identity camera: n Gaussians at depths 3..5 on a 20 x 12
// image (two tiles), degree-1 colours, opacities at most sigmoid(2) < 0.99, so the examples'
// finite differences stay away from the clamp.
std::vector<Var> splat_example_scene(ExampleInputs& x, DType t, int64_t n) {
  Graph& g = x.graph();
  Var means = x.in(t, {n, 3}, {.lo = -1, .hi = 1}) + constant(g, example_tensor(t, {1, 3}, {0, 0, 4}));
  Var ls = x.in(t, {n, 3}, {.lo = -1.3, .hi = -0.6});
  Var quats = x.in(t, {n, 4}, {.lo = -1, .hi = 1});
  Var ologit = x.in(t, {n}, {.lo = -1, .hi = 2});
  Var sh = x.in(t, {n, 4, 3}, {.lo = -0.5, .hi = 0.5});
  Var view = constant(g, example_tensor(t, {4, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  Var bg = x.in(t, {3}, {.lo = 0, .hi = 1});
  return {means, ls, quats, ologit, sh, view, bg};
}
const Attrs& splat_example_camera() {
  static const Attrs a{{"width", int64_t(20)}, {"height", int64_t(12)}, {"fx", 12.0},
                       {"fy", 12.0},           {"cx", 10.0},            {"cy", 6.0}};
  return a;
}

void register_splat_ops(OpRegistry& r) {
  r.add({.name = "splat_render", .level = Level::L1, .cls = OpClass::Composite, .min_inputs = 7, .max_inputs = 7,
         .attrs = kRenderAttrs,
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) { return check_render(in, a); },
         .lower = render_dense,
         // The native backward; the view matrix gets no cotangent.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs& a) {
           std::vector<Var> args = in;
           args.insert(args.end(), g.begin(), g.end());
           std::vector<Var> d = op_multi("splat_render_backward", args, a);
           return std::vector<Var>{d[0], d[1], d[2], d[3], d[4], Var(), d[5]};
         },
         .nondiff_inputs = {5},
         .dtypes = kSplatTypes,
         .doc = "3D Gaussian splatting render: image, alpha, expected depth (docs/splat.md)",
         .example = [](ExampleInputs& x, DType t) { return op_multi("splat_render", splat_example_scene(x, t, 6), splat_example_camera()); }});
  r.add({.name = "splat_render_backward", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 10,
         .max_inputs = 10, .attrs = kRenderAttrs,
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           std::vector<TensorType> out = check_render({in.begin(), in.begin() + 7}, a);
           const char* names[] = {"image", "alpha", "depth"};
           for (size_t k = 0; k < 3; ++k)
             if (in[7 + k] != out[k])
               throw InputError(std::string("the cotangent of ") + names[k] + " must be " + out[k].str() + ", got " +
                                in[7 + k].str());
           return std::vector<TensorType>{in[0], in[1], in[2], in[3], in[4], in[6]};
         },
         .not_differentiable = true,
         .dtypes = kSplatTypes,
         .doc = "splat_render's VJP: cotangents of means, log_scales, quats, opacity_logits, sh, background",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = splat_example_scene(x, t, 6);
           a.push_back(x.in(t, {12, 20, 3}));
           a.push_back(x.in(t, {12, 20}));
           a.push_back(x.in(t, {12, 20}));
           return op_multi("splat_render_backward", a, splat_example_camera());
         }});
}

}  // namespace rlx::ir
