// rlx-bench-petsc: the PETSc peer of `rlx-bench pcg` — KSPCG + PCJACOBI on the same 3D
// 7-point Poisson matrix (6 on the diagonal, -1 off it), b = ones, x0 = 0, stopping at
// ||r|| <= rtol ||b|| on the unpreconditioned residual (the rule rlx uses). Median of -reps
// solves. Built only when PETSc is found; it does not link rlx (PETSc brings its own HDF5).
//   build/bin/rlx-bench-petsc -n 100 -reps 3                      (1 rank)
//   mpirun -n 2 build/bin/rlx-bench-petsc -n 100 -reps 3          (2 ranks)
#include <petscksp.h>

#include <algorithm>
#include <string>
#include <cctype>
#include <vector>

int main(int argc, char** argv) {
  PetscCall(PetscInitialize(&argc, &argv, nullptr, nullptr));
  PetscInt n = 100, reps = 3;
  PetscReal rtol = 1e-8;
  PetscCall(PetscOptionsGetInt(nullptr, nullptr, "-n", &n, nullptr));
  PetscCall(PetscOptionsGetInt(nullptr, nullptr, "-reps", &reps, nullptr));
  PetscCall(PetscOptionsGetReal(nullptr, nullptr, "-rtol", &rtol, nullptr));
  const PetscInt N = n * n * n, nn = n * n;
  Mat A;
  PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
  PetscCall(MatSetSizes(A, PETSC_DECIDE, PETSC_DECIDE, N, N));
  PetscCall(MatSetType(A, MATAIJ));
  PetscCall(MatSeqAIJSetPreallocation(A, 7, nullptr));
  PetscCall(MatMPIAIJSetPreallocation(A, 7, nullptr, 6, nullptr));
  PetscInt lo, hi;
  PetscCall(MatGetOwnershipRange(A, &lo, &hi));
  for (PetscInt r = lo; r < hi; ++r) {
    PetscInt x = r % n, y = (r / n) % n, z = r / nn, cols[7], k = 0;
    PetscScalar vals[7];
    auto put = [&](PetscInt c, PetscScalar v) { cols[k] = c, vals[k++] = v; };
    if (z > 0) put(r - nn, -1);
    if (y > 0) put(r - n, -1);
    if (x > 0) put(r - 1, -1);
    put(r, 6);
    if (x + 1 < n) put(r + 1, -1);
    if (y + 1 < n) put(r + n, -1);
    if (z + 1 < n) put(r + nn, -1);
    PetscCall(MatSetValues(A, 1, &r, k, cols, vals, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  Vec x, b;
  PetscCall(MatCreateVecs(A, &x, &b));
  PetscCall(VecSet(b, 1.0));
  KSP ksp;
  PC pc;
  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  PetscCall(KSPSetType(ksp, KSPCG));
  PetscCall(KSPGetPC(ksp, &pc));
  PetscCall(PCSetType(pc, PCJACOBI));
  PetscCall(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
  PetscCall(KSPSetTolerances(ksp, rtol, 0.0, PETSC_DEFAULT, 100000));
  PetscCall(KSPSetFromOptions(ksp));
  PetscCall(KSPSetUp(ksp));
  std::vector<double> times;
  PetscInt its = 0;
  for (PetscInt i = 0; i < reps; ++i) {
    PetscCall(VecSet(x, 0.0));
    PetscCall(MPI_Barrier(PETSC_COMM_WORLD));
    double t0 = MPI_Wtime();
    PetscCall(KSPSolve(ksp, b, x));
    times.push_back(MPI_Wtime() - t0);
    PetscCall(KSPGetIterationNumber(ksp, &its));
  }
  std::sort(times.begin(), times.end());
  PetscMPIInt size;
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  KSPConvergedReason reason;
  PetscCall(KSPGetConvergedReason(ksp, &reason));
  PCType pc_type;  // -pc_type may have replaced Jacobi (bjacobi: the distributed comparison)
  PetscCall(PCGetType(pc, &pc_type));
  KSPType ksp_type;  // -ksp_type may have replaced CG (gmres, pipecg: the comparisons by method)
  PetscCall(KSPGetType(ksp, &ksp_type));
  std::string ksp_name = "KSP";
  for (const char* c = ksp_type; *c; ++c) ksp_name += char(std::toupper(static_cast<unsigned char>(*c)));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                        "  PETSc %s+PC %s (%d rank%s)  %9.3f s  %5d iterations  %7.3f ms/iteration  (%s)\n", ksp_name.c_str(), pc_type,
                        size, size > 1 ? "s" : "", times[times.size() / 2], (int)its, 1e3 * times[times.size() / 2] / its,
                        KSPConvergedReasons[reason]));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "RESULT pcg_petsc n=%d ranks=%d s=%.4f it=%d\n", (int)n, size,
                        times[times.size() / 2], (int)its));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&b));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFinalize());
  return 0;
}
