// rlx-bench direct: sparse direct solves through rlx's classes (solvers/sparse/direct.hpp)
// next to SuiteSparse called directly, in the same process, on the same arrays.
//
// For each problem (default: 2D Poisson 500^2 and 3D Poisson 40^3, f64, i32 indices,
// b random) and each solver:
//   cholmod  rlx SparseCholesky   vs  cholmod_start/analyze/factorize/solve
//   umfpack  rlx SparseLu         vs  umfpack_di_symbolic/numeric/solve (UMFPACK_A)
//   klu      rlx SparseLu(klu)    vs  klu_analyze/factor/solve
// the time of analyze + factorize + solve (objects freed outside the timed region). The
// Poisson matrices are symmetric, so their CSR arrays are also their CSC arrays: the
// direct calls get exactly the arrays rlx gets (rlx reads them as A^T and solves the
// transposed system; CHOLMOD reads one triangle either way). Library settings are the
// defaults on both sides, except that rlx asks CHOLMOD for LL' also in simplicial mode
// (irrelevant here: these factorizations are supernodal).
//
// Every figure is the median of --reps runs after one warm-up run of each (the ratio of the
// fastest runs is printed too: on a busy host it is the steadier figure); rlx and the
// direct calls alternate which goes first from run to run, so drift hits both alike. The two solutions are compared and the true residual of each is printed.
// KLU (built for circuit-like matrices, without supernodes) is slow on 3D Poisson
// (~57 s per factorization at 40^3 here), so it runs on 3D problems only when --solvers
// names it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/common.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "solvers/sparse/direct.hpp"
#include "solvers/sparse/poisson.hpp"

#ifdef RLX_HAVE_SUITESPARSE
#include <dlfcn.h>
#include <cholmod.h>
#include <klu.h>
#include <umfpack.h>
#endif

using namespace rlx;
using namespace rlx::bench;
using namespace rlx::sparse;

#ifndef RLX_HAVE_SUITESPARSE

int bench_direct(int, char**) {
  std::fprintf(stderr, "rlx-bench direct: rlx was built without SuiteSparse; nothing to measure\n");
  return 1;
}

#else

