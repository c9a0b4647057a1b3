// layer_norm, rms_norm, softmax (last axis), attention and rotary_embedding as native kernels. Their lowerings
// (src/ir/ops/nn.cpp) run as 5 to 8 kernels that each read and write the whole tensor and
// each wake the thread pool — for attention the [.., Lq, Lk] scores five times over, plus
// two batched products of 128-row blocks; these read their inputs once, keep each row (or
// each block of scores) in the L1 cache, and write their result once. Each keeps the
// lowering's arithmetic (layer_norm: the mean, then the mean of the squared deviations,
// then c * (1 / sqrt(var + eps)) * gamma + beta; rms_norm: x * (1 / sqrt(mean(x^2) + eps)) *
// gamma; softmax: exp(x - max) / sum; attention:
// (q . k) * scale [+ bias] [causal: -inf], that softmax, then the weights times v — except
// that the division by the softmax's sum is applied to the output row, as a product by its
// reciprocal), so they differ from it by the order of sums (and that division) only;
// rotary_embedding: the f32 angle, its f32 cosine and sine rounded to x's dtype, x cos +
// rotate_half(x) sin, in one pass over x instead of the lowering's slices and
// concatenations). Their VJPs stay the ops' IR expressions.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/rotary.hpp"
#include "devices/cpu/kernels.hpp"
#include "runtime/attention_layout.hpp"
#include "runtime/standard_kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "devices/cpu/vmath.hpp"
#include "ir/graph.hpp"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define RLX_NN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RLX_NN_CLONES
#endif

namespace rlx::cpu {
namespace {

// Sums in kLanes independent partial sums: a plain loop GCC vectorizes without
// reassociating (the files here are built without -ffast-math).
constexpr int kLanes = 16;

template <class T>
RLX_VM_INLINE T fma_of(T a, T b, T c) {
  if constexpr (sizeof(T) == 4) return vm::fma_f32(a, b, c);
  else return vm::fma_f64(a, b, c);
}
template <class T>
RLX_VM_INLINE T exp_of(T x) {
  if constexpr (sizeof(T) == 4) return vm::exp_f32(x);
  else return std::exp(x);
}
// exp_of for x <= 0 (a softmax's x - max; vmath.hpp).
template <class T>
RLX_VM_INLINE T exp_nonpos_of(T x) {
  if constexpr (sizeof(T) == 4) return vm::exp_f32_nonpos(x);
  else return std::exp(x);
}
template <class T>
RLX_VM_INLINE T lane_sum(const T* x, int64_t n) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  T s = 0;
  for (; i < n; ++i) s += x[i];
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}
// The row's max for softmax. A NaN may be dropped here: it still makes exp(x - max), the
// sum and so the whole row NaN, as the lowering's NaN max does.
template <class T>
RLX_VM_INLINE T lane_max(const T* x, int64_t n) {
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  T m = -INFINITY;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

// y[i] = exp(x[i] - max) / sum over one row (x and y may be the same).
template <class T>
RLX_VM_INLINE void softmax_row(const T* x, T* y, int64_t d) {
  const T m = lane_max(x, d);
  for (int64_t i = 0; i < d; ++i) y[i] = exp_of(x[i] - m);
  const T s = lane_sum(y, d);
  for (int64_t i = 0; i < d; ++i) y[i] = y[i] / s;
}

template <class T>
RLX_NN_CLONES void layer_norm_rows(const T* x, const T* g, const T* b, T* y, int64_t r0, int64_t r1, int64_t d, T eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    const T mean = lane_sum(xr, d) / T(d);
    // The deviations go through y (the row stays in L1) so that both sums vectorize alike.
    for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * (xr[i] - mean);
    const T var = lane_sum(yr, d) / T(d);
    const T inv = T(1) / std::sqrt(var + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * inv * g[i] + b[i];
  }
}

template <class T>
RLX_NN_CLONES void softmax_rows(const T* x, T* y, int64_t r0, int64_t r1, int64_t d) {
  for (int64_t r = r0; r < r1; ++r) softmax_row(x + r * d, y + r * d, d);
}

int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / std::max<int64_t>(t.shape().back(), 1); }
// Rows per task: about 16 K elements, so that small tensors run on one thread.
int64_t row_grain(int64_t d) { return std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(d, 1)); }

