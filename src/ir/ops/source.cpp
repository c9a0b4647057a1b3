// Ops with no inputs: graph parameters, constants, iota and counter-based RNG.
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

void register_source_ops(OpRegistry& r) {
  r.add({.name = "param", .level = Level::L2, .cls = OpClass::Source,
         .attrs = {{"name", AttrKind::String, true}, {"dtype", AttrKind::DType, true}, {"shape", AttrKind::Ints, true}},
         .infer = [](auto&, const Attrs& a, auto&) { return std::vector<TensorType>{declared_type(a)}; },
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
           TensorType t = declared_type(a);
           require_dtype(t, kRealNumeric, "result");
           normalize_axis(a.get_int("axis"), int(t.shape.size()));
           return std::vector<TensorType>{t};
         },
         .dtypes = kRealNumeric, .doc = "index along an axis",
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{iota(x.graph(), {4, 8}, 1, t)}; }});
  for (const char* name : {"rng_uniform", "rng_normal"}) {
    bool uniform = std::string(name) == "rng_uniform";
    // An optional input, the key: an i64[] mixed into the seed (core/rng.hpp), so that one
    // program draws new numbers each time it runs with a new key (a training step's dropout).
    r.add({.name = name, .level = Level::L2, .cls = OpClass::Source, .min_inputs = 0, .max_inputs = 1,
           .attrs = {{"shape", AttrKind::Ints, true}, {"dtype", AttrKind::DType, true},
                     {"seed", AttrKind::Int, false, int64_t(0)},
                     {uniform ? "low" : "mean", AttrKind::Float, false, 0.0},
                     {uniform ? "high" : "stddev", AttrKind::Float, false, 1.0}},
           .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
             TensorType t = declared_type(a);
             require_dtype(t, kFloats, "result");
             if (!in.empty() && in[0] != TensorType{DType::I64, {}})
               throw InputError("the key must be i64[], got " + in[0].str());
             return std::vector<TensorType>{t};
           },
           .nondiff_inputs = {0},
           .not_differentiable = true,
           .stateful = true, .dtypes = kFloats, .doc = "counter-based random numbers (src/core/rng.hpp), keyed by an optional i64[] input",
           .example = [uniform](ExampleInputs& x, DType t) {
             Var key = x.in(DType::I64, {});  // and a keyed draw
             if (uniform) return std::vector<Var>{rng_uniform(x.graph(), {4, 8}, t, 1), rng_uniform(key, {4, 8}, t, 1)};
             return std::vector<Var>{rng_normal(x.graph(), {4, 8}, t, 1), rng_normal(key, {4, 8}, t, 1)};
           }});
  }
}

}  // namespace rlx::ir
