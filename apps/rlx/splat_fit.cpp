// rlx splat fit: Gaussians fitted to pictures taken by known cameras. One nn::Trainer step
// per view (in a shuffled order each epoch): splat_render, the 3DGS paper's loss
// 0.8·L1 + 0.2·(1 − SSIM), its gradient through splat_render_backward, and Adam on every
// parameter; with --densify, the paper's adaptive density control (solvers/splat/densify.hpp)
// every few iterations. docs/splat.md.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "nn/model.hpp"
#include "nn/trainer.hpp"
#include "passes/autodiff.hpp"
#include "png.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "solvers/splat/densify.hpp"
#include "solvers/splat/render.hpp"
#include "splat.hpp"

namespace rlx::cli {

namespace {

namespace fs = std::filesystem;

struct View {
  io::Camera camera;
  std::string file;
  Tensor image;  // f32 [H, W, 3] in [0, 1]
};

// The view of each camera: its "image" in dir, or, when no camera names one, the PNG files
// of dir in name order, one per camera.
std::vector<View> load_views(const std::string& dir, const std::string& cameras_path) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(dir + ": not a folder (--images DIR holds the pictures)");
  const std::vector<io::Camera> cams = io::read_cameras(cameras_path);
  std::vector<std::string> pngs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".png" && it->is_regular_file()) pngs.push_back(it->path().string());
  }
  std::sort(pngs.begin(), pngs.end());
  const bool named = std::all_of(cams.begin(), cams.end(), [](const io::Camera& c) { return !c.image.empty(); });
  if (!named && pngs.size() != cams.size())
    throw InputError(dir + ": " + std::to_string(pngs.size()) + " PNG files for the " + std::to_string(cams.size()) +
                     " cameras of " + cameras_path + " (give each camera an \"image\", or one PNG per camera)");
  std::vector<View> views;
  for (size_t i = 0; i < cams.size(); ++i) {
    const io::Camera& c = cams[i];
    const io::Camera& first = cams[0];
    // One step program serves every view: the attributes it compiles in must agree.
    if (c.width != first.width || c.height != first.height || c.fx != first.fx || c.fy != first.fy || c.cx != first.cx ||
        c.cy != first.cy)
      throw InputError(cameras_path + ": camera " + std::to_string(i) +
                       " differs from camera 0 in size or intrinsics (fit needs them all the same)");
    View v{c, named ? (fs::path(dir) / c.image).string() : pngs[i], {}};
    const RgbImage img = read_png(v.file, io::kMaxCameraPixels);
    if (img.width != c.width || img.height != c.height)
      throw InputError(v.file + ": " + std::to_string(img.width) + "x" + std::to_string(img.height) + " pixels, but camera " +
                       std::to_string(i) + " of " + cameras_path + " is " + std::to_string(c.width) + "x" +
                       std::to_string(c.height));
    v.image = Tensor::empty(DType::F32, {c.height, c.width, 3});
    for (size_t p = 0; p < img.rgb.size(); ++p) v.image.data<float>()[p] = float(img.rgb[p]) / 255.0f;
    views.push_back(std::move(v));
  }
  return views;
}

// A camera's centre, -R^T t.
std::array<double, 3> camera_centre(const io::Camera& cam) {
  const double* m = cam.world_to_camera.data();
  std::array<double, 3> c{};
  for (int k = 0; k < 3; ++k) c[size_t(k)] = -(m[k] * m[3] + m[4 + k] * m[7] + m[8 + k] * m[11]);
  return c;
}

// The point the cameras look at (least squares over their optical axes; 3 units in front of
// camera 0 when they are parallel) and the mean distance from it to the camera centres.
std::pair<std::array<double, 3>, double> scene_centre(const std::vector<View>& views) {
  double a[9] = {}, b[3] = {};
  std::vector<std::array<double, 3>> centres;
  for (const View& v : views) {
    const double* m = v.camera.world_to_camera.data();
    const std::array<double, 3> c = camera_centre(v.camera), z{m[8], m[9], m[10]};  // z: the third row of R
    centres.push_back(c);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const double p = (i == j ? 1.0 : 0.0) - z[size_t(i)] * z[size_t(j)];  // projects out the axis
        a[3 * i + j] += p;
        b[i] += p * c[size_t(j)];
      }
  }
  const double det = a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) + a[2] * (a[3] * a[7] - a[4] * a[6]);
  std::array<double, 3> centre{};
  if (std::abs(det) > 1e-6 * double(views.size() * views.size() * views.size())) {
    for (int k = 0; k < 3; ++k) {  // Cramer's rule
      double m[9];
      std::copy(a, a + 9, m);
      for (int i = 0; i < 3; ++i) m[3 * i + k] = b[i];
      centre[size_t(k)] = (m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) + m[2] * (m[3] * m[7] - m[4] * m[6])) / det;
    }
  } else {
    const double* m = views[0].camera.world_to_camera.data();
    for (int k = 0; k < 3; ++k) centre[size_t(k)] = centres[0][size_t(k)] + 3 * m[8 + k];
  }
  double distance = 0;
  for (const auto& c : centres)
    distance += std::sqrt(std::pow(c[0] - centre[0], 2) + std::pow(c[1] - centre[1], 2) + std::pow(c[2] - centre[2], 2));
  return {centre, distance / double(centres.size())};
}

