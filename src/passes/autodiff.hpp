// Reverse- and forward-mode differentiation of IR graphs, built from each op's VJP in the
// registry (OpDef::vjp). A gradient is more IR in the same graph: forward and backward
// compile into one program, and every backward node carries the source location of the
// forward node it differentiates, so reports and errors point at the user's line.
//
//   ir::Graph g;
//   Var x = input(g, "x", DType::F32, {128, 784});
//   Var w = input(g, "w", DType::F32, {10, 784});
//   Var loss = cross_entropy(linear(x, w), labels);
//   auto [dw] = grad(loss, {w});           // appended to g
//   output(g, {loss, dw});
//
// Rules (docs/autodiff.md):
//  - Only the nodes on a path from `wrt` to the differentiated outputs get a backward;
//    a value with several uses sums their cotangents.
//  - An op without a derivative (comparisons, argmax, integer ops, rng; OpDef::
//    not_differentiable) on such a path is an error naming the node; inputs through
//    which no gradient flows by definition (a where's condition, gather's indices:
//    OpDef::nondiff_inputs) are not paths.
//  - L1 ops without a VJP of their own differentiate through their lowering body.
//  - Complex values: the gradient of a real loss L with respect to z = x + iy is
//    dL/dx + i dL/dy (the conjugate Wirtinger convention, as PyTorch), so a step
//    z -= lr * grad descends.
//  - if: its VJP is an if on the same predicate whose regions re-emit each branch and
//    differentiate it (zeros for arguments a branch does not read); the predicate gets
//    no cotangent. That VJP is an if again, so jvp and hvp go through it as well.
//  - while with a trip count fixed when grad runs (an integer counter from a constant,
//    stepped by a constant, compared with a constant): the backward recomputes the loop
//    unrolled from its inputs, intermediates kept, and differentiates that chain; refused
//    past 100,000 unrolled nodes. A while whose trip count depends on the data is refused
//    with the node's location (a solver is differentiated through its adjoint rule).
#pragma once
#include <optional>
#include <vector>

#include "ir/frontend.hpp"

namespace rlx {

// The vector-Jacobian product: for outputs y_k with cotangents u_k (same types),
// d/dx_j sum_k <u_k, y_k> for each x in wrt, appended to their graph. A wrt value the
// outputs do not depend on gets zeros. wrt values must be float or complex.
std::vector<Var> vjp(const std::vector<Var>& outputs, const std::vector<Var>& cotangents, const std::vector<Var>& wrt,
                     SrcLoc loc = SrcLoc::current());
// The gradient of y: vjp with cotangent 1 (y must have one element) or the given one.
std::vector<Var> grad(const Var& y, const std::vector<Var>& wrt, std::optional<Var> cotangent = std::nullopt,
                      SrcLoc loc = SrcLoc::current());
// The Jacobian-vector product: d/dt y_k(x + t v) at t = 0 for each output, with one
// tangent per wrt value. Derived from the VJPs by transposition (the VJP is linear in
// its cotangent, so the VJP of the VJP with respect to the cotangent is the JVP), which
// gives every op with a VJP a JVP.
std::vector<Var> jvp(const std::vector<Var>& outputs, const std::vector<Var>& wrt, const std::vector<Var>& tangents,
                     SrcLoc loc = SrcLoc::current());
// The Hessian-vector product of a scalar y: the JVP of its gradient (forward over reverse).
std::vector<Var> hvp(const Var& y, const std::vector<Var>& wrt, const std::vector<Var>& vectors,
                     SrcLoc loc = SrcLoc::current());

}  // namespace rlx

namespace rlx::passes {

// Graph in, graph out: g's results followed by the gradient of result `output` (one
// element, or seeded by a new trailing parameter `cotangent` of its type when
// with_cotangent) with respect to each parameter in wrt (by index in g.params; empty:
// every float or complex parameter).
ir::Graph grad(const ir::Graph& g, int output = 0, std::vector<int> wrt = {}, bool with_cotangent = false);

}  // namespace rlx::passes
