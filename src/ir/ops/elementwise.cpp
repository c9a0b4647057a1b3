// Elementwise L2 primitives: unary, binary (NumPy broadcasting), where, cast, with
// their VJPs (complex ones in the conjugate convention of docs/autodiff.md).
#include <cmath>
#include <map>
#include <numbers>

#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;
using vjp::cj;

namespace {

// Zero almost everywhere (floor, ceil, round, sign): the gradient is zeros, as in PyTorch.
Var flat(const Var& x, const Var&, const Var&) { return vjp::zeros_like(x); }

const std::map<std::string, vjp::Unary>& unary_vjps() {
  static const std::map<std::string, vjp::Unary> m = {
      {"neg", [](const Var&, const Var&, const Var& g) { return -g; }},
      {"abs",
       [](const Var& x, const Var& y, const Var& g) {
         if (x.dtype() != DType::C64) return g * sign(x);
         // d|z| = Re(conj(z)/|z| dz): the gradient z/|z| scaled by g, 0 at z = 0.
         Var safe = where(eq(y, scalar_like(y, 0.0)), scalar_like(y, 1.0), y);
         Var s = g / safe;
         return make_complex(s * real(x), s * imag(x));
       }},
      {"exp", [](const Var&, const Var& y, const Var& g) { return g * cj(y); }},
      {"log", [](const Var& x, const Var&, const Var& g) { return g / x; }},
      {"sqrt", [](const Var&, const Var& y, const Var& g) { return 0.5 * g / y; }},
      {"rsqrt", [](const Var&, const Var& y, const Var& g) { return -0.5 * g * y * y * y; }},
      {"sin", [](const Var& x, const Var&, const Var& g) { return g * cos(x); }},
      {"cos", [](const Var& x, const Var&, const Var& g) { return -(g * sin(x)); }},
      {"tanh", [](const Var&, const Var& y, const Var& g) { return g * (1.0 - y * y); }},
      {"erf", [](const Var& x, const Var&, const Var& g) { return g * (2.0 / std::sqrt(std::numbers::pi)) * exp(-(x * x)); }},
      {"recip", [](const Var&, const Var& y, const Var& g) { return -(g * y * y); }},
      {"floor", flat}, {"ceil", flat}, {"round", flat}, {"sign", flat},
      {"real", [](const Var&, const Var&, const Var& g) { return make_complex(g, vjp::zeros_like(g)); }},
      {"imag", [](const Var&, const Var&, const Var& g) { return make_complex(vjp::zeros_like(g), g); }},
      {"conj", [](const Var&, const Var&, const Var& g) { return conj(g); }},
  };
  return m;
}

// Ties of maximum/minimum share the gradient equally, as PyTorch does.
std::vector<Var> pick(const Var& a, const Var& b, const Var& g, bool larger) {
  Var zero = vjp::zeros_like(g), half = 0.5 * g;
  Var a_wins = larger ? gt(a, b) : lt(a, b), b_wins = larger ? gt(b, a) : lt(b, a), tie = eq(a, b);
  return {where(a_wins, g, where(tie, half, zero)), where(b_wins, g, where(tie, half, zero))};
}

const std::map<std::string, vjp::Binary>& binary_vjps() {
  using V = std::vector<Var>;
  static const std::map<std::string, vjp::Binary> m = {
      {"add", [](const Var&, const Var&, const Var&, const Var& g) { return V{g, g}; }},
      {"sub", [](const Var&, const Var&, const Var&, const Var& g) { return V{g, -g}; }},
      {"mul", [](const Var& a, const Var& b, const Var&, const Var& g) { return V{g * cj(b), g * cj(a)}; }},
      {"div", [](const Var&, const Var& b, const Var& y, const Var& g) { return V{g / cj(b), -(g * cj(y) / cj(b))}; }},
      // d/db a^b = a^b log a: 0 at a = 0 (as PyTorch), NaN for a < 0 (no real logarithm).
      {"pow",
       [](const Var& a, const Var& b, const Var& y, const Var& g) {
         Var db = where(eq(a, scalar_like(a, 0.0)), vjp::zeros_like(g), g * y * log(a));
         return V{g * b * pow(a, b - 1.0), db};
       }},
      {"maximum", [](const Var& a, const Var& b, const Var&, const Var& g) { return pick(a, b, g, true); }},
      {"minimum", [](const Var& a, const Var& b, const Var&, const Var& g) { return pick(a, b, g, false); }},
      {"make_complex", [](const Var&, const Var&, const Var&, const Var& g) { return V{real(g), imag(g)}; }},
  };
  return m;
}

VjpFn unary_vjp(const char* name) {
  auto it = unary_vjps().find(name);
  return it == unary_vjps().end() ? VjpFn{} : vjp::unary_rule(it->second);
}
VjpFn binary_vjp(const char* name) {
  auto it = binary_vjps().find(name);
  return it == binary_vjps().end() ? VjpFn{} : vjp::binary_rule(it->second);
}

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
         .vjp = unary_vjp(name),
         .not_differentiable = !unary_vjp(name),
         .dtypes = ok});
}

void binary(OpRegistry& r, const char* name, std::vector<DType> ok, std::optional<DType> result = std::nullopt) {
  r.add({.name = name, .level = Level::L2, .cls = OpClass::Elementwise, .min_inputs = 2, .max_inputs = 2,
         .infer = [ok, result](const std::vector<TensorType>& in, auto&, auto&) {
           require_same_dtype(in);
           require_dtype(in[0], ok);
           return std::vector<TensorType>{{result ? *result : in[0].dtype, broadcast_shapes(in[0].shape, in[1].shape)}};
         },
         .vjp = binary_vjp(name),
         .not_differentiable = !binary_vjp(name),
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
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs&) {
           Var zero = vjp::zeros_like(g[0]);
           return std::vector<Var>{Var(), vjp::unbroadcast(where(in[0], g[0], zero), in[1].shape()),
                                   vjp::unbroadcast(where(in[0], zero, g[0]), in[2].shape())};
         },
         .nondiff_inputs = {0},
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{where(x.in(DType::Bool, {4, 8}), x.in(t, {4, 8}), x.in(t, {4, 8}))}; }});
  r.add({.name = "cast", .level = Level::L2, .cls = OpClass::Elementwise, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"dtype", AttrKind::DType, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           return std::vector<TensorType>{{a.get_dtype("dtype"), in[0].shape}};
         },
         // Between float and complex types; an integer or bool result has no gradient.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs&) {
           return std::vector<Var>{cast(g[0], in[0].dtype())};
         },
         .dtypes = kAll,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{cast(x.in(t, {4, 8}), t == DType::F32 ? DType::F64 : DType::F32)}; }});
}

}  // namespace rlx::ir
