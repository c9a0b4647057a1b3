// Op examples: the class examples that serve most ops, and the helpers the family files'
// own examples share (well-conditioned matrices, a small CSR structure).
#include "ir/frontend.hpp"
#include "ir/ops/rules.hpp"

namespace rlx::ir {

namespace rules {

Tensor example_tensor(DType t, Shape s, const std::vector<double>& values) {
  Tensor r = Tensor::empty(t, std::move(s));
  if (size_t(r.numel()) != values.size()) throw InternalError("example_tensor: wrong number of values");
  visit_dtype(t, [&](auto z) {
    using T = decltype(z);
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, c64>)
        r.data<T>()[i] = c64(float(values[i]), 0.0f);
      else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
        r.data<T>()[i] = T(float(values[i]));
      else
        r.data<T>()[i] = static_cast<T>(values[i]);
    }
  });
  return r;
}

Var example_spd(ExampleInputs& in, DType t) {
  // Symmetric, diagonally dominant: every factorization and solve of the family is defined.
  return in.fixed(example_tensor(t, {4, 4}, {6, 1, 0.5, 0, 1, 5, -1, 0.25, 0.5, -1, 7, 2, 0, 0.25, 2, 8}));
}

std::vector<Var> example_csr(ExampleInputs& in, DType values, const ValueRange& range) {
  // 4 x 4, two entries a row, lower triangular with its diagonal (sptrsv_csr takes it too).
  return {in.fixed(example_tensor(DType::I32, {5}, {0, 1, 3, 5, 8})),
          in.fixed(example_tensor(DType::I32, {8}, {0, 0, 1, 1, 2, 0, 2, 3})), in.in(values, {8}, range)};
}

}  // namespace rules

ExampleFn example_of(const OpDef& def) {
  if (def.example) return def.example;
  const std::string name = def.name;
  if (def.cls == OpClass::Elementwise && def.min_inputs >= 1 && def.max_inputs <= 2)
    return [name, n = def.max_inputs](ExampleInputs& in, DType t) {
      std::vector<Var> operands;
      for (int i = 0; i < n; ++i) operands.push_back(in.in(t, {4, 8}));
      return std::vector<Var>{op(name, operands)};
    };
  if (def.cls == OpClass::Reduction && def.attr_spec("axes"))
    return [name](ExampleInputs& in, DType t) {
      return std::vector<Var>{op(name, {in.in(t, {4, 8})}, {{"axes", std::vector<int64_t>{1}}})};
    };
  if (def.level == Level::L1 && def.min_inputs == 1)
    return [name](ExampleInputs& in, DType t) { return std::vector<Var>{op(name, {in.in(t, {4, 8})})}; };
  return {};
}

}  // namespace rlx::ir
