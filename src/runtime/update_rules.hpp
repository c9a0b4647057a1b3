// The optimizer updates of src/ir/ops/optim.cpp (sgd_update, adam_update) as one function per
// element, for the devices' native kernels: written once, compiled for the host (cpu) and
// for the GPU (cuda), in the order of operations of the ops' lowering bodies, each constant
// rounded to the element type first as the lowering's scalar constants are — so a native
// update and the common-ir one differ at most by the rounding of the fused arithmetic.
#pragma once
#include <cmath>
#include <span>

#if defined(__CUDACC__)
#define RLX_HOST_DEVICE __host__ __device__
#else
#define RLX_HOST_DEVICE
#endif

namespace rlx {
namespace ir {
struct Node;
}
class KernelTable;
class Tensor;

namespace update {

struct SgdParams {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
struct AdamParams {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;
};

// The node's attributes (its shape rule has validated them).
SgdParams sgd_params(const ir::Node& n);
AdamParams adam_params(const ir::Node& n);

// A device's update kernels for f32 and f64, registered as sgd_update and adam_update.
using UpdateKernel = void (*)(const ir::Node&, std::span<const Tensor>, std::span<Tensor>);
void add_update_kernels(KernelTable& t, UpdateKernel sgd_f32, UpdateKernel sgd_f64, UpdateKernel adam_f32,
                        UpdateKernel adam_f64);

// p, buf updated in place from the gradient g at learning rate lr.
template <class T>
RLX_HOST_DEVICE inline void sgd(const SgdParams& a, T lr, T g, T& p, T& buf) {
  if (a.weight_decay != 0) g = g + p * T(a.weight_decay);
  if (a.momentum == 0) {
    p = p - lr * g;
    return;
  }
  buf = buf * T(a.momentum) + g * T(1.0 - a.dampening);
  const T step = a.nesterov ? g + buf * T(a.momentum) : buf;
  p = p - lr * step;
}

// The bias correction 1 - beta^t of step t (1 for beta 0), as the lowering computes it.
template <class T>
RLX_HOST_DEVICE inline T adam_correction(double beta, T t) {
#if !defined(__CUDA_ARCH__)
  using std::exp, std::log;
#endif
  return beta == 0 ? T(1) : T(1) - T(exp(t * T(log(beta))));
}

// p, m, v updated in place; c1, c2: adam_correction of beta1 and beta2 at this step.
template <class T>
RLX_HOST_DEVICE inline void adam(const AdamParams& a, T lr, T c1, T c2, T g, T& p, T& m, T& v) {
#if !defined(__CUDA_ARCH__)
  using std::sqrt;
#endif
  if (a.weight_decay != 0 && !a.decoupled) g = g + p * T(a.weight_decay);
  m = m * T(a.beta1) + g * T(1.0 - a.beta1);
  v = v * T(a.beta2) + g * g * T(1.0 - a.beta2);
  const T mhat = m / c1, vhat = v / c2;
  const T base = a.decoupled && a.weight_decay != 0 ? p * (T(1) - lr * T(a.weight_decay)) : p;
  p = base - lr * mhat / (sqrt(vhat) + T(a.eps));
}

}  // namespace update
}  // namespace rlx
