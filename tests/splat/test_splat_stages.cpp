// The stages of splat_render as ops (docs/splat.md, "The stages as ops"): the staged pipeline
// (solvers/splat render_staged, and the splat-stages rewrite) against the fused op and the
// oracle; each differentiable stage's backward op against central finite differences in f64;
// grad through the stages against the fused backward; degenerate input through every stage;
// the list's capacity and offsets checked with errors naming what is wrong; splat_render's
// capacity attribute sizing the splat-stages rewrite's list.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <random>

#include "ir/text.hpp"
#include "solvers/splat/render.hpp"
#include "tests/splat/helpers.hpp"
#include "tests/support/seed.hpp"

namespace rlx::test {
namespace {

uint64_t seed() { return run_seed("test_splat_stages"); }

splat::Intrinsics intrinsics(const Scene& s) { return {s.width, s.height, s.fx, s.fy, s.cx, s.cy}; }

// A graph of the staged pipeline over the scene's inputs: image, alpha, depth, then (with
// `intermediates`) every stage's value, then (with `with_grad`) the VJP with respect to means,
// log_scales, quats, opacity_logits, sh, background from three cotangent inputs.
struct StagedGraph {
  ir::Graph g;
  std::vector<Var> in;
  ir::SplatStages st;
  StagedGraph(const Scene& s, DType t, bool with_grad, bool intermediates = false, int64_t capacity = 0) {
    const char* names[] = {"means", "log_scales", "quats", "opacity_logits", "sh", "viewmat", "background"};
    const std::vector<Tensor> x = scene_inputs(s, t);
    for (size_t i = 0; i < 7; ++i) in.push_back(input(g, names[i], t, x[i].shape()));
    splat::StagedRender r =
        splat::render_staged(in[0], in[1], in[2], in[3], in[4], in[5], in[6], intrinsics(s), {.capacity = capacity});
    st = r.stages;
    output(g, {r.image, r.alpha, r.depth});
    if (intermediates)
      output(g, {st.xy, st.conics, st.depths, st.opacities, st.radii, st.rgb, st.counts, st.ends, st.keys, st.ids,
                 st.sorted_keys, st.list, st.ranges});
    if (!with_grad) return;
    std::vector<Var> cts;
    for (const Var& v : {r.image, r.alpha, r.depth})
      cts.push_back(input(g, "cotangent" + std::to_string(cts.size()), t, v.shape()));
    output(g, vjp({r.image, r.alpha, r.depth}, cts, {in[0], in[1], in[2], in[3], in[4], in[6]}));
  }
};

std::vector<std::vector<double>> all_values(const std::vector<Tensor>& x, size_t from = 0) {
  std::vector<std::vector<double>> r;
  for (size_t i = from; i < x.size(); ++i) r.push_back(values(x[i]));
  return r;
}
double scale_of(const std::vector<std::vector<double>>& v) {
  double s = 1;
  for (const auto& x : v)
    for (double e : x) s = std::max(s, std::abs(e));
  return s;
}

// Central differences of L = sum_k <u_k, y_k> for a graph whose first inputs are the op's and
// whose results are y_k followed by the VJP (one result per entry of wrt): 10 random elements
// of each wrt input, h = rel_step |x| (|x| at least 1e-2), in f64; returns the worst
// |vjp - fd| / scale. Compositing has thresholds (α against 1/255) that a step can cross, so
// its steps are smaller (1e-7) than those of the smooth per-Gaussian stages (1e-6).
double vjp_against_fd(const std::string& device, const ir::Graph& g, const std::vector<Tensor>& in, size_t outputs,
                      size_t first_cotangent, const std::vector<size_t>& wrt, double rel_step, std::mt19937_64& rng,
                      std::string& where) {
  const std::vector<Tensor> base = run_on(device, g, in);
  auto objective = [&](const std::vector<Tensor>& x) {
    const std::vector<Tensor> y = run_on(device, g, x);
    double l = 0;
    for (size_t r = 0; r < outputs; ++r) {
      const std::vector<double> yv = values(y[r]), uv = values(x[first_cotangent + r]);
      for (size_t i = 0; i < yv.size(); ++i) l += yv[i] * uv[i];
    }
    return l;
  };
  double worst_rel = 0;
  for (size_t j = 0; j < wrt.size(); ++j) {
    const std::vector<double> grad = values(base[outputs + j]);
    if (grad.empty()) continue;
    std::uniform_int_distribution<size_t> pick(0, grad.size() - 1);
    double worst = 0, scale = 1e-3;
    std::string detail;
    for (int trial = 0; trial < 10; ++trial) {
      const size_t e = pick(rng);
      // A step relative to the element: conics of wide Gaussians are ~1e-3, and an absolute
      // 1e-6 would move many pixels' α across the 1/255 threshold.
      const double h = rel_step * std::max(std::abs(in[wrt[j]].data<double>()[e]), 1e-2);
      double side[2];
      for (int sgn = 0; sgn < 2; ++sgn) {
        std::vector<Tensor> x = in;
        x[wrt[j]] = x[wrt[j]].clone();
        x[wrt[j]].data<double>()[e] += sgn ? -h : h;
        side[sgn] = objective(x);
      }
      const double fd = (side[0] - side[1]) / (2 * h);
      scale = std::max({scale, std::abs(fd), std::abs(grad[e])});
      if (std::abs(fd - grad[e]) > worst)
        worst = std::abs(fd - grad[e]),
        detail = " element " + std::to_string(e) + " vjp " + std::to_string(grad[e]) + " fd " + std::to_string(fd);
    }
    if (worst / scale > worst_rel) worst_rel = worst / scale, where = "input " + std::to_string(wrt[j]) + detail;
  }
  return worst_rel;
}

std::vector<Tensor> random_like(std::mt19937_64& rng, const std::vector<Shape>& shapes) {
  std::normal_distribution<double> normal;
  std::vector<Tensor> r;
  for (const Shape& sh : shapes) {
    std::vector<double> u(size_t(numel(sh)));
    for (double& e : u) e = normal(rng);
    r.push_back(tensor(DType::F64, sh, u));
  }
  return r;
}

}  // namespace

// The staged pipeline equals the oracle and the fused op on every device. f64: rounding only
// (1e-9 against the oracle, 1e-12 against the fused op). f32: the kernels' float arithmetic
// (2e-4), but a threshold test (α against 1/255, T against 1e-4) decided differently by one
// rounding moves one pixel by up to ~0.1, and the f32 inputs (against the oracle's doubles) or
// the f32 results between the stages (on reference, whose fused kernel stays in double) are
// such roundings: a few such pixels are allowed, 0.5% of the values; a wrong list, order or
// rule moves far more.
BOOST_AUTO_TEST_CASE(staged_forward_matches_the_fused_op_and_the_oracle) {
  std::mt19937_64 rng(seed());
  struct Case {
    int64_t n, k, w, h;
    double lo, hi;
  };
  for (const Case& c : {Case{40, 1, 37, 29, -2, 3}, Case{50, 4, 50, 33, -2, 3}, Case{25, 9, 17, 40, -2, 3},
                        Case{30, 16, 33, 18, -2, 3}, Case{80, 4, 24, 20, 3, 6}, Case{600, 4, 45, 37, -6, -3.5}})
    for (DType t : {DType::F64, DType::F32}) {
      const Scene s = random_scene(rng, c.n, c.k, c.w, c.h, c.lo, c.hi);
      const splat_oracle::Image want = splat_oracle::render(s);
      StagedGraph staged(s, t, false);
      RenderGraph fused(s, t, false);
      const int64_t values_count = c.w * c.h * 5, allowed = t == DType::F64 ? 0 : values_count / 200;
      for (const std::string& d : devices()) {
        const std::vector<Tensor> got = run_on(d, staged.g, scene_inputs(s, t));
        const auto [off, worst] = beyond(got, {want.rgb, want.alpha, want.depth}, t == DType::F64 ? 1e-9 : 2e-4);
        BOOST_CHECK_MESSAGE(off <= allowed, d << " " << dtype_name(t) << " n=" << c.n << " K=" << c.k << ": staged vs oracle: "
                                              << off << " values beyond the tolerance (max " << worst << ")"
                                              << " (RLX_TEST_SEED=" << seed() << ")");
        const auto [foff, fworst] =
            beyond(got, all_values(run_on(d, fused.g, scene_inputs(s, t))), t == DType::F64 ? 1e-12 : 2e-4);
        BOOST_CHECK_MESSAGE(foff <= allowed, d << " " << dtype_name(t) << " n=" << c.n << ": staged vs fused: " << foff
                                               << " values beyond the tolerance (max " << fworst << ")"
                                               << " (RLX_TEST_SEED=" << seed() << ")");
      }
    }
}

// splat_render and splat_render_backward on a device without their native kernels take the
// splat-stages rewrite (before the dense lowering), and the results equal the fused kernels'.
BOOST_AUTO_TEST_CASE(the_splat_stages_rewrite_replaces_the_fused_op) {
  std::mt19937_64 rng(seed() + 1);
  const Scene s = random_scene(rng, 30, 4, 35, 21);
  for (DType t : {DType::F64, DType::F32}) {
    RenderGraph rg(s, t, true);
    std::vector<Tensor> in = scene_inputs(s, t);
    add_cotangents(rng, in, t, 21, 35);
    for (const std::string& d : devices()) {
      Device& dev = DeviceRegistry::get().at(d);
      CompileOptions o;
      o.deny_native = {"splat_render", "splat_render_backward"};
      const Program p = compile(rg.g, dev, o);
      int rewritten = 0;
      for (const NodeReport& r : p.report.nodes)
        if (r.op == "splat_render" || r.op == "splat_render_backward") {
          BOOST_CHECK_EQUAL(r.rule, "splat-stages");
          ++rewritten;
        }
      BOOST_CHECK_EQUAL(rewritten, 2);
      const std::vector<std::vector<double>> want = all_values(run_on(d, rg.g, in));
      const double tol = (t == DType::F64 ? 1e-9 : 2e-3) * scale_of(want);
      const double worst = max_diff(run(p, dev, in), want);
      BOOST_CHECK_MESSAGE(worst <= tol, d << " " << dtype_name(t) << ": rewritten vs fused " << worst << " > " << tol
                                          << " (RLX_TEST_SEED=" << seed() << ")");
      // force-common-ir keeps the dense lowering for the forward (the rewrite is not tried).
      CompileOptions lower;
      lower.policy = Policy::ForceCommonIR;
      for (const NodeReport& r : compile(rg.g, dev, lower).report.nodes)
        if (r.op == "splat_render") BOOST_CHECK(r.route == Route::CommonIR);
    }
  }
}

// Each differentiable stage's backward op (its registered VJP) against central differences
// of the stage in f64, on every device: splat_project, splat_sh_to_rgb (every SH degree),
// splat_composite (with the list of a real scene held fixed). Normalized error <= 1e-4 (the
// steps relative to small elements leave ~2e-5 of rounding now and then; a wrong rule is O(1)).
BOOST_AUTO_TEST_CASE(stage_backwards_match_finite_differences) {
  std::mt19937_64 rng(seed() + 2);
  const DType t = DType::F64;
  for (int64_t k : {1, 4, 9, 16}) {
    const Scene s = random_scene(rng, 12, k, 23, 19);
    const std::vector<Tensor> x = scene_inputs(s, t);
    const int64_t n = s.n;
    // splat_project: means, log_scales, quats, opacity_logits (viewmat has none).
    {
      ir::Graph g;
      std::vector<Var> in;
      for (size_t i : {0, 1, 2, 3, 5}) in.push_back(input(g, "x" + std::to_string(i), t, x[i].shape()));
      std::vector<Var> y = op_multi("splat_project", in, camera_attrs(s));
      y.pop_back();  // the radii: integers
      std::vector<Var> cts;
      for (const Var& v : y) cts.push_back(input(g, "u" + std::to_string(cts.size()), t, v.shape()));
      output(g, y);
      output(g, vjp(y, cts, {in[0], in[1], in[2], in[3]}));
      std::vector<Tensor> args{x[0], x[1], x[2], x[3], x[5]};
      for (const Tensor& u : random_like(rng, {{n, 2}, {n, 3}, {n}, {n}})) args.push_back(u);
      for (const std::string& d : devices()) {
        std::string where;
        const double e = vjp_against_fd(d, g, args, 4, 5, {0, 1, 2, 3}, 1e-6, rng, where);
        BOOST_CHECK_MESSAGE(e <= 1e-4, d << " splat_project K=" << k << " " << where << ": |vjp - fd| / scale " << e
                                         << " (RLX_TEST_SEED=" << seed() << ")");
      }
    }
    // splat_sh_to_rgb: means, sh.
    {
      ir::Graph g;
      Var m = input(g, "means", t, x[0].shape()), sh = input(g, "sh", t, x[4].shape()),
          v = input(g, "viewmat", t, x[5].shape());
      Var rgb = op_multi("splat_sh_to_rgb", {m, sh, v})[0];
      Var u = input(g, "u", t, rgb.shape());
      output(g, {rgb});
      output(g, vjp({rgb}, {u}, {m, sh}));
      std::vector<Tensor> args{x[0], x[4], x[5], random_like(rng, {{n, 3}})[0]};
      for (const std::string& d : devices()) {
        std::string where;
        const double e = vjp_against_fd(d, g, args, 1, 3, {0, 1}, 1e-6, rng, where);
        BOOST_CHECK_MESSAGE(e <= 1e-4, d << " splat_sh_to_rgb K=" << k << " " << where << ": |vjp - fd| / scale " << e
                                         << " (RLX_TEST_SEED=" << seed() << ")");
      }
    }
    // splat_composite: xy, conics, opacities, rgb, depths, background, on the scene's list.
    {
      StagedGraph sg(s, t, false, true);
      const std::vector<Tensor> st = run_on("reference", sg.g, x);
      // results: image alpha depth, xy conics depths opacities radii rgb counts ends keys ids sorted list ranges
      const std::vector<Tensor> fixed{st[3], st[4], st[6], st[8], st[5], st[14], st[15], x[6]};
      ir::Graph g;
      std::vector<Var> in;
      for (size_t i = 0; i < fixed.size(); ++i)
        in.push_back(input(g, "c" + std::to_string(i), fixed[i].dtype(), fixed[i].shape()));
      std::vector<Var> y = op_multi("splat_composite", in, {{"width", s.width}, {"height", s.height}});
      std::vector<Var> cts;
      for (const Var& v : y) cts.push_back(input(g, "u" + std::to_string(cts.size()), t, v.shape()));
      output(g, y);
      output(g, vjp(y, cts, {in[0], in[1], in[2], in[3], in[4], in[7]}));
      std::vector<Tensor> args = fixed;
      for (const Tensor& u : random_like(rng, {{s.height, s.width, 3}, {s.height, s.width}, {s.height, s.width}}))
        args.push_back(u);
      for (const std::string& d : devices()) {
        std::string where;
        const double e = vjp_against_fd(d, g, args, 3, 8, {0, 1, 2, 3, 4, 7}, 1e-7, rng, where);
        BOOST_CHECK_MESSAGE(e <= 1e-4, d << " splat_composite K=" << k << " " << where << ": |vjp - fd| / scale "
                                         << e << " (RLX_TEST_SEED=" << seed() << ")");
      }
    }
  }
}

// grad through the staged pipeline (the stages' VJPs, chained by the grad pass) equals the
// fused splat_render_backward on every device; f64 to rounding, f32 to its summation order.
BOOST_AUTO_TEST_CASE(grad_through_the_stages_equals_the_fused_backward) {
  std::mt19937_64 rng(seed() + 3);
  for (DType t : {DType::F64, DType::F32}) {
    for (int64_t k : {1, 9}) {
      const Scene s = random_scene(rng, 40, k, 29, 22);
      std::vector<Tensor> in = scene_inputs(s, t);
      add_cotangents(rng, in, t, 22, 29);
      StagedGraph staged(s, t, true);
      RenderGraph fused(s, t, true);
      for (const std::string& d : devices()) {
        const std::vector<std::vector<double>> want = all_values(run_on(d, fused.g, in));
        const double tol = (t == DType::F64 ? 1e-9 : 2e-3) * scale_of(want);
        const double worst = max_diff(run_on(d, staged.g, in), want);
        BOOST_CHECK_MESSAGE(worst <= tol, d << " " << dtype_name(t) << " K=" << k << ": grad staged vs fused " << worst
                                            << " > " << tol << " (RLX_TEST_SEED=" << seed() << ")");
      }
    }
  }
}

// Degenerate Gaussians and images through every stage, forward and backward: every stage's
// result and every gradient finite, no throw; f64 images equal the oracle's.
BOOST_AUTO_TEST_CASE(degenerate_input_is_finite_through_every_stage) {
  std::mt19937_64 rng(seed() + 4);
  Scene s = degenerate_scene(rng, 14);
  set_row(s.log_scales, 12, 3, {-2, NAN, -2});
  set_row(s.quats, 13, 4, {1e-30, 0, 0, 0});  // below the zero-norm threshold
  // Three small Gaussians in one corner of a 40 x 40 image: most tiles are empty.
  Scene corner = random_scene(rng, 3, 1, 40, 40);
  for (int64_t g = 0; g < 3; ++g) {
    place_in_camera(corner, g, -0.9 + 0.05 * double(g), -0.9, 3.0);
    set_row(corner.log_scales, g, 3, {-4, -4, -4});
  }
  std::vector<Scene> scenes{s, random_scene(rng, 5, 1, 1, 1), random_scene(rng, 0, 1, 19, 7), corner};
  for (const Scene& sc : scenes)
    for (DType t : {DType::F32, DType::F64}) {
      StagedGraph sg(sc, t, true, true);
      std::vector<Tensor> in = scene_inputs(sc, t);
      for (const Shape& sh : {Shape{sc.height, sc.width, 3}, Shape{sc.height, sc.width}, Shape{sc.height, sc.width}})
        in.push_back(tensor(t, sh, std::vector<double>(static_cast<size_t>(numel(sh)), 1.0)));
      for (const std::string& d : devices()) {
        const std::vector<Tensor> got = run_on(d, sg.g, in);
        for (size_t r = 0; r < got.size(); ++r) {
          if (!is_float(got[r].dtype())) continue;
          for (double e : values(got[r]))
            BOOST_REQUIRE_MESSAGE(std::isfinite(e), d << " " << dtype_name(t) << " n=" << sc.n << " " << sc.width
                                                      << "x" << sc.height << ": result " << r << " has " << e);
        }
        if (t == DType::F64) {
          const splat_oracle::Image want = splat_oracle::render(sc);
          const double worst = max_diff({got[0], got[1], got[2]}, {want.rgb, want.alpha, want.depth});
          BOOST_CHECK_MESSAGE(worst <= 1e-9, d << " n=" << sc.n << ": staged differs from the oracle by " << worst);
        }
      }
    }
}

// A list too short for the scene is an InputError naming the count needed; offsets that are
// not the running sum of the counts are refused before anything is written.
BOOST_AUTO_TEST_CASE(capacity_and_offsets_are_checked) {
  std::mt19937_64 rng(seed() + 5);
  const Scene s = random_scene(rng, 30, 1, 40, 30);
  for (const std::string& d : devices()) {
    StagedGraph small(s, DType::F32, false, false, 2);
    try {
      run_on(d, small.g, scene_inputs(s, DType::F32));
      BOOST_ERROR(d << ": a capacity of 2 was accepted");
    } catch (const InputError& e) {
      BOOST_CHECK_MESSAGE(std::string(e.what()).find("capacity") != std::string::npos, e.what());
    }
    ir::Graph g;
    Var xy = input(g, "xy", DType::F32, {2, 2}), depth = input(g, "depth", DType::F32, {2});
    Var radii = input(g, "radii", DType::I64, {2}), ends = input(g, "ends", DType::I64, {2});
    output(g, op_multi("splat_tile_keys", {xy, depth, radii, ends},
                       {{"width", int64_t(32)}, {"height", int64_t(32)}, {"capacity", int64_t(8)}}));
    Tensor ends_bad = Tensor::empty(DType::I64, {2});
    ends_bad.data<int64_t>()[0] = 5, ends_bad.data<int64_t>()[1] = 6;  // 1 + 1 tiles: must be 1, 2
    Tensor r = Tensor::empty(DType::I64, {2});
    r.data<int64_t>()[0] = r.data<int64_t>()[1] = 2;
    try {
      run_on(d, g, {tensor(DType::F32, {2, 2}, {4, 4, 20, 20}), tensor(DType::F32, {2}, {1, 2}), r, ends_bad});
      BOOST_ERROR(d << ": inconsistent offsets were accepted");
    } catch (const InputError& e) {
      BOOST_CHECK_MESSAGE(std::string(e.what()).find("running sum") != std::string::npos, e.what());
    }
  }
}

// splat_render's capacity attribute is the length of the splat-stages rewrite's list: a
// capacity of exactly the scene's intersection count renders as the fused kernels do, one
// fewer is an InputError naming the count, and the attribute is in the text form (and out of
// it at its default, 0).
BOOST_AUTO_TEST_CASE(the_capacity_attribute_sizes_the_rewritten_list) {
  std::mt19937_64 rng(seed() + 6);
  const Scene s = random_scene(rng, 25, 4, 37, 29);
  const DType t = DType::F32;
  const std::vector<Tensor> x = scene_inputs(s, t);
  for (const std::string& d : devices()) {
    // The count: the last running sum of the tile counts, on this device.
    StagedGraph sg(s, t, false, true);
    const Tensor ends = run_on(d, sg.g, x)[10].to(host_allocator());
    const int64_t count = ends.data<int64_t>()[ends.numel() - 1];
    BOOST_REQUIRE(count > 1);
    const std::vector<std::vector<double>> fused = all_values(run_on(d, RenderGraph(s, t, true).g, [&] {
      std::vector<Tensor> in = x;
      std::mt19937_64 r(seed() + 7);
      add_cotangents(r, in, t, s.height, s.width);
      return in;
    }()));
    for (int64_t cap : {count, count - 1}) {
      ir::Graph g;
      std::vector<Var> in;
      for (size_t i = 0; i < 7; ++i) in.push_back(input(g, "x" + std::to_string(i), t, x[i].shape()));
      ir::Attrs a = camera_attrs(s);
      a.set("capacity", cap);
      std::vector<Var> y = op_multi("splat_render", in, a);
      std::vector<Var> cts;
      for (const Var& v : y) cts.push_back(input(g, "u" + std::to_string(cts.size()), t, v.shape()));
      output(g, y);
      output(g, vjp(y, cts, {in[0], in[1], in[2], in[3], in[4], in[6]}));
      BOOST_CHECK(ir::print_graph(g).find("capacity=" + std::to_string(cap)) != std::string::npos);
      std::vector<Tensor> args = x;
      std::mt19937_64 r(seed() + 7);
      add_cotangents(r, args, t, s.height, s.width);
      Device& dev = DeviceRegistry::get().at(d);
      CompileOptions o;
      o.deny_native = {"splat_render", "splat_render_backward"};
      const Program p = compile(g, dev, o);
      for (const NodeReport& nr : p.report.nodes)
        if (nr.op == "splat_render" || nr.op == "splat_render_backward") BOOST_CHECK_EQUAL(nr.rule, "splat-stages");
      if (cap == count) {
        const double worst = max_diff(run(p, dev, args), fused);
        const double tol = 2e-3 * scale_of(fused);
        BOOST_CHECK_MESSAGE(worst <= tol, d << ": staged at capacity " << cap << " vs fused " << worst << " > " << tol
                                            << " (RLX_TEST_SEED=" << seed() << ")");
        continue;
      }
      try {
        run(p, dev, args);
        BOOST_ERROR(d << ": a capacity one short of the " << count << " intersections was accepted");
      } catch (const InputError& e) {
        const std::string m = e.what();
        BOOST_CHECK_MESSAGE(m.find("capacity") != std::string::npos && m.find(std::to_string(count)) != std::string::npos,
                            d << ": " << m);
      }
    }
  }
  // The default is left out of the text, and a negative capacity is refused.
  RenderGraph plain(s, t, false);
  BOOST_CHECK(ir::print_graph(plain.g).find("capacity") == std::string::npos);
  ir::Attrs bad = camera_attrs(s);
  bad.set("capacity", int64_t(-1));
  BOOST_CHECK_THROW(op_multi("splat_render", plain.in, bad), InputError);
}

// A scene past 2^31 - 1 entries of the bound N x tiles (a million Gaussians at 1920x1080,
// 8160 tiles) takes the splat-stages rewrite when splat_render has a capacity, and is refused
// by it, saying why, when it has none. Compilation only: nothing of that size is allocated.
BOOST_AUTO_TEST_CASE(a_capacity_lets_a_million_gaussians_at_1080p_take_the_staged_route) {
  const int64_t n = 1'000'000;
  for (int64_t cap : {int64_t(50'000'000), int64_t(0)}) {
    ir::Graph g;
    const DType t = DType::F32;
    std::vector<Var> in{input(g, "means", t, {n, 3}),   input(g, "log_scales", t, {n, 3}),
                        input(g, "quats", t, {n, 4}),   input(g, "opacity_logits", t, {n}),
                        input(g, "sh", t, {n, 16, 3}),  input(g, "viewmat", t, {4, 4}),
                        input(g, "background", t, {3})};
    ir::Attrs a{{"width", int64_t(1920)}, {"height", int64_t(1080)}, {"fx", 1000.0}, {"fy", 1000.0},
                {"cx", 960.0},            {"cy", 540.0}};
    if (cap) a.set("capacity", cap);
    output(g, op_multi("splat_render", in, a));
    CompileOptions o;
    o.deny_native = {"splat_render"};
    o.policy = Policy::Strict;
    Device& dev = DeviceRegistry::get().at("cpu");
    if (cap) {
      const Program p = compile(g, dev, o);
      bool seen = false;
      for (const NodeReport& nr : p.report.nodes)
        if (nr.op == "splat_render") {
          seen = true;
          BOOST_CHECK_EQUAL(nr.rule, "splat-stages");
        }
      BOOST_CHECK(seen);
      continue;
    }
    // Without a capacity the rewrite does not apply (N x tiles = 8.16e9 entries): the node
    // takes another route, here the dense lowering, which is far too large to compile.
    try {
      const Program p = compile(g, dev, o);
      for (const NodeReport& nr : p.report.nodes)
        if (nr.op == "splat_render") BOOST_CHECK_NE(nr.rule, "splat-stages");
    } catch (const Error& e) {
      BOOST_CHECK_MESSAGE(std::string(e.what()).find("splat-stages") == std::string::npos, e.what());
    }
  }
}

}  // namespace rlx::test
