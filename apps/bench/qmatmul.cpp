// rlx-bench qmatmul: y[M, N] = x[M, K] · dequant(W)[N, K]^T with W packed in a ggml format
// (the op matmul_packed), next to the f32 matmul of the same weights dequantized
// (matmul(x, Wf32, transpose_b), the device's sgemm) in the same run, runs interleaved.
//
// Each figure is the median of --reps timed Executor::run_into calls after warm-up runs.
// Reported: ms, GFLOP/s (2 M N K), and GB/s of weight bytes read (the packed bytes for
// matmul_packed, 4 N K for the f32 matmul): at M = 1 the weights are read once and bound the
// time. Beside them, the device's copy bandwidth on the same number of bytes (cpu: memcpy on
// every pool thread, each a contiguous share; another device: its elementwise neg kernel;
// GB/s counting the bytes read, i.e. half the STREAM-style read+write count), and on 256 MiB
// (past the last-level cache). Inputs and results live in the device's memory. The results
// are compared (max |difference| / max |y|), so a fast wrong answer shows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "apps/bench/common.hpp"
#include "core/ggml_blocks.hpp"
#include "core/half.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/frontend.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;
using namespace rlx::bench;

namespace {

struct Options {
  std::vector<std::string> shapes = {"4096x4096", "1024x4096"};  // N x K
  std::vector<int64_t> ms = {1, 512};
  std::vector<std::string> types = {"Q8_0", "Q4_0", "Q4_K"};
  int reps = 0;  // 0: 41 for M <= 16, 5 above
  std::string device = "cpu";
};

// Random quants under scales of a realistic size: the kernels do not branch on values (BF16
// and F16, blocks of one element: every weight the 16-bit pattern of f16 0.01).
Tensor random_packed(const ggml::BlockFormat& f, int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::empty(DType::U8, {n, k / f.block * f.bytes});
  auto* p = t.data<unsigned char>();
  for (int64_t i = 0; i < int64_t(t.nbytes()); ++i) p[i] = uint8_t(rng());
  for (int64_t b = 0; b < n * (k / f.block); ++b) {
    const uint16_t h = f16::from_float(0.01f), z = f16::from_float(0.001f);
    std::memcpy(p + b * f.bytes, &h, 2);
    if (f.type == ggml::kQ4_K) std::memcpy(p + b * f.bytes + 2, &z, 2);
  }
  return t;
}

void copy_threads(char* dst, const char* src, size_t bytes) {
  cpu::ThreadPool::instance().run(cpu::num_threads(), [&](int t, int n) {
    const size_t b = bytes * size_t(t) / size_t(n), e = bytes * size_t(t + 1) / size_t(n);
    std::memcpy(dst + b, src + b, e - b);
  });
}

// GB/s of bytes read by a copy of `bytes` on the device: on cpu a threaded memcpy; on
// another device the elementwise kernel of neg over as many f32 (one read, one write, in the
// device's memory).
double copy_gbps(Device& dev, size_t bytes, int reps) {
  if (dev.allocator()->host_accessible()) {
    std::vector<char> a(bytes, 1), b(bytes, 2);
    return double(bytes) / median_seconds(reps, [&] { copy_threads(b.data(), a.data(), bytes); }) / 1e9;
  }
  const int64_t n = int64_t(bytes / 4);
  ir::Graph g;
  output(g, {neg(input(g, "x", DType::F32, {n}))});
  const Program p = compile(g, dev);
  Executor ex(p, dev);
  std::vector<Tensor> in = {Tensor::zeros(DType::F32, {n}).to(dev.allocator())}, out = {Tensor::empty(DType::F32, {n}, dev.allocator())};
  return double(n) * 4 / median_seconds(reps, [&] { ex.run_into(in, out); }) / 1e9;
}

void bench_one(Device& dev, int64_t n, int64_t k, const std::string& type, int64_t m, const Options& o) {
  const ggml::BlockFormat& f = *ggml::block_format(type);
  const Tensor w = random_packed(f, n, k, 7);
  Tensor x = Tensor::empty(DType::F32, {m, k});
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);

  ir::Graph gq;
  Var xq = input(gq, "x", DType::F32, {m, k});
  Var wq = input(gq, "w", DType::U8, w.shape());
  output(gq, {op("matmul_packed", {xq, wq}, {{"type", type}, {"k", k}})});
  const Program pq = compile(gq, dev);
  const NodeReport* rq = nullptr;
  for (const NodeReport& r : pq.report.nodes)
    if (r.op == "matmul_packed") rq = &r;
  Executor eq(pq, dev);

  // The peer: the same weights dequantized once (outside the clock), then f32 matmul.
  ir::Graph gd;
  output(gd, {op("dequantize", {input(gd, "w", DType::U8, w.shape())}, {{"type", type}, {"k", k}})});
  const Tensor wf = run(compile(gd, dev), dev, {w})[0];
  ir::Graph gf;
  Var xf = input(gf, "x", DType::F32, {m, k});
  output(gf, {matmul(xf, input(gf, "w", DType::F32, {n, k}), false, true)});
  const Program pf = compile(gf, dev);  // (an Executor keeps a reference to its program)
  Executor ef(pf, dev);