namespace {


// A SuiteSparse function from the libraries rlx loaded, typed by its declaration.
#define SS_FN(f) reinterpret_cast<decltype(&::f)>(suitesparse_symbol(#f))

struct Times {
  double analyze = 0, factorize = 0, solve = 0;
  double total() const { return analyze + factorize + solve; }
};

struct Problem {
  std::string name;
  CsrMatrix A;
  Tensor b;
  bool three_d = false;
};

// ---------------------------------------------------------------- rlx

// Constructing the solver is its analysis; its destructor runs after the timed region.
template <class Solver, class... Extra>
Times run_steps(const CsrMatrix& A, const Tensor& b, Tensor& x, Extra... extra) {
  Times t;
  Stopwatch w;
  Solver s(A, extra...);
  t.analyze = w.lap();
  s.factorize(A);
  t.factorize = w.lap();
  x = s.solve(b);
  t.solve = w.lap();
  return t;
}

Times run_rlx(const std::string& solver, const CsrMatrix& A, const Tensor& b, Tensor& x) {
  if (solver == "cholmod") return run_steps<SparseCholesky>(A, b, x);
  return run_steps<SparseLu>(A, b, x, solver == "klu" ? LuBackend::Klu : LuBackend::Umfpack);
}

// ---------------------------------------------------------------- SuiteSparse directly

Times run_umfpack(const CsrMatrix& A, const Tensor& b, std::vector<double>& x) {
  static const auto defaults = SS_FN(umfpack_di_defaults);
  static const auto symbolic = SS_FN(umfpack_di_symbolic);
  static const auto numeric = SS_FN(umfpack_di_numeric);
  static const auto solve = SS_FN(umfpack_di_solve);
  static const auto free_symbolic = SS_FN(umfpack_di_free_symbolic);
  static const auto free_numeric = SS_FN(umfpack_di_free_numeric);
  const int n = int(A.rows());
  const int* Ap = A.row_ptr().data<int32_t>();
  const int* Ai = A.col_idx().data<int32_t>();
  const double* Ax = A.values().data<double>();
  double control[UMFPACK_CONTROL], info[UMFPACK_INFO];
  void *sym = nullptr, *num = nullptr;
  Times t;
  Stopwatch w;
  defaults(control);
  int st = symbolic(n, n, Ap, Ai, Ax, &sym, control, info);
  t.analyze = w.lap();
  if (st == UMFPACK_OK) st = numeric(Ap, Ai, Ax, sym, &num, control, info);
  t.factorize = w.lap();
  if (st == UMFPACK_OK) st = solve(UMFPACK_A, Ap, Ai, Ax, x.data(), b.data<double>(), num, control, info);
  t.solve = w.lap();
  free_numeric(&num);
  free_symbolic(&sym);
  if (st != UMFPACK_OK) throw Error("UMFPACK failed with status " + std::to_string(st));
  return t;
}

Times run_klu(const CsrMatrix& A, const Tensor& b, std::vector<double>& x) {
  static const auto defaults = SS_FN(klu_defaults);
  static const auto analyze = SS_FN(klu_analyze);
  static const auto factor = SS_FN(klu_factor);
  static const auto solve = SS_FN(klu_solve);
  static const auto free_symbolic = SS_FN(klu_free_symbolic);
  static const auto free_numeric = SS_FN(klu_free_numeric);
  const int n = int(A.rows());
  int* Ap = A.row_ptr().data<int32_t>();
  int* Ai = A.col_idx().data<int32_t>();
  double* Ax = A.values().data<double>();
  klu_common c;
  Times t;
  Stopwatch w;
  defaults(&c);
  klu_symbolic* sym = analyze(n, Ap, Ai, &c);
  t.analyze = w.lap();
  klu_numeric* num = sym ? factor(Ap, Ai, Ax, sym, &c) : nullptr;
  t.factorize = w.lap();
  std::memcpy(x.data(), b.data<double>(), size_t(n) * sizeof(double));
  int ok = num ? solve(sym, num, n, 1, x.data(), &c) : 0;
  t.solve = w.lap();
  if (num) free_numeric(&num, &c);
  if (sym) free_symbolic(&sym, &c);
  if (!ok) throw Error("KLU failed with status " + std::to_string(c.status));
  return t;
}

Times run_cholmod(const CsrMatrix& A, const Tensor& b, std::vector<double>& x) {
  static const auto start = SS_FN(cholmod_start);
  static const auto finish = SS_FN(cholmod_finish);
  static const auto analyze = SS_FN(cholmod_analyze);
  static const auto factorize = SS_FN(cholmod_factorize);
  static const auto solve = SS_FN(cholmod_solve);
  static const auto free_factor = SS_FN(cholmod_free_factor);
  static const auto free_dense = SS_FN(cholmod_free_dense);
  const size_t n = size_t(A.rows());
  cholmod_common c;
  cholmod_sparse S{};
  S.nrow = S.ncol = n;
  S.nzmax = size_t(A.nnz());
  S.p = A.row_ptr().data<int32_t>();
  S.i = A.col_idx().data<int32_t>();
  S.x = A.values().data<double>();
  S.stype = 1;  // the upper triangle of the CSC arrays
  S.itype = CHOLMOD_INT;
  S.xtype = CHOLMOD_REAL;
  S.dtype = CHOLMOD_DOUBLE;
  S.sorted = 1;
  S.packed = 1;
  cholmod_dense B{};
  B.nrow = n;
  B.ncol = 1;
  B.nzmax = n;
  B.d = n;
  B.x = b.data<double>();
  B.xtype = CHOLMOD_REAL;
  B.dtype = CHOLMOD_DOUBLE;
  Times t;
  Stopwatch w;
  start(&c);
  cholmod_factor* L = analyze(&S, &c);
  t.analyze = w.lap();
  int ok = L && factorize(&S, L, &c) && c.status == CHOLMOD_OK;
  t.factorize = w.lap();
  cholmod_dense* X = ok ? solve(CHOLMOD_A, L, &B, &c) : nullptr;
  if (X) std::memcpy(x.data(), X->x, n * sizeof(double));
  t.solve = w.lap();
  const int status = c.status;
  if (X) free_dense(&X, &c);
  if (L) free_factor(&L, &c);
  finish(&c);
  if (!ok || status != CHOLMOD_OK) throw Error("CHOLMOD failed with status " + std::to_string(status));
  return t;
}

Times run_direct(const std::string& solver, const CsrMatrix& A, const Tensor& b, std::vector<double>& x) {
  if (solver == "cholmod") return run_cholmod(A, b, x);
  if (solver == "klu") return run_klu(A, b, x);
  return run_umfpack(A, b, x);
}

// ---------------------------------------------------------------- the driver

Problem make_problem(const std::string& spec) {
  for (int dim : {2, 3}) {
    const std::string prefix = "poisson" + std::to_string(dim) + "d:";
    if (spec.rfind(prefix, 0) == 0) {
      const int64_t m = std::stoll(spec.substr(prefix.size()));
      Problem p;
      p.name = spec;
      p.three_d = dim == 3;
      p.A = dim == 2 ? poisson2d(m, DType::F64, DType::I32) : poisson3d(m, DType::F64, DType::I32);
      p.b = Tensor::empty(DType::F64, {p.A.rows()});
      for (int64_t i = 0; i < p.A.rows(); ++i) p.b.data<double>()[i] = rng_unit(7, uint64_t(i)) * 2 - 1;
      return p;
    }
  }
  throw InputError("expected poisson2d:N or poisson3d:N, got '" + spec + "'");
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Which OpenBLAS kernels and threads SuiteSparse's BLAS calls run on (it is loaded by now).
std::string blas_note() {
  void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return "BLAS: not OpenBLAS (libopenblas.so.0 not loaded)";
  auto core = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"));
  auto threads = reinterpret_cast<int (*)()>(dlsym(h, "openblas_get_num_threads"));
  std::string s = std::string("BLAS: OpenBLAS, ") + (core ? core() : "?") + " kernels, " +
                  (threads ? std::to_string(threads()) : "?") + " threads";
  dlclose(h);
  return s;
}

}  // namespace

int bench_direct(int argc, char** argv) {
  std::vector<std::string> problems = {"poisson2d:500", "poisson3d:40"}, solvers = {"cholmod", "umfpack", "klu"};
  int reps = 5;
  Args args("rlx-bench direct",
            "  analyze + factorize + solve through rlx's SparseCholesky / SparseLu and through SuiteSparse directly,\n"
            "  same process, same arrays; medians of N runs (default 5) and the ratio rlx / direct.\n");
  args.option("--problems", "poisson2d:500,poisson3d:40", problems)
      .option("--solvers", "cholmod,umfpack,klu", solvers, {"cholmod", "umfpack", "klu"})
      .option("--reps", "N", reps, 1);
  args.parse(argc, argv);
  const bool solvers_given = args.given("--solvers");
  return run_bench("rlx-bench direct", [&] {
    suitesparse_symbol("umfpack_di_symbolic");  // loads SuiteSparse (and its BLAS) now
    std::printf("direct: SuiteSparse %s on %s, %u hardware threads; %s\n", suitesparse_version().c_str(), cpu_model().c_str(),
                std::thread::hardware_concurrency(), blas_note().c_str());
    std::printf("times: median of %d runs after a warm-up, analyze + factorize + solve, ms\n", reps);
    std::fflush(stdout);
    for (const std::string& spec : problems) {
      Problem p = make_problem(spec);
      std::printf("%s: n=%lld, nnz=%lld\n", p.name.c_str(), (long long)p.A.rows(), (long long)p.A.nnz());
      for (const std::string& solver : solvers) {
        if (solver == "klu" && p.three_d && !solvers_given) continue;
        std::vector<Times> tr, td;
        Tensor xr;
        std::vector<double> xd(size_t(p.A.rows()));
        for (int r = 0; r < reps + 1; ++r) {  // run 0 warms up; the order alternates
          Times a, d;
          if (r % 2 == 0) {
            a = run_rlx(solver, p.A, p.b, xr);
            d = run_direct(solver, p.A, p.b, xd);
          } else {
            d = run_direct(solver, p.A, p.b, xd);
            a = run_rlx(solver, p.A, p.b, xr);
          }
          if (r > 0) tr.push_back(a), td.push_back(d);
        }
        auto med = [](const std::vector<Times>& v, double (*f)(const Times&)) {
          std::vector<double> s;
          for (const Times& t : v) s.push_back(f(t));
          return 1e3 * median(s);
        };
        auto fa = [](const Times& t) { return t.analyze; };
        auto ff = [](const Times& t) { return t.factorize; };
        auto fs = [](const Times& t) { return t.solve; };
        auto ft = [](const Times& t) { return t.total(); };
        // The two answers, and the true residual of each.
        double diff = 0, scale = 0;
        for (int64_t i = 0; i < p.A.rows(); ++i) {
          diff = std::max(diff, std::abs(xr.data<double>()[i] - xd[size_t(i)]));
          scale = std::max(scale, std::abs(xd[size_t(i)]));
        }
        Tensor xdt = Tensor::empty(DType::F64, {p.A.rows()});
        std::copy(xd.begin(), xd.end(), xdt.data<double>());
        const double res_r = relative_residual(p.A, xr, p.b), res_d = relative_residual(p.A, xdt, p.b);
        const double rt = med(tr, ft), dt = med(td, ft);
        double rmin = 1e300, dmin = 1e300;  // the fastest run of each: less sensitive to a busy host
        for (size_t k = 0; k < tr.size(); ++k) rmin = std::min(rmin, 1e3 * tr[k].total()), dmin = std::min(dmin, 1e3 * td[k].total());
        std::printf("  %-8s rlx    %9.1f  (analyze %8.1f  factorize %9.1f  solve %7.1f)  residual %.1e\n", solver.c_str(), rt,
                    med(tr, fa), med(tr, ff), med(tr, fs), res_r);
        std::printf("  %-8s direct %9.1f  (analyze %8.1f  factorize %9.1f  solve %7.1f)  residual %.1e\n", "", dt, med(td, fa),
                    med(td, ff), med(td, fs), res_d);
        std::printf("  %-8s rlx / direct: median %.3f, fastest runs %.3f (%.1f vs %.1f ms)   max |x_rlx - x_direct| / max |x| = %.1e\n",
                    "", rt / dt, rmin / dmin, rmin, dmin, diff / scale);
        Result("direct")
            .add("problem", p.name)
            .add("solver", solver)
            .add("rlx_ms", rt, "%.1f")
            .add("direct_ms", dt, "%.1f")
            .add("ratio", rt / dt, "%.3f")
            .add("min_ratio", rmin / dmin, "%.3f")
            .print();
      }
    }
    return 0;
  });
}

#endif  // RLX_HAVE_SUITESPARSE
