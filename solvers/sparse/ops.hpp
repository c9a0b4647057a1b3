// Front-end functions for the sparse library primitives (declared in src/ir/ops/sparse.cpp):
//
//   ir::Graph g;
//   auto A = matrix.ir_inputs(g, "A");              // or matrix.ir_constants(g)
//   auto x = rlx::input(g, "x", A.value_type(), {A.cols});
//   auto y = rlx::sparse::spmv(A, x);               // y = A x
//
// Like every front-end call, each records the caller's file and line on its node.
#pragma once
#include "solvers/sparse/csr.hpp"

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

}  // namespace rlx::sparse
