// Pieces shared by the ops' VJP rules (OpDef::vjp; passes/autodiff.hpp): the rules are
// written with the front end beside each op's declaration.
#pragma once
#include <vector>

#include "ir/ops/rules.hpp"

namespace rlx::ir::vjp {

// A broadcast operand's cotangent: g summed over the axes broadcasting added or
// stretched, reshaped to `shape`.
Var unbroadcast(const Var& g, const Shape& shape);
// conj(x) for complex values, x otherwise: the complex rules multiply by conjugated
// derivatives (the conjugate Wirtinger convention, docs/autodiff.md).
Var cj(const Var& x);
Var zeros(Graph& g, const TensorType& t);
inline Var zeros_like(const Var& x) { return zeros(*x.graph(), x.type()); }
// A reduction's cotangent g (reduced over `axes` of `in`, keepdims or not) broadcast
// back to in's shape.
Var expand_reduced(const Var& g, const Shape& in, const std::vector<int>& axes);
// Single-result rules: fn(x, y, g) for each input.
using Unary = std::function<Var(const Var& x, const Var& y, const Var& g)>;
VjpFn unary_rule(Unary fn);
using Binary = std::function<std::vector<Var>(const Var& a, const Var& b, const Var& y, const Var& g)>;
VjpFn binary_rule(Binary fn);  // unbroadcasts what fn returns

}  // namespace rlx::ir::vjp
