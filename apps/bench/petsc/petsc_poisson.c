/* PETSc's side of docs/benchmarks.md "Distributed PCG": the 3D 7-point Poisson matrix of
 * rlx's poisson3d:N (6 on the diagonal, -1 per grid neighbour, unscaled, row x + n*y + n*n*z),
 * assembled as MPIAIJ with PETSc's default row split (the one rlx uses), right-hand side of
 * ones, KSPCG to rtol 1e-8 on the unpreconditioned residual norm (rlx's test), with the
 * -pc_type given (jacobi or bjacobi). Prints iterations and the KSPSolve time.
 *   mpirun -n 2 petsc_poisson -n 100 -pc_type jacobi
 * Build: mpicc petsc_poisson.c $(pkg-config --cflags --libs PETSc) -o petsc_poisson */
#include <petscksp.h>

int main(int argc, char **argv) {
  PetscInt n = 32, lo, hi;
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &n, NULL));
  const PetscInt N = n * n * n;
  Mat A;
  PetscCall(MatCreateAIJ(PETSC_COMM_WORLD, PETSC_DECIDE, PETSC_DECIDE, N, N, 7, NULL, 6, NULL, &A));
  PetscCall(MatGetOwnershipRange(A, &lo, &hi));
  for (PetscInt row = lo; row < hi; ++row) {
    const PetscInt x = row % n, y = (row / n) % n, z = row / (n * n);
    PetscInt cols[7], k = 0;
    PetscScalar vals[7];
    if (z > 0) cols[k] = row - n * n, vals[k++] = -1;
    if (y > 0) cols[k] = row - n, vals[k++] = -1;
    if (x > 0) cols[k] = row - 1, vals[k++] = -1;
    cols[k] = row, vals[k++] = 6;
    if (x < n - 1) cols[k] = row + 1, vals[k++] = -1;
    if (y < n - 1) cols[k] = row + n, vals[k++] = -1;
    if (z < n - 1) cols[k] = row + n * n, vals[k++] = -1;
    PetscCall(MatSetValues(A, 1, &row, k, cols, vals, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  Vec b, x;
  PetscCall(MatCreateVecs(A, &x, &b));
  PetscCall(VecSet(b, 1.0));
  KSP ksp;
  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  PetscCall(KSPSetType(ksp, KSPCG));
  PetscCall(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
  PetscCall(KSPSetTolerances(ksp, 1e-8, 0.0, PETSC_DEFAULT, 10000));
  PetscCall(KSPSetFromOptions(ksp));
  PetscCall(KSPSetUp(ksp));
  PetscLogDouble t0, t1;
  PetscCall(PetscTime(&t0));
  PetscCall(KSPSolve(ksp, b, x));
  PetscCall(PetscTime(&t1));
  PetscInt its;
  KSPConvergedReason reason;
  PetscCall(KSPGetIterationNumber(ksp, &its));
  PetscCall(KSPGetConvergedReason(ksp, &reason));
  PetscMPIInt size;
  MPI_Comm_size(PETSC_COMM_WORLD, &size);
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "petsc ranks %d n %d iterations %d reason %s solve %.3f s\n", size, (int)n, (int)its,
                        KSPConvergedReasons[reason], t1 - t0));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&b));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFinalize());
  return 0;
}
