// rlx-bench splat: Gaussian splatting (docs/splat.md) on a synthetic scene, f32: the median
// time of splat_render (forward) and of the forward+backward program (the render and its VJP
// with respect to every parameter, one compiled program) over --reps runs, on device-resident
// inputs. The scene (make_scene): N Gaussians spread over the image of an identity-view
// pinhole camera (fx = fy = 0.55 width), depths 2..10, screen sizes 0.5..3 px, SH degree 3,
// opacity logits -2..3; the same for a given N and image size in every run.
// --dump DIR writes the scene as raw little-endian f32 files plus camera.txt, and the device's
// image, for apps/bench/peers_splat.py to time gsplat on the same Gaussians and compare. --check compares the
// device's forward image with the cpu device's (max |difference| and the share of pixels
// beyond 1e-3: f32 threshold tests decided differently move single pixels). --staged 1 times
// the stage ops instead (the splat-stages rewrite, its list sized by N x tiles).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "apps/bench/common.hpp"
#include "core/error.hpp"
#include "ir/frontend.hpp"
#include "passes/autodiff.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#ifdef RLX_HAVE_CUDA
#include <cuda_runtime.h>
#endif

using namespace rlx;
using namespace rlx::bench;

namespace {

struct Options {
  std::vector<int64_t> gaussians = {100000, 1000000};
  std::string size = "1920x1080";
  int reps = 20;
  std::string device = "cuda";
  std::string dump;
  bool check = false;
  bool staged = false;
};

struct Scene {
  int64_t n = 0, k = 16, width = 0, height = 0;
  double fx = 0, fy = 0, cx = 0, cy = 0;
  std::vector<float> means, log_scales, quats, opacity_logits, sh, view, background;
};

Scene make_scene(int64_t n, int64_t width, int64_t height, uint64_t seed) {
  Scene s;
  s.n = n, s.width = width, s.height = height;
  s.fx = s.fy = 0.55 * double(width);  // ~ 85 degrees across
  s.cx = 0.5 * double(width), s.cy = 0.5 * double(height);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0, 1);
  std::normal_distribution<double> normal;
  auto uni = [&](double a, double b) { return a + (b - a) * u01(rng); };
  for (int64_t i = 0; i < n; ++i) {
    const double z = uni(2, 10), px = uni(-20, double(width) + 20), py = uni(-20, double(height) + 20);
    s.means.insert(s.means.end(), {float((px - s.cx) * z / s.fx), float((py - s.cy) * z / s.fy), float(z)});
    const double size = uni(0.5, 3) * z / s.fx;
    for (int k = 0; k < 3; ++k) s.log_scales.push_back(float(std::log(size) + uni(-0.3, 0.3)));
    for (int k = 0; k < 4; ++k) s.quats.push_back(float(normal(rng)));
    s.opacity_logits.push_back(float(uni(-2, 3)));
    for (int64_t e = 0; e < 3 * s.k; ++e) s.sh.push_back(float(e < 3 ? uni(-1, 1.5) : uni(-0.3, 0.3)));
  }
  s.view = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  s.background = {0.2f, 0.3f, 0.4f};
  return s;
}

Tensor host_tensor(Shape shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty(DType::F32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

std::vector<Tensor> inputs_of(const Scene& s) {
  return {host_tensor({s.n, 3}, s.means),   host_tensor({s.n, 3}, s.log_scales),
          host_tensor({s.n, 4}, s.quats),   host_tensor({s.n}, s.opacity_logits),
          host_tensor({s.n, s.k, 3}, s.sh), host_tensor({4, 4}, s.view),
          host_tensor({3}, s.background)};
}

void write_f32(const std::string& path, const float* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(p), std::streamsize(n * sizeof(float)));
}

void dump(const Scene& s, const std::string& dir) {
  std::filesystem::create_directories(dir);
  auto write = [&](const char* name, const std::vector<float>& v) { write_f32(dir + "/" + name, v.data(), v.size()); };
  write("means.f32", s.means), write("log_scales.f32", s.log_scales), write("quats.f32", s.quats);
  write("opacity_logits.f32", s.opacity_logits), write("sh.f32", s.sh), write("background.f32", s.background);
  std::ofstream c(dir + "/camera.txt");
  c.precision(17);
  c << s.n << " " << s.k << " " << s.width << " " << s.height << " " << s.fx << " " << s.fy << " " << s.cx << " "
    << s.cy << "\n";
}

// Device memory in use (the caching allocator's blocks included), MiB; -1 where not known.
double device_used_mib(const Device& d) {
#ifdef RLX_HAVE_CUDA
  if (d.name() == "cuda") {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) return double(total_b - free_b) / (1 << 20);
  }
#endif
  (void)d;
  return -1;
}

