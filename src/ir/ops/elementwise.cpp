// Elementwise L2 primitives: unary, binary (NumPy broadcasting), where, cast.
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

void unary(OpRegistry& r, const char* name, std::vector<DType> ok, std::optional<DType> result = std::nullopt,
           std::optional<DType> complex_result = std::nullopt) {
  r.add({.name = name, .level = Level::L2, .cls = OpClass::Elementwise, .min_inputs = 1, .max_inputs = 1,
         .infer = [ok, result, complex_result](const std::vector<TensorType>& in, auto&, auto&) {
           require_dtype(in[0], ok);
           TensorType t = in[0];
           if (result) t.dtype = *result;
           if (complex_result && in[0].dtype == DType::C64) t.dtype = *complex_result;
           return std::vector<TensorType>{t};
         },
         .dtypes = ok});
}

void binary(OpRegistry& r, const char* name, std::vector<DType> ok, std::optional<DType> result = std::nullopt) {
  r.add({.name = name, .level = Level::L2, .cls = OpClass::Elementwise, .min_inputs = 2, .max_inputs = 2,
         .infer = [ok, result](const std::vector<TensorType>& in, auto&, auto&) {
           require_same_dtype(in);
           require_dtype(in[0], ok);
           return std::vector<TensorType>{{result ? *result : in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape)}};
         },
         .dtypes = ok});
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  unary(r, "neg", kNumeric);
  unary(r, "abs", kNumeric, std::nullopt, DType::F32);
  unary(r, "exp", kInexact);
  for (const char* n : {"log", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "recip", "floor", "ceil", "round"})
    unary(r, n, kFloats);
  unary(r, "sign", kRealNumeric);
  unary(r, "logical_not", {DType::Bool});
  unary(r, "real", {DType::C64}, DType::F32);
  unary(r, "imag", {DType::C64}, DType::F32);
  unary(r, "conj", {DType::C64});

  for (const char* n : {"add", "sub", "mul", "div"}) binary(r, n, kNumeric);
  binary(r, "pow", kFloats);
  binary(r, "maximum", kRealNumeric);
  binary(r, "minimum", kRealNumeric);
  binary(r, "eq", kAllButI4, DType::Bool);
  binary(r, "ne", kAllButI4, DType::Bool);
  for (const char* n : {"lt", "le", "gt", "ge"}) binary(r, n, kRealNumeric, DType::Bool);
  binary(r, "logical_and", {DType::Bool});
  binary(r, "logical_or", {DType::Bool});
  binary(r, "make_complex", {DType::F32}, DType::C64);

  r.add({.name = "where", .level = Level::L2, .cls = OpClass::Elementwise, .min_inputs = 3, .max_inputs = 3,
         .infer = [](const std::vector<TensorType>& in, auto&, auto&) {
           if (in[0].dtype != DType::Bool)
             throw InputError(std::string("condition must be bool, got ") + dtype_name(in[0].dtype));
           require_same_dtype(in, 1);
           require_dtype(in[1], kAllButI4);
           Shape s = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape), in[2].shape);
           return std::vector<TensorType>{{in[1].dtype, s}};
         },
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{where(x.in(DType::Bool, {4, 8}), x.in(t, {4, 8}), x.in(t, {4, 8}))}; }});
  r.add({.name = "cast", .level = Level::L2, .cls = OpClass::Elementwise, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"dtype", AttrKind::DType, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           return std::vector<TensorType>{{a.get_dtype("dtype"), in[0].shape}};
         },
         .dtypes = kAll,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{cast(x.in(t, {4, 8}), t == DType::F32 ? DType::F64 : DType::F32)}; }});
}

}  // namespace rlx::ir
