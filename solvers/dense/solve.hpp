// Dense linear solves built on the IR's LAPACK primitives (lu_factor / lu_solve), and
// their VJP. For X = A^{-1} B with cotangent G = dL/dX, one adjoint solve A^H Λ = G gives
//   dL/dB = Λ,   dL/dA = -Λ X^H,
// checked against finite differences in tests/solvers/test_dense_solve.cpp. For c64 the
// cotangents follow the conjugate (Wirtinger) convention, as in PyTorch.
#pragma once
#include <string>

#include "core/tensor.hpp"

namespace rlx::dense {

// X = A^{-1} B for square A [n, n] and B [n] or [n, k], compiled for `device`.
Tensor solve(const Tensor& A, const Tensor& B, const std::string& device = "cpu");

struct SolveVjp {
  Tensor grad_A;  // [n, n]
  Tensor grad_B;  // B's shape
};
SolveVjp solve_vjp(const Tensor& A, const Tensor& X, const Tensor& grad_X, const std::string& device = "cpu");

}  // namespace rlx::dense
