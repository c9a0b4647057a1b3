// rlx-bench: the cpu device's benchmarks.
//   fused    gelu(x*a + b) (erf form) over 2^k f32 elements, GB/s at 8 bytes/element,
//            next to memcpy bandwidth measured in the same run
//   gemm     SGEMM/DGEMM n x n through compile/run, GFLOP/s
//   compile  compile() time of a 10,000-node graph (elementwise chains + matmuls)
//   sort     sort (values + i64 indices, stable) of f32 [2^24] (one row), f32 [4096, 4096]
//            (rows) and f64 [2^22], with std::stable_sort of the same f32 row (one thread)
//            beside it
// Every figure is the median of --reps runs (after warm-up runs). The other sub-commands
// (kSubCommands below) live in files of their own; every one declares its options with
// bench::Args and prints its RESULT lines with bench::Result (common.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "apps/bench/common.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;
using namespace rlx::bench;

namespace {

struct Options {
  std::vector<std::string> only;  // empty: all
  int reps = 0;                   // 0: per-benchmark default
  std::vector<int> fused_log2 = {26, 20};
  std::vector<int64_t> gemm_sizes = {512, 1024, 2048, 4096};
  int nodes = 10000;
  std::string device = "cpu";
};

void fill_random(Tensor& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  int64_t n = t.numel();
  if (t.dtype() == DType::F32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = float(u(rng));
  } else {
    double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = u(rng);
  }
}

// memcpy of `bytes` from src to dst on nt threads (each a contiguous share).
void copy_threads(char* dst, const char* src, size_t bytes, int nt) {
  cpu::ThreadPool::instance().run(nt, [&](int t, int n) {
    size_t b = bytes * size_t(t) / size_t(n), e = bytes * size_t(t + 1) / size_t(n);
    std::memcpy(dst + b, src + b, e - b);
  });
}

void bench_fused(Device& d, const Options& o) {
  for (int lg : o.fused_log2) {
    const int64_t n = int64_t(1) << lg;
    ir::Graph g;
    Var x = input(g, "x", DType::F32, {n});
    Var a = input(g, "a", DType::F32, {});
    Var b = input(g, "b", DType::F32, {});
    output(g, {gelu(x * a + b)});
    Program p = compile(g, d);
    int fused_nodes = 0, kernels = int(p.kernels.size());
    for (auto& k : p.kernels)
      if (k.kind == Kernel::Fused) fused_nodes = std::max(fused_nodes, int(k.nodes.size()));
    Executor ex(p, d);
    Tensor xt = Tensor::empty(DType::F32, {n}), at = Tensor::empty(DType::F32, {}), bt = Tensor::empty(DType::F32, {});
    fill_random(xt, 1);
    at.data<float>()[0] = 0.75f;
    bt.data<float>()[0] = 0.125f;
    std::vector<Tensor> res = {Tensor::empty(DType::F32, {n})};
    std::memset(res[0].raw(), 0, res[0].nbytes());  // fault the pages in before timing
    Tensor copy_dst = Tensor::empty(DType::F32, {n});
    std::memset(copy_dst.raw(), 0, copy_dst.nbytes());
    const size_t bytes = size_t(n) * 4;
    const int reps = o.reps ? o.reps : (lg >= 24 ? 15 : 200);
    const int nt = cpu::ThreadPool::instance().size();
    std::vector<double> tf, tc1, tcn;
    for (int r = 0; r < reps + 2; ++r) {  // interleaved, so drift hits all three alike
      auto t0 = Clock::now();
      ex.run_into({xt, at, bt}, res);
      double f = seconds_since(t0);
      t0 = Clock::now();
      std::memcpy(copy_dst.raw(), xt.raw(), bytes);
      double c1 = seconds_since(t0);
      t0 = Clock::now();
      copy_threads(static_cast<char*>(copy_dst.raw()), static_cast<const char*>(xt.raw()), bytes, nt);
      double cn = seconds_since(t0);
      if (r >= 2) {
        tf.push_back(f);
        tc1.push_back(c1);
        tcn.push_back(cn);
      }
    }
    // 8 bytes per element for every variant: one read, one write.
    double gf = 8.0 * double(n) / median(tf) / 1e9;
    double g1 = 8.0 * double(n) / median(tc1) / 1e9;
    double gn = 8.0 * double(n) / median(tcn) / 1e9;
    double best_copy = std::max(g1, gn);
    std::printf("fused gelu(x*a+b) erf form, n=2^%d f32 (%.0f MiB in + out), %d kernel(s), largest fused region %d nodes\n",
                lg, 2.0 * double(bytes) / (1 << 20), kernels, fused_nodes);
    std::printf("  rlx fused         %8.3f ms  %7.2f GB/s\n", median(tf) * 1e3, gf);
    std::printf("  memcpy 1 thread   %8.3f ms  %7.2f GB/s\n", median(tc1) * 1e3, g1);
    std::printf("  memcpy %d threads  %8.3f ms  %7.2f GB/s\n", nt, median(tcn) * 1e3, gn);
    std::printf("  rlx / best copy   %7.1f %%\n", 100.0 * gf / best_copy);
    Result("fused")
        .add("log2n", lg)
        .add("ms", median(tf) * 1e3, "%.3f")
        .add("gbps", gf, "%.2f")
        .add("copy1_gbps", g1, "%.2f")
        .add("copyN_gbps", gn, "%.2f")
        .add("ratio", gf / best_copy, "%.3f")
        .print();
  }
}

void bench_gemm(Device& d, const Options& o) {
  for (DType t : {DType::F32, DType::F64})
    for (int64_t n : o.gemm_sizes) {
      ir::Graph g;
      Var a = input(g, "a", t, {n, n});
      Var b = input(g, "b", t, {n, n});
      output(g, {matmul(a, b)});
      Program p = compile(g, d);
      Executor ex(p, d);
      Tensor at = Tensor::empty(t, {n, n}), bt = Tensor::empty(t, {n, n});
      fill_random(at, 2);
      fill_random(bt, 3);
      std::vector<Tensor> res = {Tensor::empty(t, {n, n})};
      std::memset(res[0].raw(), 0, res[0].nbytes());
      const int reps = o.reps ? o.reps : (n >= 4096 ? 5 : n >= 2048 ? 7 : 15);
      std::vector<double> ts;
      for (int r = 0; r < reps + 1; ++r) {
        auto t0 = Clock::now();
        ex.run_into({at, bt}, res);
        if (r >= 1) ts.push_back(seconds_since(t0));
      }
      double gflops = 2.0 * double(n) * double(n) * double(n) / median(ts) / 1e9;
      std::printf("%s n=%-5lld %9.3f ms  %7.1f GFLOP/s\n", t == DType::F32 ? "sgemm" : "dgemm", (long long)n,
                  median(ts) * 1e3, gflops);
      Result("gemm").add("dtype", dtype_name(t)).add("n", n).add("ms", median(ts) * 1e3, "%.3f").add("gflops", gflops, "%.1f").print();
    }
}

// A graph of `count` nodes: 8 interleaved chains over [64, 64] values; every 10th node
// is a matmul, the others elementwise ops that also read a neighbouring chain.
ir::Graph big_graph(int count) {
  ir::Graph g;
  const int64_t s = 64;
  Var x = input(g, "x", DType::F32, {s, s});
  Var w = input(g, "w", DType::F32, {s, s});
  std::vector<Var> chains;
  for (int c = 0; c < 8; ++c) chains.push_back(x + scalar(g, double(c), DType::F32));
  while (int(g.nodes.size()) < count) {
    int i = int(g.nodes.size());
    Var& v = chains[size_t(i % 8)];
    const Var& u = chains[size_t((i + 3) % 8)];
    switch (i % 10) {
      case 0: v = matmul(v, w); break;
      case 1: v = v + u; break;
      case 2: v = tanh(v); break;
      case 3: v = v * u; break;
      case 4: v = exp(neg(abs(v))); break;
      case 5: v = maximum(v, u); break;
      case 6: v = v - u * 0.5; break;
      case 7: v = erf(v); break;
      case 8: v = where(gt(v, u), v, u); break;
      default: v = sqrt(abs(v) + 1.0); break;
    }
  }
  Var total = chains[0];
  for (int c = 1; c < 8; ++c) total = total + chains[size_t(c)];
  output(g, {total});
  return g;
}

void bench_compile(Device& d, const Options& o) {
  auto t0 = Clock::now();
  ir::Graph g = big_graph(o.nodes);
  double build = seconds_since(t0);
  int matmuls = 0;
  for (auto& n : g.nodes) matmuls += n.op->name == "matmul";
  const int reps = o.reps ? o.reps : 7;
  std::vector<double> ts;
  size_t kernels = 0, l2_nodes = 0;
  for (int r = 0; r < reps + 1; ++r) {
    t0 = Clock::now();
    Program p = compile(g, d);
    double t = seconds_since(t0);
    if (r >= 1) ts.push_back(t);
    kernels = p.kernels.size();
    l2_nodes = p.graph.nodes.size();
  }
  std::printf("compile: %zu-node graph (%d matmuls) built in %.1f ms; compile() to %zu nodes, %zu kernels: median %.1f ms (min %.1f, max %.1f)\n",
              g.nodes.size(), matmuls, build * 1e3, l2_nodes, kernels, median(ts) * 1e3,
              *std::min_element(ts.begin(), ts.end()) * 1e3, *std::max_element(ts.begin(), ts.end()) * 1e3);
  Result("compile").add("nodes", int64_t(g.nodes.size())).add("ms", median(ts) * 1e3, "%.2f").print();
}

void bench_sort(Device& d, const Options& o) {
  const int reps = o.reps > 0 ? o.reps : 5;
  for (auto [t, s] : {std::pair{DType::F32, Shape{int64_t(1) << 24}}, std::pair{DType::F32, Shape{4096, 4096}},
                      std::pair{DType::F64, Shape{int64_t(1) << 22}}}) {
    ir::Graph g;
    Sorted r = sort(input(g, "x", t, s));
    output(g, {r.values, r.indices});
    Program p = compile(g, d);
    Executor ex(p, d);
    Tensor x = Tensor::empty(t, s);
    fill_random(x, 5);
    std::vector<Tensor> in = {x}, out = {Tensor::empty(t, s), Tensor::empty(DType::I64, s)};
    const double ms = 1e3 * median_seconds(reps, [&] { ex.run_into(in, out); });
    std::string name;
    for (int64_t e : s) name += (name.empty() ? "" : "x") + std::to_string(e);
    std::printf("sort    rlx %s [%s] values + indices %9.1f ms  %6.1f M elements/s\n", dtype_name(t), name.c_str(), ms,
                double(numel(s)) / (ms * 1e-3) / 1e6);
    if (t == DType::F32 && s.size() == 1) {
      std::vector<float> v(x.data<float>(), x.data<float>() + x.numel());
      const double ms_std = 1e3 * median_seconds(reps, [&] {
        std::vector<float> w = v;
        std::stable_sort(w.begin(), w.end());
      });
      std::printf("sort    std::stable_sort f32 [%s] values only  %9.1f ms  %6.1f M elements/s\n", name.c_str(), ms_std,
                  double(numel(s)) / (ms_std * 1e-3) / 1e6);
    }
  }
}

}  // namespace

