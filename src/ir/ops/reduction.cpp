// Reductions over axes, argmax, and the cumulative scan.
#include <algorithm>

#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

std::vector<int> rules::reduce_axes(const Attrs& a, int rank) {
  std::vector<int> axes;
  for (int64_t x : a.get_ints("axes")) axes.push_back(normalize_axis(x, rank));
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) throw InputError("reduction axes repeat");
  return axes;
}

Shape rules::reduced_shape(const Shape& s, const std::vector<int>& axes, bool keepdims) {
  Shape r;
  for (int i = 0; i < int(s.size()); ++i) {
    bool red = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!red)
      r.push_back(s[size_t(i)]);
    else if (keepdims)
      r.push_back(1);
  }
  return r;
}

namespace {

using V = std::vector<Var>;

V sum_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  return {vjp::expand_reduced(g[0], in[0].shape(), reduce_axes(a, in[0].rank()))};
}

// The product of the others, exactly also where some x is 0: with no zero it is y / x;
// with one zero it is the product of the rest at that zero and 0 elsewhere; with more it is 0.
V prod_vjp(const V& in, const V&, const V& g, const Attrs& a) {
  const Var& x = in[0];
  auto axes = reduce_axes(a, x.rank());
  std::vector<int64_t> ax(axes.begin(), axes.end());
  auto back = [&](const Var& v) { return vjp::expand_reduced(v, x.shape(), axes); };
  Var zero = eq(x, scalar_like(x, 0.0));
  Var nonzero = where(zero, scalar_like(x, 1.0), x);
  Var rest = back(prod(nonzero, ax, true));
  Var zeros = back(sum(cast(zero, DType::I64), ax, true));
  Var none = eq(zeros, scalar_like(zeros, 0.0)), one = eq(zeros, scalar_like(zeros, 1.0));
  Var others = where(none, rest / nonzero, where(logical_and(one, zero), rest, vjp::zeros_like(x)));
  return {back(g[0]) * vjp::cj(others)};
}

// max/min: the gradient goes to the extreme elements, shared equally between ties.
V extreme_vjp(const V& in, const V& out, const V& g, const Attrs& a) {
  const Var& x = in[0];
  auto axes = reduce_axes(a, x.rank());
  std::vector<int64_t> ax(axes.begin(), axes.end());
  auto back = [&](const Var& v) { return vjp::expand_reduced(v, x.shape(), axes); };
  Var hit = eq(x, back(out[0]));
  Var ties = back(sum(cast(hit, x.dtype()), ax, true));
  return {where(hit, back(g[0]) / ties, vjp::zeros_like(x))};
}

}  // namespace

void register_reduction_ops(OpRegistry& r) {
  auto reduce = [&](const char* name, std::vector<DType> ok, bool needs_elements, VjpFn rule) {
    r.add({.name = name, .level = Level::L2, .cls = OpClass::Reduction, .min_inputs = 1, .max_inputs = 1,
           .attrs = {{"axes", AttrKind::Ints, false, std::vector<int64_t>{}},
                     {"keepdims", AttrKind::Bool, false, false}},
           .infer = [ok, needs_elements, name](const std::vector<TensorType>& in, const Attrs& a, auto&) {
             require_dtype(in[0], ok);
             auto axes = reduce_axes(a, int(in[0].shape.size()));
             // max/min of nothing has no value (sum and prod have identities).
             if (needs_elements)
               for (int ax : axes)
                 if (in[0].shape[size_t(ax)] == 0)
                   throw InputError(std::string(name) + " over the empty axis " + std::to_string(ax));
             return std::vector<TensorType>{{in[0].dtype, reduced_shape(in[0].shape, axes, a.get_bool("keepdims"))}};
           },
           .vjp = rule,
           .dtypes = ok});
  };
  reduce("sum", kNumeric, false, sum_vjp);
  reduce("prod", kNumeric, false, prod_vjp);
  reduce("max", kRealNumeric, true, extreme_vjp);
  reduce("min", kRealNumeric, true, extreme_vjp);
  r.add({.name = "argmax", .level = Level::L2, .cls = OpClass::Reduction, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"axis", AttrKind::Int, true}, {"keepdims", AttrKind::Bool, false, false}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kRealNumeric);
           require_rank_at_least(in[0], 1);
           int ax = normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           if (in[0].shape[size_t(ax)] == 0) throw InputError("argmax over an empty axis");
           return std::vector<TensorType>{{DType::I64, reduced_shape(in[0].shape, {ax}, a.get_bool("keepdims"))}};
         },
         .not_differentiable = true,
         .dtypes = kRealNumeric,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{argmax(x.in(t, {4, 8}), 1)}; }});
  r.add({.name = "cumsum", .level = Level::L2, .cls = OpClass::Scan, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"axis", AttrKind::Int, true}, {"exclusive", AttrKind::Bool, false, false},
                   {"reverse", AttrKind::Bool, false, false}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kNumeric);
           require_rank_at_least(in[0], 1);
           normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           return std::vector<TensorType>{in[0]};
         },
         // Each x_j reaches the y_i at and after it (before it when reversed): the same
         // scan run the other way.
         .vjp = [](const V&, const V&, const V& g, const Attrs& a) {
           return V{cumsum(g[0], a.get_int("axis"), a.get_bool("exclusive"), !a.get_bool("reverse"))};
         },
         .dtypes = kNumeric,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{cumsum(x.in(t, {4, 8}), 1)}; }});
}

}  // namespace rlx::ir