// `count` grey, faint, round Gaussians (SH degree 0) uniformly in the ball of half the camera
// distance around the scene centre.
io::SplatScene random_scene(const std::vector<View>& views, int64_t count, uint64_t seed) {
  const auto [centre, distance] = scene_centre(views);
  const double radius = 0.5 * distance;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  io::SplatScene s{Tensor::empty(DType::F32, {count, 3}), Tensor::empty(DType::F32, {count, 3}),
                   Tensor::zeros(DType::F32, {count, 4}), Tensor::empty(DType::F32, {count}),
                   Tensor::empty(DType::F32, {count, 1, 3})};
  const float log_scale = float(std::log(radius / std::cbrt(double(count))));
  for (int64_t i = 0; i < count; ++i) {
    double p[3];
    do {
      for (double& x : p) x = u(rng);
    } while (p[0] * p[0] + p[1] * p[1] + p[2] * p[2] > 1);
    for (int k = 0; k < 3; ++k) {
      s.means.data<float>()[3 * i + k] = float(centre[size_t(k)] + radius * p[k]);
      s.log_scales.data<float>()[3 * i + k] = log_scale;
      s.sh.data<float>()[3 * i + k] = float(0.5 * u(rng));
    }
    s.quats.data<float>()[4 * i] = 1;
    s.opacity_logits.data<float>()[i] = float(std::log(0.1 / 0.9));
  }
  return s;
}

// The 3DGS SSIM: 11 x 11 Gaussian windows (σ = 1.5, zero padding) per channel, averaged.
Var ssim(const Var& x, const Var& y, int64_t h, int64_t w) {
  ir::Graph& g = *x.graph();
  Tensor window = Tensor::empty(DType::F32, {1, 1, 11, 11});
  double total = 0;
  for (int i = 0; i < 11; ++i)
    for (int j = 0; j < 11; ++j) total += std::exp(-((i - 5) * (i - 5) + (j - 5) * (j - 5)) / (2 * 1.5 * 1.5));
  for (int i = 0; i < 11; ++i)
    for (int j = 0; j < 11; ++j)
      window.data<float>()[11 * i + j] = float(std::exp(-((i - 5) * (i - 5) + (j - 5) * (j - 5)) / (2 * 1.5 * 1.5)) / total);
  const Var win = constant(g, window);
  Conv2dOptions same;
  same.padding = {5, 5};
  auto blur = [&](const Var& v) { return conv2d(reshape(permute(v, {2, 0, 1}), {3, 1, h, w}), win, std::nullopt, same); };
  const double c1 = 0.01 * 0.01, c2 = 0.03 * 0.03;
  const Var mx = blur(x), my = blur(y);
  const Var sxx = blur(x * x) - mx * mx, syy = blur(y * y) - my * my, sxy = blur(x * y) - mx * my;
  const Var map = ((2.0 * mx * my + c1) * (2.0 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2));
  return sum(map) / double(3 * h * w);
}

// Adam has one learning rate; each parameter is stored divided by its factor here, so that
// its step is lr·factor in its own units: about the 3DGS paper's rates at lr = 0.01
// (positions scaled by the scene's size).
struct Factors {
  double means, log_scales = 0.5, quats = 0.1, opacity = 5, sh = 1;
};

double psnr(double mse) { return mse > 0 ? 10 * std::log10(1 / mse) : INFINITY; }

}  // namespace

