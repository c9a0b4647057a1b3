#include "nn/optim.hpp"

#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace rlx::nn {

std::string Optimizer::name() const {
  if (auto* a = std::get_if<Adam>(&o_)) return a->decoupled ? "adamw" : "adam";
  return "sgd";
}

double Optimizer::lr() const {
  return std::visit([](const auto& o) { return o.lr; }, o_);
}

std::vector<std::string> Optimizer::state_names() const {
  if (std::holds_alternative<Adam>(o_)) return {"m", "v"};
  return {"momentum"};
}

std::vector<Var> Optimizer::update(const Var& p, const Var& grad, const std::vector<Var>& state, const Var& lr,
                                   const Var& step) const {
  if (auto* s = std::get_if<Sgd>(&o_))
    return op_multi("sgd_update", {p, grad, state.at(0), lr},
                    {{"momentum", s->momentum}, {"dampening", s->dampening}, {"weight_decay", s->weight_decay},
                     {"nesterov", s->nesterov}});
  const Adam& a = std::get<Adam>(o_);
  return op_multi("adam_update", {p, grad, state.at(0), state.at(1), lr, step},
                  {{"beta1", a.beta1}, {"beta2", a.beta2}, {"eps", a.eps}, {"weight_decay", a.weight_decay},
                   {"decoupled", a.decoupled}});
}

double LrSchedule::at(double base, int64_t step) const {
  if (step < warmup) return base * double(step + 1) / double(warmup);
  const int64_t k = step - warmup;
  switch (kind) {
    case Kind::Constant: return base;
    case Kind::Step:
      if (step_size < 1) throw InputError("the step schedule needs step_size >= 1");
      return base * std::pow(gamma, double(k / step_size));
    case Kind::Cosine: {
      if (total < 1) throw InputError("the cosine schedule needs total >= 1 steps");
      const double t = double(std::min(k, total)) / double(total);
      return min_lr + (base - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * t));
    }
  }
  return base;
}

std::vector<Var> clip_by_global_norm(const std::vector<Var>& grads, double max_norm) {
  if (grads.empty()) return grads;
  if (!(max_norm > 0)) throw InputError("clip: max_norm must be > 0");
  Var total = sum(grads[0] * grads[0]);
  for (size_t i = 1; i < grads.size(); ++i) total = total + sum(grads[i] * grads[i]);
  Var norm = sqrt(total);
  Var scale = minimum(scalar_like(norm, 1.0), max_norm / (norm + 1e-6));
  std::vector<Var> r;
  for (const Var& g : grads) r.push_back(g * scale);
  return r;
}

}  // namespace rlx::nn