int bench_spmv(int argc, char** argv);          // sparse.cpp
int bench_direct(int argc, char** argv);        // direct.cpp
int bench_dense_la(int argc, char** argv);      // dense_la.cpp
int bench_grad(int argc, char** argv);          // grad.cpp
int bench_pcg(int argc, char** argv);           // pcg.cpp
int bench_cuda(int argc, char** argv);          // cuda.cpp (GPU builds)
int bench_eigen_direct(int argc, char** argv);  // eigen_direct.cpp
int bench_layout(int argc, char** argv);        // tiled.cpp
int bench_splat(int argc, char** argv);         // splat.cpp
int bench_embed(int argc, char** argv);         // embed.cpp
int bench_qmatmul(int argc, char** argv);        // qmatmul.cpp
int bench_generate(int argc, char** argv);      // generate.cpp
int bench_load(int argc, char** argv);          // load.cpp
int bench_tokenize(int argc, char** argv);      // tokenize.cpp

// The sub-commands: rlx-bench NAME [options] runs run(argc - 1, argv + 1).
struct SubCommand {
  const char* name;
  int (*run)(int, char**);
};
const SubCommand kSubCommands[] = {
    {"spmv", bench_spmv},     {"pcg", bench_pcg},       {"direct", bench_direct},
    {"direct-eigen", bench_eigen_direct}, {"dense", bench_dense_la}, {"layout", bench_layout},
    {"grad", bench_grad},     {"splat", bench_splat}, {"embed", bench_embed}, {"qmatmul", bench_qmatmul},
    {"generate", bench_generate}, {"load", bench_load}, {"tokenize", bench_tokenize},
#ifdef RLX_HAVE_CUDA
    {"cuda", bench_cuda},
#endif
};

