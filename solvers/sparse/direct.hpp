// Sparse direct solvers through SuiteSparse: LU by UMFPACK or KLU, Cholesky by CHOLMOD.
//
// The three phases stay apart, so a sequence of matrices with one sparsity pattern pays
// for the ordering once:
//   SparseLu lu(A);            // analyze: fill-reducing ordering + symbolic factorization
//   lu.factorize(A);           // numeric factorization (A must have the analyzed pattern)
//   Tensor x = lu.solve(b);    // b [n] or [n, k]
//   lu.refactorize(values2);   // new values in the same positions: numeric phase only
//   Tensor x2 = lu.solve(b);
//
// Matrices stay sparse throughout (nothing is densified). Index types: i32 and i64
// (UMFPACK di/zi vs dl/zl, KLU klu/klu_z vs klu_l/klu_zl, cholmod vs cholmod_l). Values:
// f64 and c64 directly; SuiteSparse computes in double precision only, so f32 and c64
// (complex<float>) values are widened to double / complex<double>, factorized and solved
// there, and the solution is rounded to the output dtype (see solve()).
//
// CSR vs CSC: SuiteSparse takes compressed columns. A CSR matrix's arrays are the CSC
// arrays of its transpose, so LU factorizes A^T as given (no copy of the pattern) and
// solves with the transposed system (UMFPACK_Aat, klu_tsolve with conj_solve = 0: the
// plain transpose, also for complex). CHOLMOD reads one triangle: the lower triangle of
// the CSR (the upper of the CSC view, stype = +1) with complex values conjugated, which
// is the Hermitian matrix itself; entries above the diagonal are not read. A matrix
// stored as its upper triangle only (no entry below the diagonal) is read from that
// triangle instead. Rows whose columns are unsorted or repeated are accepted: the
// factorization keeps a canonical copy of the pattern (duplicates summed) and a map from
// the caller's entry order, so refactorize() takes values in the caller's order.
//
// Errors: a singular matrix (an exact zero pivot) or one that is not positive definite
// is an InputError naming what SuiteSparse reported (the pivot, row and column); bad
// shapes, dtypes and a pattern that differs from the analyzed one are InputErrors; out
// of memory and other library failures are rlx::Error. After a failed factorize() the
// object is unfactorized (solve() throws) but keeps its analysis, so it can be
// factorized again with other values.
//
// SuiteSparse is an optional dependency: when rlx is built without it, constructing a
// solver throws rlx::Error saying so (have_suitesparse() tells in advance). The libraries
// are loaded at first use (dlopen) rather than linked, because they pull in OpenBLAS,
// and OpenBLAS picks its kernels once, when it is loaded: loading it at program start
// would take that choice away from the cpu device (see devices/cpu/gemm.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/tensor.hpp"
#include "solvers/sparse/csr.hpp"

namespace rlx::sparse {

namespace detail {
class DirectFactorization;  // direct.cpp
}

enum class LuBackend { Umfpack, Klu };
const char* lu_backend_name(LuBackend b);  // "umfpack", "klu"

// True when rlx was built with SuiteSparse (the libraries may still fail to load at run
// time; the solvers then throw an Error naming the library).
bool have_suitesparse();
// The SuiteSparse version rlx was built against ("5.12.0"), or "" without it.
std::string suitesparse_version();

class SparseLu {
 public:
  // Analyzes A's pattern (ordering and symbolic factorization; UMFPACK also looks at the
  // values to prefer strong diagonal pivots). A must be square with f32, f64 or c64
  // values; c64 makes the factorization complex, and then only complex (or real)
  // values are accepted later; a real factorization refuses complex values.
  explicit SparseLu(const CsrMatrix& A, LuBackend backend = LuBackend::Umfpack);
  ~SparseLu();
  SparseLu(SparseLu&&) noexcept;
  SparseLu& operator=(SparseLu&&) noexcept;

