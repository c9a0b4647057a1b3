// rlx-bench dense: dense factorizations in f64 through compile()/Executor on a device
// (lu_factor, cholesky, qr, svd, eigh), next to the same LAPACK routines called directly
// on the OpenBLAS the cpu device loads (dgetrf_, dpotrf_, dgeqrf_ + dorgqr_, dgesdd_,
// dsyevd_), same matrices, same process, runs interleaved.
//
// What each side does per run:
//   rlx     Executor::run_into with preallocated results: the device copies A (its inputs
//           are read-only), calls LAPACK, and lays the results out row-major.
//   LAPACK  the routine(s) on a column-major copy of A made before the clock starts,
//           including the workspace query and allocation; QR also extracts R, as rlx
//           returns it. This is the floor: no copy of the input, no layout work.
//           "+copy of A" adds the memcpy that refills LAPACK's buffer: what a caller who
//           keeps A pays, as rlx (whose inputs are read-only) always does.
// Every figure is the median of --reps timed runs after one warm-up run of each. The
// results of both sides are compared (max difference, printed), so a fast wrong answer
// shows. OPENBLAS_VERBOSE=2 in the environment makes OpenBLAS print its core as well.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "apps/bench/common.hpp"
#include "devices/cpu/gemm.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/frontend.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;
using namespace rlx::bench;

