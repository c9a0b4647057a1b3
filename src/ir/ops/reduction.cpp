// Reductions over axes, argmax, and the cumulative scan.
#include <algorithm>

#include "ir/ops/rules.hpp"

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

void register_reduction_ops(OpRegistry& r) {
  auto reduce = [&](const char* name, std::vector<DType> ok, bool needs_elements) {
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
           .dtypes = ok});
  };
  reduce("sum", kNumeric, false);
  reduce("prod", kNumeric, false);
  reduce("max", kRealNumeric, true);
  reduce("min", kRealNumeric, true);
  r.add({.name = "argmax", .level = Level::L2, .cls = OpClass::Reduction, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"axis", AttrKind::Int, true}, {"keepdims", AttrKind::Bool, false, false}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kRealNumeric);
           require_rank_at_least(in[0], 1);
           int ax = normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           if (in[0].shape[size_t(ax)] == 0) throw InputError("argmax over an empty axis");
           return std::vector<TensorType>{{DType::I64, reduced_shape(in[0].shape, {ax}, a.get_bool("keepdims"))}};
         },
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
         .dtypes = kNumeric,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{cumsum(x.in(t, {4, 8}), 1)}; }});
}

}  // namespace rlx::ir
