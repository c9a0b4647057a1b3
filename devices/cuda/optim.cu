// sgd_update and adam_update as native kernels: one grid-stride pass over the parameter that
// reads p, g and the state once and writes the new values; the learning rate and step count
// are read on the device, so a recorded step replays with the values of each step
// (runtime/update_rules.hpp holds the per-element arithmetic the cpu device shares).
#include <optional>

#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"
#include "devices/cuda/library.hpp"
#include "ir/graph.hpp"
#include "runtime/update_rules.hpp"

namespace rlx::cuda {
namespace {

template <class T>
__global__ void __launch_bounds__(256) sgd_kernel(update::SgdParams a, const T* __restrict__ lr, const T* __restrict__ p,
                                                  const T* __restrict__ g, const T* __restrict__ b, T* __restrict__ po,
                                                  T* __restrict__ bo, int64_t n) {
  const T r = *lr;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T pi = p[i], bi = b[i];
    update::sgd(a, r, g[i], pi, bi);
    po[i] = pi, bo[i] = bi;
  }
}

template <class T>
__global__ void __launch_bounds__(256) adam_kernel(update::AdamParams a, const T* __restrict__ lr, const T* __restrict__ t,
                                                   const T* __restrict__ p, const T* __restrict__ g, const T* __restrict__ m,
                                                   const T* __restrict__ v, T* __restrict__ po, T* __restrict__ mo,
                                                   T* __restrict__ vo, int64_t n) {
  const T r = *lr, c1 = update::adam_correction(a.beta1, *t), c2 = update::adam_correction(a.beta2, *t);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T pi = p[i], mi = m[i], vi = v[i];
    update::adam(a, r, c1, c2, g[i], pi, mi, vi);
    po[i] = pi, mo[i] = mi, vo[i] = vi;
  }
}

template <class T>
void sgd(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t count = in[0].numel();
  if (count == 0) return;
  Tensor p = contiguous(in[0]), g = contiguous(in[1]), b = contiguous(in[2]), lr = contiguous(in[3]);
  sgd_kernel<T><<<grid_for(count, 256), 256, 0, stream()>>>(update::sgd_params(n), lr.data<T>(), p.data<T>(), g.data<T>(),
                                                            b.data<T>(), out[0].data<T>(), out[1].data<T>(), count);
  check_launch("sgd_update");
}

template <class T>
void adam(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t count = in[0].numel();
  if (count == 0) return;
  Tensor p = contiguous(in[0]), g = contiguous(in[1]), m = contiguous(in[2]), v = contiguous(in[3]);
  Tensor lr = contiguous(in[4]), t = contiguous(in[5]);
  adam_kernel<T><<<grid_for(count, 256), 256, 0, stream()>>>(update::adam_params(n), lr.data<T>(), t.data<T>(), p.data<T>(),
                                                             g.data<T>(), m.data<T>(), v.data<T>(), out[0].data<T>(),
                                                             out[1].data<T>(), out[2].data<T>(), count);
  check_launch("adam_update");
}

}  // namespace

void add_optim_kernels(KernelTable& t) {
  update::add_update_kernels(t, sgd<float>, sgd<double>, adam<float>, adam<double>);
}

}  // namespace rlx::cuda