namespace {

using lint = int;
using flen = std::size_t;

// Lets threads that still spin after one library call settle before the next contender.
void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

struct Options {
  std::vector<int64_t> sizes = {512, 1024, 2048};
  std::vector<std::string> ops = {"lu_factor", "cholesky", "qr", "svd", "eigh"};
  int reps = 0;  // 0: 7 up to n = 1024, 5 above (3 for svd/eigh above 1024)
  std::string device = "cpu";
};

template <class F>
F sym(const char* name) {
  void* p = cpu::blas_symbol(name);
  if (!p) throw Error(std::string("rlx-bench dense: the loaded OpenBLAS lacks ") + name);
  return reinterpret_cast<F>(p);
}

// The LAPACK side of one op: run() works on `a` (a column-major copy of the input) and
// leaves its results in `out` for the cross-check.
struct Direct {
  std::vector<double> a;
  std::vector<std::vector<double>> out;
  std::vector<lint> ipiv;
  std::function<void()> run;
};

Direct make_direct(const std::string& op, int64_t n64) {
  Direct d;
  const lint n = lint(n64);
  const size_t nn = size_t(n64 * n64);
  d.a.resize(nn);
  if (op == "lu_factor") {
    using F = void (*)(const lint*, const lint*, double*, const lint*, lint*, lint*);
    auto f = sym<F>("dgetrf_");
    d.ipiv.resize(size_t(n));
    d.run = [&d, f, n] {
      lint info = 0;
      f(&n, &n, d.a.data(), &n, d.ipiv.data(), &info);
      if (info != 0) throw Error("dgetrf_ info " + std::to_string(info));
    };
  } else if (op == "cholesky") {
    using F = void (*)(const char*, const lint*, double*, const lint*, lint*, flen);
    auto f = sym<F>("dpotrf_");
    d.run = [&d, f, n] {
      lint info = 0;
      f("L", &n, d.a.data(), &n, &info, 1);
      if (info != 0) throw Error("dpotrf_ info " + std::to_string(info));
    };
  } else if (op == "qr") {
    using Geqrf = void (*)(const lint*, const lint*, double*, const lint*, double*, double*, const lint*, lint*);
    using Orgqr = void (*)(const lint*, const lint*, const lint*, double*, const lint*, const double*, double*,
                           const lint*, lint*);
    auto geqrf = sym<Geqrf>("dgeqrf_");
    auto orgqr = sym<Orgqr>("dorgqr_");
    d.out.assign(1, std::vector<double>(nn));  // R, column-major
    d.run = [&d, geqrf, orgqr, n] {
      const size_t un = size_t(n);
      std::vector<double> tau(un);
      lint info = 0, q = -1;
      double w1 = 0, w2 = 0;
      geqrf(&n, &n, d.a.data(), &n, tau.data(), &w1, &q, &info);
      orgqr(&n, &n, &n, d.a.data(), &n, tau.data(), &w2, &q, &info);
      lint lwork = lint(std::max(w1, w2));
      std::vector<double> work(static_cast<size_t>(lwork));
      geqrf(&n, &n, d.a.data(), &n, tau.data(), work.data(), &lwork, &info);
      if (info != 0) throw Error("dgeqrf_ info " + std::to_string(info));
      double* r = d.out[0].data();
      for (size_t j = 0; j < un; ++j)
        for (size_t i = 0; i < un; ++i) r[j * un + i] = i <= j ? d.a[j * un + i] : 0.0;
      orgqr(&n, &n, &n, d.a.data(), &n, tau.data(), work.data(), &lwork, &info);
      if (info != 0) throw Error("dorgqr_ info " + std::to_string(info));
    };
  } else if (op == "svd") {
    using F = void (*)(const char*, const lint*, const lint*, double*, const lint*, double*, double*, const lint*,
                       double*, const lint*, double*, const lint*, lint*, lint*, flen);
    auto f = sym<F>("dgesdd_");
    d.out.assign(3, std::vector<double>(nn));  // S (first n), U, VT
    d.run = [&d, f, n] {
      std::vector<lint> iwork(size_t(8 * n));
      lint info = 0, q = -1;
      double wq = 0;
      f("S", &n, &n, d.a.data(), &n, d.out[0].data(), d.out[1].data(), &n, d.out[2].data(), &n, &wq, &q,
        iwork.data(), &info, 1);
      lint lwork = lint(wq);
      std::vector<double> work(static_cast<size_t>(lwork));
      f("S", &n, &n, d.a.data(), &n, d.out[0].data(), d.out[1].data(), &n, d.out[2].data(), &n, work.data(), &lwork,
        iwork.data(), &info, 1);
      if (info != 0) throw Error("dgesdd_ info " + std::to_string(info));
    };
  } else if (op == "eigh") {
    using F = void (*)(const char*, const char*, const lint*, double*, const lint*, double*, double*, const lint*,
                       lint*, const lint*, lint*, flen, flen);
    auto f = sym<F>("dsyevd_");
    d.out.assign(1, std::vector<double>(size_t(n)));  // w
    d.run = [&d, f, n] {
      lint info = 0, q = -1, iq = 0;
      double wq = 0;
      f("V", "L", &n, d.a.data(), &n, d.out[0].data(), &wq, &q, &iq, &q, &info, 1, 1);
      lint lwork = lint(wq), liwork = iq;
      std::vector<double> work(static_cast<size_t>(lwork));
      std::vector<lint> iwork(static_cast<size_t>(liwork));
      f("V", "L", &n, d.a.data(), &n, d.out[0].data(), work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
      if (info != 0) throw Error("dsyevd_ info " + std::to_string(info));
    };
  } else {
    throw InputError("rlx-bench dense: unknown op '" + op + "' (lu_factor, cholesky, qr, svd, eigh)");
  }
  return d;
}

// The input for op: general for LU, QR and SVD (uniform [-1, 1]), B B^T + n I for
// Cholesky, (B + B^T) / 2 for eigh. Row-major.
Tensor make_input(const std::string& op, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor b = Tensor::empty(DType::F64, {n, n});
  double* p = b.data<double>();
  for (int64_t i = 0; i < n * n; ++i) p[i] = u(rng);
  if (op == "cholesky") {
    Tensor a = Tensor::empty(DType::F64, {n, n});
    cpu::gemm(false, true, n, n, n, p, n, p, n, a.data<double>(), n);
    for (int64_t i = 0; i < n; ++i) a.data<double>()[i * n + i] += double(n);
    return a;
  }
  if (op == "eigh") {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) p[i * n + j] = p[j * n + i] = 0.5 * (p[i * n + j] + p[j * n + i]);
  }
  return b;
}

// max |rlx - LAPACK| over what both return uniquely, relative to the largest value.
double cross_check(const std::string& op, int64_t n, const std::vector<Tensor>& rlx_out, const Direct& d) {
  const size_t un = size_t(n);
  double diff = 0, scale = 0;
  auto cmp = [&](double x, double y) {
    diff = std::max(diff, std::fabs(x - y));
    scale = std::max(scale, std::fabs(y));
  };
  if (op == "lu_factor") {  // row-major lu vs column-major; pivots 0- vs 1-based
    const double* lu = rlx_out[0].data<double>();
    const int32_t* piv = rlx_out[1].data<int32_t>();
    for (size_t i = 0; i < un; ++i) {
      if (piv[i] + 1 != d.ipiv[i]) return INFINITY;
      for (size_t j = 0; j < un; ++j) cmp(lu[i * un + j], d.a[j * un + i]);
    }
  } else if (op == "cholesky") {
    const double* l = rlx_out[0].data<double>();
    for (size_t i = 0; i < un; ++i)
      for (size_t j = 0; j <= i; ++j) cmp(l[i * un + j], d.a[j * un + i]);
  } else if (op == "qr") {  // |R| (R is unique up to the sign of each row)
    const double* r = rlx_out[1].data<double>();
    for (size_t i = 0; i < un; ++i)
      for (size_t j = i; j < un; ++j) cmp(std::fabs(r[i * un + j]), std::fabs(d.out[0][j * un + i]));
  } else if (op == "svd") {
    const double* s = rlx_out[1].data<double>();
    for (size_t i = 0; i < un; ++i) cmp(s[i], d.out[0][i]);
  } else if (op == "eigh") {
    const double* w = rlx_out[0].data<double>();
    for (size_t i = 0; i < un; ++i) cmp(w[i], d.out[0][i]);
  }
  return diff / std::max(scale, 1e-300);
}

void bench_one(Device& dev, const std::string& op, int64_t n, const Options& o) {
  const Tensor a = make_input(op, n, 1000 + uint64_t(n));
  ir::Graph g;
  Var av = input(g, "A", DType::F64, {n, n});
  output(g, op_multi(op, {av}));
  Program p = compile(g, dev);
  Executor ex(p, dev);
  std::vector<Tensor> res;
  for (const ir::Value& v : g.results) {
    const TensorType& t = g.type(v);
    res.push_back(Tensor::empty(t.dtype, t.shape));
    std::memset(res.back().raw(), 0, res.back().nbytes());
  }
  Direct d = make_direct(op, n);
  // LAPACK's copy: column-major A (A^T's row-major storage).
  std::vector<double> colmajor(size_t(n * n));
  const double* ap = a.data<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) colmajor[size_t(j * n + i)] = ap[i * n + j];

