#include "solvers/sparse/adjoint.hpp"

#include <complex>

namespace rlx::sparse {

CsrMatrix conj_transpose(const CsrMatrix& A) {
  Coo c = A.to_coo();
  Tensor v = c.values.clone();
  if (v.dtype() == DType::C64)
    for (int64_t k = 0; k < v.numel(); ++k) v.data<c64>()[k] = std::conj(v.data<c64>()[k]);
  return CsrMatrix::from_coo(A.cols(), A.rows(), c.col, c.row, v, A.index_type());
}

SolveVjp solve_vjp(const CsrMatrix& A, const Tensor& x, const Tensor& grad_x, const KrylovOptions& opts,
                   const std::string& pc) {
  if (x.type() != TensorType{A.value_type(), {A.cols()}} || grad_x.type() != x.type())
    throw InputError("solve_vjp: x and grad_x must both be " + TensorType{A.value_type(), {A.cols()}}.str());
  CsrMatrix AH = conj_transpose(A);
  CsrOperator op(AH);
  auto M = make_preconditioner(pc, op);
  KrylovOptions o = opts;
  o.error_if_not_converged = true;
  SolveVjp r;
  r.adjoint = krylov_solve(op, grad_x, *M, o);
  r.grad_b = r.adjoint.x;
  r.grad_values = Tensor::empty(A.value_type(), {A.nnz()});
  const Tensor &rp = A.row_ptr(), &ci = A.col_idx();
  for (int64_t i = 0; i < A.rows(); ++i)
    for (int64_t k = index_at(rp, i); k < index_at(rp, i + 1); ++k) {
      int64_t j = index_at(ci, k);
      switch (A.value_type()) {
        case DType::F32: r.grad_values.data<float>()[k] = -r.grad_b.data<float>()[i] * x.data<float>()[j]; break;
        case DType::F64: r.grad_values.data<double>()[k] = -r.grad_b.data<double>()[i] * x.data<double>()[j]; break;
        default: r.grad_values.data<c64>()[k] = -r.grad_b.data<c64>()[i] * std::conj(x.data<c64>()[j]); break;
      }
    }
  return r;
}

}  // namespace rlx::sparse
