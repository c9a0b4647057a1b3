#include "ir/ops/vjp.hpp"

namespace rlx::ir::vjp {

Var unbroadcast(const Var& g, const Shape& shape) {
  const Shape& gs = g.shape();
  if (gs == shape) return g;
  const size_t lead = gs.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < gs.size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) axes.push_back(int64_t(i));
  Var s = axes.empty() ? g : sum(g, axes, true);
  return reshape(s, shape);
}

Var cj(const Var& x) { return x.dtype() == DType::C64 ? conj(x) : x; }

Var zeros(Graph& g, const TensorType& t) {
  Var z = scalar(g, 0.0, t.dtype);
  return t.shape.empty() ? z : broadcast_to(z, t.shape);
}

Var expand_reduced(const Var& g, const Shape& in, const std::vector<int>& axes) {
  Shape kept = in;
  for (int a : axes) kept[size_t(a)] = 1;
  Var r = g.shape() == kept ? g : reshape(g, kept);
  return r.shape() == in ? r : broadcast_to(r, in);
}

VjpFn unary_rule(Unary fn) {
  return [fn](const std::vector<Var>& in, const std::vector<Var>& out, const std::vector<Var>& g, const Attrs&) {
    return std::vector<Var>{fn(in[0], out[0], g[0])};
  };
}

VjpFn binary_rule(Binary fn) {
  return [fn](const std::vector<Var>& in, const std::vector<Var>& out, const std::vector<Var>& g, const Attrs&) {
    std::vector<Var> r = fn(in[0], in[1], out[0], g[0]);
    for (size_t i = 0; i < r.size(); ++i)
      if (r[i].defined()) r[i] = unbroadcast(r[i], in[i].shape());
    return r;
  };
}

}  // namespace rlx::ir::vjp