  const bool slow = (op == "svd" || op == "eigh") && n > 1024;
  const int reps = o.reps ? o.reps : slow ? 3 : n > 1024 ? 5 : 7;
  std::vector<double> tr, tl, tc;
  for (int r = 0; r < reps + 1; ++r) {
    pause();
    auto t0 = Clock::now();
    ex.run_into({a}, res);
    const double t_rlx = seconds_since(t0);
    pause();
    t0 = Clock::now();
    std::memcpy(d.a.data(), colmajor.data(), colmajor.size() * sizeof(double));
    const double t_copy = seconds_since(t0);
    t0 = Clock::now();
    d.run();
    const double t_lapack = seconds_since(t0);
    if (r >= 1) tr.push_back(t_rlx), tl.push_back(t_lapack), tc.push_back(t_lapack + t_copy);
  }
  const double mr = median(tr), ml = median(tl), mc = median(tc), check = cross_check(op, n, res, d);
  std::printf("%-10s n=%-5lld rlx %9.2f ms  LAPACK %9.2f ms (+copy of A %9.2f ms)  rlx/LAPACK %6.3f (%6.3f)  "
              "min %.2f / %.2f ms  |rlx-LAPACK| %.1e\n",
              op.c_str(), (long long)n, mr * 1e3, ml * 1e3, mc * 1e3, mr / ml, mr / mc,
              *std::min_element(tr.begin(), tr.end()) * 1e3, *std::min_element(tl.begin(), tl.end()) * 1e3, check);
  Result("dense")
      .add("op", op)
      .add("n", n)
      .add("rlx_ms", mr * 1e3, "%.3f")
      .add("lapack_ms", ml * 1e3, "%.3f")
      .add("lapack_with_copy_ms", mc * 1e3, "%.3f")
      .add("ratio", mr / ml, "%.4f")
      .add("ratio_with_copy", mr / mc, "%.4f")
      .add("reps", reps)
      .add("check", check, "%.2e")
      .print();
}

}  // namespace

int bench_dense_la(int argc, char** argv) {
  Options o;
  Args args("rlx-bench dense",
            "f64 factorizations of n x n matrices through rlx, next to LAPACK called directly on the\n"
            "OpenBLAS the cpu device loads. Threads: RLX_NUM_THREADS (OpenBLAS gets as many).\n");
  args.option("--sizes", "512,1024,2048", o.sizes)
      .option("--ops", "lu_factor,cholesky,qr,svd,eigh", o.ops, Options{}.ops)
      .option("--reps", "N", o.reps)
      .option("--device", "cpu", o.device);
  args.parse(argc, argv);
  return run_bench("rlx-bench dense", [&] {
    Device& dev = DeviceRegistry::get().at(o.device);
    const cpu::BlasInfo& bi = cpu::blas_info();
    if (!bi.loaded) {
      std::fprintf(stderr, "rlx-bench dense: OpenBLAS is not loaded (%s): nothing to compare with\n", bi.note.c_str());
      return 1;
    }
    print_device(dev);
    std::printf("OpenBLAS: %s, core %s (%s), %d threads; LAPACK called directly through the same library\n",
                bi.library.c_str(), bi.corename.c_str(), bi.note.c_str(), cpu::num_threads());
    for (const std::string& op : o.ops)
      for (int64_t n : o.sizes) bench_one(dev, op, n, o);
    return 0;
  });
}
