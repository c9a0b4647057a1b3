// What the splat test files share: scenes as tensors, graphs of splat_render, running on a
// device, comparing results. The oracle (oracle.hpp) is the independent renderer.
#pragma once
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <random>

#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "passes/autodiff.hpp"
#include "runtime/device.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#include "tests/splat/oracle.hpp"

namespace rlx::test {

using Scene = splat_oracle::Scene;
using splat_oracle::random_scene;

inline Tensor tensor(DType t, Shape shape, const std::vector<double>& v) {
  Tensor r = Tensor::empty(t, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F64) r.data<double>()[i] = v[i];
    else r.data<float>()[i] = float(v[i]);
  }
  return r;
}
inline std::vector<double> values(const Tensor& x) {
  Tensor c = x.contiguous();
  std::vector<double> r(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < r.size(); ++i)
    r[i] = c.dtype() == DType::F64 ? c.data<double>()[i] : double(c.data<float>()[i]);
  return r;
}

inline std::vector<Tensor> scene_inputs(const Scene& s, DType t) {
  return {tensor(t, {s.n, 3}, s.means),      tensor(t, {s.n, 3}, s.log_scales),
          tensor(t, {s.n, 4}, s.quats),      tensor(t, {s.n}, s.opacity_logits),
          tensor(t, {s.n, s.k, 3}, s.sh),    tensor(t, {4, 4}, {s.view.begin(), s.view.end()}),
          tensor(t, {3}, {s.background.begin(), s.background.end()})};
}
inline ir::Attrs camera_attrs(const Scene& s) {
  return {{"width", s.width}, {"height", s.height}, {"fx", s.fx}, {"fy", s.fy}, {"cx", s.cx}, {"cy", s.cy}};
}

// A graph of splat_render over the scene's inputs (plus, with `with_grad`, three cotangent
// inputs and the VJP with respect to means, log_scales, quats, opacity_logits, sh, background).
struct RenderGraph {
  ir::Graph g;
  std::vector<Var> in;
  RenderGraph(const Scene& s, DType t, bool with_grad, bool through_lowering = false) {
    const char* names[] = {"means", "log_scales", "quats", "opacity_logits", "sh", "viewmat", "background"};
    const std::vector<Tensor> x = scene_inputs(s, t);
    for (size_t i = 0; i < 7; ++i) in.push_back(input(g, names[i], t, x[i].shape()));
    // through_lowering: the lowering body inlined, so grad differentiates the L2 ops.
    std::vector<Var> y = through_lowering ? ir::OpRegistry::get().at("splat_render").lower(in, camera_attrs(s))
                                          : op_multi("splat_render", in, camera_attrs(s));
    output(g, y);
    if (!with_grad) return;
    std::vector<Var> cts;
    for (const Var& v : y) cts.push_back(input(g, "cotangent" + std::to_string(cts.size()), t, v.shape()));
    output(g, vjp(y, cts, {in[0], in[1], in[2], in[3], in[4], in[6]}));
  }
};

inline std::vector<Tensor> run_on(const std::string& device, const ir::Graph& g, const std::vector<Tensor>& inputs,
                           Policy policy = Policy::PreferNative, const std::vector<std::string>& deny = {}) {
  Device& d = DeviceRegistry::get().at(device);
  CompileOptions o;
  o.policy = policy;
  o.deny_native = deny;
  Program p = compile(g, d, o);
  return run(p, d, inputs);
}

// How many values of all results differ from b by more than tol, and the largest |a - b|
// (infinite where one is NaN).
inline std::pair<int64_t, double> beyond(const std::vector<Tensor>& a, const std::vector<std::vector<double>>& b,
                                         double tol) {
  int64_t count = 0;
  double worst = 0;
  for (size_t r = 0; r < b.size(); ++r) {
    const std::vector<double> av = values(a[r]);
    BOOST_REQUIRE_EQUAL(av.size(), b[r].size());
    for (size_t i = 0; i < av.size(); ++i) {
      const double d = std::abs(av[i] - b[r][i]);
      count += !(d <= tol);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  return {count, worst};
}
// The largest |a - b| over all elements of the first b.size() results.
inline double max_diff(const std::vector<Tensor>& a, const std::vector<std::vector<double>>& b) {
  return beyond(a, b, INFINITY).second;
}

// The devices that run here (reference, cpu, and cuda where a GPU is present).
inline std::vector<std::string> devices() {
  std::vector<std::string> r;
  for (Device* d : DeviceRegistry::get().runnable()) r.push_back(d->name());
  return r;
}
// Every device that runs here, native and through the common-IR lowering.
inline std::vector<std::pair<std::string, Policy>> routes() {
  std::vector<std::pair<std::string, Policy>> r;
  for (const std::string& d : devices()) r.push_back({d, Policy::PreferNative}), r.push_back({d, Policy::ForceCommonIR});
  return r;
}

// Random cotangents of the three outputs of an h x w render, appended to in.
inline void add_cotangents(std::mt19937_64& rng, std::vector<Tensor>& in, DType t, int64_t h, int64_t w) {
  std::normal_distribution<double> normal;
  for (const Shape& sh : {Shape{h, w, 3}, Shape{h, w}, Shape{h, w}}) {
    std::vector<double> u(static_cast<size_t>(numel(sh)));
    for (double& e : u) e = normal(rng);
    in.push_back(tensor(t, sh, u));
  }
}

// v[g*width .. g*width + width) = x.
inline void set_row(std::vector<double>& v, int64_t g, int width, const std::vector<double>& x) {
  for (int i = 0; i < width; ++i) v[size_t(g * width + i)] = x[size_t(i)];
}
// Gaussian g's mean at camera coordinates (x, y, z) (through the inverse of the scene's view).
inline void place_in_camera(Scene& s, int64_t g, double x, double y, double z) {
  const double p[3] = {x - s.view[3], y - s.view[7], z - s.view[11]};
  for (int i = 0; i < 3; ++i)
    s.means[size_t(3 * g + i)] = s.view[size_t(i)] * p[0] + s.view[size_t(4 + i)] * p[1] + s.view[size_t(8 + i)] * p[2];
}
// A random scene of n >= 12 Gaussians (SH degree 1, 20 x 20) whose first 12 are degenerate:
// zero, tiny, huge and infinite scales, a zero-norm quaternion, NaN mean and opacity, an
// infinite SH coefficient, on the camera plane, behind it, off-screen, an opacity logit of 1e30.
inline Scene degenerate_scene(std::mt19937_64& rng, int64_t n) {
  const double inf = INFINITY, nan = NAN;
  Scene s = random_scene(rng, n, 4, 20, 20);
  set_row(s.log_scales, 0, 3, {-inf, -inf, -inf});  // zero scale
  set_row(s.log_scales, 1, 3, {-60, -60, -60});     // tiny
  set_row(s.log_scales, 2, 3, {80, 80, 80});        // huge (overflows f32)
  set_row(s.log_scales, 3, 3, {inf, 0, 0});
  set_row(s.quats, 4, 4, {0, 0, 0, 0});  // zero-norm quaternion
  set_row(s.means, 5, 3, {nan, 0, 0});
  set_row(s.opacity_logits, 6, 1, {nan});
  s.sh[size_t(7 * 4 * 3)] = inf;
  place_in_camera(s, 8, 0.1, 0.1, 0.0);     // on the camera plane
  place_in_camera(s, 9, 0.3, -0.2, -3.0);   // behind it
  place_in_camera(s, 10, 40.0, -30.0, 2.0);  // off-screen
  set_row(s.opacity_logits, 11, 1, {1e30});
  return s;
}

}  // namespace rlx::test
