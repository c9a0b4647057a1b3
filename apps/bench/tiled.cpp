// rlx-bench layout: the host cost of the tiled layout (solvers/sparse/tiled.hpp) — tile_csr
// on the power-law matrix of rlx-bench cuda (0.5 M rows, log-uniform lengths 1..1000, random
// columns; i32 indices, f64 values), in the shape tiled_shape() gives for an H200. The first
// run includes the first touch of the layout's ~870 MB; then --reps more. Prints the median
// and the threads tile_csr used (one per hardware thread, up to one per row block).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "solvers/sparse/tiled.hpp"

using namespace rlx;

int bench_layout(int argc, char** argv) {
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: rlx-bench layout [--reps N]\n");
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  const int64_t m = 500000;
  std::mt19937_64 g(12);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int32_t> rp{0}, ci, row;
  for (int64_t r = 0; r < m; ++r) {
    row.clear();
    const int64_t len = int64_t(std::exp(u(g) * std::log(1000.0)));
    for (int64_t k = 0; k < len; ++k) row.push_back(int32_t(g() % uint64_t(m)));
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    ci.insert(ci.end(), row.begin(), row.end());
    rp.push_back(int32_t(ci.size()));
  }
  const int64_t nnz = int64_t(ci.size());
  Tensor trp = Tensor::empty(DType::I32, {m + 1}), tci = Tensor::empty(DType::I32, {nnz});
  Tensor tv = Tensor::empty(DType::F64, {nnz});
  std::memcpy(trp.raw(), rp.data(), rp.size() * 4);
  std::memcpy(tci.raw(), ci.data(), ci.size() * 4);
  for (int64_t k = 0; k < nnz; ++k) tv.data<double>()[k] = u(g) * 2 - 1;
  const sparse::TiledShape s = sparse::tiled_shape(m);
  std::vector<double> times;
  for (int rep = 0; rep <= reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const sparse::TiledCsr t = sparse::tile_csr(trp, tci, tv, m, m, s.rb, s.panel, s.warps);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep == 0)
      std::printf("layout  power-law %lld x %lld, %lld nnz, tiles %d x %d: first tile_csr %.3f s\n", (long long)m,
                  (long long)m, (long long)nnz, s.rb, s.panel, sec);
    else
      times.push_back(sec);
  }
  std::sort(times.begin(), times.end());
  std::printf("layout  tile_csr median of %d: %.3f s (%.0f M nonzeros/s), %u hardware threads\n", reps,
              times[times.size() / 2], double(nnz) / times[times.size() / 2] / 1e6, std::thread::hardware_concurrency());
  return 0;
}
