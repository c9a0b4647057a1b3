// rlx-bench spmv: y = A x in f64 on 3D 7-point Poisson matrices (n^3 rows), through
// compile()/Executor on a device, next to (in the same process, interleaved run by run):
//   - a read-only stream over as many bytes as the SpMV moves (its roofline: ~92 % of the
//     SpMV's bytes are reads);
//   - memcpy bandwidth: one copy moving as many bytes (read + write) as the SpMV does
//     ("same footprint": in cache when the matrix is), and one DRAM-sized copy of 1 GiB
//     (glibc's memcpy streams large copies with non-temporal stores, so its writes cost no
//     reads: it outruns any read-dominated kernel);
//   - STREAM's Copy kernel over 1 GiB (a loop with ordinary stores, counted as STREAM
//     counts it: 16 bytes per element). All of these on the cpu device's thread pool, one
//     contiguous share per thread;
//   - Eigen 3 SparseMatrix<double, RowMajor> * VectorXd over the same arrays (mapped, not
//     copied), threaded by Eigen's OpenMP with as many threads as the pool (when this file
//     is built with OpenMP; otherwise one thread, and the output says so).
// Bytes are counted once each: values (8/nnz) + col_idx (4 or 8/nnz) + row_ptr
// ((rows+1) x 4 or 8) + x (8/col) + y (8/row). Every figure is the median of about --reps
// warm runs: the contenders take turns in bursts of 4 back-to-back runs whose first is
// dropped; between bursts the benchmark sleeps 1 ms so that threads still spinning from
// the previous library do not compete with the next.
// apps/bench/peers_sparse.py times SciPy on the same matrices.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/common.hpp"
#include "apps/bench/matrices.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/frontend.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/ops.hpp"
#include "solvers/sparse/poisson.hpp"

#ifdef RLX_BENCH_HAVE_EIGEN
#include <Eigen/SparseCore>
#endif

using namespace rlx;
using namespace rlx::bench;

namespace {


void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }

// memcpy of `bytes` on every pool thread, one contiguous share each.
void copy_threads(char* dst, const char* src, size_t bytes) {
  cpu::ThreadPool::instance().run(cpu::num_threads(), [&](int t, int n) {
    const size_t b = bytes * size_t(t) / size_t(n), e = bytes * size_t(t + 1) / size_t(n);
    std::memcpy(dst + b, src + b, e - b);
  });
}

// Reads `words` 8-byte words on every pool thread (one contiguous share each) and sums
// them, so the reads cannot be dropped: the read-only roofline (SpMV's traffic is ~92 % reads).
uint64_t read_threads(const uint64_t* p, size_t words) {
  std::vector<uint64_t> part(size_t(cpu::num_threads()), 0);
  cpu::ThreadPool::instance().run(cpu::num_threads(), [&](int t, int n) {
    const size_t b = words * size_t(t) / size_t(n), e = words * size_t(t + 1) / size_t(n);
    uint64_t s = 0;
    for (size_t i = b; i < e; ++i) s += p[i];
    part[size_t(t)] = s;
  });
  uint64_t s = 0;
  for (uint64_t v : part) s += v;
  return s;
}

volatile uint64_t g_sink;

// STREAM's Copy kernel (a plain loop with ordinary stores, whose cache lines are read
// before they are written), on every pool thread; kept from becoming a memcpy call.
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void stream_copy_threads(uint64_t* dst, const uint64_t* src,
                                                                                        size_t words) {
  cpu::ThreadPool::instance().run(cpu::num_threads(), [&](int t, int n) {
    const size_t b = words * size_t(t) / size_t(n), e = words * size_t(t + 1) / size_t(n);
    for (size_t i = b; i < e; ++i) dst[i] = src[i];
  });
}

struct Buffers {  // a copy source and destination, pages touched
  std::vector<char> src, dst;
  explicit Buffers(size_t bytes) : src(bytes, 1), dst(bytes, 0) {}
  void time() { copy_threads(dst.data(), src.data(), src.size()); }
};

struct Options {
  std::vector<int64_t> sizes = {100, 200};
  int reps = 0;  // 0: 60 for the in-cache size, 20 above 50M nonzeros
  std::string device = "cpu";
  DType index = DType::I32;
};