void bench_scene(Device& dev, int64_t n, int64_t width, int64_t height, const Options& o) {
  const Scene s = make_scene(n, width, height, 17);
  const std::string dir = o.dump.empty() ? "" : o.dump + "/n" + std::to_string(n);
  if (!dir.empty()) dump(s, dir);
  const ir::Attrs cam{{"width", width}, {"height", height}, {"fx", s.fx}, {"fy", s.fy}, {"cx", s.cx}, {"cy", s.cy}};
  ir::Graph g;
  const char* names[] = {"means", "log_scales", "quats", "opacity_logits", "sh", "viewmat", "background"};
  const std::vector<Tensor> host_in = inputs_of(s);
  std::vector<Var> in;
  for (size_t i = 0; i < 7; ++i) in.push_back(input(g, names[i], DType::F32, host_in[i].shape()));
  const std::vector<Var> y = op_multi("splat_render", in, cam);
  ir::Graph fwd = g;
  std::vector<Var> fy;
  for (const Var& v : y) fy.push_back(Var(&fwd, v.value()));
  output(fwd, fy);
  std::vector<Var> cts;
  for (const Var& v : y) cts.push_back(input(g, "cotangent" + std::to_string(cts.size()), DType::F32, v.shape()));
  output(g, y);
  output(g, vjp(y, cts, {in[0], in[1], in[2], in[3], in[4], in[6]}));

  std::vector<Tensor> fb_in = host_in;
  for (const Shape& sh : {Shape{height, width, 3}, Shape{height, width}, Shape{height, width}}) {
    Tensor t = Tensor::empty(DType::F32, sh);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 1.0f / float(width * height);
    fb_in.push_back(t);
  }
  // --staged 1: the fused kernels denied, so both programs take the splat-stages rewrite.
  CompileOptions co;
  if (o.staged) co.deny_native = {"splat_render", "splat_render_backward"};
  Program pf = compile(fwd, dev, co), pb = compile(g, dev, co);
  Executor ef(pf, dev), eb(pb, dev);
  std::vector<Tensor> dev_f, dev_b;
  for (const Tensor& t : host_in) dev_f.push_back(t.to(dev.allocator()));
  for (const Tensor& t : fb_in) dev_b.push_back(t.to(dev.allocator()));
  dev.synchronize();
  const double before = device_used_mib(dev);
  // The median seconds of a program (after a first run that allocates its results) and the
  // device memory held after it.
  auto timed = [&](Executor& e, const std::vector<Tensor>& in, double& held) {
    auto res = e.run(in);
    dev.synchronize();
    const double t = median_seconds(o.reps, [&] {
      e.run_into(in, res);
      dev.synchronize();
    });
    held = device_used_mib(dev);
    return t;
  };
  double after_f = 0, after_b = 0;
  const double tf = timed(ef, dev_f, after_f), tb = timed(eb, dev_b, after_b);
  if (!dir.empty()) {  // the device's image, for the peer to compare its own with
    const Tensor image = ef.run(dev_f)[0].to(host_allocator());
    write_f32(dir + "/image.f32", image.data<float>(), size_t(image.numel()));
  }
  std::printf("splat%s n=%lld %lldx%lld  forward %9.3f ms   forward+backward %9.3f ms", o.staged ? " (staged)" : "",
              (long long)n, (long long)width, (long long)height, tf * 1e3, tb * 1e3);
  if (before >= 0) std::printf("   device memory held beyond the inputs: %.0f / %.0f MiB", after_f - before, after_b - before);
  std::printf("\n");
  Result r("splat");
  r.add("device", dev.name()).add("route", o.staged ? "splat-stages" : "fused").add("gaussians", n);
  r.add("width", width).add("height", height);
  r.add("forward_ms", tf * 1e3, "%.4f").add("forward_backward_ms", tb * 1e3, "%.4f").add("reps", int64_t(o.reps));
  if (before >= 0) r.add("held_forward_mib", after_f - before, "%.1f").add("held_backward_mib", after_b - before, "%.1f");
  r.print();

  if (o.check && dev.name() != "cpu") {
    Device& cpu = DeviceRegistry::get().at("cpu");
    const std::vector<Tensor> want = run(compile(fwd, cpu), cpu, host_in), got = run(pf, dev, host_in);
    const float* a = got[0].data<float>();
    const float* b = want[0].data<float>();
    double worst = 0;
    int64_t off = 0;
    for (int64_t i = 0; i < want[0].numel(); ++i) {
      const double d = std::abs(double(a[i]) - double(b[i]));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
      off += !(d <= 1e-3);
    }
    std::printf("  check against cpu: image max |difference| %.3g, %lld of %lld values beyond 1e-3\n", worst,
                (long long)off, (long long)want[0].numel());
    Result("splat_check").add("device", dev.name()).add("gaussians", n).add("max_diff", worst, "%.3g")
        .add("beyond_1e-3", off).print();
  }
}

}  // namespace

int bench_splat(int argc, char** argv) {
  Options o;
  Args args("rlx-bench splat",
            "splat_render forward and forward+backward (f32) on a synthetic scene of N Gaussians;\n"
            "medians of --reps runs after a warm-up, inputs resident on the device.\n");
  args.option("--gaussians", "100000,1000000", o.gaussians, 0)
      .option("--size", "WIDTHxHEIGHT", o.size)
      .option("--reps", "N", o.reps, 1)
      .option("--device", "cuda", o.device)
      .option("--dump", "DIR (scene files for apps/bench/peers_splat.py)", o.dump)
      .option("--check", "0|1 (compare the image with the cpu device's)", [&](const std::string& v) {
        if (v != "0" && v != "1") throw std::invalid_argument(v);
        o.check = v == "1";
      })
      .option("--staged", "0|1 (deny the fused kernels: time the splat-stages rewrite)", [&](const std::string& v) {
        if (v != "0" && v != "1") throw std::invalid_argument(v);
        o.staged = v == "1";
      });
  args.parse(argc, argv);
  return run_bench("rlx-bench splat", [&] {
    int64_t w = 0, h = 0;
    char x = 0;
    std::istringstream ss(o.size);
    if (!(ss >> w >> x >> h) || x != 'x' || w < 1 || h < 1) throw InputError("--size: expected WIDTHxHEIGHT, got " + o.size);
    Device& dev = DeviceRegistry::get().runnable_at(o.device);
    print_device(dev);
    for (int64_t n : o.gaussians) bench_scene(dev, n, w, h, o);
    return 0;
  });
}
