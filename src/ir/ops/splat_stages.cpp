// The stages of the tiled splat rasterizer as library ops (docs/splat.md, "The stages as
// ops"), each with kernels on every device (splat_math.hpp's per-Gaussian, per-entry and
// per-pixel functions; splat_host.hpp's loops), and the backward ops of the differentiable
// ones registered as their VJPs. The integer stages (tile counts, keys, ranges) have no
// derivative. splat_stages() below chains them into splat_render's pipeline.
#include "ir/ops/splat_stages.hpp"

#include "core/checked.hpp"
#include "ir/ops/rules.hpp"
#include "ir/ops/splat_math.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

const std::vector<DType> kFloat = {DType::F32, DType::F64};
using Types = std::vector<TensorType>;

const std::vector<AttrSpec> kCamera = {{"width", AttrKind::Int, true}, {"height", AttrKind::Int, true},
                                       {"fx", AttrKind::Float, true},  {"fy", AttrKind::Float, true},
                                       {"cx", AttrKind::Float, true},  {"cy", AttrKind::Float, true}};
const std::vector<AttrSpec> kImage = {{"width", AttrKind::Int, true}, {"height", AttrKind::Int, true}};

void need(const TensorType& t, const TensorType& want, const std::string& what) {
  if (t != want) throw InputError(what + " must be " + want.str() + ", got " + t.str());
}

// [N, d] in the float dtype; returns N.
int64_t rows_of(const TensorType& t, int64_t d, const std::string& what) {
  require_dtype(t, kFloat, what.c_str());
  if (t.shape.size() != 2 || t.shape[1] != d)
    throw InputError(what + " must be [N, " + std::to_string(d) + "], got " + shape_str(t.shape));
  return t.shape[0];
}

// Image size; returns the number of tiles.
int64_t tiles_of(const Attrs& a) {
  const int64_t w = a.get_int("width"), h = a.get_int("height");
  if (w < 1 || h < 1 || w > (int64_t(1) << 24) || h > (int64_t(1) << 24))
    throw InputError("width and height must lie in [1, 2^24], got " + std::to_string(w) + " x " + std::to_string(h));
  return ((w + splat::kTile - 1) / splat::kTile) * ((h + splat::kTile - 1) / splat::kTile);
}

void check_camera(const Attrs& a) {
  tiles_of(a);
  for (const char* f : {"fx", "fy", "cx", "cy"})
    if (!std::isfinite(a.get_float(f))) throw InputError(std::string(f) + " must be finite");
  if (a.get_float("fx") == 0 || a.get_float("fy") == 0) throw InputError("fx and fy must be non-zero");
}

// means, log_scales, quats, opacity_logits, viewmat -> the dtype and N.
std::pair<DType, int64_t> check_projection_inputs(const Types& in) {
  const int64_t n = rows_of(in[0], 3, "means");
  const DType t = in[0].dtype;
  need(in[1], {t, {n, 3}}, "log_scales");
  need(in[2], {t, {n, 4}}, "quats");
  need(in[3], {t, {n}}, "opacity_logits");
  need(in[4], {t, {4, 4}}, "viewmat");
  return {t, n};
}
Types project_types(const Types& in, const Attrs& a) {
  check_camera(a);
  const auto [t, n] = check_projection_inputs(in);
  return {{t, {n, 2}}, {t, {n, 3}}, {t, {n}}, {t, {n}}, {DType::I64, {n}}};
}

// means, sh, viewmat -> rgb's type.
TensorType sh_type(const Types& in) {
  const int64_t n = rows_of(in[0], 3, "means");
  const DType t = in[0].dtype;
  if (in[1].dtype != t || in[1].shape.size() != 3 || in[1].shape[0] != n || in[1].shape[2] != 3)
    throw InputError("sh must be " + std::string(dtype_name(t)) + "[N, K, 3] with N = " + std::to_string(n) + ", got " +
                     in[1].str());
  const int64_t k = in[1].shape[1];
  if (k != 1 && k != 4 && k != 9 && k != 16)
    throw InputError("sh must have K = 1, 4, 9 or 16 coefficients (degree 0..3), got " + std::to_string(k));
  need(in[2], {t, {4, 4}}, "viewmat");
  return {t, {n, 3}};
}

