// Sources on the cuda device: iota and the counter-based RNG (rng_uniform, rng_normal),
// which gives the same values as every device (core/rng.hpp).
#include <cstdint>
#include <string>
#include <type_traits>

#include "devices/cuda/kernels.cuh"
#include "devices/cuda/kernels.hpp"

namespace rlx::cuda {
namespace {

// ------------------------------------------------------------------------------------
// Sources.
// ------------------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(256) iota_kernel(T* __restrict__ y, i64 n, i64 inner, i64 A) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x)
    y[i] = Num<T>::from_int((i / inner) % A);
}

// core/rng.hpp on the device. Products and sums are explicitly rounded (no FMA
// contraction) so that values match the host's; log and cos are CUDA's double
// versions (within an ulp of the host's libm).
__device__ inline u64 d_splitmix64(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ inline double d_rng_unit(u64 seed_mixed, u64 i) {
  const u64 bits = d_splitmix64(seed_mixed ^ (i * 0xd1b54a32d192ed03ull));
  return __dmul_rn(__ull2double_rn(bits >> 11), 0x1.0p-53);
}
__device__ inline double d_rng_std_normal(u64 seed_mixed, u64 i) {
  const double u1 = __dsub_rn(1.0, d_rng_unit(seed_mixed, 2 * i));
  const double u2 = d_rng_unit(seed_mixed, 2 * i + 1);
  return __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(6.283185307179586, u2)));
}

// The mixed seed of a draw: the host's, or, with a key input (an i64[] in device memory,
// read here so that a recorded graph's replays see each step's key), core/rng.hpp's
// splitmix64(rng_keyed_seed(seed, key)).
__device__ inline u64 d_seed_mixed(u64 seed_mixed, u64 seed, const i64* key) {
  return key ? d_splitmix64(seed ^ d_splitmix64(u64(*key))) : seed_mixed;
}

template <class T>
__global__ void __launch_bounds__(256) rng_uniform_kernel(T* __restrict__ y, i64 n, u64 seed_mixed, u64 seed,
                                                          const i64* key, double low, double high) {
  seed_mixed = d_seed_mixed(seed_mixed, seed, key);
  const double width = __dsub_rn(high, low);
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x)
    y[i] = Num<T>::from_real(__dadd_rn(low, __dmul_rn(width, d_rng_unit(seed_mixed, u64(i)))));
}

template <class T>
__global__ void __launch_bounds__(256) rng_normal_kernel(T* __restrict__ y, i64 n, u64 seed_mixed, u64 seed,
                                                         const i64* key, double mean, double stddev) {
  seed_mixed = d_seed_mixed(seed_mixed, seed, key);
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x)
    y[i] = Num<T>::from_real(__dadd_rn(mean, __dmul_rn(stddev, d_rng_std_normal(seed_mixed, u64(i)))));
}

u64 h_splitmix64(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class F>
void visit_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F32: f(float{}); return;
    case DType::F64: f(double{}); return;
    default: break;
  }
  throw InternalError(std::string("cuda ") + op + ": no " + dtype_name(t) + " result");
}

}  // namespace

void iota(int axis, Tensor& out) {
  const i64 n = out.numel();
  if (n == 0) return;
  if (out.rank() > 0 && axis < 0) axis += out.rank();
  i64 inner = 1;
  for (int d = axis + 1; d < out.rank(); ++d) inner *= out.shape()[size_t(d)];
  const i64 A = out.rank() ? out.shape()[size_t(axis)] : 1;
  visit_numeric(out.dtype(), "iota", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float2>) {
      throw InternalError("cuda iota: no c64 result");
    } else {
      iota_kernel<T><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(out.data<T>(), n, inner, A);
      check_launch("iota");
    }
  });
}

static const i64* key_ptr(const Tensor* key) {
  return key ? reinterpret_cast<const i64*>(key->data<int64_t>()) : nullptr;
}

void rng_uniform(uint64_t seed, const Tensor* key, double low, double high, Tensor& out) {
  const i64 n = out.numel();
  visit_float(out.dtype(), "rng_uniform", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    rng_uniform_kernel<T><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(out.data<T>(), n, h_splitmix64(seed), seed, key_ptr(key),
                                                                        low, high);
    check_launch("rng_uniform");
  });
}

void rng_normal(uint64_t seed, const Tensor* key, double mean, double stddev, Tensor& out) {
  const i64 n = out.numel();
  visit_float(out.dtype(), "rng_normal", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    rng_normal_kernel<T><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(out.data<T>(), n, h_splitmix64(seed), seed, key_ptr(key),
                                                                       mean, stddev);
    check_launch("rng_normal");
  });
}

}  // namespace rlx::cuda
