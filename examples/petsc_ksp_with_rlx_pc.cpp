// PETSc's conjugate gradients preconditioned by rlx: the 3D Poisson matrix is built and
// distributed by rlx, handed to PETSc without copying its values (to_petsc), and PETSc's
// KSPCG runs with an rlx block-Jacobi ILU(0) preconditioner as its PCSHELL. Prints the
// iterations and the true residual; exits 1 unless PETSc converged.
//   mpirun -n 2 build/examples/example_petsc_ksp_with_rlx_pc [-n 20] [-ksp_monitor ...]
// (PETSc's runtime options apply: the KSP reads them with KSPSetFromOptions.)
#include <cstdio>

#include "dist/mpi.hpp"
#include "solvers/petsc/interop.hpp"
#include "solvers/sparse/poisson.hpp"

int main(int argc, char** argv) {
  PetscCall(PetscInitialize(&argc, &argv, nullptr, nullptr));
  int status = 1;
  {
    PetscInt n = 20;
    PetscCall(PetscOptionsGetInt(nullptr, nullptr, "-n", &n, nullptr));
    auto comm = rlx::dist::from_mpi(PETSC_COMM_WORLD);
    // rlx: the matrix on rank 0, scattered by rows; the preconditioner on each rank's block.
    auto A = rlx::sparse::DistCsrMatrix::scatter(comm, comm.rank() == 0 ? rlx::sparse::poisson3d(n) : rlx::sparse::CsrMatrix{});
    rlx::sparse::DistCsrOperator op(A);
    auto M = rlx::sparse::make_dist_preconditioner("bjacobi", op);
    // PETSc: the same matrix (reading rlx's arrays), CG, rlx's preconditioner.
    rlx::petsc::PetscMat P = rlx::petsc::to_petsc(A);
    Vec x, b;
    PetscCall(MatCreateVecs(P, &x, &b));
    PetscCall(VecSet(b, 1.0));
    // The Krylov method chosen as PETSc users choose one, by runtime options (KSPSetFromOptions
    // reads these and any others given on the command line, e.g. -ksp_monitor); the
    // preconditioner is rlx's.
    PetscCall(PetscOptionsInsertString(nullptr, "-ksp_type cg -ksp_norm_type unpreconditioned -ksp_rtol 1e-8"));
    KSP ksp;
    PC pc;
    PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PetscCall(KSPSetOperators(ksp, P, P));
    PetscCall(KSPGetPC(ksp, &pc));
    rlx::petsc::set_shell_pc(pc, *M, A.local_rows());
    PetscCall(KSPSetFromOptions(ksp));
    PetscCall(KSPSolve(ksp, b, x));
    PetscInt its;
    KSPConvergedReason reason;
    PetscCall(KSPGetIterationNumber(ksp, &its));
    PetscCall(KSPGetConvergedReason(ksp, &reason));
    // The true residual ||b - A x|| / ||b||, computed by PETSc.
    Vec r;
    PetscReal rn, bn;
    PetscCall(VecDuplicate(b, &r));
    PetscCall(MatMult(P, x, r));
    PetscCall(VecAYPX(r, -1.0, b));
    PetscCall(VecNorm(r, NORM_2, &rn));
    PetscCall(VecNorm(b, NORM_2, &bn));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                          "poisson3d:%d on %d ranks: KSPCG + rlx bjacobi (PCSHELL): %s after %d iterations, true relative residual %.3e\n",
                          int(n), comm.size(), KSPConvergedReasons[reason], int(its), double(rn / bn)));
    status = reason > 0 && rn / bn <= 1e-7 ? 0 : 1;
    PetscCall(VecDestroy(&r));
    PetscCall(VecDestroy(&x));
    PetscCall(VecDestroy(&b));
    PetscCall(KSPDestroy(&ksp));
  }  // (rlx's objects and the PetscMat go before PETSc finalizes)
  PetscCall(PetscFinalize());
  return status;
}