// x * (1 / sqrt(mean(x^2) + eps)) * g, the squares through y as in layer_norm_rows.
template <class T>
RLX_NN_CLONES void rms_norm_rows(const T* x, const T* g, T* y, int64_t r0, int64_t r1, int64_t d, T eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * xr[i];
    const T inv = T(1) / std::sqrt(lane_sum(yr, d) / T(d) + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * g[i];
  }
}

template <class T>
void rms_norm(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = in[0].contiguous(), g = in[1].contiguous();
  if (x.numel() == 0) return;
  const int64_t d = x.shape().back();
  const T eps = T(n.attrs.get_float("eps"));
  const T *xp = x.data<T>(), *gp = g.data<T>();
  T* yp = out[0].data<T>();
  parallel_for(rows_of(x), row_grain(d), [&](int64_t r0, int64_t r1) { rms_norm_rows(xp, gp, yp, r0, r1, d, eps); });
}

template <class T>
void layer_norm(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = in[0].contiguous(), g = in[1].contiguous(), b = in[2].contiguous();
  if (x.numel() == 0) return;
  const int64_t d = x.shape().back();
  const T eps = T(n.attrs.get_float("eps"));
  const T *xp = x.data<T>(), *gp = g.data<T>(), *bp = b.data<T>();
  T* yp = out[0].data<T>();
  parallel_for(rows_of(x), row_grain(d), [&](int64_t r0, int64_t r1) { layer_norm_rows(xp, gp, bp, yp, r0, r1, d, eps); });
}

template <class T>
void softmax(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = in[0].contiguous();
  if (x.numel() == 0) return;
  const int64_t d = x.shape().back();
  const T* xp = x.data<T>();
  T* yp = out[0].data<T>();
  parallel_for(rows_of(x), row_grain(d), [&](int64_t r0, int64_t r1) { softmax_rows(xp, yp, r0, r1, d); });
}

// ---------------------------------------------------------------- attention

// A register tile of the two products: c[r * cs + l] = sum over t < n of a[r * as + t] *
// b[t * bs + l], for R rows of a and C 512-bit vectors of b's columns. GCC's vector type
// keeps the R x C accumulators in registers (zmm on the x86-64-v4 clone, ymm pairs on v3);
// each a value is loaded (broadcast) once for C vectors of b, so with C = 2 the loads per
// multiply-add halve; the file is built with contraction (CMakeLists.txt), so each product
// and sum is one fused multiply-add, as in gemm.cpp's micro-kernels.
// With row_scale, row r of the tile is multiplied by row_scale[r] as it is stored.
template <class T, int R, int C = 1>
RLX_VM_INLINE void tile(const T* a, int64_t as, const T* b, int64_t bs, int64_t n, T* c, int64_t cs,
                        const T* row_scale = nullptr) {
  typedef T Vec __attribute__((vector_size(64), aligned(alignof(T))));
  constexpr int64_t kW = 64 / int64_t(sizeof(T));
  Vec acc[R][C] = {};
  for (int64_t t = 0; t < n; ++t) {
    Vec bt[C];
    for (int v = 0; v < C; ++v) bt[v] = *reinterpret_cast<const Vec*>(b + t * bs + v * kW);
    for (int r = 0; r < R; ++r) {
      const T at = a[r * as + t];
      for (int v = 0; v < C; ++v) acc[r][v] += at * bt[v];
    }
  }
  if (row_scale)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < C; ++v) acc[r][v] *= row_scale[r];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < C; ++v) *reinterpret_cast<Vec*>(c + r * cs + v * kW) = acc[r][v];
}

