// The kernels whose arguments every compiled device shares: reductions, the scan, data
// movement, gather/scatter and sources. Their signatures are written here once:
//
//   namespace rlx::cpu { RLX_DECLARE_STANDARD_KERNELS }             // the device's header
//   add_standard_kernels(table, RLX_STANDARD_KERNELS_OF(rlx::cpu));  // its registration
//
// add_standard_kernels (kernel_table.hpp) unpacks each op's attributes and states the
// dtypes each takes, also once. Inputs may be strided views; outputs are contiguous and
// preallocated; semantics are the reference device's, dtype for dtype. This header needs
// only core/, so CUDA sources include it as they are.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace rlx {

enum class ReduceOp { Sum, Prod, Max, Min };

#define RLX_DECLARE_STANDARD_KERNELS                                                                                  \
  /* Reduces x over `axes` (normalized, sorted, unique) into out (kept dims in order). */                            \
  void reduce(::rlx::ReduceOp op, const ::rlx::Tensor& x, const std::vector<int>& axes, ::rlx::Tensor& out);        \
  void argmax(const ::rlx::Tensor& x, int axis, ::rlx::Tensor& out);                                                 \
  void cumsum(const ::rlx::Tensor& x, int axis, bool exclusive, bool reverse, ::rlx::Tensor& out);                   \
  void permute(const ::rlx::Tensor& x, const std::vector<int64_t>& perm, ::rlx::Tensor& out);                        \
  void broadcast_to(const ::rlx::Tensor& x, ::rlx::Tensor& out);                                                     \
  void slice(const ::rlx::Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps,          \
             ::rlx::Tensor& out);                                                                                    \
  void concat(std::span<const ::rlx::Tensor> xs, int axis, ::rlx::Tensor& out);                                      \
  void pad(const ::rlx::Tensor& x, const std::vector<int64_t>& low, double value, ::rlx::Tensor& out);               \
  void gather(const ::rlx::Tensor& x, const ::rlx::Tensor& idx, int axis, ::rlx::Tensor& out);                       \
  void scatter_add(const ::rlx::Tensor& x, const ::rlx::Tensor& idx, const ::rlx::Tensor& updates, int axis,         \
                   ::rlx::Tensor& out);                                                                              \
  /* out = x with `block` at the scalar start along axis; out may be x's own buffer (in place) */                   \
  void update_slice(const ::rlx::Tensor& x, const ::rlx::Tensor& block, const ::rlx::Tensor& start, int axis,        \
                    ::rlx::Tensor& out);                                                                             \
  void iota(int axis, ::rlx::Tensor& out);                                                                           \
  /* key: the optional i64[] input (nullptr without); the seed is then rng_keyed_seed(seed, *key) */                \
  void rng_uniform(uint64_t seed, const ::rlx::Tensor* key, double low, double high, ::rlx::Tensor& out);            \
  void rng_normal(uint64_t seed, const ::rlx::Tensor* key, double mean, double stddev, ::rlx::Tensor& out);

// slice's steps as the kernels use them: 1 along an axis the result has at most one element
// of, where the step selects nothing more (and may be near 2^63, whose product with a stride
// would overflow); elsewhere the step is below the axis's extent.
inline std::vector<int64_t> slice_steps(const std::vector<int64_t>& steps, const Shape& out) {
  std::vector<int64_t> r = steps;
  for (size_t d = 0; d < r.size() && d < out.size(); ++d)
    if (out[d] <= 1) r[d] = 1;
  return r;
}

// update_slice's error for a start that leaves no room for its block, worded alike on every
// device (the reference device's kernel says it too).
inline std::string update_slice_bad_start(int64_t start, int64_t extent, int64_t block, int axis) {
  return "update_slice: start " + std::to_string(start) + " is outside [0, " + std::to_string(extent - block) +
         "] for a block of " + std::to_string(block) + " along axis " + std::to_string(axis) + " of extent " +
         std::to_string(extent);
}

// attention's q, k and v as the cpu and cuda kernels take them: one rank (at least 2; 3 for
// layout "lhd", [.., L, H, D]) and every dimension alike but the length (`len`, the one
// before the head size, or before the heads and the head size for lhd) and the head size;
// k and v of one length. Empty when they fit, else what does not (the device's route reason).
inline std::string attention_operands_misfit(const Shape& q, const Shape& k, const Shape& v, bool lhd) {
  if (q.size() < (lhd ? 3u : 2u)) return "q of rank at least 2 (3 for lhd)";
  if (k.size() != q.size() || v.size() != q.size()) return "q, k and v of one rank";
  const size_t len = q.size() - (lhd ? 3 : 2);
  for (size_t d = 0; d + 1 < q.size(); ++d)
    if (d != len && (k[d] != q[d] || v[d] != q[d])) return "q, k and v with the same leading dimensions";
  if (k[len] != v[len]) return "k and v of one length";
  return "";
}

// Layout hld's other form the kernels take: q, k and v of one rank, k's and v's leading
// dimensions q's or 1 (they broadcast: grouped-query attention's [B, KV, 1, S, D] against q's
// [B, KV, G, T, D]), k and v of one length.
inline bool attention_kv_broadcast(const Shape& q, const Shape& k, const Shape& v) {
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size() || k[q.size() - 2] != v[q.size() - 2]) return false;
  for (size_t d = 0; d + 2 < q.size(); ++d)
    if ((k[d] != q[d] && k[d] != 1) || (v[d] != q[d] && v[d] != 1)) return false;
  return true;
}

// The same functions as pointers, for registration.
struct StandardKernels {
  void (*reduce)(ReduceOp, const Tensor&, const std::vector<int>&, Tensor&);
  void (*argmax)(const Tensor&, int, Tensor&);
  void (*cumsum)(const Tensor&, int, bool, bool, Tensor&);
  void (*permute)(const Tensor&, const std::vector<int64_t>&, Tensor&);
  void (*broadcast_to)(const Tensor&, Tensor&);
  void (*slice)(const Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&, Tensor&);
  void (*concat)(std::span<const Tensor>, int, Tensor&);
  void (*pad)(const Tensor&, const std::vector<int64_t>&, double, Tensor&);
  void (*gather)(const Tensor&, const Tensor&, int, Tensor&);
  void (*scatter_add)(const Tensor&, const Tensor&, const Tensor&, int, Tensor&);
  void (*update_slice)(const Tensor&, const Tensor&, const Tensor&, int, Tensor&);
  void (*iota)(int, Tensor&);
  void (*rng_uniform)(uint64_t, const Tensor*, double, double, Tensor&);
  void (*rng_normal)(uint64_t, const Tensor*, double, double, Tensor&);
};

#define RLX_STANDARD_KERNELS_OF(ns)                                                                                    \
  ::rlx::StandardKernels {                                                                                             \
    &ns::reduce, &ns::argmax, &ns::cumsum, &ns::permute, &ns::broadcast_to, &ns::slice, &ns::concat, &ns::pad,         \
        &ns::gather, &ns::scatter_add, &ns::update_slice, &ns::iota, &ns::rng_uniform, &ns::rng_normal                 \
  }

}  // namespace rlx
