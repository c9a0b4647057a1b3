// Optimizer updates as L1 ops: one parameter's step, with its state, from its gradient.
// The learning rate (and Adam's step count) are tensor inputs, so a schedule changes them
// between steps without recompiling. Each lowering is elementwise, so a device that fuses
// elementwise regions runs an update as one kernel per parameter.
#include <cmath>

#include "ir/frontend.hpp"
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

using V = std::vector<Var>;

// Updates in f32 or f64 only: in f16/bf16 Adam's bias correction 1 - b2^t and the moments
// lose most of their digits (a bf16 step was off by 9 %), and training in half precision
// keeps f32 master weights anyway.
const std::vector<DType> kUpdateTypes = {DType::F32, DType::F64};

void require_like(const Var& v, const Var& p, const char* what) {
  if (v.shape() != p.shape())
    throw InputError(std::string(what) + " has shape " + shape_str(v.shape()) + ", the parameter " + shape_str(p.shape()));
}
void require_scalar(const Var& v, const char* what) {
  if (!v.shape().empty()) throw InputError(std::string(what) + " must be a scalar, got " + shape_str(v.shape()));
}

// p, g, buf, lr -> p', buf'. PyTorch's SGD: g += wd p; buf = momentum buf + (1 - dampening) g;
// the step is g + momentum buf (Nesterov) or buf; p -= lr step. buf starts at zeros, which
// equals PyTorch's first step (buf = g) when dampening is 0.
V sgd_body(const V& in, const Attrs& a) {
  const Var &p = in[0], &lr = in[3];
  require_like(in[1], p, "the gradient");
  require_like(in[2], p, "the momentum buffer");
  require_scalar(lr, "lr");
  const double momentum = a.get_float("momentum"), dampening = a.get_float("dampening"), wd = a.get_float("weight_decay");
  if (momentum < 0 || wd < 0) throw InputError("momentum and weight_decay must be >= 0");
  if (a.get_bool("nesterov") && (momentum <= 0 || dampening != 0))
    throw InputError("nesterov needs momentum > 0 and dampening 0");
  Var g = wd != 0 ? in[1] + p * wd : in[1];
  if (momentum == 0) return {p - lr * g, in[2]};
  Var buf = in[2] * momentum + g * (1.0 - dampening);
  Var step = a.get_bool("nesterov") ? g + buf * momentum : buf;
  return {p - lr * step, buf};
}

// p, g, m, v, lr, t -> p', m', v' (t: the 1-based step count). Adam: g += wd p (L2); AdamW
// (decoupled): p *= 1 - lr wd instead. m and v are the biased moments; the step is
// lr m^ / (sqrt(v^) + eps) with m^ = m / (1 - b1^t), v^ = v / (1 - b2^t), as PyTorch.
V adam_body(const V& in, const Attrs& a) {
  const Var &p = in[0], &lr = in[4], &t = in[5];
  require_like(in[1], p, "the gradient");
  require_like(in[2], p, "the first moment");
  require_like(in[3], p, "the second moment");
  require_scalar(lr, "lr");
  require_scalar(t, "the step count");
  const double b1 = a.get_float("beta1"), b2 = a.get_float("beta2"), eps = a.get_float("eps"), wd = a.get_float("weight_decay");
  if (!(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1)) throw InputError("beta1 and beta2 must lie in [0, 1)");
  if (!(eps > 0) || wd < 0) throw InputError("eps must be > 0 and weight_decay >= 0");
  const bool decoupled = a.get_bool("decoupled");
  Var g = wd != 0 && !decoupled ? in[1] + p * wd : in[1];
  Var m = in[2] * b1 + g * (1.0 - b1);
  Var v = in[3] * b2 + g * g * (1.0 - b2);
  // 1 - b^t as exp(t log b); b = 0 gives 1.
  auto correction = [&](double b) { return b == 0 ? scalar_like(t, 1.0) : 1.0 - exp(t * std::log(b)); };
  Var mhat = m / correction(b1), vhat = v / correction(b2);
  Var base = decoupled && wd != 0 ? p * (1.0 - lr * wd) : p;
  return {base - lr * mhat / (sqrt(vhat) + eps), m, v};
}

}  // namespace

void register_optim_ops(OpRegistry& r) {
  r.add({.name = "sgd_update", .level = Level::L1, .cls = OpClass::Composite, .min_inputs = 4, .max_inputs = 4,
         .attrs = {{"momentum", AttrKind::Float, false, 0.0},
                   {"dampening", AttrKind::Float, false, 0.0},
                   {"weight_decay", AttrKind::Float, false, 0.0},
                   {"nesterov", AttrKind::Bool, false, false}},
         .infer = infer_by_lowering(sgd_body, kUpdateTypes, true), .lower = sgd_body,
         // (an update is applied to values, never differentiated)
         .not_differentiable = true, .dtypes = kUpdateTypes,
         .doc = "SGD step (p, grad, momentum buffer, lr) -> (p', buffer'), PyTorch's rule",
         .example = [](ExampleInputs& x, DType t) {
           return op_multi("sgd_update", {x.in(t, {4, 8}), x.in(t, {4, 8}), x.in(t, {4, 8}), x.in(t, {}, {.lo = 0.01, .hi = 0.1})},
                           {{"momentum", 0.9}, {"weight_decay", 1e-2}, {"nesterov", true}});
         }});
  r.add({.name = "adam_update", .level = Level::L1, .cls = OpClass::Composite, .min_inputs = 6, .max_inputs = 6,
         .attrs = {{"beta1", AttrKind::Float, false, 0.9},
                   {"beta2", AttrKind::Float, false, 0.999},
                   {"eps", AttrKind::Float, false, 1e-8},
                   {"weight_decay", AttrKind::Float, false, 0.0},
                   {"decoupled", AttrKind::Bool, false, false}},
         .infer = infer_by_lowering(adam_body, kUpdateTypes, true), .lower = adam_body,
         .not_differentiable = true, .dtypes = kUpdateTypes,
         .doc = "Adam (decoupled: AdamW) step (p, grad, m, v, lr, step) -> (p', m', v'), PyTorch's rule",
         .example = [](ExampleInputs& x, DType t) {
           return op_multi("adam_update",
                           {x.in(t, {4, 8}), x.in(t, {4, 8}), x.in(t, {4, 8}), x.in(t, {4, 8}, {.lo = 0.1, .hi = 2}),
                            x.in(t, {}, {.lo = 0.001, .hi = 0.01}), x.in(t, {}, {.lo = 1, .hi = 9, .quantum = 1})},
                           {{"weight_decay", 1e-2}, {"decoupled", true}});
         }});
}

}  // namespace rlx::ir
