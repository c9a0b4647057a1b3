// Optimizers and learning-rate schedules. An optimizer turns a parameter, its gradient and
// its state into IR for the updated values (the L1 ops sgd_update and adam_update), so the
// update compiles into the same program as the forward and backward (nn/trainer.hpp).
#pragma once
#include <string>
#include <variant>
#include <vector>

#include "ir/frontend.hpp"

namespace rlx::nn {

// PyTorch's torch.optim.SGD.
struct Sgd {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
// PyTorch's torch.optim.Adam, or AdamW with decoupled = true.
struct Adam {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;
};

class Optimizer {
 public:
  Optimizer(Sgd s) : o_(s) {}   // NOLINT: implicit on purpose
  Optimizer(Adam a) : o_(a) {}  // NOLINT
  static Optimizer adamw(Adam a) {
    a.decoupled = true;
    return a;
  }
  std::string name() const;  // "sgd", "adam", "adamw"
  double lr() const;
  // The state each parameter carries, by name ("momentum"; "m", "v"), zeros at the start.
  std::vector<std::string> state_names() const;
  // {p', state'...} for one parameter; lr and step (1-based, for Adam's bias correction) are
  // scalar values of p's dtype.
  std::vector<Var> update(const Var& p, const Var& grad, const std::vector<Var>& state, const Var& lr,
                          const Var& step) const;

 private:
  std::variant<Sgd, Adam> o_;
};

// The learning rate at step k (0-based) from the optimizer's base rate: a linear warm-up
// over `warmup` steps from base / warmup, then constant, divided by `gamma`^-1 every
// `step_size` steps (Step), or a cosine from base to min_lr over `total` steps (Cosine).
struct LrSchedule {
  enum class Kind { Constant, Step, Cosine };
  Kind kind = Kind::Constant;
  int64_t warmup = 0;
  int64_t step_size = 1;  // Step
  double gamma = 0.1;     // Step
  int64_t total = 0;      // Cosine: steps after the warm-up
  double min_lr = 0;      // Cosine
  double at(double base, int64_t step) const;
};

// Global-norm clipping: every gradient scaled by min(1, max_norm / (||g||_2 + 1e-6)), the
// norm taken over all of them together (PyTorch's clip_grad_norm_).
std::vector<Var> clip_by_global_norm(const std::vector<Var>& grads, double max_norm);

}  // namespace rlx::nn
