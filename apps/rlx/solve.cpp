// rlx gen and rlx solve: standard test problems and sparse solves from the command line.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <complex>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

#include "args.hpp"
#include "core/rng.hpp"
#include "dist/communicator.hpp"
#ifdef RLX_HAVE_HDF5_PARALLEL
#include "dist/parallel_hdf5.hpp"
#endif
#include "io/hdf5.hpp"
#include "runtime/device.hpp"
#include "solvers/sparse/direct.hpp"
#include "solvers/sparse/dist_csr.hpp"
#include "solvers/sparse/dist_matrix_market.hpp"
#include "solvers/sparse/hdf5_matrix.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/matrix_market.hpp"
#include "solvers/sparse/dist_partition.hpp"
#include "solvers/sparse/partition.hpp"
#include "solvers/sparse/poisson.hpp"
#include "solvers/sparse/tiled.hpp"

namespace rlx::cli {

namespace {

using namespace rlx::sparse;

// "poisson2d:N" / "poisson3d:N" generate in memory; FILE.h5[:GROUP] is rlx's HDF5 CSR
// layout (solvers/sparse/hdf5_matrix.hpp); anything else is a Matrix Market file.
CsrMatrix load_matrix(const std::string& spec) {
  if (const auto h5 = hdf5_matrix_spec(spec)) return read_hdf5_csr(h5->path, h5->group);
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

// The right-hand side's entries for the given rows of an n-row system (rows: the user's row
// numbers, so a rank computes its own part of ones/random without the others); a Matrix
// Market vector is read whole, `rows` ignored.
Tensor make_rhs(const std::string& spec, DType t, int64_t n, const std::vector<int64_t>& rows, uint64_t seed) {
  const int64_t m = int64_t(rows.size());
  Tensor b = Tensor::empty(t, {m});
  auto set = [&](int64_t k, double re, double im) {
    if (t == DType::F32) b.data<float>()[k] = float(re);
    else if (t == DType::F64) b.data<double>()[k] = re;
    else b.data<c64>()[k] = c64(float(re), float(im));
  };
  if (spec == "ones") {
    for (int64_t k = 0; k < m; ++k) set(k, 1.0, 0.0);
    return b;
  }
  if (spec == "random") {
    for (int64_t k = 0; k < m; ++k) {
      const uint64_t i = uint64_t(rows[size_t(k)]);
      set(k, rng_unit(seed, 2 * i) * 2 - 1, rng_unit(seed, 2 * i + 1) * 2 - 1);
    }
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

Tensor make_rhs(const std::string& spec, const CsrMatrix& A, uint64_t seed) {
  std::vector<int64_t> rows(static_cast<size_t>(A.rows()));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int64_t(i);
  return make_rhs(spec, A.value_type(), A.rows(), rows, seed);
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
  o.orthogonalization = a.get("orthog", "cgs2");  // (checked by cmd_solve)
  o.device = a.get("device", "cpu");
  o.policy = policy_from_name(a.get("policy", "prefer-native"));
  if (a.flag("monitor") && print_monitor)
    o.monitor = [](int it, double r) { std::printf("%5d residual norm %.12e\n", it, r); };
  return o;
}

// The method as the summary names it: GMRES with its Gram-Schmidt ("gmres (cgs2)").
std::string method_label(const std::string& method, const KrylovOptions& o) {
  return method == "gmres" ? method + " (" + o.orthogonalization + ")" : method;
}

Tensor history_tensor(const KrylovResult& r) {
  Tensor h = Tensor::empty(DType::F64, {int64_t(r.history.size())});
  for (size_t i = 0; i < r.history.size(); ++i) h.data<double>()[i] = r.history[i];
  return h;
}

// The root attributes of a Krylov solve's file (docs/io.md), in the order written.
std::vector<std::pair<std::string, io::H5Attr>> result_attributes(const KrylovResult& r, const std::string& method,
                                                                  const std::string& pc, const std::string& spmv, double rel) {
  return {{"converged", int64_t(converged(r.reason))},
          {"reason", std::string(stop_reason_name(r.reason))},
          {"iterations", int64_t(r.iterations)},
          {"residual", rel},
          {"method", method},
          {"pc", pc},
          {"spmv", spmv}};
}

// The solution file of a Krylov solve: x, b, the residual history and the solve's
// attributes (and `ranks`, the processes that solved, when ranks > 0).
void write_krylov_result(const std::string& out, const KrylovResult& r, const Tensor& x, const Tensor& b,
                         const std::string& method, const std::string& pc, const std::string& spmv, double rel,
                         int ranks) {
  io::H5Writer w(out);
  w.write("x", x);
  w.write("b", b);
  w.write("residual_history", history_tensor(r));
  for (const auto& [name, value] : result_attributes(r, method, pc, spmv, rel)) w.attr("/", name, value);
  if (ranks > 0) w.attr("/", "ranks", int64_t(ranks));
  w.commit();
  std::printf("wrote %s\n", out.c_str());
}

// The solution file of a distributed solve, the serial layout plus `ranks`, x and b in the
// user's row order. Default build: both gathered (collective) and written by rank 0 with the
// serial HDF5 writer. With RLX_HDF5_PARALLEL every rank writes its own rows of one file
// (dist/parallel_hdf5.hpp), nothing gathered.
void write_distributed_result(const std::string& out, const KrylovResult& r, const DistCsrMatrix& A, const Tensor& b_local,
                              const std::string& method, const std::string& pc, double rel) {
  const dist::Communicator& comm = A.communicator();
#ifdef RLX_HAVE_HDF5_PARALLEL
  dist::ParallelH5Writer w(comm, out);
  const std::vector<int64_t> rows = A.user_rows();
  w.write_rows("x", r.x, A.global_rows(), rows);
  w.write_rows("b", b_local, A.global_rows(), rows);
  w.write_whole("residual_history", history_tensor(r));
  for (const auto& [name, value] : result_attributes(r, method, pc, "csr", rel)) w.attr(name, value);
  w.attr("ranks", int64_t(comm.size()));
  w.commit();
  if (comm.rank() == 0) std::printf("wrote %s (parallel HDF5, %d ranks)\n", out.c_str(), comm.size());
#else
  const Tensor x = gather_vector(r.x, A), b = gather_vector(b_local, A);
  if (comm.rank() == 0) write_krylov_result(out, r, x, b, method, pc, "csr", rel, comm.size());
#endif
}

// Whether the distributed solve reads this matrix with every rank at once: a Matrix Market
// or HDF5 file, split contiguously, then (--partition ptscotch) partitioned in parallel. A
// METIS or Scotch partition needs the whole graph on one rank, so with --partition
// metis|scotch rank 0 reads the file; poisson2d:N / poisson3d:N are generated by rank 0.
bool read_in_parallel(const std::string& spec, const std::string& partition) {
  return (partition == "contiguous" || is_parallel_partitioner(partition)) && spec.rfind("poisson", 0) != 0;
}

// mpirun -n N rlx solve ...: the matrix reaches the ranks in one of two ways: each rank
// reads its share of the .mtx or .h5 file (solvers/sparse/dist_matrix_market.hpp,
// hdf5_matrix.hpp), or rank 0
// loads it, partitions it (--partition contiguous|metis|scotch, solvers/sparse/partition.hpp) and
// scatters each rank its rows. Every rank runs the same Krylov iteration on its rows, dot
// products all-reduced; the residual is computed over the ranks; the solution comes back
// in the user's row order, and rank 0 prints the summary and writes the file (serial HDF5,
// or with RLX_HDF5_PARALLEL every rank its rows of one file). Errors found on one rank are
// raised on all (CollectiveError).
int solve_distributed(const Args& a, const std::string& method, const std::string& pc, const std::string& partition,
                      const Numbers& num, const dist::Communicator& comm) {
  const bool root = comm.rank() == 0;
  const std::string spmv_mode = a.get("spmv", "csr");
  if (spmv_mode != "csr" && spmv_mode != "auto")
    throw UsageError("--spmv " + spmv_mode + ": a distributed solve multiplies by its CSR blocks (--spmv csr)");
  const std::string out = a.get("out", "");
  const std::string spec = a.pos[0], rhs = a.get("rhs", "ones");
  auto t0 = std::chrono::steady_clock::now();
  std::optional<DistCsrMatrix> DA;
  std::string how;
  if (const auto h5 = hdf5_matrix_spec(spec); h5 && read_in_parallel(spec, partition)) {
    DA.emplace(read_hdf5_csr_distributed(comm, h5->path, h5->group));
    how = "read in parallel";
  } else if (read_in_parallel(spec, partition)) {
    DistReadInfo info;
    DA.emplace(read_matrix_market_distributed(comm, spec, &info));
    how = info.parallel ? "read in parallel" : "read by rank 0 (" + std::string(mm_name(info.header.format)) + " " +
                                                   mm_name(info.header.field) + ")";
  } else {
    CsrMatrix A;
    RowPartition part;
    std::string why;
    if (root) {
      try {
        A = load_matrix(spec);
        if (A.rows() != A.cols())
          why = spec + ": the matrix is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", not square";
        else  // (a parallel partitioner starts from the contiguous split, below)
          part = make_partition(is_parallel_partitioner(partition) ? "contiguous" : partition, A, comm.size());
      } catch (const InputError& e) {  // (ParseError and UsageError are InputErrors)
        why = e.what();
      }
    }
    dist::raise_collectively(comm, why);
    DA.emplace(DistCsrMatrix::scatter(comm, A, part));
    how = spec.rfind("poisson", 0) == 0 ? "generated by rank 0" : "read by rank 0";
  }
  if (is_parallel_partitioner(partition)) {
    DA.emplace(repartition(*DA, partition));
    how += ", partitioned in parallel";
  }
  const DistCsrMatrix& M0 = *DA;
  // The right-hand side: ones and random computed by each rank for its own rows; a file
  // read by rank 0 and scattered.
  Tensor b_local;
  {
    std::string why;
    if (rhs == "ones" || rhs == "random") {
      b_local = make_rhs(rhs, M0.value_type(), M0.global_rows(), M0.user_rows(), num.seed);
    } else {
      Tensor b;
      if (root) {
        try {
          b = make_rhs(rhs, M0.value_type(), M0.global_rows(), {}, num.seed);
        } catch (const InputError& e) {
          why = e.what();
        }
      }
      dist::raise_collectively(comm, why);
      b_local = scatter_vector(b, M0);
    }
  }
  DistCsrOperator op(M0);
  std::unique_ptr<Preconditioner> M;
  {
    std::string why;
    try {
      M = make_dist_preconditioner(pc, op);
    } catch (const InputError& e) {
      why = spec + ": " + e.what();
    }
    dist::raise_collectively(comm, why);
  }
  const DistCsrMatrix& DM = op.matrix();
  KrylovOptions o = krylov_options(a, method, num, root);
  // The ranks finish their setup at different times (rank 0 built and sent the matrix): the
  // solve's clock starts when all of them are ready, as a PETSc user times KSPSolve.
  comm.barrier();
  auto t1 = std::chrono::steady_clock::now();
  KrylovResult r = krylov_solve(op, b_local, *M, o);
  auto t2 = std::chrono::steady_clock::now();
  const double rel = relative_residual(DM, r.x, b_local);
  const int64_t rows_min = comm.all_reduce(DM.local_rows(), ReduceOp::Min), rows_max = comm.all_reduce(DM.local_rows(), ReduceOp::Max);
  const int64_t nnz = comm.all_reduce(DM.diagonal_block().nnz() + DM.off_diagonal_block().nnz(), ReduceOp::Sum);
  const int64_t sent = int64_t(dtype_storage_bytes(DM.value_type(), DM.halo().pattern().sends()));
  const int64_t halo_total = comm.all_reduce(sent, ReduceOp::Sum), halo_max = comm.all_reduce(DM.halo_bytes(), ReduceOp::Max);
  const bool ok = converged(r.reason);
  if (root) {
    if (a.flag("explain")) std::cout << r.report.table();
    std::printf("matrix: %s (%lld x %lld, %lld nonzeros, %s; %s)\n", spec.c_str(), (long long)DM.global_rows(),
                (long long)DM.global_rows(), (long long)nnz, dtype_name(DM.value_type()), how.c_str());
    std::printf("method: %s  pc: %s  device: %s\n", method_label(method, o).c_str(), pc.c_str(), o.device.c_str());
    std::printf("ranks: %d  partition: %s  rows per rank: %lld-%lld  halo per SpMV: %lld bytes sent in all (at most %lld sent+received by one rank)\n",
                comm.size(), DM.partition_kind().c_str(), (long long)rows_min, (long long)rows_max, (long long)halo_total,
                (long long)halo_max);
    std::printf("reason: %s  iterations: %d  true relative residual: %.3e\n", stop_reason_name(r.reason), r.iterations, rel);
    std::printf("time: setup %.3f s, solve %.3f s\n", std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(t2 - t1).count());
    std::fflush(stdout);
  }
  if (!out.empty()) write_distributed_result(out, r, DM, b_local, method, pc, rel);
  if (root && !ok)
    std::fprintf(stderr, "rlx: %s: not converged (%s): %s\n", spec.c_str(), stop_reason_name(r.reason),
                 not_converged_why(r, o, rel).c_str());
  return ok ? kOk : kNotConverged;
}

}  // namespace

int cmd_gen(const Args& a) {
  if (a.pos.size() != 1 || a.pos[0] != "poisson")
    throw UsageError("gen supports one problem: gen poisson --dim 2|3 --n N [--shuffle SEED] -o FILE.mtx|FILE.h5");
  int64_t dim = a.integer("dim", 2, 2, 3), n = a.integer("n", 0, 1, INT64_MAX);
  std::string out = a.get("out", "");
  if (n < 1) throw UsageError("--n must be >= 1");
  if (out.empty()) throw UsageError("gen needs -o FILE.mtx or -o FILE.h5");
  CsrMatrix A = dim == 2 ? poisson2d(n) : poisson3d(n);
  // --shuffle SEED: the unknowns numbered at random (P A P^T), the same matrix without the
  // grid's locality in its numbering: what --partition metis and scotch are for.
  const bool shuffled = a.has("shuffle");
  if (shuffled) {
    std::vector<int64_t> order(static_cast<size_t>(A.rows()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    std::mt19937_64 rng(uint64_t(a.integer("shuffle", 0, 0, INT64_MAX)));
    std::shuffle(order.begin(), order.end(), rng);
    A = permute_symmetric(A, order);
  }
  if (const auto h5 = hdf5_matrix_spec(out)) {  // rlx's HDF5 CSR layout (docs/io.md)
    io::H5Writer w(h5->path);
    w.write_csr(h5->group == "/" ? "" : h5->group, io::CsrArrays{A.row_ptr(), A.col_idx(), A.values(), A.rows(), A.cols()});
    w.commit();
    out = h5->path;
  } else {
    WriteOptions w;
    w.symmetry = MmSymmetry::Symmetric;
    write_matrix_market(out, A, w);
  }
  std::cout << out << ": " << A.rows() << " x " << A.cols() << ", " << A.nnz() << " nonzeros (" << dim << "D Poisson, n="
            << n << (shuffled ? ", rows numbered at random" : "") << ")\n";
  return kOk;
}

int cmd_solve(const Args& a) {
  if (a.pos.size() != 1) throw UsageError("solve takes one matrix: FILE.mtx, FILE.h5[:GROUP] or poisson2d:N / poisson3d:N");
  std::string method = a.get("method", "pcg"), pc = a.get("pc", method == "pcg" ? "jacobi" : "none");
  const Numbers num(a);
  // --orthog: GMRES's Gram-Schmidt, checked before anything is loaded.
  if (a.has("orthog") && method != "gmres") throw UsageError("--orthog applies to --method gmres, not to " + method);
  if (const std::string g = a.get("orthog", "cgs2"); !known_orthogonalization(g))
    throw UsageError("--orthog must be cgs2 or cgs, got '" + g + "'");
  if (method == "lu" || method == "klu" || method == "cholesky") {
    if (a.has("spmv")) throw UsageError("--spmv applies to the Krylov methods, not to " + method);
    if (a.has("partition")) throw UsageError("--partition applies to the Krylov methods under mpirun, not to " + method);
    return solve_direct(a, method, num);
  }
  // --partition: how a distributed solve spreads the rows (one process owns them all, so a
  // serial solve checks the name and the build and goes on).
  const std::string partition = a.get("partition", "contiguous");
  check_partition_kind(partition);
  // Under mpirun with more than one rank: the distributed solve (one rank: the serial one).
  if (const dist::Communicator world = dist::Communicator::world(); world.size() > 1)
    return solve_distributed(a, method, pc, partition, num, world);
  std::string out = a.get("out", "");
  auto t0 = std::chrono::steady_clock::now();
  CsrMatrix A = load_matrix(a.pos[0]);
  if (A.rows() != A.cols()) throw InputError(a.pos[0] + ": the matrix is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", not square");
  Tensor b = make_rhs(a.get("rhs", "ones"), A, num.seed);
  CsrOperator op(A);
  // One process holds one block: block Jacobi is then its sub-preconditioner on the whole
  // matrix, as PETSc's bjacobi is on one rank, so `--pc bjacobi` means the same at every -n.
  const std::string one_block = pc == "bjacobi" ? "ilu0" : pc == "bjacobi-ic0" ? "ic0" : pc;
  auto M = naming(a.pos[0], [&] { return make_preconditioner(one_block, op, num.omega); });
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
  const std::string pc_name = one_block == pc ? M->name() : pc + " (one block: " + M->name() + ")";
  std::printf("method: %s  pc: %s  device: %s\n", method_label(method, o).c_str(), pc_name.c_str(), o.device.c_str());
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
