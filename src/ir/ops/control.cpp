// Structured control flow: while and if, each owning sub-graphs (regions).
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

static std::vector<TensorType> param_types(const Graph& g) {
  std::vector<TensorType> t;
  for (Value v : g.params) t.push_back(g.type(v));
  return t;
}
static std::vector<TensorType> result_types(const Graph& g) {
  std::vector<TensorType> t;
  for (Value v : g.results) t.push_back(g.type(v));
  return t;
}
static std::string types_str(const std::vector<TensorType>& ts) {
  std::string s = "(";
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].str();
  return s + ")";
}
static void require_regions(const std::vector<std::shared_ptr<Graph>>& regions, const char* a, const char* b) {
  if (regions.size() != 2 || !regions[0] || !regions[1])
    throw InputError(std::string("needs two regions (") + a + ", " + b + ")");
}

void register_control_ops(OpRegistry& r) {
  r.add({.name = "while", .level = Level::L2, .cls = OpClass::Control, .min_inputs = 1, .max_inputs = -1,
         .infer = [](const std::vector<TensorType>& in, auto&, const std::vector<std::shared_ptr<Graph>>& rg) {
           require_regions(rg, "cond", "body");
           if (param_types(*rg[0]) != in) throw InputError("cond parameters " + types_str(param_types(*rg[0])) + " differ from the carried values " + types_str(in));
           if (param_types(*rg[1]) != in) throw InputError("body parameters " + types_str(param_types(*rg[1])) + " differ from the carried values " + types_str(in));
           auto c = result_types(*rg[0]);
           if (c.size() != 1 || c[0] != TensorType{DType::Bool, {}})
             throw InputError("cond must return one bool[], returns " + types_str(c));
           if (result_types(*rg[1]) != in)
             throw InputError("body returns " + types_str(result_types(*rg[1])) + ", expected " + types_str(in));
           return in;
         },
         .dtypes = kAll,
         .example = [](ExampleInputs& x, DType t) {  // carries x (any dtype) through three trips
           Graph& g = x.graph();
           return while_loop(
               {x.in(t, {4, 8}), scalar(g, 0, DType::I64)},
               [](const std::vector<Var>& v) { return std::vector<Var>{lt(v[1], scalar_like(v[1], 3))}; },
               [](const std::vector<Var>& v) { return std::vector<Var>{v[0], v[1] + scalar_like(v[1], 1)}; });
         }});
  r.add({.name = "if", .level = Level::L2, .cls = OpClass::Control, .min_inputs = 1, .max_inputs = -1,
         .infer = [](const std::vector<TensorType>& in, auto&, const std::vector<std::shared_ptr<Graph>>& rg) {
           require_regions(rg, "then", "else");
           if (in[0] != TensorType{DType::Bool, {}}) throw InputError("predicate must be bool[], got " + in[0].str());
           std::vector<TensorType> args(in.begin() + 1, in.end());
           for (int i = 0; i < 2; ++i)
             if (param_types(*rg[size_t(i)]) != args)
               throw InputError(std::string(i ? "else" : "then") + " parameters differ from the arguments " +
                                types_str(args));
           auto t = result_types(*rg[0]), e = result_types(*rg[1]);
           if (t != e) throw InputError("then returns " + types_str(t) + " but else returns " + types_str(e));
           if (t.empty()) throw InputError("regions return nothing");
           return t;
         },
         .dtypes = kAll,
         .example = [](ExampleInputs& x, DType t) {  // picks one of two values of any dtype
           return if_then_else(
               x.in(DType::Bool, {}), {x.in(t, {4, 8}), x.in(t, {4, 8})},
               [](const std::vector<Var>& v) { return std::vector<Var>{v[0]}; },
               [](const std::vector<Var>& v) { return std::vector<Var>{v[1]}; });
         }});
}

}  // namespace rlx::ir