// c = a . b over columns [0, cols) (a multiple of W): two vectors a tile, one for an odd last.
template <class T, int R, int W>
RLX_VM_INLINE void tiles(const T* a, int64_t as, const T* b, int64_t bs, int64_t n, T* c, int64_t cs, int64_t cols,
                         const T* row_scale = nullptr) {
  int64_t c0 = 0;
  for (; c0 + 2 * W <= cols; c0 += 2 * W) tile<T, R, 2>(a, as, b + c0, bs, n, c + c0, cs, row_scale);
  if (c0 < cols) tile<T, R, 1>(a, as, b + c0, bs, n, c + c0, cs, row_scale);
}

// tiles() as a function of its own: inlined into attention_rows, the register tiles share the
// zmm registers with the softmax's constants, which the compiler keeps loaded across the
// whole loop, and spill an operand of every multiply-add.
template <class T, int R, int W>
RLX_NN_CLONES __attribute__((noinline)) void tiles_apart(const T* a, int64_t as, const T* b, int64_t bs, int64_t n,
                                                         T* c, int64_t cs, int64_t cols, const T* row_scale) {
  tiles<T, R, W>(a, as, b, bs, n, c, cs, cols, row_scale);
}

// The kernel's arguments: where the operands lie (runtime/attention_layout.hpp), the scale
// and the mask.
struct AttentionArgs : AttentionLayout {
  double scale = 1;
  bool causal = false;
};

constexpr int kRows = 8;          // query rows per register tile: 8 accumulators hide the FMA latency
constexpr int64_t kQBlock = 32;   // query rows per task

// One row of scores for attention_rows: sr[j] = exp(sr[j] scale + bias[j] - max) for the keys
// the row sees (j < last), 0 for the rest up to nkp (a multiple of W); returns the row's sum.
// The division by the sum is left to the output row (dv multiplies instead of nk divides). A
// row that sees no key, or whose every key has a bias of -inf, gives a sum of 0 or a NaN, and
// so a NaN output row, as the lowering's softmax of a row of -inf does. The max and the sum
// are kept in whole vectors (a scalar chain of 16 lanes costs more than the row's products),
// and the lanes of the last vector past `last` are -inf before the exps, which makes them 0.
template <class T, int W>
RLX_VM_INLINE T attention_weights(T* sr, T scale, const T* br, int64_t bks, int64_t last, int64_t nkp) {
  typedef T Vec __attribute__((vector_size(64), aligned(alignof(T))));
  static_assert(sizeof(Vec) == W * sizeof(T));
  const int64_t lastp = (last + W - 1) / W * W;
  Vec ninf, mx, lane;
  for (int l = 0; l < W; ++l) ninf[l] = -T(INFINITY), lane[l] = T(l);
  mx = ninf;
  for (int64_t j = 0; j < lastp; j += W) {
    Vec x = *reinterpret_cast<const Vec*>(sr + j) * scale;
    if (br) {
      Vec b;
      if (bks == 1 && j + W <= last) b = *reinterpret_cast<const Vec*>(br + j);
      else  // (never past the row's last key: the bias ends there)
        for (int l = 0; l < W; ++l) b[l] = j + l < last ? br[(j + l) * bks] : T(0);
      x += b;
    }
    if (j + W > last) {
      Vec cut = lane - T(last - j);  // < 0 for the lanes the row sees
      x = cut < T(0) ? x : ninf;
    }
    *reinterpret_cast<Vec*>(sr + j) = x;
    mx = x > mx ? x : mx;
  }
  T m = mx[0];
  for (int l = 1; l < W; ++l) m = mx[l] > m ? mx[l] : m;
  for (int64_t j = 0; j < lastp; ++j) sr[j] = exp_nonpos_of(sr[j] - m);
  for (int64_t j = lastp; j < nkp; ++j) sr[j] = T(0);
  Vec s0 = {}, s1 = {};
  int64_t j = 0;
  for (; j + 2 * W <= lastp; j += 2 * W) {
    s0 += *reinterpret_cast<const Vec*>(sr + j);
    s1 += *reinterpret_cast<const Vec*>(sr + j + W);
  }
  if (j < lastp) s0 += *reinterpret_cast<const Vec*>(sr + j);
  s0 += s1;
  T sum = 0;
  for (int l = 0; l < W; ++l) sum += s0[l];
  return sum;
}

