// Batched matmul. (The library primitives of the solver modules join this family.)
#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

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
}

}  // namespace rlx::ir
