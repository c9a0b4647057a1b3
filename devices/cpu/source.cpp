// Sources: iota and the counter-based RNG (bit-identical to core/rng.hpp: each element
// is computed in f64 from (seed, index) and rounded once to the result dtype).
#include <type_traits>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "devices/cpu/ew_kernels.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"

namespace rlx::cpu {

namespace {

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return T(f64_to_f32_odd(v));
  else return T(v);
}

template <class F>
void fill_by_index(Tensor& out, F&& value) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, c64>) {
      throw InternalError(std::string("cpu source op: no ") + dtype_name(out.dtype()) + " result");
    } else {
      T* o = out.data<T>();
      parallel_for(out.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) o[i] = value.template operator()<T>(i);
      });
    }
  });
}

}  // namespace

void iota(int axis, Tensor& out) {
  int64_t inner = 1;
  for (int d = axis + 1; d < out.rank(); ++d) inner *= out.shape()[size_t(d)];
  const int64_t A = out.rank() ? out.shape()[size_t(axis)] : 1;
  fill_by_index(out, [&]<class T>(int64_t i) {
    int64_t v = (i / inner) % A;
    if constexpr (std::is_integral_v<T>) return T(v);
    else return from_double<T>(double(v));
  });
}

// The key is an i64[] in host memory (a cpu tensor).
static uint64_t keyed(uint64_t seed, const Tensor* key) {
  return key ? rng_keyed_seed(seed, key->data<int64_t>()[0]) : seed;
}

void rng_uniform(uint64_t seed, const Tensor* key, double low, double high, Tensor& out) {
  if (!is_float(out.dtype())) throw InternalError("cpu rng_uniform: non-float result");
  seed = keyed(seed, key);
  fill_by_index(out, [&]<class T>(int64_t i) {
    double u = rng_unit(seed, uint64_t(i));
    return from_double<T>(low + (high - low) * u);
  });
}

void rng_normal(uint64_t seed, const Tensor* key, double mean, double stddev, Tensor& out) {
  if (!is_float(out.dtype())) throw InternalError("cpu rng_normal: non-float result");
  seed = keyed(seed, key);
  fill_by_index(out, [&]<class T>(int64_t i) {
    return from_double<T>(mean + stddev * rng_std_normal(seed, uint64_t(i)));
  });
}

}  // namespace rlx::cpu