  // Numeric factorization of A, which must have exactly the analyzed pattern (the same
  // row_ptr and col_idx; the index dtype may differ). Singular: InputError.
  void factorize(const CsrMatrix& A);
  // The same with new values [nnz] in the analyzed matrix's entry order. UMFPACK redoes
  // the numeric phase with the analyzed ordering; KLU first tries klu_refactor (same
  // pivot sequence, no pivot search) and falls back to a full numeric factorization
  // when that hits a zero pivot or its pivots degrade (crude rcond 1e8 times smaller
  // than at the last full factorization).
  void refactorize(const Tensor& values);
  // Solves A x = b for b [n] or [n, k] (f32, f64 or c64, any device: copied to the
  // host). The result is a host tensor of b's shape: c64 when the matrix or b is
  // complex, else f64 when either is f64, else f32 (computed in double, then rounded).
  // UMFPACK applies its default iterative refinement (up to 2 steps).
  Tensor solve(const Tensor& b);

  LuBackend backend() const;
  int64_t rows() const;
  bool is_complex() const;     // the factorization's arithmetic
  bool factorized() const;
  // After factorize(): the library's reciprocal condition estimate (UMFPACK: Info's
  // RCOND, min/max |U(k,k)|; KLU: klu_rcond, the same crude ratio).
  double rcond() const;
  // After factorize(): entries stored in L and U (the unit diagonal of L not counted;
  // KLU includes its off-diagonal blocks).
  int64_t factor_nnz() const;

 private:
  std::unique_ptr<detail::DirectFactorization> f_;
  LuBackend backend_ = LuBackend::Umfpack;
};

class SparseCholesky {
 public:
  // Analyzes A (symmetric positive definite, or Hermitian positive definite for c64):
  // CHOLMOD's default ordering strategy (AMD; METIS as well when AMD's fill is large,
  // keeping the better) and symbolic factorization, supernodal or simplicial as CHOLMOD
  // chooses (simplicial ones are asked for as L L^H, not CHOLMOD's default L D L^H, so
  // that an indefinite matrix is refused). Only one triangle of A is read (the lower; the
  // upper for a matrix stored as its upper triangle).
  explicit SparseCholesky(const CsrMatrix& A);
  ~SparseCholesky();
  SparseCholesky(SparseCholesky&&) noexcept;
  SparseCholesky& operator=(SparseCholesky&&) noexcept;

  // Numeric factorization L L^H. Not positive definite: InputError naming the failing
  // column (CHOLMOD's L->minor, in the permuted order, and the original column).
  void factorize(const CsrMatrix& A);
  void refactorize(const Tensor& values);  // new values [nnz] in the analyzed entry order
  Tensor solve(const Tensor& b);           // as SparseLu::solve

  int64_t rows() const;
  bool is_complex() const;
  bool factorized() const;
  double rcond() const;        // cholmod_rcond: (min diag(L) / max diag(L))^2
  int64_t factor_nnz() const;  // nnz(L) including the diagonal, as CHOLMOD's analysis counts it

 private:
  std::unique_ptr<detail::DirectFactorization> f_;
};

// ||b - A x||_F / ||b||_F (||b - A x|| when b is zero), accumulated in long double on the
// host: an independent check of a solve. x and b are [n] or [n, k] (f32, f64, c64).
double relative_residual(const CsrMatrix& A, const Tensor& x, const Tensor& b);
// Its two sums, for a block of rows: A is m x n, x [n] or [n, k], b [m] or [m, k];
// returns (||b - A x||^2, ||b||^2). A distributed residual adds them over the ranks.
std::pair<long double, long double> residual_sums(const CsrMatrix& A, const Tensor& x, const Tensor& b);

// The address of a SuiteSparse function (e.g. "umfpack_di_symbolic") from the libraries
// the solvers loaded, for callers that drive SuiteSparse directly next to rlx (the
// benchmark does). Throws Error without SuiteSparse, InputError for an unknown name.
void* suitesparse_symbol(const std::string& name);

}  // namespace rlx::sparse