void run_size(Device& dev, int64_t n, const Options& o) {
  auto tg = Clock::now();
  sparse::CsrMatrix A = sparse::poisson3d(n, DType::F64, o.index);
  const double gen_s = seconds_since(tg);
  const int64_t rows = A.rows(), nnz = A.nnz();
  const size_t isz = dtype_size(A.index_type());
  const double bytes = double(nnz) * (8.0 + double(isz)) + double(rows + 1) * double(isz) + double(A.cols()) * 8.0 +
                       double(rows) * 8.0;
  const int reps = o.reps ? o.reps : (nnz > 50'000'000 ? 20 : 60);

  // rlx: the matrix arrays and x are graph inputs.
  Program p = spmv_program(A, dev);
  Executor ex(p, dev);
  Tensor x = Tensor::empty(DType::F64, {A.cols()});
  for (int64_t i = 0; i < A.cols(); ++i) x.data<double>()[i] = 1.0 + double(i % 7) * 0.125;
  std::vector<Tensor> inputs = A.arrays();
  inputs.push_back(x);
  std::vector<Tensor> res = {Tensor::zeros(DType::F64, {rows})};

  Buffers same(size_t(bytes / 2)), dram(size_t(1) << 29);  // traffic = read + write = 2 x buffer
  std::vector<uint64_t> stream(size_t(bytes / 8), 1);         // read-only traffic = bytes
  std::vector<uint64_t> sc_src(size_t(1) << 26, 1), sc_dst(size_t(1) << 26, 0);  // 2 x 512 MiB

#ifdef RLX_BENCH_HAVE_EIGEN
  const int eigen_threads = cpu::num_threads();
  Eigen::setNbThreads(eigen_threads);
  std::vector<double> ye(size_t(rows), 0.0);
  Eigen::Map<const Eigen::VectorXd> xe(x.data<double>(), A.cols());
  Eigen::Map<Eigen::VectorXd> yem(ye.data(), rows);
  auto eigen_run = [&] {
    if (o.index == DType::I32) {
      Eigen::Map<const Eigen::SparseMatrix<double, Eigen::RowMajor, int32_t>> Ae(
          rows, A.cols(), nnz, A.row_ptr().data<int32_t>(), A.col_idx().data<int32_t>(), A.values().data<double>());
      yem.noalias() = Ae * xe;
    } else {
      Eigen::Map<const Eigen::SparseMatrix<double, Eigen::RowMajor, int64_t>> Ae(
          rows, A.cols(), nnz, A.row_ptr().data<int64_t>(), A.col_idx().data<int64_t>(), A.values().data<double>());
      yem.noalias() = Ae * xe;
    }
  };
#endif

  // Rounds of bursts: each contender runs kBurst times back to back and the first run
  // of each burst is dropped, so every figure is a warm run (the matrix stays in L3 when
  // it fits, as it would across the iterations of a solver) while the contenders still
  // alternate, so that drift on a shared machine hits them alike.
  constexpr int kBurst = 4;
  std::vector<double> t_rlx, t_eigen, t_read, t_same, t_dram, t_stream;
  auto burst = [&](std::vector<double>& out, auto&& fn) {
    for (int b = 0; b < kBurst; ++b) {
      auto t0 = Clock::now();
      fn();
      const double t = seconds_since(t0);
      if (b > 0) out.push_back(t);
    }
    pause();
  };
  const int rounds = (reps + kBurst - 2) / (kBurst - 1);
  for (int r = 0; r < rounds; ++r) {
    burst(t_rlx, [&] { ex.run_into(inputs, res); });
#ifdef RLX_BENCH_HAVE_EIGEN
    burst(t_eigen, eigen_run);
#endif
    burst(t_read, [&] { g_sink = read_threads(stream.data(), stream.size()); });
    burst(t_same, [&] { same.time(); });
    burst(t_dram, [&] { dram.time(); });
    burst(t_stream, [&] { stream_copy_threads(sc_dst.data(), sc_src.data(), sc_src.size()); });
  }

  double checksum = 0;
  for (int64_t i = 0; i < rows; ++i) checksum += res[0].data<double>()[i];
  const double ms = median(t_rlx) * 1e3, gbps = bytes / median(t_rlx) / 1e9;
  const double read_gbps = double(stream.size()) * 8 / median(t_read) / 1e9;
  const double same_gbps = double(same.src.size()) * 2 / median(t_same) / 1e9;
  const double dram_gbps = double(dram.src.size()) * 2 / median(t_dram) / 1e9;
  const double stream_gbps = double(sc_src.size()) * 16 / median(t_stream) / 1e9;
  std::printf("spmv f64 3D Poisson n=%lld: %lld rows, %lld nnz, %s indices, %.1f MB moved per product "
              "(generated in %.2f s), %d warm runs each\n",
              (long long)n, (long long)rows, (long long)nnz, dtype_name(A.index_type()), bytes / 1e6, gen_s,
              int(t_rlx.size()));
  std::printf("  rlx %-14s %9.3f ms  %7.2f GB/s  (sum y = %.10g)\n", dev.name().c_str(), ms, gbps, checksum);
#ifdef RLX_BENCH_HAVE_EIGEN
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < rows; ++i) {
    diff = std::max(diff, std::fabs(ye[size_t(i)] - res[0].data<double>()[i]));
    scale = std::max(scale, std::fabs(ye[size_t(i)]));
  }
  const int eigen_shown = Eigen::nbThreads();  // 1 without OpenMP
  const double ems = median(t_eigen) * 1e3, egbps = bytes / median(t_eigen) / 1e9;
  std::printf("  Eigen %d.%d.%d (%d thr) %8.3f ms  %7.2f GB/s  (max |y_rlx - y_eigen| / max |y| = %.1e)\n",
              EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, eigen_shown, ems, egbps,
              diff / std::max(scale, 1e-300));