// xy [N,2] and an [N] i64 per Gaussian (radii) -> N.
int64_t check_xy_radii(const TensorType& xy, const TensorType& radii) {
  const int64_t n = rows_of(xy, 2, "xy");
  need(radii, {DType::I64, {n}}, "radii");
  return n;
}

// The composite stage's eight inputs -> its three results.
Types composite_types(const Types& in, const Attrs& a) {
  const int64_t tiles = tiles_of(a);
  const int64_t n = rows_of(in[0], 2, "xy");
  const DType t = in[0].dtype;
  need(in[1], {t, {n, 3}}, "conics");
  need(in[2], {t, {n}}, "opacities");
  need(in[3], {t, {n, 3}}, "rgb");
  need(in[4], {t, {n}}, "depths");
  if (in[5].dtype != DType::I64 || in[5].shape.size() != 1)
    throw InputError("the list must be i64[L], got " + in[5].str());
  need(in[6], {DType::I64, {tiles, 2}}, "ranges");
  need(in[7], {t, {3}}, "background");
  const int64_t w = a.get_int("width"), h = a.get_int("height");
  checked_mul(checked_mul(w, h, "splat_composite image"), 3, "splat_composite image");
  return {{t, {h, w, 3}}, {t, {h, w}}, {t, {h, w}}};
}

// The cotangents given to a backward op must have the types of the forward's results.
void check_cotangents(const Types& in, size_t first, const Types& fwd, const char* const* names) {
  for (size_t k = 0; k < fwd.size(); ++k)
    if (in[first + k] != fwd[k])
      throw InputError(std::string("the cotangent of ") + names[k] + " must be " + fwd[k].str() + ", got " +
                       in[first + k].str());
}

// The example chain up to the list: the stages as splat_stages() builds them.
SplatStages example_stages(ExampleInputs& x, DType t) {
  return splat_stages(splat_example_scene(x, t, 6), splat_example_camera(), 6 * 2);
}

}  // namespace

int64_t splat_capacity_bound(int64_t n, int64_t width, int64_t height, int64_t limit) {
  const int64_t tiles = ((width + splat::kTile - 1) / splat::kTile) * ((height + splat::kTile - 1) / splat::kTile);
  const int64_t bound = std::max<int64_t>(checked_mul(n, tiles, "splat intersection bound"), 1);
  if (bound > limit)
    throw InputError("the staged splat pipeline sizes its intersection list by N x tiles = " + std::to_string(n) +
                     " x " + std::to_string(tiles) + " = " + std::to_string(bound) + ", more than " +
                     std::to_string(limit) + "; give splat_render a capacity attribute (the most intersections a render may have) or build the pipeline with one (solvers/splat render_staged)");
  return bound;
}

SplatStages splat_stages(const std::vector<Var>& in, const Attrs& camera, int64_t capacity) {
  if (in.size() != 7) throw InputError("splat_stages takes splat_render's 7 inputs, got " + std::to_string(in.size()));
  if (capacity < 1) throw InputError("splat_stages: the capacity must be at least 1, got " + std::to_string(capacity));
  const Var &means = in[0], &log_scales = in[1], &quats = in[2], &ologit = in[3], &sh = in[4], &view = in[5],
            &bg = in[6];
  Graph& g = *means.graph();
  const Attrs image{{"width", camera.get_int("width")}, {"height", camera.get_int("height")}};
  // The camera alone: splat_render's attributes also hold its capacity, which the projection has not.
  Attrs cam = image;
  for (const char* f : {"fx", "fy", "cx", "cy"}) cam.set(f, camera.get_float(f));
  SplatStages s;
  std::vector<Var> p = op_multi("splat_project", {means, log_scales, quats, ologit, view}, cam);
  s.xy = p[0], s.conics = p[1], s.depths = p[2], s.opacities = p[3];
  s.rgb = op_multi("splat_sh_to_rgb", {means, sh, view})[0];
  // A Gaussian with a non-finite SH coefficient is culled (docs/splat.md): its radius is 0.
  const int64_t n = means.shape()[0];
  Var sh_bad = sum(cast(logical_not(lt(abs(sh), scalar(g, INFINITY, sh.dtype()))), DType::I64), {1, 2});
  s.radii = where(eq(sh_bad, scalar(g, 0.0, DType::I64)), p[4], broadcast_to(scalar(g, 0.0, DType::I64), {n}));
  s.counts = op_multi("splat_tile_counts", {s.xy, s.radii}, image)[0];
  s.ends = cumsum(s.counts, 0);
  Attrs keyed = image;
  keyed.set("capacity", capacity);
  std::vector<Var> k = op_multi("splat_tile_keys", {s.xy, s.depths, s.radii, s.ends}, keyed);
  s.keys = k[0], s.ids = k[1];
  std::vector<Var> sorted = op_multi("sort", {s.keys}, {{"axis", int64_t(0)}});
  s.sorted_keys = sorted[0];
  s.list = gather(s.ids, sorted[1], 0);
  s.ranges = op_multi("splat_tile_ranges", {s.sorted_keys}, image)[0];
  std::vector<Var> c =
      op_multi("splat_composite", {s.xy, s.conics, s.opacities, s.rgb, s.depths, s.list, s.ranges, bg}, image);
  s.image = c[0], s.alpha = c[1], s.depth = c[2];
  return s;
}

