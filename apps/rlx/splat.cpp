// rlx splat render: a Gaussian scene (PLY) seen by a camera (JSON) rendered with the
// splat_render op on a device, written as PNG (and depth/alpha as .npy); the sub-command
// dispatch of `rlx splat`. docs/splat.md.
#include "splat.hpp"

#include <chrono>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "args.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/camera_json.hpp"
#include "io/npy.hpp"
#include "io/ply.hpp"
#include "ir/frontend.hpp"
#include "ir/ops/splat_math.hpp"
#include "png.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"

namespace rlx::cli {

namespace {

const char* kSplatUsage =
    "usage: rlx splat render SCENE.ply --camera CAM.json [--view K] [--device D] [--background r,g,b]\n"
    "                        -o OUT.png [--depth DEPTH.npy] [--alpha ALPHA.npy]\n"
    "       rlx splat fit --images DIR --cameras CAMS.json [--init random|POINTS.ply] [--count N] --iters N\n"
    "                     [--lr L] [--device D] [--background r,g,b] [--seed S] [--report-every K]\n"
    "                     [--snapshots DIR] [--snapshot-every K] [--densify [--densify-from I] [--densify-until I]\n"
    "                     [--densify-every K] [--grad-threshold G] [--opacity-reset-every K]] -o OUT.ply\n";

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}


// Gaussians that survive the projection's culling and touch the image: the same test the
// kernels apply (ir/ops/splat_math.hpp), in double precision.
int64_t count_visible(const io::SplatScene& s, const io::Camera& c) {
  const splat::Camera cam = splat::make_camera(c.fx, c.fy, c.cx, c.cy, c.width, c.height, c.world_to_camera.data());
  int64_t visible = 0;
  for (int64_t i = 0; i < s.size(); ++i) {
    double m[3], ls[3], q[4];
    for (int k = 0; k < 3; ++k) m[k] = s.means.data<float>()[3 * i + k], ls[k] = s.log_scales.data<float>()[3 * i + k];
    for (int k = 0; k < 4; ++k) q[k] = s.quats.data<float>()[4 * i + k];
    const double o = s.opacity_logits.data<float>()[i];
    splat::Projected<double> p;
    double radius = 0;
    if (splat::project(m, ls, q, o, cam, p, radius) && !splat::tile_rect(p.u, p.v, radius, cam).empty()) ++visible;
  }
  return visible;
}


// Fails now, before any rendering, when `path` cannot be written (no such folder, a folder).
void check_output(const std::string& path) { io::AtomicFile probe(path); }

int render(const Args& a) {
  if (a.pos.size() != 1) throw UsageError("splat render takes one SCENE.ply");
  const std::string scene_path = a.pos[0], camera_path = a.get("camera", ""), out = a.get("out", "");
  if (camera_path.empty()) throw UsageError("splat render needs --camera CAM.json");
  if (out.empty()) throw UsageError("splat render needs -o OUT.png");
  if (!png_available())
    throw UsageError("this rlx was built without libpng, so splat render cannot write " + out +
                     " (install libpng-dev and rebuild)");
  const std::vector<double> background = a.numbers("background", {0, 0, 0}, 0, 1);
  const int64_t view = a.integer("view", 0, 0, INT64_MAX);
  const std::string depth_path = a.get("depth", ""), alpha_path = a.get("alpha", "");
  for (const std::string& p : {out, depth_path, alpha_path})
    if (!p.empty()) check_output(p);
  if ((!depth_path.empty() && (depth_path == out || depth_path == alpha_path)) || (!alpha_path.empty() && alpha_path == out))
    throw UsageError("-o, --depth and --alpha must name different files");
  Device& d = DeviceRegistry::get().runnable_at(a.get("device", "cpu"));

  const io::SplatScene scene = io::read_splat_ply(scene_path);
  const std::vector<io::Camera> cams = io::read_cameras(camera_path);
  if (view >= int64_t(cams.size()))
    throw UsageError("--view " + std::to_string(view) + ": " + camera_path + " holds " + std::to_string(cams.size()) +
                     " camera" + (cams.size() == 1 ? "" : "s") + " (views 0.." + std::to_string(cams.size() - 1) + ")");
  const io::Camera& cam = cams[size_t(view)];

  ir::Graph g;
  const int64_t n = scene.size();
  render_graph(g, n, scene.sh.shape()[1], cam);
  Tensor bg = Tensor::empty(DType::F32, {3});
  for (int i = 0; i < 3; ++i) bg.data<float>()[i] = float(background[size_t(i)]);

  auto t0 = std::chrono::steady_clock::now();
  const Program p = compile(g, d);
  const double compile_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> results =
      run(p, d, {scene.means, scene.log_scales, scene.quats, scene.opacity_logits, scene.sh, view_matrix(cam), bg});
  const double run_ms = ms_since(t0);
  for (Tensor& r : results)
    if (!r.is_host()) r = r.to(host_allocator());

  write_png(out, cam.width, cam.height, to_rgb8(results[0]));
  if (!alpha_path.empty()) io::write_npy(alpha_path, results[1]);
  if (!depth_path.empty()) io::write_npy(depth_path, results[2]);

  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << scene_path << ": " << n << " Gaussians (SH degree " << scene.sh_degree() << "), "
    << count_visible(scene, cam) << " visible from view " << view << " of " << camera_path << "; " << cam.width << "x"
    << cam.height << " on " << d.name() << " in " << run_ms << " ms (compile " << compile_ms << " ms) -> " << out;
  if (!depth_path.empty()) s << ", depth " << depth_path;
  if (!alpha_path.empty()) s << ", alpha " << alpha_path;
  std::cout << s.str() << "\n";
  return kOk;
}

}  // namespace