int main(int argc, char** argv) {
  std::string others;
  for (const SubCommand& c : kSubCommands) {
    if (argc > 1 && argv[1] == std::string(c.name)) return c.run(argc - 1, argv + 1);
    others += (others.empty() ? "" : "|") + std::string(c.name);
  }
  Options o;
  Args args("rlx-bench",
            "Threads: RLX_NUM_THREADS (default: all cores). GEMM: OpenBLAS loaded at run time, or\n"
            "RLX_CPU_GEMM=builtin for the device's own kernels.\n"
            "Other benchmarks: rlx-bench " + others + " [--help].\n");
  args.option("--only", "fused,gemm,compile,sort", o.only, {"fused", "gemm", "compile", "sort"})
      .option("--reps", "N", o.reps)
      .option("--fused-log2", "26,20", o.fused_log2, 0)
      .option("--gemm-sizes", "512,1024,2048,4096", o.gemm_sizes)
      .option("--nodes", "10000", o.nodes, 1)
      .option("--device", "cpu", o.device);
  args.parse(argc, argv);
  auto want = [&](const char* name) { return o.only.empty() || std::find(o.only.begin(), o.only.end(), name) != o.only.end(); };
  return run_bench("rlx-bench", [&] {
    Device& d = DeviceRegistry::get().at(o.device);
    print_device(d);
    if (want("fused")) bench_fused(d, o);
    if (want("gemm")) bench_gemm(d, o);
    if (want("compile")) bench_compile(d, o);
    if (want("sort")) bench_sort(d, o);
    return 0;
  });
}
