// rlx and PETSc in one program (issue 19's interop). Both directions:
//
//   rlx -> PETSc   to_petsc(A)              rlx's distributed CSR as a MATMPIAIJ that reads
//                                           rlx's arrays (MatCreateMPIAIJWithSplitArrays):
//                                           the diagonal block's row pointers, columns and
//                                           values and the off-diagonal block's values are
//                                           not copied; the off-diagonal columns are (PETSc
//                                           wants them global, rlx keeps them ghost-local).
//                  shell_matrix(op)         any rlx operator as a MATSHELL (MatMult runs the
//                                           operator's compiled IR on the Vecs' arrays).
//                  set_shell_pc(pc, M, n)   an rlx preconditioner as a PCSHELL (PCApply runs
//                                           its compiled IR on the Vecs' arrays).
//   PETSc -> rlx   from_petsc(mat)          a MATMPIAIJ's rows as rlx's distributed CSR, the
//                                           same partition (values copied: rlx's blocks keep
//                                           their own index layout), usable as an operator.
//                  operator_of(mat)         any Mat with MatMult (AIJ, a shell, ...) as an rlx
//                                           operator that reads it in place: each product the
//                                           solver's program makes is a host_call running
//                                           MatMult on Vecs placed over rlx's arrays; its
//                                           diagonal (for Jacobi) where the Mat has one.
//
// What rlx hands PETSc holds what it reads: a PetscMat keeps the rlx arrays alive until it is
// destroyed, a shell keeps its compiled program. PETSc must be initialised (PetscInitialize)
// before any of these, on the communicator the rlx objects use. f64 values and 32- or 64-bit
// PetscInt as the PETSc build has it; rlx's c64/f32 matrices are refused (InputError).
//
// This library links PETSc, and PETSc links the MPI build of HDF5: it must never share a
// binary with the serial HDF5 the rest of rlx may link. Its targets link with --as-needed and
// take nothing from rlx that reads HDF5 (tests/dist checks the binaries with ldd).
#pragma once
#include <petscksp.h>

#include <memory>
#include <vector>

#include "solvers/sparse/dist_csr.hpp"

namespace rlx::petsc {

// A PETSc Mat that reads rlx's arrays; destroys the Mat before letting them go.
class PetscMat {
 public:
  PetscMat() = default;
  PetscMat(PetscMat&&) noexcept;
  PetscMat& operator=(PetscMat&&) noexcept;
  ~PetscMat();
  Mat get() const { return mat_; }
  operator Mat() const { return mat_; }

 private:
  friend PetscMat to_petsc(const sparse::DistCsrMatrix& A);
  Mat mat_ = nullptr;
  std::vector<Tensor> kept_;            // rlx tensors PETSc reads in place
  std::vector<PetscInt> di_, dj_, oi_, oj_;  // index arrays PETSc reads (when rlx's differ in type or numbering)
};

// Collective over A's communicator.
PetscMat to_petsc(const sparse::DistCsrMatrix& A);

// A MATSHELL whose MatMult is y = A x with rlx's operator (its vectors: this rank's rows);
// the operator must outlive the Mat. Collective. The caller destroys the Mat (MatDestroy).
Mat shell_matrix(const sparse::LinearOperator& A, MPI_Comm comm);

// Makes pc a PCSHELL applying rlx's preconditioner M to vectors of `local_rows` entries on
// this rank (M must outlive pc).
void set_shell_pc(PC pc, const sparse::Preconditioner& M, int64_t local_rows, DType dtype = DType::F64);

// A MATMPIAIJ's rows, partition and values as rlx's distributed CSR (collective).
sparse::DistCsrMatrix from_petsc(Mat A);

// A square Mat (same row and column layout) as an rlx operator over its communicator,
// nothing copied: the operator holds a reference to A (PetscObjectReference) and every
// product calls MatMult, so later changes to A's values are seen by its products -- not by
// its diagonal, taken once here (a Jacobi preconditioner made from it keeps the old one).
// Collective (MatCreateVecs, MatGetDiagonal); the operator's products are collective as
// MatMult is, which the solvers' programs respect (every rank runs the same program in the
// same order). One solve at a time per operator (its two Vecs are shared), and the operator
// must be destroyed before PetscFinalize (its destructor releases PETSc objects).
std::unique_ptr<sparse::HostOperator> operator_of(Mat A);

// This rank's entries of a Vec as an rlx tensor that shares the Vec's array while the view
// lives (VecGetArray / VecRestoreArray); read_only views restore with the read-only call.
class VecView {
 public:
  VecView(Vec v, bool read_only);
  ~VecView();
  VecView(const VecView&) = delete;
  VecView& operator=(const VecView&) = delete;
  const Tensor& tensor() const { return t_; }

 private:
  Vec v_;
  bool ro_;
  PetscScalar* p_ = nullptr;
  Tensor t_;
};

}  // namespace rlx::petsc
