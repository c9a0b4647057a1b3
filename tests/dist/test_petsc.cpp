// rlx and PETSc in both directions (solvers/petsc), under mpirun on 1 to 3 ranks (CTest
// test_petsc_np*). Each check compares against a computation that does not use the
// direction under test:
//   - to_petsc(A) reads rlx's values in place (same pointer) and its MatMult equals the
//     product computed from the global matrix on every rank (1e-14 relative);
//   - shell_matrix(rlx operator): MatMult equals the same product;
//   - PETSc KSPCG with rlx's bjacobi as a PCSHELL takes the iterations of rlx's own PCG with
//     bjacobi and of PETSc's own PCBJACOBI (ILU(0) blocks, the same preconditioner) within 1,
//     and its solution equals rlx's within 1e-8 relative; KSPCG on the MATSHELL with PCNONE
//     takes the iterations of KSPCG on the MPIAIJ within 1 and the same solution;
//   - from_petsc(a Mat PETSc assembled itself): rlx's SpMV equals MatMult (1e-14), and rlx's
//     PCG-Jacobi on it takes PETSc's KSPCG+PCJACOBI iterations within 1, solutions within 1e-8;
//   - operator_of(that Mat): its product is MatMult's bit for bit, follows a MatScale of the
//     Mat (read in place), and PCG-Jacobi on it matches PCG-Jacobi on from_petsc's copy.
// A failed check prints on the rank that saw it; the job exits 1 when any rank failed.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dist/mpi.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#include "solvers/petsc/interop.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/poisson.hpp"

using namespace rlx;
using namespace rlx::sparse;

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", dist::Communicator::world().rank(), what.c_str());
}

// max |a - b| / max |b| over every rank.
double rel_diff(const dist::Communicator& c, const double* a, const double* b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::abs(a[i] - b[i])), m = std::max(m, std::abs(b[i]));
  d = c.all_reduce(d, ReduceOp::Max);
  m = c.all_reduce(m, ReduceOp::Max);
  return m > 0 ? d / m : d;
}

std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3e", v);
  return b;
}

// A right-hand side / test vector with varied entries (global index g).
double entry(int64_t g) { return 1.0 + 0.5 * std::sin(0.37 * double(g)); }

void fill(Vec v, int64_t first) {
  petsc::VecView w(v, false);
  for (int64_t i = 0; i < w.tensor().numel(); ++i) w.tensor().data<double>()[i] = entry(first + i);
}

struct Ksp {
  KSP ksp = nullptr;
  Ksp(Mat A, const char* type, const char* pc_type) {
    KSPCreate(PETSC_COMM_WORLD, &ksp);
    KSPSetOperators(ksp, A, A);
    KSPSetType(ksp, type);
    KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED);  // rlx's stop test: the true residual
    KSPSetTolerances(ksp, 1e-10, 0.0, PETSC_DEFAULT, 2000);
    if (pc_type) {
      PC pc;
      KSPGetPC(ksp, &pc);
      PCSetType(pc, pc_type);
    }
  }
  ~Ksp() { KSPDestroy(&ksp); }
  PC pc() const {
    PC pc;
    KSPGetPC(ksp, &pc);
    return pc;
  }
  int solve(Vec b, Vec x) {
    KSPSolve(ksp, b, x);
    PetscInt its;
    KSPConvergedReason r;
    KSPGetIterationNumber(ksp, &its);
    KSPGetConvergedReason(ksp, &r);
    check(r > 0, std::string("PETSc KSP converged (") + KSPConvergedReasons[r] + ")");
    return int(its);
  }
};

KrylovOptions rlx_options(const std::string& method) {
  KrylovOptions o;
  o.method = method;
  o.rtol = 1e-10;
  o.max_it = 2000;
  return o;
}

