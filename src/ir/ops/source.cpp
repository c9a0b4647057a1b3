// Ops with no inputs: graph parameters, constants, iota and counter-based RNG.
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

static TensorType declared(const Attrs& a) {
  Shape s = a.get_ints("shape");
  for (int64_t d : s)
    if (d < 0) throw InputError("shape " + shape_str(s) + " has a negative extent");
  return {a.get_dtype("dtype"), s};
}

void register_source_ops(OpRegistry& r) {
  r.add({.name = "param", .level = Level::L2, .cls = OpClass::Source,
         .attrs = {{"name", AttrKind::String, true}, {"dtype", AttrKind::DType, true}, {"shape", AttrKind::Ints, true}},
         .infer = [](auto&, const Attrs& a, auto&) { return std::vector<TensorType>{declared(a)}; },
         .dtypes = kAll, .doc = "a graph input"});
  r.add({.name = "constant", .level = Level::L2, .cls = OpClass::Source,
         .attrs = {{"value", AttrKind::Tensor, true}},
         .infer = [](auto&, const Attrs& a, auto&) { return std::vector<TensorType>{a.get_tensor("value").type()}; },
         .dtypes = kAll, .doc = "a literal tensor",
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{constant(x.graph(), Tensor::zeros(t, {4, 8}))}; }});
  r.add({.name = "iota", .level = Level::L2, .cls = OpClass::Source,
         .attrs = {{"shape", AttrKind::Ints, true}, {"axis", AttrKind::Int, false, int64_t(0)},
                   {"dtype", AttrKind::DType, true}},
         .infer = [](auto&, const Attrs& a, auto&) {
           TensorType t = declared(a);
           require_dtype(t, kRealNumeric, "result");
           normalize_axis(a.get_int("axis"), int(t.shape.size()));
           return std::vector<TensorType>{t};
         },
         .dtypes = kRealNumeric, .doc = "index along an axis",
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{iota(x.graph(), {4, 8}, 1, t)}; }});
  for (const char* name : {"rng_uniform", "rng_normal"}) {
    bool uniform = std::string(name) == "rng_uniform";
    r.add({.name = name, .level = Level::L2, .cls = OpClass::Source,
           .attrs = {{"shape", AttrKind::Ints, true}, {"dtype", AttrKind::DType, true},
                     {"seed", AttrKind::Int, false, int64_t(0)},
                     {uniform ? "low" : "mean", AttrKind::Float, false, 0.0},
                     {uniform ? "high" : "stddev", AttrKind::Float, false, 1.0}},
           .infer = [](auto&, const Attrs& a, auto&) {
             TensorType t = declared(a);
             require_dtype(t, kFloats, "result");
             return std::vector<TensorType>{t};
           },
           .stateful = true, .dtypes = kFloats, .doc = "counter-based random numbers (src/core/rng.hpp)",
           .example = [uniform](ExampleInputs& x, DType t) {
             return std::vector<Var>{uniform ? rng_uniform(x.graph(), {4, 8}, t, 1) : rng_normal(x.graph(), {4, 8}, t, 1)};
           }});
  }
}

}  // namespace rlx::ir
