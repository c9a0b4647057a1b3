#include "solvers/petsc/interop.hpp"

#include <cstring>
#include <string>

#include "core/error.hpp"
#include "dist/mpi.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/csr.hpp"

#if defined(PETSC_USE_COMPLEX) || !defined(PETSC_USE_REAL_DOUBLE)
#error "rlx's PETSc interop needs a real, double-precision PETSc (PetscScalar = double)"
#endif

namespace rlx::petsc {

namespace {

void check(PetscErrorCode rc, const char* what) {
  if (rc != 0) throw Error(std::string("PETSc: ") + what + " failed (error " + std::to_string(int(rc)) + ")");
}

constexpr DType kPetscInt = sizeof(PetscInt) == 8 ? DType::I64 : DType::I32;

// A tensor's indices as PetscInt: the tensor itself when its dtype is PetscInt's (PETSc then
// reads it in place), else a converted copy held in `copy`.
PetscInt* indices_for_petsc(const Tensor& t, std::vector<PetscInt>& copy, std::vector<Tensor>& kept) {
  if (t.dtype() == kPetscInt && t.is_host() && t.is_contiguous()) {
    kept.push_back(t);
    return static_cast<PetscInt*>(t.raw());
  }
  copy.resize(size_t(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) copy[size_t(k)] = PetscInt(sparse::index_at(t, k));
  return copy.data();
}

PetscScalar* values_for_petsc(const Tensor& t, std::vector<Tensor>& kept) {
  if (!t.is_host() || !t.is_contiguous()) throw InternalError("to_petsc: matrix values not in contiguous host memory");
  kept.push_back(t);
  return static_cast<PetscScalar*>(t.raw());
}

// x -> f(x) on this rank's vectors, compiled once for the cpu device and run on PETSc's
// arrays in place.
class Compiled {
 public:
  template <class F>
  Compiled(F&& f, int64_t n, DType t) : n_(n), t_(t) {
    Var x = g_.input("x", t, {n});
    output(g_.graph, {f(g_, x)});
    Device& d = DeviceRegistry::get().runnable_at("cpu");
    prog_ = std::make_unique<Program>(compile(g_.graph, d));
    g_.move_bound_to(d.allocator());
    ex_ = std::make_unique<Executor>(*prog_, d);
  }
  // y = f(x) for PETSc Vecs of n_ local entries.
  void run(Vec x, Vec y) {
    VecView xv(x, true), yv(y, false);
    if (xv.tensor().numel() != n_ || yv.tensor().numel() != n_)
      throw InputError("PETSc vectors have " + std::to_string(xv.tensor().numel()) + " local entries, the rlx operator " +
                       std::to_string(n_));
    std::vector<Tensor> out{yv.tensor()};
    ex_->run_into(g_.inputs({xv.tensor()}), out);
  }

 private:
  int64_t n_;
  DType t_;
  sparse::BoundGraph g_;
  std::unique_ptr<Program> prog_;
  std::unique_ptr<Executor> ex_;
};

// PETSc calls C function pointers: an rlx exception becomes a PETSc error (with rlx's message
// on stderr), never an exception unwinding through PETSc's frames.
template <class F>
PetscErrorCode guarded(MPI_Comm comm, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    SETERRQ(comm, PETSC_ERR_LIB, "rlx: %s", e.what());
  }
}

PetscErrorCode shell_mult(Mat A, Vec x, Vec y) {
  void* ctx = nullptr;
  PetscCall(MatShellGetContext(A, &ctx));
  return guarded(PetscObjectComm(reinterpret_cast<PetscObject>(A)), [&] { static_cast<Compiled*>(ctx)->run(x, y); });
}

PetscErrorCode shell_destroy(void* ctx) {
  delete static_cast<Compiled*>(ctx);
  return 0;
}

PetscErrorCode pc_apply(PC pc, Vec x, Vec y) {
  void* ctx = nullptr;
  PetscCall(PCShellGetContext(pc, &ctx));
  return guarded(PetscObjectComm(reinterpret_cast<PetscObject>(pc)), [&] { static_cast<Compiled*>(ctx)->run(x, y); });
}

PetscErrorCode pc_destroy(PC pc) {
  void* ctx = nullptr;
  PetscCall(PCShellGetContext(pc, &ctx));
  delete static_cast<Compiled*>(ctx);
  return 0;
}

}  // namespace

// ---------------------------------------------------------------- rlx -> PETSc

PetscMat::PetscMat(PetscMat&& o) noexcept { *this = std::move(o); }

PetscMat& PetscMat::operator=(PetscMat&& o) noexcept {
  if (this != &o) {
    if (mat_) MatDestroy(&mat_);
    mat_ = o.mat_;
    o.mat_ = nullptr;
    kept_ = std::move(o.kept_);
    di_ = std::move(o.di_), dj_ = std::move(o.dj_), oi_ = std::move(o.oi_), oj_ = std::move(o.oj_);
  }
  return *this;
}

PetscMat::~PetscMat() {
  if (mat_) MatDestroy(&mat_);
}

PetscMat to_petsc(const sparse::DistCsrMatrix& A) {
  std::string why;
  if (A.value_type() != DType::F64)
    why = std::string("to_petsc: PETSc here holds f64 values, the matrix is ") + dtype_name(A.value_type());
  const sparse::CsrMatrix& D = A.diagonal_block();
  const sparse::CsrMatrix& O = A.off_diagonal_block();
  // PETSc's AIJ blocks keep each row's columns ascending.
  if (why.empty() && !(D.sorted_unique() && O.sorted_unique()))
    why = "to_petsc: the matrix rows must have ascending, distinct columns";
  dist::raise_collectively(A.communicator(), why);

  PetscMat m;
  PetscInt* di = indices_for_petsc(D.row_ptr(), m.di_, m.kept_);
  PetscInt* dj = indices_for_petsc(D.col_idx(), m.dj_, m.kept_);
  PetscScalar* da = values_for_petsc(sparse::host_contiguous(D.values()), m.kept_);
  PetscInt* oi = indices_for_petsc(O.row_ptr(), m.oi_, m.kept_);
  // PETSc takes the off-diagonal columns as global indices (and renumbers them itself).
  const std::vector<int64_t>& ghosts = A.ghost_columns();
  m.oj_.resize(size_t(O.nnz()));
  for (int64_t k = 0; k < O.nnz(); ++k) m.oj_[size_t(k)] = PetscInt(ghosts[size_t(sparse::index_at(O.col_idx(), k))]);
  PetscScalar* oa = values_for_petsc(sparse::host_contiguous(O.values()), m.kept_);
  const PetscInt rows = PetscInt(A.local_rows()), n = PetscInt(A.global_rows());
  check(MatCreateMPIAIJWithSplitArrays(dist::mpi_comm(A.communicator()), rows, rows, n, n, di, dj, da, oi, m.oj_.data(), oa,
                                       &m.mat_),
        "MatCreateMPIAIJWithSplitArrays");
  return m;
}

Mat shell_matrix(const sparse::LinearOperator& A, MPI_Comm comm) {
  if (A.rows() != A.cols()) throw InputError("shell_matrix: the operator must be square on each rank");
  auto* ctx = new Compiled([&](sparse::BoundGraph& g, const Var& x) { return A.apply(g, x); }, A.rows(), A.dtype());
  Mat m = nullptr;
  const PetscInt rows = PetscInt(A.rows());
  PetscErrorCode rc = MatCreateShell(comm, rows, rows, PETSC_DETERMINE, PETSC_DETERMINE, ctx, &m);
  if (rc) delete ctx;
  check(rc, "MatCreateShell");
  check(MatShellSetContextDestroy(m, shell_destroy), "MatShellSetContextDestroy");
  check(MatShellSetOperation(m, MATOP_MULT, reinterpret_cast<void (*)(void)>(shell_mult)), "MatShellSetOperation");
  return m;
}

void set_shell_pc(PC pc, const sparse::Preconditioner& M, int64_t local_rows, DType dtype) {
  auto* ctx = new Compiled([&](sparse::BoundGraph& g, const Var& r) { return M.apply(g, r); }, local_rows, dtype);
  PetscErrorCode rc = PCSetType(pc, PCSHELL);
  if (!rc) rc = PCShellSetContext(pc, ctx);
  if (rc) delete ctx;
  check(rc, "PCSetType(PCSHELL)");
  check(PCShellSetApply(pc, pc_apply), "PCShellSetApply");
  check(PCShellSetDestroy(pc, pc_destroy), "PCShellSetDestroy");
  check(PCShellSetName(pc, ("rlx " + M.name()).c_str()), "PCShellSetName");
}

// ---------------------------------------------------------------- PETSc -> rlx

sparse::DistCsrMatrix from_petsc(Mat A) {
  MPI_Comm comm = PetscObjectComm(reinterpret_cast<PetscObject>(A));
  PetscInt lo = 0, hi = 0, n = 0, ncols = 0;
  check(MatGetOwnershipRange(A, &lo, &hi), "MatGetOwnershipRange");
  check(MatGetSize(A, &n, &ncols), "MatGetSize");
  std::vector<int64_t> i, j;
  std::vector<double> v;
  for (PetscInt row = lo; row < hi; ++row) {
    PetscInt nc = 0;
    const PetscInt* cols = nullptr;
    const PetscScalar* vals = nullptr;
    check(MatGetRow(A, row, &nc, &cols, &vals), "MatGetRow");
    for (PetscInt k = 0; k < nc; ++k) {
      i.push_back(row - lo);
      j.push_back(cols[k]);
      v.push_back(vals[k]);
    }
    check(MatRestoreRow(A, row, &nc, &cols, &vals), "MatRestoreRow");
  }
  Tensor vt = Tensor::empty(DType::F64, {int64_t(v.size())});
  if (!v.empty()) std::memcpy(vt.raw(), v.data(), v.size() * sizeof(double));
  sparse::CsrMatrix local = sparse::CsrMatrix::from_coo(hi - lo, ncols, std::move(i), std::move(j), vt);
  return sparse::DistCsrMatrix::from_local_rows(dist::from_mpi(comm), local);
}

namespace {

// What operator_of's products share: the Mat (referenced) and two Vecs of its layout whose
// arrays are replaced by rlx's for each MatMult (VecPlaceArray), so no entry is copied.
struct MatProduct {
  Mat A = nullptr;
  Vec x = nullptr, y = nullptr;
  MatProduct(const MatProduct&) = delete;
  MatProduct& operator=(const MatProduct&) = delete;
  MatProduct() = default;
  ~MatProduct() {
    if (x) VecDestroy(&x);
    if (y) VecDestroy(&y);
    if (A) MatDestroy(&A);  // drops the reference operator_of took
  }
  void mult(const Tensor& in, Tensor& out) const {
    // (MatMult only reads x: the const_cast lends rlx's input array to a Vec for the call.)
    check(VecPlaceArray(x, const_cast<double*>(in.data<double>())), "VecPlaceArray");
    PetscErrorCode rc = VecPlaceArray(y, out.data<double>());
    if (rc) {
      VecResetArray(x);
      check(rc, "VecPlaceArray");
    }
    rc = MatMult(A, x, y);
    const PetscErrorCode reset_y = VecResetArray(y), reset_x = VecResetArray(x);
    check(rc, "MatMult");
    check(reset_y ? reset_y : reset_x, "VecResetArray");
  }
};

}  // namespace

std::unique_ptr<sparse::HostOperator> operator_of(Mat A) {
  MPI_Comm comm = PetscObjectComm(reinterpret_cast<PetscObject>(A));
  PetscInt m = 0, n = 0, M = 0, N = 0;
  check(MatGetLocalSize(A, &m, &n), "MatGetLocalSize");
  check(MatGetSize(A, &M, &N), "MatGetSize");
  std::string why;
  if (M != N || m != n)
    why = "operator_of: the Mat must be square with the same row and column layout on each rank (global " +
          std::to_string(M) + "x" + std::to_string(N) + ", this rank " + std::to_string(m) + "x" + std::to_string(n) + ")";
  const dist::Communicator c = dist::from_mpi(comm);
  dist::raise_collectively(c, why);
  auto st = std::make_shared<MatProduct>();
  check(PetscObjectReference(reinterpret_cast<PetscObject>(A)), "PetscObjectReference");
  st->A = A;
  check(MatCreateVecs(A, &st->x, &st->y), "MatCreateVecs");
  PetscBool has_diag = PETSC_FALSE;
  check(MatHasOperation(A, MATOP_GET_DIAGONAL, &has_diag), "MatHasOperation");
  Tensor diag;
  if (has_diag) {
    diag = Tensor::empty(DType::F64, {int64_t(m)});
    check(VecPlaceArray(st->y, diag.data<double>()), "VecPlaceArray");
    PetscErrorCode rc = MatGetDiagonal(A, st->y);
    VecResetArray(st->y);
    check(rc, "MatGetDiagonal");
  }
  MatType type = nullptr;
  check(MatGetType(A, &type), "MatGetType");
  return std::make_unique<sparse::HostOperator>(
      int64_t(m), int64_t(m), DType::F64, [st](const Tensor& x, Tensor& y) { st->mult(x, y); },
      std::string("PETSc ") + (type ? type : "Mat") + " " + std::to_string(M) + "x" + std::to_string(N), diag, c);
}

// ---------------------------------------------------------------- vectors

VecView::VecView(Vec v, bool read_only) : v_(v), ro_(read_only) {
  PetscInt n = 0;
  check(VecGetLocalSize(v, &n), "VecGetLocalSize");
  if (ro_) {
    const PetscScalar* p = nullptr;
    check(VecGetArrayRead(v, &p), "VecGetArrayRead");
    p_ = const_cast<PetscScalar*>(p);  // (only read through the tensor: inputs of a program)
  } else {
    check(VecGetArray(v, &p_), "VecGetArray");
  }
  t_ = Tensor::view_of(p_, host_allocator(), DType::F64, {int64_t(n)});
}

VecView::~VecView() {
  if (ro_) {
    const PetscScalar* p = p_;
    VecRestoreArrayRead(v_, &p);
  } else {
    VecRestoreArray(v_, &p_);
  }
}

}  // namespace rlx::petsc
