// Where attention's operands lie: the scores' batch dimensions, each operand's strides over
// them and its row stride, and how a (batch, head) pair finds its first elements. Plain C++
// shared by the cpu and cuda attention kernels (host set-up and device code alike) and tested
// on the host (test_cpu_kernels), so one index arithmetic serves both devices.
#pragma once
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "core/broadcast_strides.hpp"
#include "core/shape.hpp"

#ifdef __CUDACC__
#define RLX_ATTENTION_HD __host__ __device__
#else
#define RLX_ATTENTION_HD
#endif

namespace rlx {

// The scores' leading (batch) dimensions, at most kMaxAttentionBatchDims, and each operand's element
// strides over them — 0 where it broadcasts: the bias, and in layout hld k and v
// (grouped-query attention's [B, KV, 1, S, D] against q's [B, KV, G, T, D]) — with the
// distance between consecutive rows of q, k, v and the output. Layout "lhd" ([.., L, H, D])
// has H as its last batch dimension, of stride D, and rows H D apart; "hld" rows D apart.
constexpr int kMaxAttentionBatchDims = 4;
struct AttentionLayout {
  int batch_dims = 0;
  int64_t batch_shape[kMaxAttentionBatchDims] = {};
  int64_t q_stride[kMaxAttentionBatchDims] = {}, k_stride[kMaxAttentionBatchDims] = {}, v_stride[kMaxAttentionBatchDims] = {},
          o_stride[kMaxAttentionBatchDims] = {}, bias_batch_stride[kMaxAttentionBatchDims] = {};
  int64_t q_row = 0, k_row = 0, v_row = 0, o_row = 0;
  int64_t bias_q_stride = 0, bias_k_stride = 0;
  int lq = 0, lk = 0, d = 0, dv = 0;
  bool has_bias = false;
};

// The first element of (batch, head) pair bh (row-major over batch_shape) in each operand.
struct AttentionOffsets {
  int64_t q = 0, k = 0, v = 0, o = 0, bias = 0;
};
RLX_ATTENTION_HD inline AttentionOffsets attention_offsets(const AttentionLayout& a, int64_t bh) {
  AttentionOffsets r;
  for (int dim = a.batch_dims - 1; dim >= 0; --dim) {
    const int64_t idx = bh % a.batch_shape[dim];
    bh /= a.batch_shape[dim];
    r.q += idx * a.q_stride[dim];
    r.k += idx * a.k_stride[dim];
    r.v += idx * a.v_stride[dim];
    r.o += idx * a.o_stride[dim];
    r.bias += idx * a.bias_batch_stride[dim];
  }
  return r;
}

// What attention_layout cannot describe (empty when it can): more than
// kMaxAttentionBatchDims batch dimensions, or a length or head size of 2^31 or more.
inline std::string attention_layout_misfit(const Shape& q, const Shape& k, const Shape& v, bool lhd) {
  if (q.size() > size_t(2 + kMaxAttentionBatchDims)) return "q of rank at most " + std::to_string(2 + kMaxAttentionBatchDims);
  const size_t len = q.size() - (lhd ? 3 : 2);
  for (int64_t e : {q[len], k[len], q.back(), v.back()})
    if (e > INT32_MAX) return "lengths and head sizes below 2^31";
  return "";
}

// The shapes' part of the arguments (host): q, k, v and the result contiguous, in layout hld
// ([.., L, D]; k and v may have 1 where q has a batch dimension) or lhd ([.., L, H, D]); the
// bias, when given, contiguous and right-aligned against the scores [batch.., Lq, Lk].
// Returns the number of (batch, head) pairs. The shapes must fit (attention_operands_misfit
// or attention_kv_broadcast, and attention_layout_misfit).
inline int64_t attention_layout(AttentionLayout& a, const Shape& q, const Shape& k, const Shape& v, const Shape& out,
                                const Shape* bias, bool lhd) {
  const size_t r = q.size(), len = r - (lhd ? 3 : 2);
  a.batch_dims = int(r) - 2;
  a.lq = int(q[len]);
  a.d = int(q.back());
  a.lk = int(k[len]);
  a.dv = int(v.back());
  int64_t pairs = 1;
  for (int dim = 0; dim < a.batch_dims; ++dim) {
    a.batch_shape[dim] = lhd && dim == a.batch_dims - 1 ? q[r - 2] : q[size_t(dim)];
    pairs *= a.batch_shape[dim];
  }
  // hld: an operand's own leading dimensions (k's and v's may broadcast), a step of one
  // covering a whole [L, D] matrix. lhd: the dimensions before L, a step covering [L, H, D],
  // then H, a step of D.
  auto strides = [&](const Shape& s, int64_t* dst, int64_t& row) {
    const int64_t l = s[len], w = s.back(), heads = lhd ? s[r - 2] : 1;
    const std::vector<int64_t> st = broadcast_strides(Shape(s.begin(), s.begin() + int64_t(len)), len);
    for (size_t dim = 0; dim < len; ++dim) dst[dim] = st[dim] * l * heads * w;
    if (lhd) dst[len] = w;
    row = heads * w;
  };
  strides(q, a.q_stride, a.q_row);
  strides(k, a.k_stride, a.k_row);
  strides(v, a.v_stride, a.v_row);
  strides(out, a.o_stride, a.o_row);
  a.has_bias = bias != nullptr;
  if (bias) {
    const std::vector<int64_t> stride = broadcast_strides(*bias, size_t(a.batch_dims) + 2);
    for (int dim = 0; dim < a.batch_dims; ++dim) a.bias_batch_stride[dim] = stride[size_t(dim)];
    a.bias_q_stride = stride[size_t(a.batch_dims)];
    a.bias_k_stride = stride[size_t(a.batch_dims) + 1];
  }
  return pairs;
}

}  // namespace rlx