#else
  const double ems = 0;
  std::printf("  Eigen              (not built: Eigen 3 was not found at configure time)\n");
#endif
  std::printf("  read, same bytes   %9.3f ms  %7.2f GB/s  (%d threads)\n", median(t_read) * 1e3, read_gbps,
              cpu::num_threads());
  std::printf("  memcpy, same bytes %9.3f ms  %7.2f GB/s  (%d threads)\n", median(t_same) * 1e3, same_gbps,
              cpu::num_threads());
  std::printf("  memcpy, 1 GiB      %9.3f ms  %7.2f GB/s  (%d threads)\n", median(t_dram) * 1e3, dram_gbps,
              cpu::num_threads());
  std::printf("  STREAM copy, 1 GiB %9.3f ms  %7.2f GB/s  (%d threads, ordinary stores)\n",
              median(t_stream) * 1e3, stream_gbps, cpu::num_threads());
  std::printf("  rlx / read %.1f %%, rlx / same-bytes memcpy %.1f %%, rlx / 1 GiB memcpy %.1f %%, rlx / STREAM copy %.1f %%, "
              "Eigen / rlx time %.2fx\n",
              100 * gbps / read_gbps, 100 * gbps / same_gbps, 100 * gbps / dram_gbps, 100 * gbps / stream_gbps, ems / ms);
  Result("spmv")
      .add("n", n)
      .add("rows", rows)
      .add("nnz", nnz)
      .add("index", dtype_name(A.index_type()))
      .add("ms", ms, "%.3f")
      .add("gbps", gbps, "%.2f")
      .add("eigen_ms", ems, "%.3f")
      .add("read_gbps", read_gbps, "%.2f")
      .add("copy_same_gbps", same_gbps, "%.2f")
      .add("copy_dram_gbps", dram_gbps, "%.2f")
      .add("stream_copy_gbps", stream_gbps, "%.2f")
      .add("ratio_read", gbps / read_gbps, "%.3f")
      .add("ratio_same", gbps / same_gbps, "%.3f")
      .add("ratio_dram", gbps / dram_gbps, "%.3f")
      .add("ratio_stream", gbps / stream_gbps, "%.3f")
      .add("checksum", checksum, "%.10g")
      .print();
}

}  // namespace

int bench_spmv(int argc, char** argv) {
  Options o;
  Args args("rlx-bench spmv",
            "SpMV y = A x, f64, on the 3D 7-point Poisson matrix with n^3 rows for each n.\n"
            "Threads: RLX_NUM_THREADS (default: all cores); Eigen uses as many OpenMP threads.\n");
  args.option("--sizes", "100,200", o.sizes)
      .option("--reps", "N", o.reps)
      .option("--device", "cpu", o.device)
      .option("--index", "i32|i64", [&](const std::string& s) {
        if (s != "i32" && s != "i64") throw std::invalid_argument(s);
        o.index = s == "i32" ? DType::I32 : DType::I64;
      });
  args.parse(argc, argv);
  return run_bench("rlx-bench spmv", [&] {
    Device& d = DeviceRegistry::get().at(o.device);
    print_device(d);
    for (int64_t n : o.sizes) run_size(d, n, o);
    return 0;
  });
}