// One task: query rows [i0, i1) of head `h`. kt: K transposed, [d][lkp] (keys padded with 0
// to lkp, a multiple of W); vp: V padded, [lk][dvp]; s: scores, [kRows][lkp]; o: [kRows][dvp].
// A whole block of kRows rows reads q in place (rows a.q_row apart) and, when dv is a
// multiple of W, writes the output rows in place; a last, partial block goes through qp (the
// rows padded with 0) and o. The scores' products and the output's are register tiles.
template <class T, int W>
RLX_NN_CLONES void attention_rows(const AttentionArgs& a, const T* q, const T* kt, const T* vp, const T* bias,
                                  int64_t bias_base, int64_t i0, int64_t i1, int64_t lkp, int64_t dvp, T* qp, T* s,
                                  T* o, T* out) {
  const T scale = T(a.scale);
  const int64_t qs = a.q_row, os = a.o_row;
  for (int64_t ib = i0; ib < i1; ib += kRows) {
    const int nr = int(std::min<int64_t>(kRows, i1 - ib));
    const T* qb = q + ib * qs;
    int64_t qbs = qs;
    if (nr < kRows) {
      for (int r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < a.d; ++c) qp[r * a.d + c] = r < nr ? qb[r * qs + c] : T(0);
      qb = qp;
      qbs = a.d;
    }
    // The keys any of these rows may see (causal: col <= row + lk - lq).
    int64_t nk = a.lk;
    if (a.causal) nk = std::clamp<int64_t>(ib + nr - 1 + a.lk - a.lq + 1, 1, a.lk);
    const int64_t nkp = (nk + W - 1) / W * W;
    tiles_apart<T, kRows, W>(qb, qbs, kt, lkp, a.d, s, lkp, nkp, nullptr);
    T inv[kRows];
    for (int r = 0; r < nr; ++r) {
      const int64_t i = ib + r;
      // Keys past the row's causal limit get weight 0.
      const int64_t last = a.causal ? std::clamp<int64_t>(i + a.lk - a.lq + 1, 0, nk) : nk;
      const T* br = bias ? bias + bias_base + i * a.bias_q_stride : nullptr;
      inv[r] = T(1) / attention_weights<T, W>(s + r * lkp, scale, br, a.bias_k_stride, last, nkp);
    }
    for (int r = nr; r < kRows; ++r)
      for (int64_t j = 0; j < nkp; ++j) s[r * lkp + j] = T(0);
    for (int r = nr; r < kRows; ++r) inv[r] = T(0);
    T* ob = out + ib * os;
    if (nr == kRows && a.dv == dvp) {
      tiles_apart<T, kRows, W>(s, lkp, vp, dvp, nk, ob, os, dvp, inv);
    } else {
      tiles_apart<T, kRows, W>(s, lkp, vp, dvp, nk, o, dvp, dvp, inv);
      for (int r = 0; r < nr; ++r)
        for (int64_t c = 0; c < a.dv; ++c) ob[r * os + c] = o[r * dvp + c];
    }
  }
}

