// rlx-bench layout: the host cost of the tiled layout (solvers/sparse/tiled.hpp) — tile_csr
// on the power-law matrix of rlx-bench cuda (apps/bench/matrices.hpp: 0.5 M rows,
// log-uniform lengths 1..1000, random columns; i32 indices, f64 values), in the shape
// tiled_shape() gives for an H200. The first run includes the first touch of the layout's
// ~870 MB; then the median of --reps more. tile_csr uses one thread per hardware thread
// (up to one per row block).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/common.hpp"
#include "apps/bench/matrices.hpp"
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
  const sparse::CsrMatrix A = bench::power_law_csr(500000);
  const sparse::TiledShape s = sparse::tiled_shape(A.rows());
  auto build = [&] {
    const bench::Clock::time_point t0 = bench::Clock::now();
    sparse::tile_csr(A.row_ptr(), A.col_idx(), A.values(), A.rows(), A.cols(), s.rb, s.panel, s.warps);
    return bench::seconds_since(t0);
  };
  std::printf("layout  power-law %lld x %lld, %lld nnz, tiles %d x %d: first tile_csr %.3f s\n", (long long)A.rows(),
              (long long)A.cols(), (long long)A.nnz(), s.rb, s.panel, build());
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) times.push_back(build());
  const double med = bench::median(times);
  std::printf("layout  tile_csr median of %d: %.3f s (%.0f M nonzeros/s), %u hardware threads\n", reps, med,
              double(A.nnz()) / med / 1e6, std::thread::hardware_concurrency());
  return 0;
}
