// rlx-bench direct-eigen: rlx's sparse direct solvers (CHOLMOD, UMFPACK through
// solvers/sparse/direct.hpp) next to Eigen's SimplicialLLT and SparseLU (COLAMD ordering),
// analyze + factorize + solve of b = ones, on 2D Poisson n² (default 500²), medians of --reps
// after one untimed warm-up round,
// interleaved in one process. (rlx-bench direct compares with SuiteSparse called directly.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/bench/common.hpp"
#include "solvers/sparse/direct.hpp"
#include "solvers/sparse/poisson.hpp"

#ifdef RLX_BENCH_HAVE_EIGEN
#include <Eigen/OrderingMethods>
#include <Eigen/SparseCholesky>
#include <Eigen/SparseLU>
#endif

using namespace rlx;
using namespace rlx::bench;
using namespace rlx::sparse;

int bench_eigen_direct(int argc, char** argv) {
  int64_t n = 500;
  int reps = 5;
  Args args("rlx-bench direct-eigen", "");
  args.option("--n", "500", n, 1).option("--reps", "5", reps, 1);
  args.parse(argc, argv);
#ifndef RLX_BENCH_HAVE_EIGEN
  std::fprintf(stderr, "rlx-bench direct-eigen: built without Eigen\n");
  return 2;
#else
  CsrMatrix A = poisson2d(n);
  Tensor b = Tensor::empty(DType::F64, {A.rows()});
  for (int64_t i = 0; i < A.rows(); ++i) b.data<double>()[i] = 1.0;
  using SpMat = Eigen::SparseMatrix<double, Eigen::ColMajor, int>;
  // The Poisson matrix is symmetric: its CSR arrays are its CSC arrays.
  Eigen::Map<const SpMat> Am(A.rows(), A.cols(), A.nnz(), A.row_ptr().data<int32_t>(), A.col_idx().data<int32_t>(),
                             A.values().data<double>());
  SpMat Ae = Am;
  Eigen::VectorXd be = Eigen::VectorXd::Ones(A.rows());
  auto time = [](auto&& f) {
    auto t0 = Clock::now();
    f();
    return seconds_since(t0);
  };
  std::vector<double> chol, llt, lu, slu;
  for (int r = -1; r < reps; ++r) {  // round -1 warms up (loads SuiteSparse, touches pages); untimed
    double tc = time([&] {
      SparseCholesky c(A);
      c.factorize(A);
      (void)c.solve(b);
    });
    double te = time([&] {
      Eigen::SimplicialLLT<SpMat> s(Ae);
      Eigen::VectorXd x = s.solve(be);
    });
    double tl = time([&] {
      SparseLu l(A, LuBackend::Umfpack);
      l.factorize(A);
      (void)l.solve(b);
    });
    double ts = time([&] {
      Eigen::SparseLU<SpMat, Eigen::COLAMDOrdering<int>> s;
      s.analyzePattern(Ae);
      s.factorize(Ae);
      Eigen::VectorXd x = s.solve(be);
    });
    if (r < 0) continue;
    chol.push_back(tc), llt.push_back(te), lu.push_back(tl), slu.push_back(ts);
  }
  std::printf("2D Poisson %lld^2 (%lld rows, %lld nonzeros), analyze + factorize + solve, medians of %d\n",
              (long long)n, (long long)A.rows(), (long long)A.nnz(), reps);
  std::printf("  rlx SparseCholesky (CHOLMOD)  %8.1f ms   Eigen SimplicialLLT  %8.1f ms   rlx / Eigen %.2f\n",
              1e3 * median(chol), 1e3 * median(llt), median(chol) / median(llt));
  std::printf("  rlx SparseLu (UMFPACK)        %8.1f ms   Eigen SparseLU       %8.1f ms   rlx / Eigen %.2f\n",
              1e3 * median(lu), 1e3 * median(slu), median(lu) / median(slu));
  return 0;
#endif
}
