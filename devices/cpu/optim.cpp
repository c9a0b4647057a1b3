// sgd_update and adam_update as native kernels: one threaded pass over the parameter that
// reads p, g and the state once and writes the new values (runtime/update_rules.hpp holds
// the per-element arithmetic the cuda device shares).
#include "core/error.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/graph.hpp"
#include "runtime/update_rules.hpp"

namespace rlx::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;

// Inputs may be strided views (the executor's outputs are contiguous): those are copied.
template <class T>
const T* dense(const Tensor& t, Tensor& keep) {
  keep = t.is_contiguous() ? t : t.contiguous();
  return keep.data<T>();
}

template <class T>
void sgd(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const update::SgdParams a = update::sgd_params(n);
  Tensor kp, kg, kb;
  const T *p = dense<T>(in[0], kp), *g = dense<T>(in[1], kg), *b = dense<T>(in[2], kb);
  const T lr = in[3].contiguous().data<T>()[0];
  T *po = out[0].data<T>(), *bo = out[1].data<T>();
  parallel_for(in[0].numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T pi = p[i], bi = b[i];
      update::sgd(a, lr, g[i], pi, bi);
      po[i] = pi, bo[i] = bi;
    }
  });
}

template <class T>
void adam(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const update::AdamParams a = update::adam_params(n);
  Tensor kp, kg, km, kv;
  const T *p = dense<T>(in[0], kp), *g = dense<T>(in[1], kg), *m = dense<T>(in[2], km), *v = dense<T>(in[3], kv);
  const T lr = in[4].contiguous().data<T>()[0], t = in[5].contiguous().data<T>()[0];
  const T c1 = update::adam_correction(a.beta1, t), c2 = update::adam_correction(a.beta2, t);
  T *po = out[0].data<T>(), *mo = out[1].data<T>(), *vo = out[2].data<T>();
  parallel_for(in[0].numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T pi = p[i], mi = m[i], vi = v[i];
      update::adam(a, lr, c1, c2, g[i], pi, mi, vi);
      po[i] = pi, mo[i] = mi, vo[i] = vi;
    }
  });
}

}  // namespace

void add_optim_kernels(KernelTable& t) {
  update::add_update_kernels(t, sgd<float>, sgd<double>, adam<float>, adam<double>);
}

}  // namespace rlx::cpu
