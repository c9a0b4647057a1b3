#include "solvers/sparse/ops.hpp"

#include <cmath>

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

CgVars cg(const CsrVars& A, const Var& b, const CgOptions& o, const std::optional<Var>& x0, SrcLoc loc) {
  check_vars(A, "cg");
  std::vector<Var> in{A.row_ptr, A.col_idx, A.values, b};
  if (x0) in.push_back(*x0);
  std::vector<Var> r = rlx::op_multi(
      "cg_csr", in, {{"cols", A.cols}, {"rtol", o.rtol}, {"atol", o.atol}, {"max_it", o.max_it}}, {}, loc);
  Var norm_b = sqrt(sum(b.dtype() == DType::C64 ? real(b * conj(b), loc) : b * b, {}, false, loc), loc);
  Var bound = maximum(norm_b * o.rtol, scalar(*b.graph(), o.atol, r[2].dtype(), loc), loc) * kTrueResidualSlack;
  return {r[0], r[1], r[2], le(r[2], bound, loc)};
}

void check_converged(const Tensor& x, const Tensor& iterations, const Tensor& residual, const Tensor& converged,
                     const CgOptions& o) {
  auto host = [](const Tensor& t) { return t.contiguous().to(host_allocator()); };
  if (host(converged).data<bool>()[0]) return;
  KrylovResult r;
  r.x = host(x);
  r.iterations = int(host(iterations).data<int64_t>()[0]);
  const Tensor res = host(residual);
  r.true_residual = r.residual = res.dtype() == DType::F64 ? res.data<double>()[0] : double(res.data<float>()[0]);
  r.reason = !std::isfinite(r.true_residual) ? StopReason::DivergedNan
             : r.iterations >= o.max_it      ? StopReason::DivergedMaxIt
                                             : StopReason::DivergedStagnation;
  throw SolveError(std::string("cg: ") + stop_reason_name(r.reason) + " after " + std::to_string(r.iterations) +
                       " iterations, true residual " + std::to_string(r.true_residual) + " (rtol " +
                       std::to_string(o.rtol) + ", atol " + std::to_string(o.atol) + ")",
                   std::move(r));
}

}  // namespace rlx::sparse