template <class T>
void attention(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  constexpr int W = 64 / int(sizeof(T));  // one 512-bit vector
  const Tensor q = in[0].contiguous(), k = in[1].contiguous(), v = in[2].contiguous();
  const Shape& qs = q.shape();
  const bool lhd = n.attrs.get_string("layout") == "lhd";
  AttentionArgs a;
  Tensor bias;
  if (in.size() == 4) bias = in[3].contiguous();
  // (hld: k's and v's leading dimensions may be 1 where q's are not — grouped-query
  // attention's [B, KV, 1, S, D] against [B, KV, G, T, D] — and the G query heads of a group
  // then read one K and V.)
  const int64_t bh = attention_layout(a, qs, k.shape(), v.shape(), out[0].shape(), bias.defined() ? &bias.shape() : nullptr, lhd);
  a.scale = n.attrs.get_float("scale");
  if (a.scale == 0.0) a.scale = 1.0 / std::sqrt(double(a.d));
  a.causal = n.attrs.get_string("mask") == "causal";
  if (out[0].numel() == 0) return;
  if (a.lk == 0) {  // softmax over no keys: 0 / 0
    std::fill(out[0].data<T>(), out[0].data<T>() + out[0].numel(), T(NAN));
    return;
  }
  const int64_t lkp = (a.lk + W - 1) / W * W, dvp = (a.dv + W - 1) / W * W;
  const int64_t qblocks = (a.lq + kQBlock - 1) / kQBlock;
  const T *qd = q.data<T>(), *kd = k.data<T>(), *vd = v.data<T>();
  const T* bd = bias.defined() ? bias.data<T>() : nullptr;
  T* od = out[0].data<T>();
  // Tasks are (head, block of queries); a thread's range of tasks is contiguous, so it lays
  // out K and V of a head once for all its blocks of that head.
  parallel_for(bh * qblocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> kt(size_t(a.d * lkp)), vp(size_t(a.lk * dvp)), qp(size_t(kRows * a.d)), s(size_t(kRows * lkp)),
        o(size_t(kRows * dvp));
    int64_t laid_k = -1, laid_v = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t h = t / qblocks, blk = t % qblocks;
      const AttentionOffsets off = attention_offsets(a, h);
      if (off.k != laid_k || off.v != laid_v) {
        const T* kh = kd + off.k;
        const T* vh = vd + off.v;
        for (int64_t c = 0; c < a.d; ++c)
          for (int64_t j = 0; j < lkp; ++j) kt[size_t(c * lkp + j)] = j < a.lk ? kh[j * a.k_row + c] : T(0);
        for (int64_t j = 0; j < a.lk; ++j)
          for (int64_t c = 0; c < dvp; ++c) vp[size_t(j * dvp + c)] = c < a.dv ? vh[j * a.v_row + c] : T(0);
        laid_k = off.k;
        laid_v = off.v;
      }
      const int64_t i0 = blk * kQBlock, i1 = std::min<int64_t>(a.lq, i0 + kQBlock);
      attention_rows<T, W>(a, qd + off.q, kt.data(), vp.data(), bd, off.bias, i0, i1, lkp, dvp, qp.data(), s.data(),
                           o.data(), od + off.o);
    }
  });
}

// q [.., Lq, D], k [.., Lk, D], v [.., Lk, Dv] with the same leading dimensions or (hld, Lq
// of at least 16) k's and v's 1 where q's are not, at most 4 batch dimensions, and a bias
// of rank at most q's broadcasting to the scores; other cases (q's leading dimensions broadcast against k's)
// run the lowering.
constexpr int64_t kMinBroadcastRows = 16;

std::string attention_check(const ir::Node& n, const ir::Graph& g) {
  const Shape &q = g.type(n.inputs[0]).shape, &k = g.type(n.inputs[1]).shape, &v = g.type(n.inputs[2]).shape;
  const bool lhd = n.attrs.get_string("layout") == "lhd";
  // hld also takes k and v whose leading dimensions are 1 where q's are not (broadcast), for
  // at least kMinBroadcastRows query rows: with fewer (a decode step's one row per head) laying
  // out K and V per head costs more than the lowering's products, which read them in place.
  auto broadcasts_kv = [&] {
    return !lhd && q.size() >= 2 && q[q.size() - 2] >= kMinBroadcastRows && attention_kv_broadcast(q, k, v);
  };
  if (std::string m = attention_operands_misfit(q, k, v, lhd); !m.empty() && !broadcasts_kv())
    return "attention on cpu: " + m;
  if (std::string m = attention_layout_misfit(q, k, v, lhd); !m.empty()) return "attention on cpu: " + m;
  for (ir::Value in : n.inputs)
    if (g.type(in).dtype != g.type(n.inputs[0]).dtype) return "attention on cpu: every input of q's dtype";
  if (n.inputs.size() == 4 && g.type(n.inputs[3]).shape.size() > q.size())
    return "attention on cpu: a bias of rank at most q's";
  return "";
}

// ---------------------------------------------------------------- rotary_embedding