int splat_fit(const Args& a) {
  if (!a.pos.empty()) throw UsageError("splat fit takes no positional arguments (got '" + a.pos[0] + "')");
  const std::string images = a.get("images", ""), cameras = a.get("cameras", ""), out = a.get("out", "");
  if (images.empty()) throw UsageError("splat fit needs --images DIR");
  if (cameras.empty()) throw UsageError("splat fit needs --cameras CAMS.json");
  if (out.empty()) throw UsageError("splat fit needs -o OUT.ply");
  if (!a.has("iters")) throw UsageError("splat fit needs --iters N");
  const int64_t iters = a.integer("iters", 0, 1, 100'000'000);
  const int64_t count = a.integer("count", 1000, 1, 100'000'000);
  const double lr = a.number("lr", 0.01, 0, 1, /*open=*/true);
  const uint64_t seed = uint64_t(a.integer("seed", 0, 0, INT64_MAX));
  const int64_t report = a.integer("report-every", std::max<int64_t>(1, iters / 10), 1, INT64_MAX);
  const std::string snapshots = a.get("snapshots", "");
  const int64_t snapshot_every = a.integer("snapshot-every", report, 1, INT64_MAX);
  const std::vector<double> background = a.numbers("background", {0, 0, 0}, 0, 1);
  const std::string init = a.get("init", "random");
  if (init != "random" && a.has("count")) throw UsageError("--count sets the size of --init random only (" + init + " has its own)");
  { io::AtomicFile probe(out); }  // a path that cannot be written fails before the work
  if (!snapshots.empty()) {
    std::error_code ec;
    fs::create_directories(snapshots, ec);
    if (ec || !fs::is_directory(snapshots)) throw UsageError("--snapshots " + snapshots + ": cannot create the folder");
  }
  // Densification: off unless asked (docs/splat.md says why); the paper's schedule for 30,000
  // iterations (from 500, until 15,000, every 100, opacity reset every 3,000) scaled to --iters,
  // every at least 10 iterations so that each decision averages over several views.
  struct {
    bool on;
    int64_t from, until, every, reset_every;
    double threshold;
  } densify{};
  densify.on = a.flag("densify");
  for (const char* o : {"densify-from", "densify-until", "densify-every", "grad-threshold", "opacity-reset-every"})
    if (a.has(o) && !densify.on) throw UsageError(std::string("--") + o + " needs --densify");
  densify.every = a.integer("densify-every", std::max<int64_t>(10, (iters + 150) / 300), 1, INT64_MAX);
  densify.from = a.integer("densify-from", (iters + 30) / 60, 0, INT64_MAX);
  densify.until = a.integer("densify-until", iters / 2, 0, INT64_MAX);
  densify.reset_every = a.integer("opacity-reset-every", 30 * densify.every, 0, INT64_MAX);
  densify.threshold = a.number("grad-threshold", 0.0002, 0, HUGE_VAL);
  Device& d = DeviceRegistry::get().runnable_at(a.get("device", "cpu"));

  const std::vector<View> views = load_views(images, cameras);
  const io::Camera& cam = views[0].camera;
  const io::SplatScene start = init == "random" ? random_scene(views, count, seed) : io::read_splat_ply(init);
  const int64_t n = start.size(), k = start.sh.shape()[1];
  if (n == 0) throw InputError(init + ": a scene without Gaussians cannot be fitted");
  Factors f;
  f.means = 0.1 * scene_centre(views).second;

  // The step for n Gaussians: parameters (stored divided by their factors), then view,
  // target, background. While densifying it renders through the stages (solvers/splat), whose
  // 2D means are values of the graph, and accumulates each Gaussian's view-space gradient
  // norm, the views that saw it and its largest screen radius in three buffers.
  const int64_t tiles = ((cam.width + 15) / 16) * ((cam.height + 15) / 16);
  struct Step {
    ir::Graph g;
    std::unique_ptr<nn::Model> m;
    std::unique_ptr<nn::Trainer> trainer;
    ir::Graph eval_graph;
    std::unique_ptr<Program> eval;
    int64_t n = 0, capacity = 0;
    bool staged = false;
  };
  auto build = [&](int64_t gaussians, bool staged, int64_t capacity) {
    auto st = std::make_unique<Step>();
    st->n = gaussians, st->staged = staged, st->capacity = capacity;
    st->m = std::make_unique<nn::Model>(st->g);
    nn::Model& m = *st->m;
    const Var means = m.param("means", {gaussians, 3}, nn::Init::zeros()) * f.means;
    const Var log_scales = m.param("log_scales", {gaussians, 3}, nn::Init::zeros()) * f.log_scales;
    const Var quats = m.param("quats", {gaussians, 4}, nn::Init::zeros()) * f.quats;
    const Var opacity = m.param("opacity_logits", {gaussians}, nn::Init::zeros()) * f.opacity;
    const Var sh = m.param("sh", {gaussians, k, 3}, nn::Init::zeros()) * f.sh;
    const Var view = m.input("viewmat", DType::F32, {4, 4});
    const Var target = m.input("target", DType::F32, {cam.height, cam.width, 3});
    const Var bg = m.input("background", DType::F32, {3});
    Var image;
    splat::StagedRender r;
    if (staged) {
      r = splat::render_staged(means, log_scales, quats, opacity, sh, view, bg,
                               {cam.width, cam.height, cam.fx, cam.fy, cam.cx, cam.cy}, {.capacity = capacity});
      image = r.image;
    } else {
      image = render_outputs({means, log_scales, quats, opacity, sh, view, bg}, cam)[0];
    }
    const double pixels = double(cam.height * cam.width * 3);
    const Var loss = 0.8 * (sum(abs(image - target)) / pixels) + 0.2 * (1.0 - ssim(image, target, cam.height, cam.width));
    if (staged) {
      // The gradient of the 2D means in normalised device coordinates (pixels are
      // (ndc + 1) width / 2 - 1/2), the units of the paper's threshold.
      Tensor ndc = Tensor::empty(DType::F32, {1, 2});
      ndc.data<float>()[0] = float(0.5 * double(cam.width)), ndc.data<float>()[1] = float(0.5 * double(cam.height));
      const Var gxy = grad(loss, {r.stages.xy})[0] * constant(st->g, ndc);
      const Var seen = cast(gt(r.stages.radii, scalar(st->g, 0.0, DType::I64)), DType::F32);
      const Var grad_sum = m.buffer("grad_sum", {gaussians}, nn::Init::zeros());
      const Var views_seen = m.buffer("views_seen", {gaussians}, nn::Init::zeros());
      const Var max_radius = m.buffer("max_radius", {gaussians}, nn::Init::zeros());
      m.update_buffer(grad_sum, grad_sum + sqrt(sum(gxy * gxy, {1})) * seen);
      m.update_buffer(views_seen, views_seen + seen);
      m.update_buffer(max_radius, maximum(max_radius, cast(r.stages.radii, DType::F32)));
    }
    st->trainer = std::make_unique<nn::Trainer>(m, loss, nn::Adam{.lr = lr}, d);
    render_graph(st->eval_graph, gaussians, k, cam);
    st->eval = std::make_unique<Program>(compile(st->eval_graph, d));
    return st;
  };

  auto scaled = [](const Tensor& t, double by) {
    Tensor r = Tensor::empty(DType::F32, t.shape());
    const Tensor c = t.contiguous();
    for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = float(double(c.data<float>()[i]) * by);
    return r;
  };
  auto stored = [&](const io::SplatScene& s) {
    return std::vector<Tensor>{scaled(s.means, 1 / f.means), scaled(s.log_scales, 1 / f.log_scales),
                               scaled(s.quats, 1 / f.quats), scaled(s.opacity_logits, 1 / f.opacity),
                               scaled(s.sh, 1 / f.sh)};
  };

  // Intersections of the scene in its busiest view (the staged list's capacity is twice that,
  // at least 4096 more, at most N x tiles: IR types are static, so the list is sized here).
  auto busiest = [&](const io::SplatScene& s) {
    ir::Graph g;
    std::vector<Var> in = {input(g, "means", DType::F32, s.means.shape()), input(g, "log_scales", DType::F32, s.log_scales.shape()),
                           input(g, "quats", DType::F32, s.quats.shape()),
                           input(g, "opacity_logits", DType::F32, s.opacity_logits.shape()),
                           input(g, "viewmat", DType::F32, {4, 4})};
    const std::vector<Var> p = op_multi("splat_project", in, camera_attrs(cam));
    output(g, {sum(op_multi("splat_tile_counts", {p[0], p[4]}, {{"width", cam.width}, {"height", cam.height}})[0])});
    const Program prog = compile(g, d);
    int64_t most = 0;
    for (const View& v : views) {
      Tensor c = run(prog, d, {s.means, s.log_scales, s.quats, s.opacity_logits, view_matrix(v.camera)})[0];
      if (!c.is_host()) c = c.to(host_allocator());
      most = std::max(most, c.data<int64_t>()[0]);
    }
    return most;
  };
  auto capacity_for = [&](const io::SplatScene& s, int64_t factor) {
    const int64_t most = busiest(s);
    const int64_t bound = s.size() > INT64_MAX / tiles ? INT64_MAX : std::max<int64_t>(1, s.size() * tiles);
    return std::min(bound, std::max(factor * most, most + 4096));
  };

  std::unique_ptr<Step> step = build(n, densify.on, densify.on ? capacity_for(start, 2) : 0);
  step->trainer->set_parameters(stored(start));
  auto current = [&] {
    const std::vector<Tensor> p = step->trainer->parameters();
    return io::SplatScene{scaled(p[0], f.means), scaled(p[1], f.log_scales), scaled(p[2], f.quats),
                          scaled(p[3], f.opacity), scaled(p[4], f.sh)};
  };
  // A new step program for `s` (stored values `params`, optimiser state `state`), the step
  // count carried over so that Adam's bias correction continues.
  auto rebuild = [&](const io::SplatScene& s, const std::vector<Tensor>& params, const std::vector<Tensor>& state,
                     bool staged, int64_t factor) {
    const int64_t steps = step->trainer->steps_done();
    step.reset();
    step = build(s.size(), staged, staged ? capacity_for(s, factor) : 0);
    step->trainer->set_state(state, steps);
    step->trainer->set_parameters(params);
  };

  // Evaluation: the render alone, for PSNR over every view and the snapshots.
  Tensor bg_t = Tensor::empty(DType::F32, {3});
  for (int i = 0; i < 3; ++i) bg_t.data<float>()[i] = float(background[size_t(i)]);
  auto render_view = [&](const io::SplatScene& s, const View& v) {
    Tensor img = run(*step->eval, d, {s.means, s.log_scales, s.quats, s.opacity_logits, s.sh, view_matrix(v.camera), bg_t})[0];
    return img.is_host() ? img : img.to(host_allocator());
  };
  auto mean_psnr = [&](const io::SplatScene& s) {
    double total = 0;
    for (const View& v : views) {
      const Tensor img = render_view(s, v);
      double se = 0;
      for (int64_t i = 0; i < img.numel(); ++i) {
        const double x = std::clamp(double(img.data<float>()[i]), 0.0, 1.0) - double(v.image.data<float>()[i]);
        se += std::isnan(x) ? 1 : x * x;
      }
      total += psnr(se / double(img.numel()));
    }
    return total / double(views.size());
  };

  // Densification (docs/splat.md, "Densification"): the scene's size is 1.1 x the largest
  // distance of a camera centre from their mean (the paper's), or the camera distance to the
  // scene centre for a single camera.
  double extent = 0;
  {
    double mean[3] = {};
    std::vector<std::array<double, 3>> centres;
    for (const View& v : views) {
      centres.push_back(camera_centre(v.camera));
      for (int q = 0; q < 3; ++q) mean[q] += centres.back()[size_t(q)] / double(views.size());
    }
    for (const auto& c : centres)
      extent = std::max(extent, 1.1 * std::sqrt(std::pow(c[0] - mean[0], 2) + std::pow(c[1] - mean[1], 2) + std::pow(c[2] - mean[2], 2)));
    if (!(extent > 0)) extent = scene_centre(views).second;
  }
  std::mt19937_64 split_rng(seed + 2);
  const float reset_logit = float(std::log(0.01 / 0.99));

  const auto t0 = std::chrono::steady_clock::now();
  const double psnr_start = mean_psnr(start);
  std::printf("fitting %lld Gaussians (SH degree %d) to %zu views of %lldx%lld on %s\n", (long long)n, start.sh_degree(),
              views.size(), (long long)cam.width, (long long)cam.height, d.name().c_str());
  if (densify.on)
    std::printf("densifying from iteration %lld until %lld every %lld (gradient threshold %g, opacity reset every %lld)\n",
                (long long)densify.from, (long long)densify.until, (long long)densify.every, densify.threshold,
                (long long)densify.reset_every);
  std::printf("iter %lld/%lld  PSNR %.2f dB\n", 0LL, (long long)iters, psnr_start);
  std::fflush(stdout);
  std::vector<size_t> order(views.size());
  std::mt19937_64 shuffle(seed + 1);
  double last_psnr = psnr_start;
  for (int64_t it = 1; it <= iters; ++it) {
    const size_t slot = size_t((it - 1) % int64_t(views.size()));
    if (slot == 0) {
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), shuffle);
    }
    const View& v = views[order[slot]];
    try {
      step->trainer->step({view_matrix(v.camera), v.image, bg_t});
    } catch (const InputError& e) {
      // The staged list is sized from the scene at the last rebuild; a scene that has since
      // spread over more tiles gets a list twice its new count and the step again.
      if (!step->staged || std::string(e.what()).find("intersections") == std::string::npos) throw;
      const std::vector<Tensor> params = step->trainer->parameters(), state = step->trainer->state();
      rebuild(current(), params, state, true, 4);
      step->trainer->step({view_matrix(v.camera), v.image, bg_t});
    }
    const bool reporting = it % report == 0 || it == iters;
    const bool snapshot = !snapshots.empty() && (it % snapshot_every == 0 || it == iters);
    // The step's loss, before a rebuild below replaces the trainer.
    const double l = reporting ? step->trainer->loss() : 0;
    if (densify.on && it < densify.until) {
      if (it > densify.from && it % densify.every == 0) {
        const std::vector<Tensor> state = step->trainer->state(), stats = step->trainer->buffers();
        splat::DensifyOptions o;
        o.grad_threshold = densify.threshold;
        o.extent = extent;
        if (densify.reset_every > 0 && it > densify.reset_every) o.max_screen_radius = 20, o.max_world_scale = 0.1;
        const splat::Densified dn = splat::densify(current(), stats[0], stats[1], stats[2], o, split_rng);
        if (dn.stats.after == 0)
          throw InputError("splat fit: densification at iteration " + std::to_string(it) + " pruned every Gaussian");
        std::vector<Tensor> carried;
        for (const Tensor& t : state) carried.push_back(splat::take_rows(t, dn.from, dn.fresh));
        rebuild(dn.scene, stored(dn.scene), carried, true, 2);
        std::printf("iter %lld/%lld  densified: %lld -> %lld Gaussians (%lld cloned, %lld split, %lld pruned)\n",
                    (long long)it, (long long)iters, (long long)dn.stats.before, (long long)dn.stats.after,
                    (long long)dn.stats.cloned, (long long)dn.stats.split, (long long)dn.stats.pruned);
      }
      if (densify.reset_every > 0 && it % densify.reset_every == 0) {
        // Opacities down to at most 0.01 (Adam's state of the opacities restarts), so that
        // Gaussians the views do not need fade below the pruning threshold.
        std::vector<Tensor> params = step->trainer->parameters(), state = step->trainer->state();
        for (int64_t i = 0; i < params[3].numel(); ++i)
          params[3].data<float>()[i] = std::min(params[3].data<float>()[i], float(reset_logit / f.opacity));
        for (size_t slot = 0; slot < state.size() / params.size(); ++slot) {
          Tensor& s = state[3 * (state.size() / params.size()) + slot];
          std::fill(s.data<float>(), s.data<float>() + s.numel(), 0.0f);
        }
        step->trainer->set_state(state, step->trainer->steps_done());
        step->trainer->set_parameters(params);
        std::printf("iter %lld/%lld  opacities reset to at most 0.01\n", (long long)it, (long long)iters);
      }
    } else if (step->staged) {
      // Past densification: the fused kernels again.
      rebuild(current(), step->trainer->parameters(), step->trainer->state(), false, 2);
    }
    if (!reporting && !snapshot) continue;
    const io::SplatScene s = current();
    if (reporting) {
      if (!std::isfinite(l)) throw DeviceError("splat fit: the loss is " + std::to_string(l) + " at iteration " + std::to_string(it));
      last_psnr = mean_psnr(s);
      std::printf("iter %lld/%lld  loss %.5f  PSNR %.2f dB  (%lld Gaussians)\n", (long long)it, (long long)iters, l,
                  last_psnr, (long long)s.size());
      std::fflush(stdout);
    }
    if (snapshot) {
      char name[32];
      std::snprintf(name, sizeof name, "iter_%06lld.png", (long long)it);
      write_png((fs::path(snapshots) / name).string(), cam.width, cam.height, to_rgb8(render_view(s, views[0])));
    }
  }
  io::write_splat_ply(out, current());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fitted in %.1f s: PSNR %.2f -> %.2f dB; wrote %s\n", seconds, psnr_start, last_psnr, out.c_str());
  return kOk;
}

}  // namespace rlx::cli
