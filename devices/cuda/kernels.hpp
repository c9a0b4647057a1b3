// The cuda device's hand-written kernels (kernels.cu): reductions, the scan, data
// movement, gather/scatter and sources. Inputs are device tensors and may be strided
// views; outputs are contiguous and preallocated. Every call is ordered on stream() and
// returns without synchronizing. Semantics are the reference device's
// (devices/reference/*.cpp), dtype for dtype.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.hpp"

namespace rlx::cuda {

enum class ReduceOp { Sum, Prod, Max, Min };
// Reduces x over `axes` (normalized, sorted, unique) into out (kept dims in order).
// Deterministic: the same inputs give the same bits on every run.
void reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes, Tensor& out);
void argmax(const Tensor& x, int axis, Tensor& out);
void cumsum(const Tensor& x, int axis, bool exclusive, bool reverse, Tensor& out);

void permute(const Tensor& x, const std::vector<int64_t>& perm, Tensor& out);
void broadcast_to(const Tensor& x, Tensor& out);
void slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps, Tensor& out);
void concat(std::span<const Tensor> xs, int axis, Tensor& out);
void pad(const Tensor& x, const std::vector<int64_t>& low, double value, Tensor& out);
void gather(const Tensor& x, const Tensor& idx, int axis, Tensor& out);
void scatter_add(const Tensor& x, const Tensor& idx, const Tensor& updates, int axis, Tensor& out);

void iota(int axis, Tensor& out);
void rng_uniform(uint64_t seed, double low, double high, Tensor& out);
void rng_normal(uint64_t seed, double mean, double stddev, Tensor& out);

}  // namespace rlx::cuda