void run(int64_t n) {
  const dist::Communicator comm = dist::from_mpi(PETSC_COMM_WORLD);
  const CsrMatrix global = poisson3d(n);  // every rank builds it: the oracle for products
  const DistCsrMatrix A = DistCsrMatrix::scatter(comm, comm.rank() == 0 ? global : CsrMatrix{});
  const int64_t first = A.first_row(), rows = A.local_rows();
  const std::string at = "poisson3d:" + std::to_string(n) + " on " + std::to_string(comm.size()) + " ranks: ";

  // The product y = A x from the global matrix, this rank's rows.
  std::vector<double> y_ref(static_cast<size_t>(rows), 0.0);
  {
    const Tensor rp = host_contiguous(global.row_ptr()), ci = host_contiguous(global.col_idx());
    const Tensor v = host_contiguous(global.values());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = index_at(rp, first + r); k < index_at(rp, first + r + 1); ++k)
        y_ref[size_t(r)] += v.data<double>()[k] * entry(index_at(ci, k));
  }

  // rlx -> PETSc: the MPIAIJ reading rlx's arrays.
  petsc::PetscMat P = petsc::to_petsc(A);
  {
    Mat Ad, Ao;
    const PetscInt* garray;
    MatMPIAIJGetSeqAIJ(P, &Ad, &Ao, &garray);
    const PetscScalar* a;
    MatSeqAIJGetArrayRead(Ad, &a);
    check(rows == 0 || a == host_contiguous(A.diagonal_block().values()).data<double>(),
          at + "PETSc's diagonal block reads rlx's values in place");
    MatSeqAIJRestoreArrayRead(Ad, &a);
  }
  Vec x, y, b;
  MatCreateVecs(P, &x, &y);
  VecDuplicate(y, &b);
  fill(x, first);
  MatMult(P, x, y);
  {
    petsc::VecView yv(y, true);
    const double d = rel_diff(comm, yv.tensor().data<double>(), y_ref.data(), rows);
    check(d <= 1e-14, at + "MatMult of to_petsc(A) equals the product, off by " + sci(d));
  }
  // rlx's operator as a MATSHELL.
  DistCsrOperator op(A);
  Mat S = petsc::shell_matrix(op, PETSC_COMM_WORLD);
  MatMult(S, x, y);
  {
    petsc::VecView yv(y, true);
    const double d = rel_diff(comm, yv.tensor().data<double>(), y_ref.data(), rows);
    check(d <= 1e-14, at + "MatMult of the rlx MATSHELL equals the product, off by " + sci(d));
  }

  // KSPCG + rlx bjacobi (PCSHELL) against rlx's PCG-bjacobi and PETSc's PCBJACOBI.
  fill(b, first);
  const Tensor b_rlx = [&] {
    petsc::VecView bv(b, true);
    return bv.tensor().clone();
  }();
  auto M = make_dist_preconditioner("bjacobi", op);
  const KrylovResult mine = krylov_solve(op, b_rlx, *M, rlx_options("pcg"));
  check(converged(mine.reason), at + "rlx's PCG-bjacobi converged");
  {
    Ksp k(P, KSPCG, nullptr);
    petsc::set_shell_pc(k.pc(), *M, rows);
    VecSet(x, 0.0);
    const int its = k.solve(b, x);
    check(std::abs(its - mine.iterations) <= 1, at + "KSPCG + rlx bjacobi took " + std::to_string(its) +
                                                    " iterations, rlx's PCG " + std::to_string(mine.iterations));
    petsc::VecView xv(x, true);
    const double d = rel_diff(comm, xv.tensor().data<double>(), mine.x.data<double>(), rows);
    check(d <= 1e-8, at + "KSPCG + rlx bjacobi's solution equals rlx's, off by " + sci(d));
    Ksp own(P, KSPCG, PCBJACOBI);
    VecSet(x, 0.0);
    const int its_own = own.solve(b, x);
    check(std::abs(its - its_own) <= 1, at + "KSPCG + rlx bjacobi took " + std::to_string(its) +
                                            " iterations, KSPCG + PCBJACOBI " + std::to_string(its_own));
  }
  // KSPCG on the MATSHELL against KSPCG on the MPIAIJ, no preconditioner.
  {
    Ksp on_shell(S, KSPCG, PCNONE), on_aij(P, KSPCG, PCNONE);
    Vec x2;
    VecDuplicate(x, &x2);
    VecSet(x, 0.0);
    VecSet(x2, 0.0);
    const int its_shell = on_shell.solve(b, x), its_aij = on_aij.solve(b, x2);
    check(std::abs(its_shell - its_aij) <= 1, at + "KSPCG on the rlx MATSHELL took " + std::to_string(its_shell) +
                                                  " iterations, on the MPIAIJ " + std::to_string(its_aij));
    petsc::VecView a(x, true), c(x2, true);
    const double d = rel_diff(comm, a.tensor().data<double>(), c.tensor().data<double>(), rows);
    check(d <= 1e-8, at + "KSPCG solutions on the MATSHELL and the MPIAIJ agree, off by " + sci(d));
    VecDestroy(&x2);
  }

  // PETSc -> rlx: a matrix PETSc assembles itself (MatSetValues, its own split), as an rlx
  // operator.
  Mat Q;
  MatCreateAIJ(PETSC_COMM_WORLD, PETSC_DECIDE, PETSC_DECIDE, global.rows(), global.rows(), 7, nullptr, 6, nullptr, &Q);
  {
    PetscInt lo, hi;
    MatGetOwnershipRange(Q, &lo, &hi);
    const Tensor rp = host_contiguous(global.row_ptr()), ci = host_contiguous(global.col_idx());
    const Tensor v = host_contiguous(global.values());
    for (PetscInt r = lo; r < hi; ++r)
      for (int64_t k = index_at(rp, r); k < index_at(rp, r + 1); ++k) {
        PetscInt c = PetscInt(index_at(ci, k));
        MatSetValue(Q, r, c, v.data<double>()[k], INSERT_VALUES);
      }
    MatAssemblyBegin(Q, MAT_FINAL_ASSEMBLY);
    MatAssemblyEnd(Q, MAT_FINAL_ASSEMBLY);
  }
  const DistCsrMatrix R = petsc::from_petsc(Q);
  check(R.first_row() == first && R.local_rows() == rows, at + "from_petsc keeps PETSc's partition");
  DistCsrOperator rop(R);
  {
    fill(x, first);
    MatMult(Q, x, y);
    petsc::VecView xv(x, true), yv(y, true);
    sparse::BoundGraph g;
    Var xin = g.input("x", DType::F64, {rows});
    output(g.graph, {rop.apply(g, xin)});
    Device& d = DeviceRegistry::get().runnable_at("cpu");
    Program p = compile(g.graph, d);
    Executor ex(p, d);
    const Tensor ry = ex.run(g.inputs({xv.tensor()}))[0];
    const double diff = rel_diff(comm, ry.data<double>(), yv.tensor().data<double>(), rows);
    check(diff <= 1e-14, at + "rlx's SpMV of from_petsc(Q) equals MatMult, off by " + sci(diff));
  }
  {
    auto J = make_dist_preconditioner("jacobi", rop);
    const KrylovResult r = krylov_solve(rop, b_rlx, *J, rlx_options("pcg"));
    check(converged(r.reason), at + "rlx's PCG-Jacobi on from_petsc(Q) converged");
    Ksp k(Q, KSPCG, PCJACOBI);
    VecSet(x, 0.0);
    const int its = k.solve(b, x);
    check(std::abs(its - r.iterations) <= 1, at + "rlx's PCG-Jacobi on from_petsc(Q) took " + std::to_string(r.iterations) +
                                                 " iterations, PETSc's KSPCG+PCJACOBI " + std::to_string(its));
    petsc::VecView xv(x, true);
    const double diff = rel_diff(comm, r.x.data<double>(), xv.tensor().data<double>(), rows);
    check(diff <= 1e-8, at + "rlx's solution on from_petsc(Q) equals PETSc's, off by " + sci(diff));
  }
  // PETSc -> rlx without a copy: Q itself as an operator (a host_call running MatMult on
  // Vecs placed over rlx's arrays). Its product is MatMult's, PCG-Jacobi on it (the diagonal
  // from MatGetDiagonal) takes the iterations of PCG-Jacobi on from_petsc(Q) and gives its
  // solution, and a change to Q's values after the operator was made shows in its products.
  {
    std::unique_ptr<HostOperator> H = petsc::operator_of(Q);
    check(H->rows() == rows && H->communicator() != nullptr, at + "operator_of(Q) has this rank's rows and a communicator");
    sparse::BoundGraph g;
    Var xin = g.input("x", DType::F64, {rows});
    output(g.graph, {H->apply(g, xin)});
    Device& d = DeviceRegistry::get().runnable_at("cpu");
    Program p = compile(g.graph, d);
    bool native = false;
    for (const auto& r : p.report.nodes) native |= r.op == "host_call" && std::string(route_name(r.route)) == "native";
    check(native, at + "operator_of(Q)'s product is a native host_call on cpu");
    Executor ex(p, d);
    fill(x, first);
    MatMult(Q, x, y);
    auto product_diff = [&](double scale) {
      petsc::VecView xv(x, true), yv(y, true);
      const Tensor hy = ex.run(g.inputs({xv.tensor()}))[0];
      std::vector<double> want(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) want[size_t(i)] = scale * yv.tensor().data<double>()[i];
      return rel_diff(comm, hy.data<double>(), want.data(), rows);
    };
    const double d1 = product_diff(1.0);
    check(d1 == 0.0, at + "operator_of(Q)'s product is MatMult's, off by " + sci(d1));
    MatScale(Q, 2.0);
    const double d2 = product_diff(2.0);
    check(d2 == 0.0, at + "operator_of(Q) reads Q in place: after MatScale(Q, 2) its product is off by " + sci(d2));
    MatScale(Q, 0.5);
    auto J = make_operator_preconditioner("jacobi", *H);
    const KrylovResult viaH = krylov_solve(*H, b_rlx, *J, rlx_options("pcg"));
    auto Jr = make_dist_preconditioner("jacobi", rop);
    const KrylovResult viaR = krylov_solve(rop, b_rlx, *Jr, rlx_options("pcg"));
    check(converged(viaH.reason), at + "rlx's PCG-Jacobi on operator_of(Q) converged");
    check(std::abs(viaH.iterations - viaR.iterations) <= 1,
          at + "PCG-Jacobi on operator_of(Q) took " + std::to_string(viaH.iterations) + " iterations, on from_petsc(Q) " +
              std::to_string(viaR.iterations));
    const double dx = rel_diff(comm, viaH.x.data<double>(), viaR.x.data<double>(), rows);
    check(dx <= 1e-8, at + "PCG-Jacobi's solutions on operator_of(Q) and from_petsc(Q) agree, off by " + sci(dx));
    bool refused = false;
    try {
      make_operator_preconditioner("ilu0", *H);
    } catch (const InputError&) {
      refused = true;
    }
    check(refused, at + "ILU(0) of an operator known by its product is refused");
  }
  MatDestroy(&Q);
  MatDestroy(&S);
  VecDestroy(&x);
  VecDestroy(&y);
  VecDestroy(&b);
}

}  // namespace

int main(int argc, char** argv) {
  PetscCall(PetscInitialize(&argc, &argv, nullptr, nullptr));
  const dist::Communicator world = dist::Communicator::world();
  try {
    for (int64_t n : {1, 2, 9}) run(n);  // 1 and 2: ranks with no rows and ranks with no ghosts
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", world.rank(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);  // a rank-local error ends the job instead of leaving the others waiting
  }
  const int all = int(world.all_reduce(int64_t(failures), ReduceOp::Sum));
  if (world.rank() == 0)
    std::printf("test_petsc: %d ranks, %s (%d failed checks)\n", world.size(), all ? "FAILED" : "all checks passed", all);
  PetscCall(PetscFinalize());
  return all ? 1 : 0;
}
