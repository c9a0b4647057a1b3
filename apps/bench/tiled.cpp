// rlx-bench layout: what the tiled layout (solvers/sparse/tiled.hpp) costs to build — the
// tile_csr op on each runnable device (cpu: two threaded passes; cuda: a radix sort on the
// GPU, devices/cuda/tile_csr.cu), on the power-law matrix of rlx-bench cuda
// (apps/bench/matrices.hpp: 0.5 M rows, log-uniform lengths 1..1000, random columns; i32
// indices, f64 values), in the shape tiled_shape() gives for an H200. The CSR arrays are
// placed on each device first (not timed; the copy to a GPU is printed on its own line);
// each build is timed to its end (Device::synchronize). The first build includes the
// first touch of the layout's ~870 MB; then the median of --reps more. Every device's
// arrays are compared with the cpu device's, bit for bit.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/common.hpp"
#include "apps/bench/matrices.hpp"
#include "ir/frontend.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#include "runtime/device.hpp"
#include "solvers/sparse/tiled.hpp"

using namespace rlx;

namespace {

int run(int reps) {
  const sparse::CsrMatrix A = bench::power_law_csr(500000);
  const sparse::TiledShape s = sparse::tiled_shape(A.rows());
  std::printf("layout  power-law %lld x %lld, %lld nnz, tiles %d x %d; %u hardware threads\n", (long long)A.rows(),
              (long long)A.cols(), (long long)A.nnz(), s.rb, s.panel, std::thread::hardware_concurrency());
  std::vector<Tensor> want;  // the cpu device's arrays, on the host
  double cpu_s = 0;
  for (const char* name : {"cpu", "cuda"}) {
    Device* d = DeviceRegistry::get().find(name);
    if (!d || !d->unavailable().empty()) continue;
    bench::Clock::time_point t0 = bench::Clock::now();
    std::vector<Tensor> csr = A.arrays();
    for (Tensor& t : csr) t = t.allocator() == d->allocator() ? t : t.to(d->allocator());
    d->synchronize();
    if (csr[0].allocator() != host_allocator())
      std::printf("layout  %-5s copy of the CSR arrays to the device: %.3f s (not in the times below)\n", name,
                  bench::seconds_since(t0));
    std::vector<Tensor> got;
    sparse::TiledCsr layout;
    auto build = [&] {
      const bench::Clock::time_point t1 = bench::Clock::now();
      layout = sparse::tile_csr(csr[0], csr[1], csr[2], A.rows(), A.cols(), s.rb, s.panel, s.warps, d);
      got = sparse::tiled_tensors(layout);
      d->synchronize();
      return bench::seconds_since(t1);
    };
    const double first = build();
    std::vector<double> times;
    for (int rep = 0; rep < reps; ++rep) times.push_back(build());
    const double med = bench::median(times);
    const bool first_device = want.empty();
    std::string same = "the reference for the others", ratio;
    if (first_device) {
      want = got, cpu_s = med;
    } else {
      same = "same arrays as cpu's";
      ratio = ", cpu/" + std::string(name) + " time " + std::to_string(cpu_s / med);
      for (size_t i = 0; i < 3; ++i) {
        const Tensor h = got[i].to(host_allocator());
        if (h.numel() != want[i].numel() ||
            std::memcmp(h.raw(), want[i].raw(), size_t(h.numel()) * dtype_size(h.dtype())) != 0)
          same = "MISMATCH: array " + std::to_string(i) + " differs from cpu's";
      }
    }
    std::printf("layout  %-5s tile_csr first %.4f s, median of %d %.4f s (%.0f M nonzeros/s)%s; %s\n", name, first,
                reps, med, double(A.nnz()) / med / 1e6, ratio.c_str(), same.c_str());
    // What it buys on this device: y = A x by spmv_csr and by spmv_tiled, each a compiled
    // program of its own, median of 7 runs after one (wall clock to the device's end); the
    // results compared.
    Tensor hx = Tensor::empty(DType::F64, {A.cols()});
    for (int64_t i = 0; i < A.cols(); ++i) hx.data<double>()[i] = 1.0 / double(1 + i % 7);
    const Tensor dx = hx.allocator() == d->allocator() ? hx : hx.to(d->allocator());
    auto product = [&](bool tiled, Tensor& y) {
      ir::Graph g;
      Var x = input(g, "x", DType::F64, {A.cols()});
      std::vector<Var> arr;
      const std::vector<Tensor>& arrays = tiled ? got : csr;
      for (size_t i = 0; i < 3; ++i) arr.push_back(input(g, "a" + std::to_string(i), arrays[i].dtype(), arrays[i].shape()));
      output(g, {tiled ? sparse::spmv_tiled(arr, layout, x) : op("spmv_csr", {arr[0], arr[1], arr[2], x}, {{"cols", A.cols()}})});
      const Program prog = compile(g, *d);
      Executor ex(prog, *d);
      std::vector<double> t;
      for (int rep = 0; rep < 8; ++rep) {
        const bench::Clock::time_point t1 = bench::Clock::now();
        y = ex.run({dx, arrays[0], arrays[1], arrays[2]})[0];
        d->synchronize();
        if (rep > 0) t.push_back(bench::seconds_since(t1));
      }
      y = y.to(host_allocator());
      return bench::median(t);
    };
    Tensor yc, yt;
    const double t_csr = product(false, yc), t_tiled = product(true, yt);
    double diff = 0, big = 0;
    for (int64_t r = 0; r < A.rows(); ++r)
      diff = std::max(diff, std::fabs(yc.data<double>()[r] - yt.data<double>()[r])),
      big = std::max(big, std::fabs(yc.data<double>()[r]));
    std::printf("layout  %-5s y = A x: spmv_csr %.3f ms | spmv_tiled %.3f ms | tiled/csr time %.3f (max |difference| / "
                "max |y| %.1e)\n", name, 1e3 * t_csr, 1e3 * t_tiled, t_tiled / t_csr, big > 0 ? diff / big : diff);
  }
  return 0;
}

}  // namespace

int bench_layout(int argc, char** argv) {
  int reps = 3;
  bench::Args args("rlx-bench layout", "");
  args.option("--reps", "N", reps, 1);
  args.parse(argc, argv);
  return bench::run_bench("rlx-bench layout", [&] { return run(reps); });
}
