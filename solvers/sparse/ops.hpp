// Front-end functions for the sparse library primitives (declared in src/ir/ops/sparse.cpp):
//
//   ir::Graph g;
//   auto A = matrix.ir_inputs(g, "A");              // or matrix.ir_constants(g)
//   auto x = rlx::input(g, "x", A.value_type(), {A.cols});
//   auto y = rlx::sparse::spmv(A, x);               // y = A x
//
// Like every front-end call, each records the caller's file and line on its node.
#pragma once
#include <optional>

#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/krylov.hpp"

namespace rlx::sparse {

// y = alpha * A x.
Var spmv(const CsrVars& A, const Var& x, double alpha = 1.0, SrcLoc loc = SrcLoc::current());
// y = alpha * A x + beta * y0 (literally: a NaN in y0 propagates even when beta is 0).
Var spmv(const CsrVars& A, const Var& x, double alpha, double beta, const Var& y0, SrcLoc loc = SrcLoc::current());
// C = A B for a dense B [cols, k].
Var spmm(const CsrVars& A, const Var& B, SrcLoc loc = SrcLoc::current());
// Solves T x = b, T the lower (or upper) triangle of the square A (the other triangle is
// not read). With unit_diagonal the diagonal is taken as 1 and not read. The diagonal
// is the sum of the stored entries at (i, i) (0 when none: x follows IEEE division).
Var sptrsv(const CsrVars& A, const Var& b, bool lower = true, bool unit_diagonal = false,
           SrcLoc loc = SrcLoc::current());

// Conjugate gradients as one node (the op cg_csr): solves A x = b for a Hermitian positive
// definite A, from x0 (zero when absent), in an in-graph while loop that stops when the
// recursively updated residual is <= max(rtol ||b||, atol) or after max_it iterations. grad
// passes through it by the adjoint solve A^H λ = g (docs/autodiff.md).
//
// The node does not throw when the solve fails (max_it reached, an A that is not positive
// definite: a NaN residual); `converged` says whether the true residual ||b - A x|| of the x
// returned is within kTrueResidualSlack times the tolerance, the test krylov_solve applies.
// After a run, check_converged(...) on the run's values is the checked variant.
struct CgOptions {
  double rtol = 1e-8;
  double atol = 0.0;
  int64_t max_it = 10000;
};
struct CgVars {
  Var x;           // the last iterate
  Var iterations;  // i64[]
  Var residual;    // ||b - A x|| for that x, recomputed (real scalar: f32 for c64)
  Var converged;   // bool[]: residual <= kTrueResidualSlack * max(rtol ||b||, atol)
};
CgVars cg(const CsrVars& A, const Var& b, const CgOptions& o = {}, const std::optional<Var>& x0 = std::nullopt,
          SrcLoc loc = SrcLoc::current());
// Throws SolveError (its result holds x, the iterations and the residual; the reason
// diverged-nan for a residual that is not finite, diverged-max-it when the iterations reached
// max_it, diverged-stagnation otherwise: the recursion stopped but the true residual did not
// follow) unless `converged` is true. The tensors are a run's values of CgVars's fields.
void check_converged(const Tensor& x, const Tensor& iterations, const Tensor& residual, const Tensor& converged,
                     const CgOptions& o);

}  // namespace rlx::sparse