// x [..., T, heads, D] at positions [T]: the cosines and sines of the [T, D/2] angles once
// (float(position) * inv_i in f32, as the lowering), then each row's pairs (i, i + D/2).
template <class T>
void rotary_embedding(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = in[0].contiguous(), pos = in[1].contiguous();
  if (x.numel() == 0) return;
  const Shape& s = x.shape();
  const int64_t d = s.back(), half = d / 2, heads = s[s.size() - 2], t = s[s.size() - 3];
  const double theta = n.attrs.get_float("theta");
  std::vector<T> cs(size_t(t * half)), sn(size_t(t * half));
  for (int64_t i = 0; i < half; ++i) {
    const float inv = rotary_inverse_frequency(theta, d, i);
    for (int64_t p = 0; p < t; ++p) {
      const float at = pos.dtype() == DType::I64 ? float(pos.data<int64_t>()[p]) : float(pos.data<int32_t>()[p]);
      const float angle = at * inv;
      // In f64 rounded once to f32: the reference device's rounding of the lowering's f32 cos and sin.
      cs[size_t(p * half + i)] = T(float(std::cos(double(angle))));
      sn[size_t(p * half + i)] = T(float(std::sin(double(angle))));
    }
  }
  const T* xp = x.data<T>();
  T* yp = out[0].data<T>();
  parallel_for(x.numel() / d, row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T *xr = xp + r * d, *c = cs.data() + (r / heads) % t * half, *sr = sn.data() + (r / heads) % t * half;
      T* yr = yp + r * d;
      for (int64_t i = 0; i < half; ++i) {
        const T x1 = xr[i], x2 = xr[i + half];
        yr[i] = x1 * c[i] - x2 * sr[i];
        yr[i + half] = x2 * c[i] + x1 * sr[i];
      }
    }
  });
}

std::string rotary_check(const ir::Node& n, const ir::Graph& g) {
  const Shape& x = g.type(n.inputs[0]).shape;
  if (x.size() < 3 || x.back() % 2) return "rotary_embedding on cpu: x [..., T, heads, D], D even";
  return "";
}

// layer_norm, rms_norm and softmax: the last axis only (softmax's axis attribute naming it).
std::string softmax_check(const ir::Node& n, const ir::Graph& g) {
  const int64_t rank = int64_t(g.type(n.inputs[0]).shape.size());
  const int64_t ax = n.attrs.get_int("axis");
  if (rank == 0 || (ax != -1 && ax != rank - 1)) return "softmax on cpu: the last axis only";
  return "";
}
std::string norm_check(const ir::Node& n, const ir::Graph& g) {
  if (g.type(n.inputs[0]).shape.empty()) return n.op->name + " on cpu: rank at least 1";
  return "";
}

// The f32 or f64 instance of a kernel, picked by input 0's dtype: f(tag, ...) with tag a T{}.
template <class F>
KernelFn f32_or_f64(F f) {
  return [f](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    if (in[0].dtype() == DType::F64) f(double{}, n, in, out);
    else f(float{}, n, in, out);
  };
}

}  // namespace

void add_nn_kernels(KernelTable& t) {
  const DTypeSet f32_f64 = bit(DType::F32) | bit(DType::F64);
  t.add({"layer_norm", f32_f64, 0,
         f32_or_f64([](auto tag, const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           layer_norm<decltype(tag)>(n, in, out);
         }),
         norm_check});
  t.add({"rms_norm", f32_f64, 0,
         f32_or_f64([](auto tag, const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           rms_norm<decltype(tag)>(n, in, out);
         }),
         norm_check});
  t.add({"softmax", f32_f64, 0,
         f32_or_f64([](auto tag, const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           softmax<decltype(tag)>(n, in, out);
         }),
         softmax_check});
  t.add({"attention", f32_f64, 0,
         f32_or_f64([](auto tag, const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           attention<decltype(tag)>(n, in, out);
         }),
         attention_check});
  t.add({"rotary_embedding", f32_f64, 0,
         f32_or_f64([](auto tag, const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           rotary_embedding<decltype(tag)>(n, in, out);
         }),
         rotary_check});
}

}  // namespace rlx::cpu
