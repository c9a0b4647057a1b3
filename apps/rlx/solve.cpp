// rlx gen and rlx solve: standard test problems and sparse solves from the command line.
#include <chrono>
#include <climits>
#include <cmath>
#include <complex>
#include <cstdio>
#include <iostream>
#include <memory>

#include "args.hpp"
#include "core/rng.hpp"
#include "dist/communicator.hpp"
#include "io/hdf5.hpp"
#include "runtime/device.hpp"
#include "solvers/sparse/direct.hpp"
#include "solvers/sparse/dist_csr.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/matrix_market.hpp"
#include "solvers/sparse/poisson.hpp"
#include "solvers/sparse/tiled.hpp"

namespace rlx::cli {

namespace {

using namespace rlx::sparse;

// "poisson2d:N" / "poisson3d:N" generate in memory; anything else is a Matrix Market file.
CsrMatrix load_matrix(const std::string& spec) {
  for (int dim : {2, 3}) {
    std::string prefix = "poisson" + std::to_string(dim) + "d:";
    if (spec.rfind(prefix, 0) == 0) {
      char* end = nullptr;
      long long n = std::strtoll(spec.c_str() + prefix.size(), &end, 10);
      if (*end != '\0' || n < 1) throw UsageError("expected " + prefix + "N with N >= 1, got '" + spec + "'");
      return dim == 2 ? poisson2d(n) : poisson3d(n);
    }
  }
  return read_matrix_market(spec).matrix;
}

// Runs f(); an InputError it throws (a preconditioner's zero diagonal, a direct solver's
// singular matrix) comes back with the matrix's name in front: the file, or poisson3d:N.
// Parse errors already name their file and line; usage errors name their option.
template <class F>
decltype(auto) naming(const std::string& source, F&& f) {
  try {
    return f();
  } catch (const ParseError&) {
    throw;
  } catch (const UsageError&) {
    throw;
  } catch (const InputError& e) {
    throw InputError(source + ": " + e.what());
  }
}

// The numeric options of rlx solve, range-checked once before anything is loaded.
struct Numbers {
  uint64_t seed;
  double rtol, atol, omega;
  int max_it, restart;
  explicit Numbers(const Args& a)
      : seed(uint64_t(a.integer("seed", 1, 0, INT64_MAX))),
        rtol(a.number("rtol", 1e-8, 0, HUGE_VAL)),
        atol(a.number("atol", 0.0, 0, HUGE_VAL)),
        omega(a.number("omega", 1.0, 0, 2, /*open=*/true)),
        max_it(int(a.integer("max-it", 10000, 0, INT_MAX))),
        restart(int(a.integer("restart", 30, 1, INT_MAX))) {}
};

// Why a Krylov solve stopped without converging, in words, for stderr.
std::string not_converged_why(const KrylovResult& r, const KrylovOptions& o, double rel) {
  char tr[64];
  std::snprintf(tr, sizeof tr, "%.3g", rel);
  switch (r.reason) {
    case StopReason::DivergedMaxIt:
      return "--max-it " + std::to_string(o.max_it) + " iterations did not reach the tolerance (true relative residual " + tr + ")";
    case StopReason::DivergedBreakdown:
      return "the method broke down (a division by zero in its recurrence): the matrix may be singular; another --method may work";
    case StopReason::DivergedIndefinite:
      return "the matrix or the preconditioner is not positive definite: cg needs both SPD (try minres, gmres or bicgstab)";
    case StopReason::DivergedNan: return "a NaN or Inf appeared (a NaN in the input, or an overflow)";
    case StopReason::DivergedStagnation:
      return std::string("no progress: the true residual ||b - A x|| (relative ") + tr +
             ") stopped decreasing, whatever the method's own residual said; the system is probably singular or "
             "inconsistent, or the tolerance is below what this precision can reach";
    default: return "";
  }
}

Tensor make_rhs(const std::string& spec, const CsrMatrix& A, uint64_t seed) {
  DType t = A.value_type();
  int64_t n = A.rows();
  Tensor b = Tensor::empty(t, {n});
  auto set = [&](int64_t i, double re, double im) {
    if (t == DType::F32) b.data<float>()[i] = float(re);
    else if (t == DType::F64) b.data<double>()[i] = re;
    else b.data<c64>()[i] = c64(float(re), float(im));
  };
  if (spec == "ones") {
    for (int64_t i = 0; i < n; ++i) set(i, 1.0, 0.0);
    return b;
  }
  if (spec == "random") {
    for (int64_t i = 0; i < n; ++i) set(i, rng_unit(seed, uint64_t(2 * i)) * 2 - 1, rng_unit(seed, uint64_t(2 * i + 1)) * 2 - 1);
    return b;
  }
  // A Matrix Market vector: array n x 1 (or coordinate n x 1).
  CsrMatrix v = read_matrix_market(spec, ReadOptions{t, std::nullopt, Duplicates::Sum}).matrix;
  if (v.rows() != n || v.cols() != 1)
    throw InputError(spec + ": right-hand side must be " + std::to_string(n) + " x 1, got " + std::to_string(v.rows()) +
                     " x " + std::to_string(v.cols()));
  Tensor dense = v.to_dense();
  return dense.reshape({n});
}

// --method lu | klu | cholesky: UMFPACK, KLU or CHOLMOD through solvers/sparse/direct.hpp,
// on the host, each phase timed. A singular or indefinite matrix is an InputError (exit 2).
int solve_direct(const Args& a, const std::string& method, const Numbers& num) {
  std::string out = a.get("out", "");
  auto t0 = std::chrono::steady_clock::now();
  CsrMatrix A = load_matrix(a.pos[0]);
  if (A.rows() != A.cols()) throw InputError(a.pos[0] + ": the matrix is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", not square");
  Tensor b = make_rhs(a.get("rhs", "ones"), A, num.seed);
  auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
  auto t1 = std::chrono::steady_clock::now();
  std::string backend;
  Tensor x;
  double rcond = 0, t_analyze = 0, t_factor = 0, t_solve = 0;
  int64_t fill = 0;
  auto run = [&](auto& solver) {
    auto ta = std::chrono::steady_clock::now();
    solver.factorize(A);
    auto tb = std::chrono::steady_clock::now();
    x = solver.solve(b);
    auto tc = std::chrono::steady_clock::now();
    t_analyze = seconds(t1, ta), t_factor = seconds(ta, tb), t_solve = seconds(tb, tc);
    rcond = solver.rcond();
    fill = solver.factor_nnz();
  };
  naming(a.pos[0], [&] {
    if (method == "cholesky") {
      backend = "cholmod";
      SparseCholesky c(A);
      run(c);
    } else {
      SparseLu lu(A, method == "klu" ? LuBackend::Klu : LuBackend::Umfpack);
      backend = lu_backend_name(lu.backend());
      run(lu);
    }
  });
  double rel = relative_residual(A, x, b);
  std::printf("matrix: %s (%lld x %lld, %lld nonzeros, %s)\n", a.pos[0].c_str(), (long long)A.rows(), (long long)A.cols(),
              (long long)A.nnz(), dtype_name(A.value_type()));
  std::printf("method: %s (%s, SuiteSparse %s, on the host%s)\n", method.c_str(), backend.c_str(), suitesparse_version().c_str(),
              A.value_type() == DType::F64 ? "" : "; computed in double precision, rounded to the matrix's dtype");
  std::printf("reason: direct  factor nonzeros: %lld  rcond estimate: %.3e  true relative residual: %.3e\n", (long long)fill, rcond, rel);
  std::printf("time: setup %.3f s, analyze %.3f s, factorize %.3f s, solve %.3f s\n", seconds(t0, t1), t_analyze, t_factor, t_solve);
  if (!out.empty()) {
    double bnorm = 0;
    for (int64_t i = 0; i < b.numel(); ++i)
      bnorm += b.dtype() == DType::C64 ? std::norm(b.data<c64>()[i]) : b.dtype() == DType::F64 ? b.data<double>()[i] * b.data<double>()[i]
                                                                                                : double(b.data<float>()[i]) * b.data<float>()[i];
    io::H5Writer w(out);
    w.write("x", x);
    w.write("b", b);
    Tensor h = Tensor::empty(DType::F64, {1});  // the final residual norm ||b - A x||
    h.data<double>()[0] = rel * std::sqrt(bnorm);
    w.write("residual_history", h);
    w.attr("/", "converged", int64_t(1));
    w.attr("/", "reason", std::string("direct"));
    w.attr("/", "iterations", int64_t(0));
    w.attr("/", "residual", rel);
    w.attr("/", "method", method);
    w.attr("/", "pc", std::string("none"));
    w.attr("/", "backend", backend);
    w.attr("/", "analyze_s", t_analyze);
    w.attr("/", "factorize_s", t_factor);
    w.attr("/", "solve_s", t_solve);
    w.commit();
    std::printf("wrote %s\n", out.c_str());
  }
  return kOk;
}

// The options of a Krylov solve that do not depend on how the matrix is held.
KrylovOptions krylov_options(const Args& a, const std::string& method, const Numbers& num, bool print_monitor) {
  KrylovOptions o;
  o.method = method;
  o.rtol = num.rtol;
  o.atol = num.atol;
  o.max_it = num.max_it;
  o.restart = num.restart;
  o.device = a.get("device", "cpu");
  o.policy = policy_from_name(a.get("policy", "prefer-native"));
  if (a.flag("monitor") && print_monitor)
    o.monitor = [](int it, double r) { std::printf("%5d residual norm %.12e\n", it, r); };
  return o;
}

// The solution file of a Krylov solve: x, b, the residual history and the solve's attributes.
void write_krylov_result(const std::string& out, const KrylovResult& r, const Tensor& x, const Tensor& b,
                         const std::string& method, const std::string& pc, const std::string& spmv, double rel,
                         int ranks) {
  io::H5Writer w(out);
  w.write("x", x);
  w.write("b", b);
  w.write("residual_history", [&] {
    Tensor h = Tensor::empty(DType::F64, {int64_t(r.history.size())});
    for (size_t i = 0; i < r.history.size(); ++i) h.data<double>()[i] = r.history[i];
    return h;
  }());
  w.attr("/", "converged", int64_t(converged(r.reason)));
  w.attr("/", "reason", std::string(stop_reason_name(r.reason)));
  w.attr("/", "iterations", int64_t(r.iterations));
  w.attr("/", "residual", rel);
  w.attr("/", "method", method);
  w.attr("/", "pc", pc);
  w.attr("/", "spmv", spmv);
  if (ranks > 0) w.attr("/", "ranks", int64_t(ranks));
  w.commit();
  std::printf("wrote %s\n", out.c_str());
}

// mpirun -n N rlx solve ...: rank 0 reads the matrix and the right-hand side and scatters
// contiguous row blocks (solvers/sparse/dist_csr.hpp); every rank runs the same Krylov
// iteration on its rows, dot products all-reduced; the solution is gathered and rank 0
// prints the summary and writes the file with the serial HDF5 writer (docs/distributed.md
// says why not parallel HDF5). Errors found on one rank are raised on all (CollectiveError).
int solve_distributed(const Args& a, const std::string& method, const std::string& pc, const Numbers& num,
                      const dist::Communicator& comm) {
  const bool root = comm.rank() == 0;
  const std::string spmv_mode = a.get("spmv", "csr");
  if (spmv_mode != "csr" && spmv_mode != "auto")
    throw UsageError("--spmv " + spmv_mode + ": a distributed solve multiplies by its CSR blocks (--spmv csr)");
  const std::string out = a.get("out", "");
  auto t0 = std::chrono::steady_clock::now();
  CsrMatrix A;
  Tensor b;
  std::string why;
  if (root) {
    try {
      A = load_matrix(a.pos[0]);
      if (A.rows() != A.cols())
        why = a.pos[0] + ": the matrix is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", not square";
      else
        b = make_rhs(a.get("rhs", "ones"), A, num.seed);
    } catch (const ParseError& e) {
      why = e.what();
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  dist::raise_collectively(comm, why);
  DistCsrMatrix DA = DistCsrMatrix::scatter(comm, A);
  Tensor b_local = scatter_vector(comm, b, DA.row_starts());
  DistCsrOperator op(DA);
  std::unique_ptr<Preconditioner> M;
  why.clear();
  try {
    M = make_dist_preconditioner(pc, op);
  } catch (const InputError& e) {
    why = a.pos[0] + ": " + e.what();
  }
  dist::raise_collectively(comm, why);
  KrylovOptions o = krylov_options(a, method, num, root);
  auto t1 = std::chrono::steady_clock::now();
  KrylovResult r = krylov_solve(op, b_local, *M, o);
  auto t2 = std::chrono::steady_clock::now();
  Tensor x = gather_vector(comm, r.x, DA.row_starts());
  const int64_t rows_min = comm.all_reduce(DA.local_rows(), ReduceOp::Min), rows_max = comm.all_reduce(DA.local_rows(), ReduceOp::Max);
  const int64_t sent = int64_t(dtype_storage_bytes(DA.value_type(), DA.halo().pattern().sends()));
  const int64_t halo_total = comm.all_reduce(sent, ReduceOp::Sum), halo_max = comm.all_reduce(DA.halo_bytes(), ReduceOp::Max);
  const bool ok = converged(r.reason);
  if (!root) return ok ? kOk : kNotConverged;
  if (a.flag("explain")) std::cout << r.report.table();
  const double rel = relative_residual(A, x, b);
  std::printf("matrix: %s (%lld x %lld, %lld nonzeros, %s)\n", a.pos[0].c_str(), (long long)A.rows(), (long long)A.cols(),
              (long long)A.nnz(), dtype_name(A.value_type()));
  std::printf("method: %s  pc: %s  device: %s\n", method.c_str(), pc.c_str(), o.device.c_str());
  std::printf("ranks: %d  rows per rank: %lld-%lld  halo per SpMV: %lld bytes sent in all (at most %lld sent+received by one rank)\n",
              comm.size(), (long long)rows_min, (long long)rows_max, (long long)halo_total, (long long)halo_max);
  std::printf("reason: %s  iterations: %d  true relative residual: %.3e\n", stop_reason_name(r.reason), r.iterations, rel);
  std::printf("time: setup %.3f s, solve %.3f s\n", std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count());
  if (!out.empty()) write_krylov_result(out, r, x, b, method, pc, "csr", rel, comm.size());
  if (!ok)
    std::fprintf(stderr, "rlx: %s: not converged (%s): %s\n", a.pos[0].c_str(), stop_reason_name(r.reason),
                 not_converged_why(r, o, rel).c_str());
  return ok ? kOk : kNotConverged;
}

}  // namespace

int cmd_gen(const Args& a) {
  if (a.pos.size() != 1 || a.pos[0] != "poisson") throw UsageError("gen supports one problem: gen poisson --dim 2|3 --n N -o FILE.mtx");
  int64_t dim = a.integer("dim", 2, 2, 3), n = a.integer("n", 0, 1, INT64_MAX);
  std::string out = a.get("out", "");
  if (n < 1) throw UsageError("--n must be >= 1");
  if (out.empty()) throw UsageError("gen needs -o FILE.mtx");
  CsrMatrix A = dim == 2 ? poisson2d(n) : poisson3d(n);
  WriteOptions w;
  w.symmetry = MmSymmetry::Symmetric;
  write_matrix_market(out, A, w);
  std::cout << out << ": " << A.rows() << " x " << A.cols() << ", " << A.nnz() << " nonzeros (" << dim << "D Poisson, n="
            << n << ")\n";
  return kOk;
}

int cmd_solve(const Args& a) {
  if (a.pos.size() != 1) throw UsageError("solve takes one matrix: FILE.mtx or poisson2d:N / poisson3d:N");
  std::string method = a.get("method", "pcg"), pc = a.get("pc", method == "pcg" ? "jacobi" : "none");
  const Numbers num(a);
  if (method == "lu" || method == "klu" || method == "cholesky") {
    if (a.has("spmv")) throw UsageError("--spmv applies to the Krylov methods, not to " + method);
    return solve_direct(a, method, num);
  }
  // Under mpirun with more than one rank: the distributed solve (one rank: the serial one).
  if (const dist::Communicator world = dist::Communicator::world(); world.size() > 1)
    return solve_distributed(a, method, pc, num, world);
  std::string out = a.get("out", "");
  auto t0 = std::chrono::steady_clock::now();
  CsrMatrix A = load_matrix(a.pos[0]);
  if (A.rows() != A.cols()) throw InputError(a.pos[0] + ": the matrix is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", not square");
  Tensor b = make_rhs(a.get("rhs", "ones"), A, num.seed);
  CsrOperator op(A);
  auto M = naming(a.pos[0], [&] { return make_preconditioner(pc, op, num.omega); });
  // --spmv tiled: the matrix laid out once more in tiles for the GPU (solvers/sparse/tiled.hpp,
  // shaped for the device's GPU, else an H200), the Krylov iteration multiplying by that
  // copy; auto (the default): tiled where it was measured to pay (sparse::choose_spmv), said.
  const std::string mode = a.get("spmv", "auto");  // (checked by operator_for)
  // (Built by the tile_csr op on the solve's device: on a GPU the layout never visits the host.)
  OperatorChoice choice = operator_for(op, DeviceRegistry::get().runnable_at(a.get("device", "cpu")), mode);
  if (mode == "auto") std::printf("spmv: %s (--spmv auto)\n", choice.why.c_str());
  const std::string spmv = choice.op ? "tiled" : "csr";
  const std::unique_ptr<TiledOperator>& tiled = choice.op;
  if (tiled) {
    std::printf("operator: %s (%s)\n", tiled->describe().c_str(), choice.layout.c_str());
    const double per_row = A.rows() ? double(A.nnz()) / double(A.rows()) : 0.0;
    if (per_row < kTiledRowLength)
      std::fprintf(stderr, "rlx: note: %.1f nonzeros per row; the tiled layout was measured to pay from %d per row, "
                   "CSR is faster here (docs/solvers.md)\n", per_row, int(kTiledRowLength));
  }
  const LinearOperator& apply = tiled ? static_cast<const LinearOperator&>(*tiled) : op;
  KrylovOptions o = krylov_options(a, method, num, true);
  auto t1 = std::chrono::steady_clock::now();
  KrylovResult r = naming(a.pos[0], [&] { return krylov_solve(apply, b, *M, o); });
  auto t2 = std::chrono::steady_clock::now();
  if (a.flag("explain")) std::cout << r.report.table();
  double rel = relative_residual(A, r.x, b);
  bool ok = converged(r.reason);
  std::printf("matrix: %s (%lld x %lld, %lld nonzeros, %s)\n", a.pos[0].c_str(), (long long)A.rows(), (long long)A.cols(),
              (long long)A.nnz(), dtype_name(A.value_type()));
  std::printf("method: %s  pc: %s  device: %s\n", method.c_str(), M->name().c_str(), o.device.c_str());
  std::printf("reason: %s  iterations: %d  true relative residual: %.3e\n", stop_reason_name(r.reason), r.iterations, rel);
  std::printf("time: setup %.3f s, solve %.3f s\n", std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count());
  if (!out.empty()) write_krylov_result(out, r, r.x, b, method, M->name(), spmv, rel, 0);
  if (!ok)
    std::fprintf(stderr, "rlx: %s: not converged (%s): %s\n", a.pos[0].c_str(), stop_reason_name(r.reason),
                 not_converged_why(r, o, rel).c_str());
  return ok ? kOk : kNotConverged;
}

}  // namespace rlx::cli