ir::Attrs camera_attrs(const io::Camera& c) {
  return {{"width", c.width}, {"height", c.height}, {"fx", c.fx}, {"fy", c.fy}, {"cx", c.cx}, {"cy", c.cy}};
}

Tensor view_matrix(const io::Camera& c) {
  Tensor v = Tensor::empty(DType::F32, {4, 4});
  for (int i = 0; i < 16; ++i) v.data<float>()[i] = float(c.world_to_camera[size_t(i)]);
  return v;
}

std::vector<Var> render_outputs(const std::vector<Var>& inputs, const io::Camera& c) {
  return op_multi("splat_render", inputs, camera_attrs(c));
}

void render_graph(ir::Graph& g, int64_t n, int64_t k, const io::Camera& c) {
  const std::vector<Var> in = {input(g, "means", DType::F32, {n, 3}), input(g, "log_scales", DType::F32, {n, 3}),
                               input(g, "quats", DType::F32, {n, 4}), input(g, "opacity_logits", DType::F32, {n}),
                               input(g, "sh", DType::F32, {n, k, 3}), input(g, "viewmat", DType::F32, {4, 4}),
                               input(g, "background", DType::F32, {3})};
  output(g, render_outputs(in, c));
}

std::vector<uint8_t> to_rgb8(const Tensor& image) {
  const Tensor c = image.contiguous();
  std::vector<uint8_t> r(size_t(c.numel()));
  for (size_t i = 0; i < r.size(); ++i) {
    const float x = c.data<float>()[i];
    r[i] = uint8_t(std::lround(255.0f * (x > 0 ? (x < 1 ? x : 1.0f) : 0.0f)));  // NaN -> 0
  }
  return r;
}

int cmd_splat(int argc, char** argv) {
  const std::string sub = argc > 2 ? argv[2] : "";
  if (sub == "render")
    return render(Args(argc, argv, 3, {"camera", "view", "device", "background", "out", "depth", "alpha"}, {}));
  if (sub == "fit")
    return splat_fit(Args(argc, argv, 3,
                          {"images", "cameras", "init", "count", "iters", "lr", "device", "background", "seed", "report-every",
                           "snapshots", "snapshot-every", "out", "densify-from", "densify-until", "densify-every",
                           "grad-threshold", "opacity-reset-every"},
                          {"densify"}));
  if (sub == "--help" || sub == "-h") {
    std::cout << kSplatUsage;
    return kOk;
  }
  throw UsageError(sub.empty() ? std::string("splat needs a sub-command: render or fit") : "unknown splat sub-command '" + sub + "' (render, fit)");
}

}  // namespace rlx::cli