void register_splat_stage_ops(OpRegistry& r) {
  r.add({.name = "splat_project", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 5, .max_inputs = 5,
         .attrs = kCamera,
         .infer = [](const Types& in, const Attrs& a, auto&) { return project_types(in, a); },
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs& a) {
           std::vector<Var> args = in;
           args.insert(args.end(), g.begin(), g.begin() + 4);  // the radii (i64) have none
           std::vector<Var> d = op_multi("splat_project_backward", args, a);
           return std::vector<Var>{d[0], d[1], d[2], d[3], Var()};
         },
         .nondiff_inputs = {4},
         .dtypes = kFloat,
         .doc = "splat stage: EWA projection -> xy, conics, depths, opacities, radii (i64; 0 = culled)",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> s = splat_example_scene(x, t, 6);
           return op_multi("splat_project", {s[0], s[1], s[2], s[3], s[5]}, splat_example_camera());
         }});
  r.add({.name = "splat_project_backward", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 9,
         .max_inputs = 9, .attrs = kCamera,
         .infer = [](const Types& in, const Attrs& a, auto&) {
           const Types fwd = project_types({in.begin(), in.begin() + 5}, a);
           const char* names[] = {"xy", "conics", "depths", "opacities"};
           check_cotangents(in, 5, {fwd.begin(), fwd.begin() + 4}, names);
           return Types{in[0], in[1], in[2], in[3]};
         },
         .not_differentiable = true,
         .dtypes = kFloat,
         .doc = "splat_project's VJP: cotangents of means, log_scales, quats, opacity_logits",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> s = splat_example_scene(x, t, 6);
           return op_multi("splat_project_backward",
                           {s[0], s[1], s[2], s[3], s[5], x.in(t, {6, 2}), x.in(t, {6, 3}), x.in(t, {6}), x.in(t, {6})},
                           splat_example_camera());
         }});
  r.add({.name = "splat_sh_to_rgb", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 3, .max_inputs = 3,
         .infer = [](const Types& in, const Attrs&, auto&) { return Types{sh_type(in)}; },
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs&) {
           std::vector<Var> d = op_multi("splat_sh_to_rgb_backward", {in[0], in[1], in[2], g[0]});
           return std::vector<Var>{d[0], d[1], Var()};
         },
         .nondiff_inputs = {2},
         .dtypes = kFloat,
         .doc = "splat stage: SH (degree 0..3) at the view direction -> rgb (clamped at 0)",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> s = splat_example_scene(x, t, 6);
           return op_multi("splat_sh_to_rgb", {s[0], s[4], s[5]});
         }});
  r.add({.name = "splat_sh_to_rgb_backward", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4,
         .max_inputs = 4,
         .infer = [](const Types& in, const Attrs&, auto&) {
           const char* names[] = {"rgb"};
           check_cotangents(in, 3, {sh_type(in)}, names);
           return Types{in[0], in[1]};
         },
         .not_differentiable = true,
         .dtypes = kFloat,
         .doc = "splat_sh_to_rgb's VJP: cotangents of means, sh",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> s = splat_example_scene(x, t, 6);
           return op_multi("splat_sh_to_rgb_backward", {s[0], s[4], s[5], x.in(t, {6, 3})});
         }});
  r.add({.name = "splat_tile_counts", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 2, .max_inputs = 2,
         .attrs = kImage,
         .infer = [](const Types& in, const Attrs& a, auto&) {
           tiles_of(a);
           return Types{{DType::I64, {check_xy_radii(in[0], in[1])}}};
         },
         .not_differentiable = true,
         .dtypes = kFloat,
         .doc = "splat stage: the number of 16x16 tiles each Gaussian touches (i64)",
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{example_stages(x, t).counts}; }});
  r.add({.name = "splat_tile_keys", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 4,
         .attrs = {{"width", AttrKind::Int, true}, {"height", AttrKind::Int, true}, {"capacity", AttrKind::Int, true}},
         .infer = [](const Types& in, const Attrs& a, auto&) {
           tiles_of(a);
           const int64_t n = check_xy_radii(in[0], in[2]);
           need(in[1], {in[0].dtype, {n}}, "depths");
           need(in[3], {DType::I64, {n}}, "offsets");
           const int64_t cap = a.get_int("capacity");
           if (cap < 1) throw InputError("capacity must be at least 1, got " + std::to_string(cap));
           return Types{{DType::I64, {cap}}, {DType::I64, {cap}}};
         },
         .not_differentiable = true,
         .dtypes = kFloat,
         .doc = "splat stage: (tile << 32 | f32 depth bits) keys and Gaussian ids, padded to capacity",
         .example = [](ExampleInputs& x, DType t) {
           SplatStages s = example_stages(x, t);
           return std::vector<Var>{s.keys, s.ids};
         }});
  r.add({.name = "splat_tile_ranges", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = kImage,
         .infer = [](const Types& in, const Attrs& a, auto&) {
           if (in[0].dtype != DType::I64 || in[0].shape.size() != 1)
             throw InputError("the sorted keys must be i64[L], got " + in[0].str());
           return Types{{DType::I64, {tiles_of(a), 2}}};
         },
         .not_differentiable = true,
         .dtypes = {DType::I64},
         .doc = "splat stage: each tile's [begin, end) in the sorted keys ([tiles, 2] i64)",
         .example = [](ExampleInputs& x, DType) { return std::vector<Var>{example_stages(x, DType::F32).ranges}; }});
  r.add({.name = "splat_composite", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 8, .max_inputs = 8,
         .attrs = kImage,
         .infer = [](const Types& in, const Attrs& a, auto&) { return composite_types(in, a); },
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs& a) {
           std::vector<Var> args = in;
           args.insert(args.end(), g.begin(), g.end());
           std::vector<Var> d = op_multi("splat_composite_backward", args, a);
           return std::vector<Var>{d[0], d[1], d[2], d[3], d[4], Var(), Var(), d[5]};
         },
         .nondiff_inputs = {5, 6},
         .dtypes = kFloat,
         .doc = "splat stage: front-to-back alpha compositing per tile -> image, alpha, depth",
         .example = [](ExampleInputs& x, DType t) {
           SplatStages s = example_stages(x, t);
           return std::vector<Var>{s.image, s.alpha, s.depth};
         }});
  r.add({.name = "splat_composite_backward", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 11,
         .max_inputs = 11, .attrs = kImage,
         .infer = [](const Types& in, const Attrs& a, auto&) {
           const Types fwd = composite_types({in.begin(), in.begin() + 8}, a);
           const char* names[] = {"image", "alpha", "depth"};
           check_cotangents(in, 8, fwd, names);
           return Types{in[0], in[1], in[2], in[3], in[4], in[7]};
         },
         .not_differentiable = true,
         .dtypes = kFloat,
         .doc = "splat_composite's VJP: cotangents of xy, conics, opacities, rgb, depths, background",
         .example = [](ExampleInputs& x, DType t) {
           SplatStages s = example_stages(x, t);
           const Var bg = x.in(t, {3}, {.lo = 0, .hi = 1});
           return op_multi("splat_composite_backward",
                           {s.xy, s.conics, s.opacities, s.rgb, s.depths, s.list, s.ranges, bg, x.in(t, {12, 20, 3}),
                            x.in(t, {12, 20}), x.in(t, {12, 20})},
                           Attrs{{"width", int64_t(20)}, {"height", int64_t(12)}});
         }});
}

}  // namespace rlx::ir
