#include "solvers/sparse/ops.hpp"

#include "core/error.hpp"

namespace rlx::sparse {

namespace {
void check_vars(const CsrVars& A, const char* fn) {
  if (!A.row_ptr.defined() || !A.col_idx.defined() || !A.values.defined())
    throw InputError(std::string(fn) + ": the matrix has no graph values (use ir_inputs or ir_constants)");
  if (A.row_ptr.shape() != Shape{A.rows + 1})
    throw InputError(std::string(fn) + ": row_ptr is " + shape_str(A.row_ptr.shape()) + " but the matrix has " +
                     std::to_string(A.rows) + " rows");
}
}  // namespace

Var spmv(const CsrVars& A, const Var& x, double alpha, SrcLoc loc) {
  check_vars(A, "spmv");
  return rlx::op("spmv_csr", {A.row_ptr, A.col_idx, A.values, x}, {{"cols", A.cols}, {"alpha", alpha}}, loc);
}

Var spmv(const CsrVars& A, const Var& x, double alpha, double beta, const Var& y0, SrcLoc loc) {
  check_vars(A, "spmv");
  return rlx::op("spmv_csr", {A.row_ptr, A.col_idx, A.values, x, y0},
                 {{"cols", A.cols}, {"alpha", alpha}, {"beta", beta}}, loc);
}

Var spmm(const CsrVars& A, const Var& B, SrcLoc loc) {
  check_vars(A, "spmm");
  return rlx::op("spmm_csr", {A.row_ptr, A.col_idx, A.values, B}, {{"cols", A.cols}}, loc);
}

Var sptrsv(const CsrVars& A, const Var& b, bool lower, bool unit_diagonal, SrcLoc loc) {
  check_vars(A, "sptrsv");
  return rlx::op("sptrsv_csr", {A.row_ptr, A.col_idx, A.values, b},
                 {{"cols", A.cols}, {"lower", lower}, {"unit_diagonal", unit_diagonal}}, loc);
}

}  // namespace rlx::sparse
