// rlx-bench pcg: time to solution of Jacobi-preconditioned CG (or, with --method bicgstab,
// BiCGSTAB) on the 3D 7-point Poisson matrix (n^3 rows, b = ones, x0 = 0, stop at
// ||r|| <= rtol ||b||), rlx on a device next to Eigen's ConjugateGradient / BiCGSTAB with its
// DiagonalPreconditioner (the same stopping rule) in the same process, runs interleaved;
// medians of --reps. apps/bench/peers_pcg.py times SciPy's CG.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/bench/common.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/poisson.hpp"

#ifdef RLX_BENCH_HAVE_EIGEN
#include <Eigen/IterativeLinearSolvers>
#include <Eigen/SparseCore>
#endif

using namespace rlx;
using namespace rlx::bench;
using namespace rlx::sparse;

namespace {

struct Options {
  int64_t n = 100;
  int reps = 3;
  double rtol = 1e-8;
  std::string device = "cpu", method = "cg";
};

int run(const Options& opt) {
  const auto& [n, reps, rtol, device, method] = opt;
  CsrMatrix A = poisson3d(n);
  Tensor b = Tensor::empty(DType::F64, {A.rows()});
  for (int64_t i = 0; i < A.rows(); ++i) b.data<double>()[i] = 1.0;
  std::printf("%s-Jacobi on 3D Poisson %lld^3 (%lld rows, %lld nonzeros), rtol %.0e, b = ones\n", method.c_str(),
              (long long)n, (long long)A.rows(), (long long)A.nnz(), rtol);
  CsrOperator op(A);
  auto M = make_preconditioner("jacobi", op);
  KrylovOptions o;
  o.method = method;
  o.rtol = rtol;
  o.device = device;
  std::vector<double> t_rlx, t_eigen;
  int it_rlx = 0, it_eigen = -1;
#ifdef RLX_BENCH_HAVE_EIGEN
  using SpMat = Eigen::SparseMatrix<double, Eigen::RowMajor, int>;
  Eigen::Map<const SpMat> Ae(A.rows(), A.cols(), A.nnz(), A.row_ptr().data<int32_t>(), A.col_idx().data<int32_t>(),
                             A.values().data<double>());
  SpMat Acopy = Ae;
  Eigen::VectorXd be = Eigen::VectorXd::Ones(A.rows());
#endif
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    KrylovResult res = krylov_solve(op, b, *M, o);
    t_rlx.push_back(seconds_since(t0));
    it_rlx = res.iterations;
#ifdef RLX_BENCH_HAVE_EIGEN
    t0 = Clock::now();
    if (method == "cg") {
      Eigen::ConjugateGradient<SpMat, Eigen::Lower | Eigen::Upper, Eigen::DiagonalPreconditioner<double>> cg;
      cg.setTolerance(rtol);
      cg.setMaxIterations(100000);
      cg.compute(Acopy);
      Eigen::VectorXd x = cg.solve(be);
      it_eigen = int(cg.iterations());
    } else {
      Eigen::BiCGSTAB<SpMat, Eigen::DiagonalPreconditioner<double>> bi;
      bi.setTolerance(rtol);
      bi.setMaxIterations(100000);
      bi.compute(Acopy);
      Eigen::VectorXd x = bi.solve(be);
      it_eigen = int(bi.iterations());
    }
    t_eigen.push_back(seconds_since(t0));
#endif
  }
  std::printf("  %-28s %9.3f s  %5d iterations  %7.3f ms/iteration\n", ("rlx " + method + "+jacobi (" + device + ")").c_str(),
              median(t_rlx), it_rlx, 1e3 * median(t_rlx) / std::max(1, it_rlx));
  if (!t_eigen.empty()) {
    std::printf("  %-28s %9.3f s  %5d iterations  %7.3f ms/iteration\n",
                method == "cg" ? "Eigen ConjugateGradient" : "Eigen BiCGSTAB", median(t_eigen),
                it_eigen, 1e3 * median(t_eigen) / std::max(1, it_eigen));
    std::printf("  rlx / Eigen time             %9.3f\n", median(t_rlx) / median(t_eigen));
  } else {
    std::printf("  (Eigen not found at build time: no peer in this run)\n");
  }
  Result(method)
      .add("n", n)
      .add("rlx_s", median(t_rlx), "%.4f")
      .add("rlx_it", it_rlx)
      .add("eigen_s", t_eigen.empty() ? 0.0 : median(t_eigen), "%.4f")
      .add("eigen_it", it_eigen)
      .print();
  return 0;
}

}  // namespace

int bench_pcg(int argc, char** argv) {
  Options o;
  Args args("rlx-bench pcg", "");
  args.option("--n", "100", o.n, 1)
      .option("--reps", "3", o.reps, 1)
      .option("--rtol", "1e-8", o.rtol)
      .option("--device", "cpu", o.device)
      .option("--method", "cg|bicgstab", o.method, {"cg", "bicgstab"});
  args.parse(argc, argv);
  return run_bench("rlx-bench pcg", [&] { return run(o); });
}
