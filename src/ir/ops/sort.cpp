// The `sort` library primitive: a stable sort along one axis, giving the sorted values and
// the permutation (argsort) in one op, since every device computes both at once.
#include "core/error.hpp"
#include "ir/frontend.hpp"
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

// Sorting is a permutation of each row, so the cotangent of x is the values' cotangent
// sent back through it: grad_x[.., idx[.., j, ..], ..] = grad_values[.., j, ..]. The
// permutation is applied on the flattened tensor: the element at flat position p with
// coordinate j along the axis came from flat position p + (idx[p] - j) * stride.
// The indices are integers and carry no gradient.
std::vector<Var> sort_vjp(const std::vector<Var>& in, const std::vector<Var>& out, const std::vector<Var>& grad_out,
                          const Attrs& a) {
  const Var& x = in[0];
  const Var& idx = out[1];
  const Var& gv = grad_out[0];
  Graph& g = *x.graph();
  const Shape s = x.shape();
  const int ax = normalize_axis(a.get_int("axis"), x.rank());
  int64_t stride = 1;
  for (size_t d = size_t(ax) + 1; d < s.size(); ++d) stride *= s[d];
  const int64_t n = numel(s);
  Var flat_pos = reshape(iota(g, {n}, 0, DType::I64), s);
  Var along = iota(g, s, ax, DType::I64);
  Var source = flat_pos + (idx - along) * scalar(g, double(stride), DType::I64);
  Var zeros = broadcast_to(scalar_like(gv, 0.0), {n});
  Var grad = scatter_add(zeros, reshape(source, {n}), reshape(gv, {n}), 0);
  return {reshape(grad, s)};
}

}  // namespace

void register_sort_ops(OpRegistry& r) {
  // Stable sort along `axis` -> (values, indices i64): values[.., j, ..] = x[.., indices[.., j, ..], ..].
  // Order: ascending numeric order; -0.0 and +0.0 are equal; NaNs are equal to each other and
  // greater than +inf (last; NumPy's and PyTorch's order). descending reverses the order
  // (NaNs first). Either way, equal elements keep their input order. Keys for devices that
  // sort bits: core/sort_key.hpp.
  r.add({.name = "sort", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"axis", AttrKind::Int, false, int64_t(-1)}, {"descending", AttrKind::Bool, false, false}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kRealNumeric, "sort input");
           if (in[0].shape.empty()) throw InputError("sort needs an input of rank >= 1, got a scalar");
           normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           return std::vector<TensorType>{in[0], {DType::I64, in[0].shape}};
         },
         .vjp = sort_vjp,
         .dtypes = kRealNumeric,
         .doc = "stable sort along an axis -> (values, indices i64); NaNs last, -0 == +0",
         .example = [](ExampleInputs& x, DType t) { return op_multi("sort", {x.in(t, {4, 8})}); }});
}

}  // namespace rlx::ir