  // Inputs and results stay in the device's memory, so only the products are timed.
  Allocator* da = dev.allocator();
  const std::vector<Tensor> inq = {x.to(da), w.to(da)}, inf = {x.to(da), wf.to(da)};
  std::vector<Tensor> yq = {Tensor::empty(DType::F32, {m, n}, da)}, yf = {Tensor::empty(DType::F32, {m, n}, da)};
  const int reps = o.reps ? o.reps : (m <= 16 ? 41 : 5);
  std::vector<double> tq, tf;
  for (int r = 0; r < reps + 2; ++r) {
    Stopwatch s;
    eq.run_into(inq, yq);
    const double a = s.lap();
    ef.run_into(inf, yf);
    const double b = s.lap();
    if (r >= 2) tq.push_back(a), tf.push_back(b);
  }
  const Tensor hq = yq[0].to(host_allocator()), hf = yf[0].to(host_allocator());
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    diff = std::max(diff, double(std::fabs(hq.data<float>()[i] - hf.data<float>()[i])));
    scale = std::max(scale, double(std::fabs(hf.data<float>()[i])));
  }
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const double qbytes = double(w.nbytes()), fbytes = 4.0 * double(n) * double(k);
  const double sq = median(tq), sf = median(tf);
  const double copy = copy_gbps(dev, w.nbytes(), 21);
  std::printf("%s N=%lld K=%lld M=%lld (%s: %s; packed %.1f MiB, f32 %.1f MiB)\n", type.c_str(), (long long)n, (long long)k,
              (long long)m, rq ? route_name(rq->route) : "?", rq && !rq->rule.empty() ? rq->rule.c_str() : "kernel",
              qbytes / (1 << 20), fbytes / (1 << 20));
  std::printf("  matmul_packed       %9.3f ms  %8.1f GFLOP/s  %7.1f GB/s packed\n", sq * 1e3, flops / sq / 1e9, qbytes / sq / 1e9);
  std::printf("  f32 matmul (peer)   %9.3f ms  %8.1f GFLOP/s  %7.1f GB/s f32\n", sf * 1e3, flops / sf / 1e9, fbytes / sf / 1e9);
  std::printf("  copy of %.1f MiB    %7.1f GB/s read; speed-up over f32 %.2fx; max |diff| / max |y| %.2e\n",
              qbytes / (1 << 20), copy, sf / sq, scale > 0 ? diff / scale : diff);
  Result("qmatmul")
      .add("type", type)
      .add("n", n)
      .add("k", k)
      .add("m", m)
      .add("ms", sq * 1e3, "%.4f")
      .add("gflops", flops / sq / 1e9, "%.2f")
      .add("gbps", qbytes / sq / 1e9, "%.2f")
      .add("f32_ms", sf * 1e3, "%.4f")
      .add("f32_gflops", flops / sf / 1e9, "%.2f")
      .add("f32_gbps", fbytes / sf / 1e9, "%.2f")
      .add("copy_gbps", copy, "%.2f")
      .add("speedup", sf / sq, "%.3f")
      .add("rel_diff", scale > 0 ? diff / scale : diff, "%.3e")
      .print();
}

}  // namespace

int bench_qmatmul(int argc, char** argv) {
  Options o;
  Args args("rlx-bench qmatmul",
            "matmul_packed (ggml-packed weights) next to the f32 matmul of the dequantized weights.\n"
            "Shapes are NxK (weight rows x row length). Threads: RLX_NUM_THREADS.\n");
  args.option("--shapes", "4096x4096,1024x4096", o.shapes)
      .option("--m", "1,512", o.ms)
      .option("--types", "Q8_0,Q4_0,Q4_K", o.types, {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "BF16", "F16"})
      .option("--reps", "N", o.reps)
      .option("--device", "cpu", o.device);
  args.parse(argc, argv);
  return run_bench("rlx-bench qmatmul", [&] {
    Device& dev = DeviceRegistry::get().at(o.device);
    print_device(dev);
    std::printf("copy bandwidth of 256 MiB (past the last-level cache): %.1f GB/s read\n", copy_gbps(dev, size_t(256) << 20, 7));
    for (const std::string& s : o.shapes) {
      const size_t x = s.find('x');
      if (x == std::string::npos) throw InputError("--shapes: '" + s + "' is not NxK");
      const int64_t n = std::stoll(s.substr(0, x)), k = std::stoll(s.substr(x + 1));
      for (const std::string& t : o.types) {
        const ggml::BlockFormat& f = *ggml::block_format(t);
        if (n <= 0 || k <= 0 || k % f.block != 0)
          throw InputError("--shapes: " + s + " needs N, K >= 1 with K a multiple of " + t + "'s block of " +
                           std::to_string(f.block));
        for (int64_t m : o.ms) bench_one(dev, n, k, t, m, o);
      }
    }
    return 0;
  });
}
