// Differentiating through a sparse linear solve. For x = A^{-1} b and a loss L(x) with
// cotangent g = dL/dx, one adjoint solve A^H λ = g gives
//   dL/db = λ,   dL/dA_ij = -λ_i conj(x_j)  for every stored nonzero (i, j),
// so a learned model can be trained through a physics solve at the cost of one more solve.
// (krylov_solve is a host-driven loop, not an IR op, so the autodiff pass cannot reach it
// inside a graph; this is its VJP as a function. Inside a graph, sparse::cg (ops.hpp) is one
// op, cg_csr, which grad differentiates by the same adjoint solve.)
#pragma once
#include <string>

#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/krylov.hpp"

namespace rlx::sparse {

struct SolveVjp {
  Tensor grad_b;       // [rows], b's dtype
  Tensor grad_values;  // [nnz], aligned with A.values()
  KrylovResult adjoint;  // how the adjoint solve went
};

// A^H as a CSR matrix (conjugated values for c64).
CsrMatrix conj_transpose(const CsrMatrix& A);

// Runs the adjoint solve with `opts` (method, preconditioner `pc`) and forms both
// cotangents. Throws SolveError when the adjoint solve does not converge.
SolveVjp solve_vjp(const CsrMatrix& A, const Tensor& x, const Tensor& grad_x, const KrylovOptions& opts,
                   const std::string& pc = "none");

}  // namespace rlx::sparse
