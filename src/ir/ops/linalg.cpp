// Batched matmul, and project_out (a Gram-Schmidt pass's update with the next pass's
// projections). (The library primitives of the solver modules join this family.)
#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

namespace {
// project_out(V [k, n], w [n, m], h [k, m]) -> (u = w - V^T h, c = conj(V) u): the update of
// one classical Gram-Schmidt pass against the rows of V and the projections of its result,
// which the next pass (GMRES's CGS2) needs. Written as one op so that a device may do both
// in one read of V (cpu: per block of columns, the update, then the dot products while the
// block is in cache); its lowering is the two products.
std::vector<Var> project_out_body(const std::vector<Var>& in, const Attrs&) {
  const Var &V = in[0], &w = in[1], &h = in[2];
  if (V.rank() != 2 || w.rank() != 2 || h.rank() != 2 || w.shape()[0] != V.shape()[1] || h.shape()[0] != V.shape()[0] ||
      h.shape()[1] != w.shape()[1])
    throw InputError("project_out expects V [k, n], w [n, m] and h [k, m], got " + shape_str(V.shape()) + ", " +
                     shape_str(w.shape()) + " and " + shape_str(h.shape()));
  Var u = w - matmul(V, h, true, false);
  Var c = matmul(is_complex(V.dtype()) ? conj(V) : V, u);
  return {u, c};
}
}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.add({.name = "matmul", .level = Level::L2, .cls = OpClass::Matmul, .min_inputs = 2, .max_inputs = 2,
         .attrs = {{"transpose_a", AttrKind::Bool, false, false}, {"transpose_b", AttrKind::Bool, false, false}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_same_dtype(in);
           require_dtype(in[0], kInexact);
           require_rank_at_least(in[0], 2, "a");
           require_rank_at_least(in[1], 2, "b");
           const Shape &sa = in[0].shape, &sb = in[1].shape;
           bool ta = a.get_bool("transpose_a"), tb = a.get_bool("transpose_b");
           int64_t m = sa[sa.size() - (ta ? 1 : 2)], ka = sa[sa.size() - (ta ? 2 : 1)];
           int64_t kb = sb[sb.size() - (tb ? 1 : 2)], n = sb[sb.size() - (tb ? 2 : 1)];
           if (ka != kb)
             throw InputError("inner dimensions differ: a " + shape_str(sa) + (ta ? "^T" : "") + " and b " +
                              shape_str(sb) + (tb ? "^T" : "") + " (" + std::to_string(ka) + " vs " +
                              std::to_string(kb) + ")");
           Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
           Shape s = broadcast_shapes(ba, bb);
           s.push_back(m);
           s.push_back(n);
           return std::vector<TensorType>{{in[0].dtype, s}};
         },
         // With A' = op(A), B' = op(B): dA' = g B'^H, dB' = A'^H g, transposed back where the
         // operand was, and summed over the batch axes it was broadcast along.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs& a) {
           bool ta = a.get_bool("transpose_a"), tb = a.get_bool("transpose_b");
           Var a_ = vjp::cj(in[0]), b_ = vjp::cj(in[1]);
           Var da = ta ? matmul(b_, g[0], tb, true) : matmul(g[0], b_, false, !tb);
           Var db = tb ? matmul(g[0], a_, true, ta) : matmul(a_, g[0], !ta, false);
           return std::vector<Var>{vjp::unbroadcast(da, in[0].shape()), vjp::unbroadcast(db, in[1].shape())};
         },
         .dtypes = kInexact,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{matmul(x.in(t, {2, 4, 8}), x.in(t, {2, 8, 4}))}; }});
  r.add({.name = "project_out", .level = Level::L1, .cls = OpClass::Composite, .min_inputs = 3, .max_inputs = 3,
         .infer = infer_by_lowering(project_out_body, kInexact, true), .lower = project_out_body,
         .dtypes = kInexact,
         .doc = "u = w - V^T h and c = conj(V) u for V [k, n], w [n, m], h [k, m]: a Gram-Schmidt pass's update "
                "and the next pass's projections",
         .example = [](ExampleInputs& x, DType t) {
           auto [u, c] = project_out(x.in(t, {3, 10}), x.in(t, {10, 1}), x.in(t, {3, 1}));
           return std::vector<Var>{u, c};
         }});
}

}  // namespace rlx::ir
