// host_call: a call out of the graph into code of the running program (a PETSc MatMult, a
// physics routine, a Fortran operator), so that such code can stand where a graph needs an
// operator without its data being copied into rlx structures first. The attribute `fn` names
// a function registered in the running process (rlx::HostFunction, src/runtime/
// host_function.hpp; id 0 is the built-in identity); like a collective's `comm`, the handle
// is an attribute so that a graph is checked and printed without the function at hand, and
// an id that names nothing is an error when the node runs, never a silent no-op. The result's
// type is declared by attributes, as a parameter's is. A host function may have effects the
// graph cannot see, so the node is stateful (never folded or merged with an equal call), and
// it has no derivative: rlx cannot see inside it. Every rank schedules the same graph alike,
// so a function that is collective (MatMult) is called in the same order everywhere.
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

void register_host_ops(OpRegistry& r) {
  r.add({.name = "host_call", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 0, .max_inputs = 8,
         .attrs = {{"fn", AttrKind::Int, true}, {"dtype", AttrKind::DType, true}, {"shape", AttrKind::Ints, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           if (a.get_int("fn") < 0) throw InputError("fn must be >= 0, got " + std::to_string(a.get_int("fn")));
           for (size_t i = 0; i < in.size(); ++i) require_dtype(in[i], kAllButI4, ("input " + std::to_string(i)).c_str());
           TensorType t = declared_type(a);
           require_dtype(t, kAllButI4, "result");
           return std::vector<TensorType>{t};
         },
         .not_differentiable = true,
         .stateful = true,
         .dtypes = kAllButI4,
         .doc = "the result of host function `fn` (registered in the running process; 0: the identity) on the "
                "inputs, of the declared dtype and shape",
         .example = [](ExampleInputs& x, DType t) {
           return std::vector<Var>{op("host_call", {x.in(t, {4, 8})},
                                      {{"fn", int64_t(0)}, {"dtype", t}, {"shape", std::vector<int64_t>{4, 8}}})};
         }});
}

}  // namespace rlx::ir
