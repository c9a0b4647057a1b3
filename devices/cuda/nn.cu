// layer_norm, rms_norm, softmax (last axis), attention, rotary_embedding and decoding's
// grouped_query_attention as native kernels. Their lowerings
// (src/ir/ops/nn.cpp) run as 3 to 8 kernels that each read and write the whole tensor — for
// attention the [.., Lq, Lk] scores five times over; these read their inputs once and write
// their result once (for rms_norm, a decoder's four norms per layer, the kernels saved are
// what counts: a batch-1 decode step's norms are a few KB each, and each kernel costs its
// launch). Each keeps the lowering's arithmetic (layer_norm: mean, then the mean of the
// squared deviations, then c * rsqrt(var + eps) * gamma + beta; rms_norm: x * rsqrt(mean(x^2)
// + eps) * gamma; softmax: exp(x - max) / sum; rotary_embedding: the f32 angle, its f32
// cosine and sine rounded to x's dtype), so they differ from it by the order of f32 sums
// (and fused multiply-adds) only. Their VJPs stay the ops' IR expressions.
#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/broadcast_strides.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"
#include "core/rotary.hpp"
#include "devices/cuda/library.hpp"
#include "ir/graph.hpp"
#include "runtime/attention_layout.hpp"
#include "runtime/standard_kernels.hpp"

namespace rlx::cuda {
namespace {

using i64 = long long;

template <class T>
__device__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
template <class T>
__device__ T warp_max(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const T o = __shfl_xor_sync(0xffffffffu, v, off);
    v = (o > v || o != o) ? o : v;  // NaN wins, as the lowering's max gives NaN for a row holding one
  }
  return v;
}

constexpr int kRowsPerBlock = 8;  // a warp per row

template <class T>
__global__ void __launch_bounds__(32 * kRowsPerBlock) layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                                                        const T* __restrict__ beta, T* __restrict__ y,
                                                                        i64 rows, int d, T eps) {
  const i64 row = i64(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * d;
  T* yr = y + row * d;
  const int lane = int(threadIdx.x);
  T s = T(0);
  for (int i = lane; i < d; i += 32) s += xr[i];
  const T mean = warp_sum(s) / T(d);
  T q = T(0);
  for (int i = lane; i < d; i += 32) {
    const T c = xr[i] - mean;
    q += c * c;
  }
  const T var = warp_sum(q) / T(d);
  const T r = T(1) / sqrt(var + eps);
  for (int i = lane; i < d; i += 32) yr[i] = (xr[i] - mean) * r * gamma[i] + beta[i];
}

template <class T>
__global__ void __launch_bounds__(32 * kRowsPerBlock) rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                                                      T* __restrict__ y, i64 rows, int d, T eps) {
  const i64 row = i64(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * d;
  T* yr = y + row * d;
  const int lane = int(threadIdx.x);
  T q = T(0);
  for (int i = lane; i < d; i += 32) q += xr[i] * xr[i];
  const T r = T(1) / sqrt(warp_sum(q) / T(d) + eps);
  for (int i = lane; i < d; i += 32) yr[i] = xr[i] * r * gamma[i];
}

template <class T>
__global__ void __launch_bounds__(32 * kRowsPerBlock) softmax_kernel(const T* __restrict__ x, T* __restrict__ y, i64 rows,
                                                                     int d) {
  const i64 row = i64(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * d;
  T* yr = y + row * d;
  const int lane = int(threadIdx.x);
  T m = -INFINITY;
  for (int i = lane; i < d; i += 32) m = (xr[i] > m || xr[i] != xr[i]) ? xr[i] : m;
  m = warp_max(m);
  T s = T(0);
  for (int i = lane; i < d; i += 32) s += exp(xr[i] - m);
  s = warp_sum(s);
  for (int i = lane; i < d; i += 32) yr[i] = exp(xr[i] - m) / s;
}

i64 rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.shape().back(); }
int last_of(const Tensor& t) { return t.rank() == 0 ? 1 : int(t.shape().back()); }

template <class T>
void layer_norm(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = contiguous(in[0]), g = contiguous(in[1]), b = contiguous(in[2]);
  const i64 rows = rows_of(x);
  if (x.numel() == 0) return;
  layer_norm_kernel<T><<<grid_for(rows, kRowsPerBlock), dim3(32, kRowsPerBlock), 0, stream()>>>(
      x.data<T>(), g.data<T>(), b.data<T>(), out[0].data<T>(), rows, last_of(x), T(n.attrs.get_float("eps")));
  check_launch("layer_norm");
}

template <class T>
void rms_norm(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = contiguous(in[0]), g = contiguous(in[1]);
  const i64 rows = rows_of(x);
  if (x.numel() == 0) return;
  rms_norm_kernel<T><<<grid_for(rows, kRowsPerBlock), dim3(32, kRowsPerBlock), 0, stream()>>>(
      x.data<T>(), g.data<T>(), out[0].data<T>(), rows, last_of(x), T(n.attrs.get_float("eps")));
  check_launch("rms_norm");
}

template <class T>
void softmax(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = contiguous(in[0]);
  if (x.numel() == 0) return;
  const i64 rows = rows_of(x);
  softmax_kernel<T><<<grid_for(rows, kRowsPerBlock), dim3(32, kRowsPerBlock), 0, stream()>>>(x.data<T>(), out[0].data<T>(),
                                                                                             rows, last_of(x));
  check_launch("softmax");
}

// ---------------------------------------------------------------- attention

// The kernel's arguments: where the operands lie (runtime/attention_layout.hpp), the scale
// and the mask.
struct AttentionArgs : AttentionLayout {
  float scale = 1;
  bool causal = false;
};

constexpr int kThreadsPerBlock = 128;

// S threads per query row of one (batch, head), kThreadsPerBlock / S rows a block. Each of
// a row's S lanes takes every S-th key and keeps its own online softmax (running max m,
// running sum l, the output accumulated with weights exp(s - m) and rescaled when m grows),
// so the [Lq, Lk] scores never leave registers; at the end the lanes' states are merged by
// shuffles (a butterfly: every lane ends with the row's state) and each lane writes its
// share of the output row. More lanes give a short sequence's call more threads and shorter
// chains (12 heads of 128 queries at one lane a row: 12 blocks, 128 keys in turn per
// thread); fewer lanes stage K and V fewer times when the rows alone fill the GPU
// (attention_lanes picks). K and V go through shared memory KS rows at a time, read by
// every thread of the block, four floats at a load; their rows are padded by four floats so
// that the S lanes of a row, reading S different keys at the same column, hit different
// banks. A lane's bias values for a stage are loaded into registers with the stage (S >= 2),
// off the per-key chain. KD/KV: the head sizes rounded up to 32, 64 or 128. Masked keys (causal, or a bias
// of -inf) add nothing; a row with every key masked divides 0 by 0, NaN, as the lowering's
// softmax of a row of -inf does.
template <int KD, int KV, int S>
__global__ void __launch_bounds__(kThreadsPerBlock) attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                                     const float* __restrict__ v,
                                                                     const float* __restrict__ bias, float* __restrict__ o,
                                                                     AttentionArgs a) {
  static_assert(S >= 1 && S <= 32 && (S & (S - 1)) == 0, "lanes per row: a power of two within a warp");
  constexpr int kRows = kThreadsPerBlock / S;
  constexpr int KS = KD + KV > 128 ? 32 : 64;  // keys a stage: static shared memory stays under 48 KiB
  constexpr int kPre = S >= 2 ? KS / S : 0;     // bias values a lane prefetches a stage
  __shared__ __align__(16) float ks[KS][KD + 4];
  __shared__ __align__(16) float vs[KS][KV + 4];
  const int lane = int(threadIdx.x) % S;
  const int i = int(blockIdx.x) * kRows + int(threadIdx.x) / S;
  const bool active = i < a.lq;
  // This (batch, head)'s first element in each operand.
  const AttentionOffsets off = attention_offsets(a, blockIdx.y);
  const i64 qo = off.q, ko = off.k, vo = off.v, oo = off.o;
  i64 bias_base = off.bias;
  if (a.has_bias) bias_base += i64(active ? i : 0) * a.bias_q_stride;
  float qr[KD], acc[KV];
#pragma unroll
  for (int c = 0; c < KD; ++c) qr[c] = (active && c < a.d) ? q[qo + i64(i) * a.q_row + c] * a.scale : 0.f;
#pragma unroll
  for (int c = 0; c < KV; ++c) acc[c] = 0.f;
  float m = -INFINITY, l = 0.f;
  bool nan = false;
  const float* kb = k + ko;
  const float* vb = v + vo;
  // The last key row i may see under the causal mask (col <= row + lk - lq).
  const int last = a.causal ? min(a.lk - 1, i + a.lk - a.lq) : a.lk - 1;
  int block_last = a.lk - 1;
  if (a.causal) block_last = min(a.lk - 1, int(blockIdx.x) * kRows + kRows - 1 + a.lk - a.lq);
  for (int j0 = 0; j0 <= block_last; j0 += KS) {
    const int n = min(KS, a.lk - j0);
    float bv[kPre > 0 ? kPre : 1];
    if constexpr (kPre > 0) {
#pragma unroll
      for (int t = 0; t < kPre; ++t) {
        const int r = lane + t * S;
        bv[t] = (a.has_bias && active && r < n) ? bias[bias_base + i64(j0 + r) * a.bias_k_stride] : 0.f;
      }
    }
    __syncthreads();
    for (int e = int(threadIdx.x); e < KS * KD; e += kThreadsPerBlock) {
      const int r = e / KD, c = e % KD;
      ks[r][c] = (r < n && c < a.d) ? kb[i64(j0 + r) * a.k_row + c] : 0.f;
    }
    for (int e = int(threadIdx.x); e < KS * KV; e += kThreadsPerBlock) {
      const int r = e / KV, c = e % KV;
      vs[r][c] = (r < n && c < a.dv) ? vb[i64(j0 + r) * a.v_row + c] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
#pragma unroll(kPre > 0 ? kPre : 1)
    for (int t = 0; t < (kPre > 0 ? kPre : KS); ++t) {
      const int r = lane + t * S;
      if (r >= n || j0 + r > last) break;
      // Four partial sums: one chain of KD dependent multiply-adds (4 cycles each) per key
      // is otherwise the critical path.
      float s4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int c = 0; c < KD; c += 4) {
        const float4 kk = *reinterpret_cast<const float4*>(&ks[r][c]);
        s4[0] += qr[c] * kk.x;
        s4[1] += qr[c + 1] * kk.y;
        s4[2] += qr[c + 2] * kk.z;
        s4[3] += qr[c + 3] * kk.w;
      }
      float s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
      if constexpr (kPre > 0) s += bv[t];
      else if (a.has_bias) s += bias[bias_base + i64(j0 + r) * a.bias_k_stride];
      if (s != s) nan = true;
      if (!(s > -INFINITY)) continue;  // masked (or NaN, recorded above)
      if (s > m) {
        const float corr = expf(m - s);
        l *= corr;
#pragma unroll
        for (int c = 0; c < KV; ++c) acc[c] *= corr;
        m = s;
      }
      const float p = expf(s - m);
      l += p;
#pragma unroll
      for (int c = 0; c < KV; c += 4) {
        const float4 vv = *reinterpret_cast<const float4*>(&vs[r][c]);
        acc[c] += p * vv.x;
        acc[c + 1] += p * vv.y;
        acc[c + 2] += p * vv.z;
        acc[c + 3] += p * vv.w;
      }
    }
  }
  // Merge the S lanes of each row (inactive rows too: every lane of the warp shuffles). A
  // lane that saw no unmasked key (m = -inf) weighs 0.
#pragma unroll
  for (int off = 1; off < S; off <<= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, off), lo = __shfl_xor_sync(0xffffffffu, l, off);
    nan = __shfl_xor_sync(0xffffffffu, int(nan), off) || nan;
    const float mn = fmaxf(m, mo);
    const float wa = m == -INFINITY ? 0.f : expf(m - mn), wb = mo == -INFINITY ? 0.f : expf(mo - mn);
    l = l * wa + lo * wb;
#pragma unroll
    for (int c = 0; c < KV; ++c) acc[c] = acc[c] * wa + __shfl_xor_sync(0xffffffffu, acc[c], off) * wb;
    m = mn;
  }
  if (!active) return;
  const float inv = nan ? NAN : 1.f / l;
  float* orow = o + oo + i64(i) * a.o_row;
#pragma unroll
  for (int c = 0; c < KV; ++c)
    if (c % S == lane && c < a.dv) orow[c] = acc[c] * inv;
}

// ---------------------------------------------------------------- attention over short keys in register tiles
// Without TF32, a call with enough query rows and at most kTileKeys keys (a BERT sequence)
// runs both products as register-tiled f32 FMAs: the lane kernel above spends a dependent
// expf, rescale and 32-FMA chain per key and row, ~90 µs a layer for MiniLM at batch 32
// against ~16 µs of FMA work. A block takes kTileRows query rows of one (batch, head) and
// stages them (scaled), every key and every value in shared memory; thread (rg, kg) = (tid /
// 16, tid % 16) computes the scores of rows 4 rg .. 4 rg + 3 against keys kg, kg + 16, ...,
// kg + 112 (keys 16 apart: the 16 threads' K rows then fall in 8 different bank quads), four
// columns of q and k per load; the row's max and sum come from the 16 threads of a half-warp
// by shuffles; the unnormalized weights go to shared memory, and the same thread grid then
// computes rows 4 rg .. + 3 of the output against columns KV / 16 · kg .., four keys of the
// weights and of V per load, dividing by the row's sum at the end. Rows KD + 4 (q, k) and
// kTileKeys + 4 (weights) floats apart. Keys past lk weigh 0; masked keys (causal, a bias of
// -inf) weigh exp(-inf) = 0 and still multiply their values, as the lowering's softmax and
// product do (an Inf or NaN value at a masked key makes the row NaN here, where the lane
// kernel skips the key); a row with every key masked has max -inf and gives NaN, as the
// lowering's softmax does; a NaN score makes its row NaN.
constexpr int kTileRows = 64, kTileKeys = 128, kTileThreads = 256;
template <int KD, int KV>
constexpr size_t tile_shared_bytes() {
  return sizeof(float) * (size_t(kTileRows) * (KD + 4) + size_t(kTileKeys) * (KD + 4) + size_t(kTileKeys) * KV +
                          size_t(kTileRows) * (kTileKeys + 4) + kTileRows);
}

template <int KD, int KV>
__global__ void __launch_bounds__(kTileThreads) attention_tile_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                                      const float* __restrict__ v,
                                                                      const float* __restrict__ bias, float* __restrict__ o,
                                                                      AttentionArgs a) {
  constexpr int QS = KD + 4, PS = kTileKeys + 4, CW = KV / 16;  // row strides; output columns a thread
  extern __shared__ __align__(16) float tile_sm[];
  float* qs = tile_sm;                  // [kTileRows][QS], scaled
  float* ks = qs + kTileRows * QS;      // [kTileKeys][QS]
  float* vs = ks + kTileKeys * QS;      // [kTileKeys][KV]
  float* ps = vs + kTileKeys * KV;      // [kTileRows][PS], exp(s - max)
  float* inv = ps + kTileRows * PS;     // [kTileRows], 1 / the row's sum
  const int tid = int(threadIdx.x), rg = tid / 16, kg = tid % 16;
  const int row0 = int(blockIdx.x) * kTileRows;
  const AttentionOffsets off = attention_offsets(a, blockIdx.y);
  for (int e = tid; e < kTileRows * KD; e += kTileThreads) {
    const int r = e / KD, c = e % KD, i = row0 + r;
    qs[r * QS + c] = (i < a.lq && c < a.d) ? q[off.q + i64(i) * a.q_row + c] * a.scale : 0.f;
  }
  for (int e = tid; e < kTileKeys * KD; e += kTileThreads) {
    const int j = e / KD, c = e % KD;
    ks[j * QS + c] = (j < a.lk && c < a.d) ? k[off.k + i64(j) * a.k_row + c] : 0.f;
  }
  for (int e = tid; e < kTileKeys * KV; e += kTileThreads) {
    const int j = e / KV, c = e % KV;
    vs[e] = (j < a.lk && c < a.dv) ? v[off.v + i64(j) * a.v_row + c] : 0.f;
  }
  __syncthreads();
  float s[4][8] = {};
#pragma unroll 2
  for (int c = 0; c < KD; c += 4) {
    float4 qv[4], kv4[8];
#pragma unroll
    for (int r = 0; r < 4; ++r) qv[r] = *reinterpret_cast<const float4*>(&qs[(4 * rg + r) * QS + c]);
#pragma unroll
    for (int u = 0; u < 8; ++u) kv4[u] = *reinterpret_cast<const float4*>(&ks[(kg + 16 * u) * QS + c]);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int u = 0; u < 8; ++u)
        s[r][u] += qv[r].x * kv4[u].x + qv[r].y * kv4[u].y + qv[r].z * kv4[u].z + qv[r].w * kv4[u].w;
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int rr = 4 * rg + r, i = row0 + rr;
    const int last = a.causal ? i + a.lk - a.lq : a.lk - 1;  // the last key row i sees
    const i64 bias_row = off.bias + i64(i < a.lq ? i : 0) * a.bias_q_stride;
    float m = -INFINITY;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int j = kg + 16 * u;
      float x = s[r][u];
      if (a.has_bias && j < a.lk) x += bias[bias_row + i64(j) * a.bias_k_stride];
      if (j > last) x = -INFINITY;
      s[r][u] = x;
      m = fmaxf(m, x);
    }
#pragma unroll
    for (int sh = 1; sh < 16; sh <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, sh));
    float l = 0.f;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int j = kg + 16 * u;
      const float p = j < a.lk ? expf(s[r][u] - m) : 0.f;  // (m = -inf: every key masked, NaN)
      l += p;
      ps[rr * PS + j] = p;
    }
#pragma unroll
    for (int sh = 1; sh < 16; sh <<= 1) l += __shfl_xor_sync(0xffffffffu, l, sh);
    if (kg == 0) inv[rr] = 1.f / l;
  }
  __syncthreads();
  float acc[4][CW] = {};
  const int nk = a.lk < kTileKeys ? (a.lk + 3) / 4 * 4 : kTileKeys;
  for (int j = 0; j < nk; j += 4) {
    float4 pv[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) pv[r] = *reinterpret_cast<const float4*>(&ps[(4 * rg + r) * PS + j]);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float vv[CW];
      if constexpr (CW == 4) {
        const float4 t = *reinterpret_cast<const float4*>(&vs[(j + u) * KV + CW * kg]);
        vv[0] = t.x, vv[1] = t.y, vv[2] = t.z, vv[3] = t.w;
      } else {
        const float2 t = *reinterpret_cast<const float2*>(&vs[(j + u) * KV + CW * kg]);
        vv[0] = t.x, vv[1] = t.y;
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float p = u == 0 ? pv[r].x : u == 1 ? pv[r].y : u == 2 ? pv[r].z : pv[r].w;
#pragma unroll
        for (int c = 0; c < CW; ++c) acc[r][c] += p * vv[c];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int rr = 4 * rg + r, i = row0 + rr;
    if (i >= a.lq) continue;
    float* orow = o + off.o + i64(i) * a.o_row;
#pragma unroll
    for (int c = 0; c < CW; ++c)
      if (CW * kg + c < a.dv) orow[CW * kg + c] = acc[r][c] * inv[rr];
  }
}

// ---------------------------------------------------------------- attention on tensor cores
// Where RLX_CUDA_TF32=1 allows TF32 products (tf32_allowed), attention of at least
// kTcMinRows query rows runs on the tensor cores: the two products of a FlashAttention-style
// pass — scores S = (scale q) kᵀ and the output P v — as mma.sync m16n8k8 TF32 (operands
// rounded to 10-bit mantissas, f32 sums, the precision of matmul under the same setting),
// the online softmax between them in f32. A block is 4 warps, 16 query rows each, of one
// (batch, head); it walks the keys KT at a time (to its causal limit), staging K and V in
// shared memory with rows D + 4 floats apart so that the fragment loads below hit 32
// different banks (4g + t for K, 8t + g for V). q's fragments stay in registers for the
// whole pass, scaled and rounded once.
//
// Fragments (PTX, m16n8k8 .tf32; g = lane / 4, t = lane % 4): A a0 (g, t), a1 (g+8, t),
// a2 (g, t+4), a3 (g+8, t+4); B b0 (k t, n g), b1 (k t+4, n g); C c0 (g, 2t), c1 (g, 2t+1),
// c2 (g+8, 2t), c3 (g+8, 2t+1). P's C fragment feeds the second product as its A fragment
// with the keys of each 8-key chunk taken in the order 0,2,4,6,1,3,5,7 (k index t is key 2t,
// t+4 is key 2t+1) and v's rows read in the same order: a sum over keys in another order,
// no shuffles.
constexpr int kTcWarps = 4, kTcRows = 16 * kTcWarps;
constexpr int kTcMinRows = 16;

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Copies Bytes (4 or 16) from src to shared dst without waiting (cp.async), or zeros there
// where `in` is false (all of it zero-filled: nothing is read).
template <int Bytes>
__device__ __forceinline__ void copy_async(uint32_t* dst, const float* src, bool in) {
  __pipeline_memcpy_async(dst, src, Bytes, in ? 0 : Bytes);
}

// D: head size rounded up to 32, 64 or 128 (d and dv at most D); KT keys a stage.
template <int D>
constexpr int kTcKeys = D > 64 ? 32 : 64;
template <int D>
constexpr size_t tc_shared_bytes() {  // two stages of K and V, rows D + 4 floats apart
  return size_t(2) * 2 * kTcKeys<D> * (D + 4) * sizeof(float);
}

// (The TF32 kernel below keeps its own copy of this step and of finish_rows: through these
// functions ptxas allocates its 64-wide instance differently, with 20 bytes of spills.)
// The online softmax of the tensor-core kernels for one stage of KT keys from j0, on the
// C fragments s of the scores (rows g and g + 8 of the warp's 16, keys 8n + 2t + {0, 1};
// shift = lk - lq, so that row r sees keys up to r + shift under the causal mask):
// bias, the masks (a masked or NaN score becomes -inf, a NaN recorded in nan), each row's new
// maximum over its quad, and the rescaling of l and of the output fragments acc by exp(old
// max - new max).
template <int KT, int NV>
__device__ __forceinline__ void softmax_stage(float (&s)[KT / 8][4], float (&acc)[NV][4], float (&m)[2], float (&l)[2],
                                              bool (&nan)[2], const int (&rows)[2], const bool (&valid)[2], int j0,
                                              int t, int shift, const float* __restrict__ bias,
                                              const AttentionOffsets& off, const AttentionArgs& a) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < KT / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1, key = j0 + 8 * n + 2 * t + (e & 1);
      float x = s[n][e];
      const bool seen = valid[r] && key < a.lk && (!a.causal || key <= rows[r] + shift);
      if (seen && a.has_bias) x += bias[off.bias + i64(rows[r]) * a.bias_q_stride + i64(key) * a.bias_k_stride];
      if (seen && x != x) nan[r] = true;
      x = seen && x == x ? x : -INFINITY;  // masked (or NaN, recorded above)
      s[n][e] = x;
      mx[r] = fmaxf(mx[r], x);
    }
  float corr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float mn = fmaxf(m[r], mx[r]);
    // Nothing seen yet (mn = -inf): no rescaling, and every p after is 0.
    corr[r] = mn == -INFINITY ? 1.f : expf(m[r] - mn);
    m[r] = mn;
    l[r] *= corr[r];
  }
#pragma unroll
  for (int n = 0; n < NV; ++n) {
    acc[n][0] *= corr[0];
    acc[n][1] *= corr[0];
    acc[n][2] *= corr[1];
    acc[n][3] *= corr[1];
  }
}

// The tensor-core kernels' last step: each row's sum and NaN flag over its quad, then the
// output rows (acc's C fragments, features 8n + 2t + {0, 1}) divided by the sums.
template <int NV>
__device__ __forceinline__ void finish_rows(const float (&acc)[NV][4], float (&l)[2], bool (&nan)[2],
                                            const int (&rows)[2], const bool (&valid)[2], int t, float* __restrict__ o,
                                            const AttentionOffsets& off, const AttentionArgs& a) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    nan[r] = __shfl_xor_sync(0xffffffffu, int(nan[r]), 1) || nan[r];
    nan[r] = __shfl_xor_sync(0xffffffffu, int(nan[r]), 2) || nan[r];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!valid[r]) continue;
    // A row that saw no key divides 0 by 0: NaN, as the lowering's softmax of -inf gives.
    const float inv = nan[r] ? NAN : 1.f / l[r];
    float* orow = o + off.o + i64(rows[r]) * a.o_row;
#pragma unroll
    for (int n = 0; n < NV; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * n + 2 * t + e;
        if (col < a.dv) orow[col] = acc[n][2 * r + e] * inv;
      }
  }
}

// VEC: floats a copy (4: d, dv, the row and batch strides of k and v multiples of 4 and the
// pointers 16-byte aligned; else 1). K and V stream through two stages in dynamic shared
// memory: the copies of the next KT keys are in flight while the warps multiply this stage's
// (cp.async, one group a stage); TF32 rounding happens at the fragment loads.
template <int D, int VEC>
__global__ void __launch_bounds__(32 * kTcWarps) attention_tc_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                                      const float* __restrict__ v,
                                                                      const float* __restrict__ bias, float* __restrict__ o,
                                                                      AttentionArgs a) {
  constexpr int KT = kTcKeys<D>, KP = D + 4;
  extern __shared__ __align__(16) uint32_t tc_shared[];
  // stage s: K at tc_shared + (2 s) KT KP, V at tc_shared + (2 s + 1) KT KP.
  auto kst = [&](int s, int r, int c) -> uint32_t& { return tc_shared[(2 * s * KT + r) * KP + c]; };
  auto vst = [&](int s, int r, int c) -> uint32_t& { return tc_shared[((2 * s + 1) * KT + r) * KP + c]; };
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const AttentionOffsets off = attention_offsets(a, blockIdx.y);
  const int block_row = int(blockIdx.x) * kTcRows, row0 = block_row + 16 * warp;
  const int rows[2] = {row0 + g, row0 + g + 8};
  const bool valid[2] = {rows[0] < a.lq, rows[1] < a.lq};
  // Starts the copies of keys j0.. into stage s (zeros past lk and past d / dv).
  auto stage = [&](int s, int j0) {
    for (int e = int(threadIdx.x); e < KT * D / VEC; e += 32 * kTcWarps) {
      const int r = e / (D / VEC), c = (e % (D / VEC)) * VEC;
      const bool in = j0 + r < a.lk;
      copy_async<4 * VEC>(&kst(s, r, c), in && c < a.d ? k + off.k + i64(j0 + r) * a.k_row + c : k, in && c < a.d);
      copy_async<4 * VEC>(&vst(s, r, c), in && c < a.dv ? v + off.v + i64(j0 + r) * a.v_row + c : v, in && c < a.dv);
    }
    __pipeline_commit();
  };
  // q's fragments for this warp's 16 rows, every 8-column chunk of the head.
  uint32_t qf[D / 8][4];
#pragma unroll
  for (int c = 0; c < D / 8; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e & 1, col = 8 * c + t + (e >> 1) * 4;
      qf[c][e] = to_tf32(valid[r] && col < a.d ? q[off.q + i64(rows[r]) * a.q_row + col] * a.scale : 0.f);
    }
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  bool nan[2] = {false, false};
  // The last key row r may see under the causal mask is r + lk - lq; the block's and the
  // warp's last keys bound the stages they take part in.
  const int shift = a.lk - a.lq;
  const int block_last = a.causal ? min(a.lk - 1, block_row + kTcRows - 1 + shift) : a.lk - 1;
  const int warp_last = a.causal ? min(a.lk - 1, row0 + 15 + shift) : a.lk - 1;
  const bool warp_active = row0 < a.lq;
  if (block_last >= 0) stage(0, 0);
  for (int j0 = 0, s_now = 0; j0 <= block_last; j0 += KT, s_now ^= 1) {
    // The next stage's copies go out before this one's are awaited; the barrier at the end of
    // the previous trip freed its buffer.
    if (j0 + KT <= block_last) {
      stage(s_now ^ 1, j0 + KT);
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();
    if (warp_active && j0 <= warp_last) {
      float s[KT / 8][4];
#pragma unroll
      for (int n = 0; n < KT / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int c = 0; c < D / 8; ++c)
#pragma unroll
        for (int n = 0; n < KT / 8; ++n)
          mma_tf32(s[n], qf[c], to_tf32(__uint_as_float(kst(s_now, 8 * n + g, 8 * c + t))),
                   to_tf32(__uint_as_float(kst(s_now, 8 * n + g, 8 * c + t + 4))));
      // Bias, masks, and each row's maximum over this stage.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < KT / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1, key = j0 + 8 * n + 2 * t + (e & 1);
          float x = s[n][e];
          const bool seen = valid[r] && key < a.lk && (!a.causal || key <= rows[r] + shift);
          if (seen && a.has_bias) x += bias[off.bias + i64(rows[r]) * a.bias_q_stride + i64(key) * a.bias_k_stride];
          if (seen && x != x) nan[r] = true;
          x = seen && x == x ? x : -INFINITY;  // masked (or NaN, recorded above)
          s[n][e] = x;
          mx[r] = fmaxf(mx[r], x);
        }
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mn = fmaxf(m[r], mx[r]);
        // Nothing seen yet (mn = -inf): no rescaling, and every p below is 0.
        corr[r] = mn == -INFINITY ? 1.f : expf(m[r] - mn);
        m[r] = mn;
        l[r] *= corr[r];
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        acc[n][0] *= corr[0];
        acc[n][1] *= corr[0];
        acc[n][2] *= corr[1];
        acc[n][3] *= corr[1];
      }
#pragma unroll
      for (int n = 0; n < KT / 8; ++n) {
        uint32_t pf[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const float p = s[n][e] == -INFINITY ? 0.f : expf(s[n][e] - m[r]);
          l[r] += p;
          pf[(e & 1) * 2 + r] = to_tf32(p);  // c0 c1 c2 c3 -> a0 a2 a1 a3
        }
#pragma unroll
        for (int c = 0; c < D / 8; ++c)
          mma_tf32(acc[c], pf, to_tf32(__uint_as_float(vst(s_now, 8 * n + 2 * t, 8 * c + g))),
                   to_tf32(__uint_as_float(vst(s_now, 8 * n + 2 * t + 1, 8 * c + g))));
      }
    }
    __syncthreads();
  }
  // Each row's sum and NaN flag over its quad, then the normalized rows.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    nan[r] = __shfl_xor_sync(0xffffffffu, int(nan[r]), 1) || nan[r];
    nan[r] = __shfl_xor_sync(0xffffffffu, int(nan[r]), 2) || nan[r];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!valid[r]) continue;
    // A row that saw no key divides 0 by 0: NaN, as the lowering's softmax of -inf gives.
    const float inv = nan[r] ? NAN : 1.f / l[r];
    float* orow = o + off.o + i64(rows[r]) * a.o_row;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * n + 2 * t + e;
        if (col < a.dv) orow[col] = acc[n][2 * r + e] * inv;
      }
  }
}

// ---------------------------------------------------------------- attention in bf16
// RLX_CUDA_ATTENTION=bf16: attention of at least kTcMinRows query rows with both products
// as mma.sync m16n8k16 BF16 — q (scaled), k, v and the softmax weights rounded to bf16 (8-bit
// mantissas), f32 sums and an f32 online softmax: the precision of a bf16 model's attention
// under PyTorch, at twice the TF32 kernel's tensor-core rate and with each operand converted
// once, when it is staged, instead of at every fragment load. A block is 4 warps, 16 query
// rows each, of one (batch, head); it walks the keys kBfKeys at a time (to its causal limit).
//
// K is staged row-major in bf16 with rows kBfKPitch<D> apart (2 pitch ≡ 64 mod 128 bytes, so
// a quarter-warp's 16-byte loads fall in 8 different 16-byte bank groups); V is staged
// transposed, Vᵀ [D][keys] with rows kBfKeys + 8 apart (36 words ≡ 4 mod 32: the fragment
// loads of 4g + t hit 32 banks).
//
// Fragments (m16n8k16, g = lane / 4, t = lane % 4): A a0 (row g, k 2t..2t+1), a1 (g + 8,
// 2t..2t+1), a2 (g, 2t+8..2t+9), a3 (g + 8, 2t+8..2t+9); B b0 (k 2t..2t+1, n g), b1 (k
// 2t+8..2t+9, n g); C c0 c1 (g, 2t..2t+1), c2 c3 (g + 8, 2t..2t+1). In S = q kᵀ the k index
// is a feature, and both operands take the features of a 32-feature step in one shared order
// (as quant.cu's mma16_kernel does): lane t's slots 2t, 2t+1, 2t+8, 2t+9 of the step's first
// MMA are features 8t .. 8t+3 and of its second 8t+4 .. 8t+7, so a lane's B operand for a key
// is one 16-byte load of 8 features. In P v the k index is a key: the C fragments of two
// 8-key chunks of S are, packed in pairs, the A fragment of 16 keys in their own order, and
// Vᵀ's rows give B as 32-bit loads of two adjacent keys.
constexpr int kBfKeys = 64;
template <int D>
constexpr int kBfKPitch = D % 64 == 32 ? D : D + 32;
constexpr int kBfVPitch = kBfKeys + 8;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {  // (lo in the low half)
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// D: head size rounded up to 32, 64 or 128 (d and dv at most D). VEC: floats a global load
// when staging (4: d, dv, the row and batch strides of k and v multiples of 4 and the
// pointers 16-byte aligned; else 1).
template <int D, int VEC>
__global__ void __launch_bounds__(32 * kTcWarps) attention_bf16_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                                        const float* __restrict__ v,
                                                                        const float* __restrict__ bias, float* __restrict__ o,
                                                                        AttentionArgs a) {
  constexpr int KT = kBfKeys, KP = kBfKPitch<D>, VP = kBfVPitch;
  __shared__ __align__(16) __nv_bfloat16 ks[KT * KP];
  __shared__ __align__(16) __nv_bfloat16 vts[D * VP];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const AttentionOffsets off = attention_offsets(a, blockIdx.y);
  const int block_row = int(blockIdx.x) * kTcRows, row0 = block_row + 16 * warp;
  const int rows[2] = {row0 + g, row0 + g + 8};
  const bool valid[2] = {rows[0] < a.lq, rows[1] < a.lq};
  // q's A fragments: per 32-feature step, two MMAs' worth (features 8t..8t+3, then 8t+4..8t+7).
  uint32_t qf[D / 32][2][4];
#pragma unroll
  for (int st = 0; st < D / 32; ++st)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e & 1, col = 32 * st + 8 * t + 4 * h + 2 * (e >> 1);
        const float* qr = q + off.q + i64(rows[r]) * a.q_row;
        const float x0 = valid[r] && col < a.d ? qr[col] * a.scale : 0.f;
        const float x1 = valid[r] && col + 1 < a.d ? qr[col + 1] * a.scale : 0.f;
        qf[st][h][e] = pack_bf16(x0, x1);
      }
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  bool nan[2] = {false, false};
  const int shift = a.lk - a.lq;
  const int block_last = a.causal ? min(a.lk - 1, block_row + kTcRows - 1 + shift) : a.lk - 1;
  const int warp_last = a.causal ? min(a.lk - 1, row0 + 15 + shift) : a.lk - 1;
  const bool warp_active = row0 < a.lq;
  for (int j0 = 0; j0 <= block_last; j0 += KT) {
    // Stage keys j0 .. j0 + KT - 1: K row-major, V transposed, zeros past lk and past d / dv
    // (a zero weight times a value never read would still be NaN if the value were garbage).
    // Consecutive threads take consecutive keys for V (their 16-bit stores to one Vᵀ row
    // share words, not banks) and consecutive features for K.
    for (int e = int(threadIdx.x); e < KT * D / VEC; e += 32 * kTcWarps) {
      const int r = e / (D / VEC), c = (e % (D / VEC)) * VEC;
      const bool in = j0 + r < a.lk;
      if constexpr (VEC == 4) {
        float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
        if (in && c < a.d) f = __ldg(reinterpret_cast<const float4*>(k + off.k + i64(j0 + r) * a.k_row + c));
        *reinterpret_cast<uint2*>(&ks[r * KP + c]) = make_uint2(pack_bf16(f.x, f.y), pack_bf16(f.z, f.w));
      } else {
        ks[r * KP + c] = __float2bfloat16_rn(in && c < a.d ? k[off.k + i64(j0 + r) * a.k_row + c] : 0.f);
      }
    }
    for (int e = int(threadIdx.x); e < KT * D / VEC; e += 32 * kTcWarps) {
      const int r = e % KT, c = (e / KT) * VEC;
      const bool in = j0 + r < a.lk;
      if constexpr (VEC == 4) {
        float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
        if (in && c < a.dv) f = __ldg(reinterpret_cast<const float4*>(v + off.v + i64(j0 + r) * a.v_row + c));
        vts[(c + 0) * VP + r] = __float2bfloat16_rn(f.x);
        vts[(c + 1) * VP + r] = __float2bfloat16_rn(f.y);
        vts[(c + 2) * VP + r] = __float2bfloat16_rn(f.z);
        vts[(c + 3) * VP + r] = __float2bfloat16_rn(f.w);
      } else {
        vts[c * VP + r] = __float2bfloat16_rn(in && c < a.dv ? v[off.v + i64(j0 + r) * a.v_row + c] : 0.f);
      }
    }
    __syncthreads();
    if (warp_active && j0 <= warp_last) {
      float s[KT / 8][4];
#pragma unroll
      for (int n = 0; n < KT / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int st = 0; st < D / 32; ++st)
#pragma unroll
        for (int n = 0; n < KT / 8; ++n) {
          const uint4 kb = *reinterpret_cast<const uint4*>(&ks[(8 * n + g) * KP + 32 * st + 8 * t]);
          mma_bf16(s[n], qf[st][0][0], qf[st][0][1], qf[st][0][2], qf[st][0][3], kb.x, kb.y);
          mma_bf16(s[n], qf[st][1][0], qf[st][1][1], qf[st][1][2], qf[st][1][3], kb.z, kb.w);
        }
      softmax_stage<KT, D / 8>(s, acc, m, l, nan, rows, valid, j0, t, shift, bias, off, a);
#pragma unroll
      for (int j = 0; j < KT / 16; ++j) {
        float p[2][4];  // chunks 2j and 2j + 1 of S: keys 16j .. 16j + 15
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e >> 1;
            p[h][e] = s[2 * j + h][e] == -INFINITY ? 0.f : expf(s[2 * j + h][e] - m[r]);
            l[r] += p[h][e];
          }
        const uint32_t a0 = pack_bf16(p[0][0], p[0][1]), a1 = pack_bf16(p[0][2], p[0][3]);
        const uint32_t a2 = pack_bf16(p[1][0], p[1][1]), a3 = pack_bf16(p[1][2], p[1][3]);
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
          const __nv_bfloat16* vr = &vts[(8 * c + g) * VP + 16 * j + 2 * t];
          mma_bf16(acc[c], a0, a1, a2, a3, *reinterpret_cast<const uint32_t*>(vr),
                   *reinterpret_cast<const uint32_t*>(vr + 8));
        }
      }
    }
    __syncthreads();
  }
  finish_rows<D / 8>(acc, l, nan, rows, valid, t, o, off, a);
}

int padded_head(int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : 128; }

// What the kernel takes: f32; layout hld: q [.., Lq, D], k [.., Lk, D], v [.., Lk, Dv] with the
// same leading dimensions, or k's and v's 1 where q's are not (grouped-query attention's
// prefill, [B, KV, 1, S, D] against [B, KV, G, T, D]); lhd: q [.., Lq, H, D], k [.., Lk, H,
// D], v [.., Lk, H, Dv]; at most 4 batch dimensions (those before L, and H) of at most 65535
// (batch, head) pairs in all; D and Dv at most 128; a bias broadcasting to the scores
// [.., H, Lq, Lk]. Other cases (q broadcasting against k) run the lowering.
constexpr int64_t kRowKernelMaxWideRows = 256;
std::string attention_check(const ir::Node& n, const ir::Graph& g) {
  const Shape &q = g.type(n.inputs[0]).shape, &k = g.type(n.inputs[1]).shape, &v = g.type(n.inputs[2]).shape;
  const bool lhd = n.attrs.get_string("layout") == "lhd";
  if (std::string m = attention_operands_misfit(q, k, v, lhd); !m.empty() && (lhd || !attention_kv_broadcast(q, k, v)))
    return "attention on cuda: " + m;
  if (std::string m = attention_layout_misfit(q, k, v, lhd); !m.empty()) return "attention on cuda: " + m;
  if (q.back() > 128 || v.back() > 128) return "attention on cuda: head sizes of at most 128";
  if (q.back() < 1 || v.back() < 1) return "attention on cuda: empty heads";
  // Heads over 64 wide keep one lane a row, the f32 FMAs of one thread per query row: past a
  // few hundred rows the lowering's GEMMs are faster (Qwen3's prefill, 512 rows of 128-wide
  // heads: 3.2 ms against about 1 ms a layer on the H200). The tensor-core kernel is not so
  // bounded.
  const int64_t lq = q[q.size() - (lhd ? 3 : 2)];
  if (!tf32_allowed() && attention_kernel_setting() != AttentionKernel::Bf16 && (q.back() > 64 || v.back() > 64) &&
      lq >= kRowKernelMaxWideRows)
    return "attention on cuda: heads over 64 wide with " + std::to_string(kRowKernelMaxWideRows) +
           " or more query rows run as the lowering's products (RLX_CUDA_TF32=1 or RLX_CUDA_ATTENTION=bf16: on the "
           "tensor cores)";
  int64_t pairs = 1;  // the grid's second dimension: every dimension of q but L and D
  for (size_t d = 0, len = q.size() - (lhd ? 3 : 2); d + 1 < q.size(); ++d)
    if (d != len) pairs *= q[d];
  if (pairs > 65535) return "attention on cuda: at most 65535 (batch, head) pairs";
  if (n.inputs.size() == 4) {
    const Shape& b = g.type(n.inputs[3]).shape;
    if (b.size() > q.size()) return "attention on cuda: a bias of rank at most q's";
  }
  return "";
}

// Launches attention kernel K with `shared` bytes of dynamic shared memory, opting K in past
// the default 48 KiB the first time (one flag per instantiation, so per kernel).
template <auto K>
void launch_shared(dim3 grid, int threads, size_t shared, const float* q, const float* k, const float* v, const float* bias,
                   float* o, const AttentionArgs& a) {
  static std::once_flag once;
  std::call_once(once, [&] {
    check(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)), "attention: shared memory opt-in");
  });
  K<<<grid, threads, shared, stream()>>>(q, k, v, bias, o, a);
}

void attention(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor q = contiguous(in[0]), k = contiguous(in[1]), v = contiguous(in[2]);
  const Shape& qs = q.shape();
  const bool lhd = n.attrs.get_string("layout") == "lhd";
  AttentionArgs a;
  Tensor bias;
  if (in.size() == 4) bias = contiguous(in[3]);
  const i64 bh = attention_layout(a, qs, k.shape(), v.shape(), out[0].shape(), bias.defined() ? &bias.shape() : nullptr, lhd);
  double scale = n.attrs.get_float("scale");
  if (scale == 0.0) scale = 1.0 / std::sqrt(double(a.d));
  a.scale = float(scale);
  a.causal = n.attrs.get_string("mask") == "causal";
  if (out[0].numel() == 0) return;
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
  const float* bp = a.has_bias ? bias.data<float>() : nullptr;
  float* op = out[0].data<float>();
  // rows: query rows per block (kThreadsPerBlock / S for the kernel's S lanes per row).
  auto go = [&](auto kernel, int rows) {
    const dim3 grid(unsigned(ceil_div(a.lq, rows)), unsigned(bh));
    kernel<<<grid, kThreadsPerBlock, 0, stream()>>>(qp, kp, vp, bp, op, a);
  };
  const int kd = padded_head(a.d), kv = padded_head(a.dv);
  if (attention_kernel_setting() == AttentionKernel::Bf16 && a.lq >= kTcMinRows) {
    bool vec = a.d % 4 == 0 && a.dv % 4 == 0 && a.k_row % 4 == 0 && a.v_row % 4 == 0 &&
               reinterpret_cast<uintptr_t>(kp) % 16 == 0 && reinterpret_cast<uintptr_t>(vp) % 16 == 0;
    for (int dim = 0; dim < a.batch_dims; ++dim) vec = vec && a.k_stride[dim] % 4 == 0 && a.v_stride[dim] % 4 == 0;
    const dim3 grid(unsigned(ceil_div(a.lq, kTcRows)), unsigned(bh));
    auto by_width = [&](auto width) {
      constexpr int D = decltype(width)::value;
      if (vec) attention_bf16_kernel<D, 4><<<grid, 32 * kTcWarps, 0, stream()>>>(qp, kp, vp, bp, op, a);
      else attention_bf16_kernel<D, 1><<<grid, 32 * kTcWarps, 0, stream()>>>(qp, kp, vp, bp, op, a);
    };
    const int wide = std::max(kd, kv);
    if (wide == 32) by_width(std::integral_constant<int, 32>{});
    else if (wide == 64) by_width(std::integral_constant<int, 64>{});
    else by_width(std::integral_constant<int, 128>{});
  } else if (tf32_allowed() && a.lq >= kTcMinRows) {
    bool vec = a.d % 4 == 0 && a.dv % 4 == 0 && a.k_row % 4 == 0 && a.v_row % 4 == 0 &&
               reinterpret_cast<uintptr_t>(kp) % 16 == 0 && reinterpret_cast<uintptr_t>(vp) % 16 == 0;
    for (int dim = 0; dim < a.batch_dims; ++dim) vec = vec && a.k_stride[dim] % 4 == 0 && a.v_stride[dim] % 4 == 0;
    const dim3 grid(unsigned(ceil_div(a.lq, kTcRows)), unsigned(bh));
    const int wide = std::max(kd, kv);
    auto by_width = [&](auto width) {
      constexpr int D = decltype(width)::value;
      if (vec) launch_shared<attention_tc_kernel<D, 4>>(grid, 32 * kTcWarps, tc_shared_bytes<D>(), qp, kp, vp, bp, op, a);
      else launch_shared<attention_tc_kernel<D, 1>>(grid, 32 * kTcWarps, tc_shared_bytes<D>(), qp, kp, vp, bp, op, a);
    };
    if (wide == 32) by_width(std::integral_constant<int, 32>{});
    else if (wide == 64) by_width(std::integral_constant<int, 64>{});
    else by_width(std::integral_constant<int, 128>{});
  } else if (kd > 64 || kv > 64) {
    // 128-wide heads keep a lane a row: their registers are already full with q and the output.
    go(attention_kernel<128, 128, 1>, kThreadsPerBlock);
  } else if (const AttentionKernel choice = attention_kernel_setting();
             a.lk <= kTileKeys && choice != AttentionKernel::Lanes &&
             (choice == AttentionKernel::Tile || bh * ceil_div(a.lq, kTileRows) >= sm_count())) {
    const dim3 grid(unsigned(ceil_div(a.lq, kTileRows)), unsigned(bh));
    if (kd == 32 && kv == 32)
      launch_shared<attention_tile_kernel<32, 32>>(grid, kTileThreads, tile_shared_bytes<32, 32>(), qp, kp, vp, bp, op, a);
    else if (kd == 32)
      launch_shared<attention_tile_kernel<32, 64>>(grid, kTileThreads, tile_shared_bytes<32, 64>(), qp, kp, vp, bp, op, a);
    else
      launch_shared<attention_tile_kernel<64, 64>>(grid, kTileThreads, tile_shared_bytes<64, 64>(), qp, kp, vp, bp, op, a);
  } else {
    const int lanes = attention_lanes(bh * a.lq);
    auto with = [&](auto kd_tag) {
      constexpr int D = decltype(kd_tag)::value;
      switch (lanes) {
        case 1: go(attention_kernel<D, D, 1>, kThreadsPerBlock); break;
        case 2: go(attention_kernel<D, D, 2>, kThreadsPerBlock / 2); break;
        case 4: go(attention_kernel<D, D, 4>, kThreadsPerBlock / 4); break;
        default: go(attention_kernel<D, D, 8>, kThreadsPerBlock / 8); break;
      }
    };
    if (kd == 32 && kv == 32) with(std::integral_constant<int, 32>{});
    else with(std::integral_constant<int, 64>{});
  }
  check_launch("attention");
}

// ---------------------------------------------------------------- rotary_embedding

// A block per position row (b, t) of x [..., T, heads, D]: the row's D/2 angles, the
// lowering's f32 float(position) * inv_i, and their cosines and sines in f32 (rounded to T)
// are computed once into shared memory, then every head's feature pairs (i, i + D/2) become
// (x1 c - x2 s, x2 c + x1 s) — one kernel where the lowering runs four slice and
// concatenation copies and the elementwise products. (A thread per pair recomputing its
// angle, with 64-bit index divisions, was compute-bound: ~2× the row's bytes' time at a
// prefill's sizes.)
constexpr int kMaxRotaryHalf = 256;  // heads of up to 512 features
struct RotaryArgs {
  i64 rows = 0;
  int half = 0, heads = 0, t = 0;
  float inv[kMaxRotaryHalf] = {};
};

template <class T, class P>
__global__ void __launch_bounds__(256) rotary_kernel(const T* __restrict__ x, const P* __restrict__ pos, T* __restrict__ y,
                                                     RotaryArgs a) {
  __shared__ T cs[kMaxRotaryHalf], sn[kMaxRotaryHalf];
  const int pairs = a.heads * a.half;
  for (i64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int t = int(row % a.t);
    __syncthreads();  // (the previous row's values are no longer read)
    for (int i = int(threadIdx.x); i < a.half; i += int(blockDim.x)) {
      const float angle = float(pos[t]) * a.inv[i];
      // f32: cosf and sinf (within f32's tolerances). f64: the cosine and sine in f64 rounded
      // once to f32, as the reference device rounds the lowering's f32 cos and sin, since
      // cosf's last-ulp error would show at f64's tolerance.
      if constexpr (sizeof(T) == 4) {
        cs[i] = cosf(angle);
        sn[i] = sinf(angle);
      } else {
        cs[i] = T(float(cos(double(angle))));
        sn[i] = T(float(sin(double(angle))));
      }
    }
    __syncthreads();
    const T* xr = x + row * 2 * pairs;
    T* yr = y + row * 2 * pairs;
    for (int e = int(threadIdx.x); e < pairs; e += int(blockDim.x)) {
      const int h = e / a.half, i = e - h * a.half, at = 2 * h * a.half + i;
      const T c = cs[i], s = sn[i], x1 = xr[at], x2 = xr[at + a.half];
      yr[at] = x1 * c - x2 * s;
      yr[at + a.half] = x2 * c + x1 * s;
    }
  }
}

template <class T>
void rotary_embedding(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = contiguous(in[0]), pos = contiguous(in[1]);
  if (x.numel() == 0) return;
  const Shape& s = x.shape();
  RotaryArgs a;
  a.half = int(s.back() / 2);
  a.heads = int(s[s.size() - 2]);
  a.t = int(s[s.size() - 3]);
  a.rows = x.numel() / (2 * i64(a.half) * a.heads);
  const double theta = n.attrs.get_float("theta");
  for (int i = 0; i < a.half; ++i) a.inv[i] = rotary_inverse_frequency(theta, s.back(), i);
  const unsigned grid = unsigned(std::min<i64>(a.rows, kMaxGrid));
  if (pos.dtype() == DType::I64)
    rotary_kernel<T, long long><<<grid, 256, 0, stream()>>>(x.data<T>(), pos.data<long long>(), out[0].data<T>(), a);
  else
    rotary_kernel<T, int><<<grid, 256, 0, stream()>>>(x.data<T>(), pos.data<int>(), out[0].data<T>(), a);
  check_launch("rotary_embedding");
}

std::string rotary_check(const ir::Node& n, const ir::Graph& g) {
  const Shape& x = g.type(n.inputs[0]).shape;
  if (x.size() < 3 || x.back() % 2) return "rotary_embedding on cuda: x [..., T, heads, D], D even";
  if (x.back() / 2 > kMaxRotaryHalf) return "rotary_embedding on cuda: heads of at most 512 features";
  if ((x.back() > 0 && x[x.size() - 2] > INT_MAX / x.back()) || x[x.size() - 3] > INT_MAX)
    return "rotary_embedding on cuda: T and a position's heads x D below 2^31";
  return "";
}

// ---------------------------------------------------------------- grouped_query_attention (decoding)

// A query row (b, h, t) is split over the keys: blockIdx.y picks the row, blockIdx.x one of
// `splits` chunks of keys, so that a decoding step's few rows still fill the GPU (Qwen3-0.6B:
// 16 rows, 576 keys, 9 chunks). In a block, the warps take the chunk's keys in turns,
// kGqaKeys at a time (each lane holding features lane, lane + 32, ... of the head: coalesced
// rows of k and v, the dot product summed across the warp), each warp keeping an online
// softmax (running max m, sum l, output acc rescaled when m grows); the warps' (m, l, acc)
// are merged in shared memory. With several chunks each block writes its merged (acc, m, l)
// to scratch and the row's last block to finish (a per-row counter in device memory that it
// resets for the next launch) merges them and writes the row. One kernel where the lowering
// runs the scores' and p·v's batched products and the softmax's reductions and elementwise
// steps: a decoding step's attention is bound by its launches and by reading k and v once.
// Query head h reads key/value head h / (H / KV). Masked keys (causal, or a bias of -inf)
// add nothing; a row with every key masked is NaN (0 / 0), and so is a row with a NaN score,
// as the lowering's softmax gives.
constexpr int kGqaWarps = 8;
constexpr int kGqaKeys = 4;          // keys in flight per warp
constexpr int kGqaMaxQueries = 16;   // T: decoding's one token (or a few speculative ones)
constexpr int kGqaChunk = 64;        // keys per block, about (fewer blocks where there are many rows)
constexpr int kGqaCounters = 1 << 16;  // rows that can be split; more rows run unsplit
__device__ unsigned gqa_arrivals[kGqaCounters];  // zero at load; each row's last block re-zeroes its own

struct GqaArgs {
  int h = 0, t = 0, s = 0, d = 0, dv = 0, groups = 0;
  int splits = 1, chunk = 0;
  float scale = 1;
  bool causal = false, has_bias = false;
  i64 bias_stride[5] = {};  // over [B, KV, H / KV, T, S]; 0 where the bias broadcasts
};

template <int R>  // features per lane: D and Dv at most 32 R
__global__ void __launch_bounds__(32 * kGqaWarps) gqa_decode_kernel(const float* __restrict__ q,
                                                                    const float* __restrict__ k,
                                                                    const float* __restrict__ v,
                                                                    const float* __restrict__ bias,
                                                                    float* __restrict__ o, float* partial,
                                                                    GqaArgs a) {
  __shared__ float wm[kGqaWarps], wl[kGqaWarps];
  __shared__ float wacc[kGqaWarps][32 * R];
  __shared__ int any_nan, last_block;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const i64 row = blockIdx.y;  // ((b * H) + h) * T + t
  const int split = int(blockIdx.x);
  const int t = int(row % a.t);
  const i64 bh = row / a.t;
  const int h = int(bh % a.h);
  const i64 b = bh / a.h;
  const int kvh = h / a.groups, grp = h % a.groups;
  const i64 kv_row = b * (a.h / a.groups) + kvh;
  const float* kb = k + kv_row * a.s * a.d;
  const float* vb = v + kv_row * a.s * a.dv;
  i64 bias_base = 0;
  if (a.has_bias)
    bias_base = b * a.bias_stride[0] + kvh * a.bias_stride[1] + grp * a.bias_stride[2] + t * a.bias_stride[3];
  if (threadIdx.x == 0) any_nan = 0;
  float qr[R], acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    qr[r] = c < a.d ? q[row * a.d + c] * a.scale : 0.f;
    acc[r] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  bool nan = false;
  // This block's keys: its chunk, less those masked by causality (key j <= t + S - T).
  const int last = min((split + 1) * a.chunk, a.causal ? min(a.s, t + a.s - a.t + 1) : a.s) - 1;
  for (int j0 = split * a.chunk + warp * kGqaKeys; j0 <= last; j0 += kGqaWarps * kGqaKeys) {
    float kr[kGqaKeys][R], vr[kGqaKeys][R], sc[kGqaKeys];
#pragma unroll
    for (int u = 0; u < kGqaKeys; ++u) {
      const bool in = j0 + u <= last;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = lane + 32 * r;
        kr[u][r] = in && c < a.d ? kb[i64(j0 + u) * a.d + c] : 0.f;
        vr[u][r] = in && c < a.dv ? vb[i64(j0 + u) * a.dv + c] : 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kGqaKeys; ++u) {
      float p = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) p += qr[r] * kr[u][r];
      sc[u] = p;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < kGqaKeys; ++u) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], off);
    float mx = m;
#pragma unroll
    for (int u = 0; u < kGqaKeys; ++u) {
      if (j0 + u > last) {
        sc[u] = -INFINITY;
        continue;
      }
      if (a.has_bias) sc[u] += bias[bias_base + i64(j0 + u) * a.bias_stride[4]];
      if (sc[u] != sc[u]) {
        nan = true;
        sc[u] = -INFINITY;
      }
      mx = fmaxf(mx, sc[u]);
    }
    if (mx == -INFINITY) continue;  // every key so far masked
    const float corr = expf(m - mx);  // 0 while m is -inf
    l *= corr;
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] *= corr;
#pragma unroll
    for (int u = 0; u < kGqaKeys; ++u) {
      const float p = expf(sc[u] - mx);  // 0 for a masked key
      l += p;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += p * vr[u][r];
    }
    m = mx;
  }
  __syncthreads();  // any_nan is set
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
    if (nan) any_nan = 1;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) wacc[warp][lane + 32 * r] = acc[r];
  __syncthreads();
  // The block's (m, l, acc): warps whose keys were all masked add nothing.
  float bm = -INFINITY, bl = 0.f;
  for (int w = 0; w < kGqaWarps; ++w) bm = fmaxf(bm, wm[w]);
  for (int w = 0; w < kGqaWarps; ++w)
    if (wm[w] != -INFINITY) bl += wl[w] * expf(wm[w] - bm);
  if (a.splits == 1) {
    for (int c = int(threadIdx.x); c < a.dv; c += 32 * kGqaWarps) {
      float num = 0.f;
      for (int w = 0; w < kGqaWarps; ++w)
        if (wm[w] != -INFINITY) num += wacc[w][c] * expf(wm[w] - bm);
      o[row * a.dv + c] = any_nan ? NAN : num / bl;  // 0 / 0 when every key is masked
    }
    return;
  }
  // Several chunks: this block's part [acc.., m, l] (l NaN for a NaN score), then the last.
  float* mine = partial + (row * a.splits + split) * (a.dv + 2);
  for (int c = int(threadIdx.x); c < a.dv; c += 32 * kGqaWarps) {
    float num = 0.f;
    for (int w = 0; w < kGqaWarps; ++w)
      if (wm[w] != -INFINITY) num += wacc[w][c] * expf(wm[w] - bm);
    mine[c] = num;
  }
  if (threadIdx.x == 0) {
    mine[a.dv] = bm;
    mine[a.dv + 1] = any_nan ? NAN : bl;
  }
  __threadfence();  // the part is visible to every block before the arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) last_block = atomicAdd(&gqa_arrivals[row], 1u) == unsigned(a.splits - 1);
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  if (threadIdx.x == 0) gqa_arrivals[row] = 0;  // ready for the next launch
  const float* parts = partial + row * a.splits * (a.dv + 2);
  float rm = -INFINITY, rl = 0.f;
  bool rnan = false;
  for (int sp = 0; sp < a.splits; ++sp) rm = fmaxf(rm, __ldcg(parts + sp * (a.dv + 2) + a.dv));
  for (int sp = 0; sp < a.splits; ++sp) {
    const float pm = __ldcg(parts + sp * (a.dv + 2) + a.dv), pl = __ldcg(parts + sp * (a.dv + 2) + a.dv + 1);
    if (pl != pl) rnan = true;
    else if (pm != -INFINITY) rl += pl * expf(pm - rm);
  }
  for (int c = int(threadIdx.x); c < a.dv; c += 32 * kGqaWarps) {
    float num = 0.f;
    for (int sp = 0; sp < a.splits; ++sp) {
      const float pm = __ldcg(parts + sp * (a.dv + 2) + a.dv);
      if (pm != -INFINITY) num += __ldcg(parts + sp * (a.dv + 2) + c) * expf(pm - rm);
    }
    o[row * a.dv + c] = rnan ? NAN : num / rl;
  }
}

// What the kernel takes: f32; q [B, H, T, D] with T at most kGqaMaxQueries, D and Dv at
// most 128; a bias broadcasting to [B, KV, H / KV, T, S]. Longer query blocks (a prompt)
// run the lowering, whose batched products suit them.
std::string gqa_check(const ir::Node& n, const ir::Graph& g) {
  const Shape &q = g.type(n.inputs[0]).shape, &k = g.type(n.inputs[1]).shape, &v = g.type(n.inputs[2]).shape;
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return "grouped_query_attention on cuda: rank 4";
  if (q[2] > kGqaMaxQueries) return "grouped_query_attention on cuda: at most 16 queries per head (decoding)";
  if (q[3] > 128 || v[3] > 128) return "grouped_query_attention on cuda: head sizes of at most 128";
  if (k[2] > INT_MAX / 2) return "grouped_query_attention on cuda: fewer than 2^30 keys";
  if (q[0] * q[1] * q[2] > 65535) return "grouped_query_attention on cuda: at most 65535 query rows";
  for (ir::Value in : n.inputs)
    if (g.type(in).dtype != DType::F32) return "grouped_query_attention on cuda: every input f32";
  return "";
}

void grouped_query_attention(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor q = contiguous(in[0]), k = contiguous(in[1]), v = contiguous(in[2]);
  const Shape &qs = q.shape(), &ks = k.shape();
  GqaArgs a;
  a.h = int(qs[1]);
  a.t = int(qs[2]);
  a.d = int(qs[3]);
  a.s = int(ks[2]);
  a.dv = int(v.shape()[3]);
  a.groups = int(qs[1] / ks[1]);
  double scale = n.attrs.get_float("scale");
  if (scale == 0.0) scale = 1.0 / std::sqrt(double(a.d));
  a.scale = float(scale);
  a.causal = n.attrs.get_string("mask") == "causal";
  Tensor bias;
  if (in.size() == 4) {
    bias = contiguous(in[3]);
    a.has_bias = true;
    // Right-aligned against [B, KV, H / KV, T, S]; a dimension of 1 broadcasts (stride 0).
    const std::vector<int64_t> stride = broadcast_strides(bias.shape(), 5);
    std::copy(stride.begin(), stride.end(), a.bias_stride);
  }
  if (out[0].numel() == 0) return;
  const i64 rows = qs[0] * qs[1] * qs[2];
  // Chunks of about kGqaChunk keys, fewer where the rows alone fill the GPU several times.
  i64 splits = std::max<i64>(1, ceil_div(a.s, kGqaChunk));
  splits = std::min<i64>(splits, std::max<i64>(1, 4 * sm_count() / rows));
  if (rows > kGqaCounters) splits = 1;
  a.chunk = int(ceil_div(a.s, splits));
  a.splits = int(ceil_div(a.s, a.chunk));
  Scratch partial(a.splits > 1 ? size_t(rows * a.splits * (a.dv + 2)) * sizeof(float) : sizeof(float));
  const float* bp = a.has_bias ? bias.data<float>() : nullptr;
  auto go = [&](auto kernel) {
    kernel<<<dim3(unsigned(a.splits), unsigned(rows)), 32 * kGqaWarps, 0, stream()>>>(
        q.data<float>(), k.data<float>(), v.data<float>(), bp, out[0].data<float>(), partial.as<float>(), a);
  };
  const int widest = std::max(a.d, a.dv);
  if (widest <= 32) go(gqa_decode_kernel<1>);
  else if (widest <= 64) go(gqa_decode_kernel<2>);
  else go(gqa_decode_kernel<4>);
  check_launch("grouped_query_attention");
}

// layer_norm and softmax: the last axis only (softmax's axis attribute naming it).
std::string softmax_check(const ir::Node& n, const ir::Graph& g) {
  const int64_t rank = int64_t(g.type(n.inputs[0]).shape.size());
  const int64_t ax = n.attrs.get_int("axis");
  if (rank == 0 || (ax != -1 && ax != rank - 1)) return "softmax on cuda: the last axis only";
  if (g.type(n.inputs[0]).shape.back() > (int64_t(1) << 31) - 1) return "softmax on cuda: rows of at most 2^31 - 1";
  return "";
}
// layer_norm and rms_norm: a warp per row of the last axis.
std::string norm_check(const ir::Node& n, const ir::Graph& g) {
  const Shape& x = g.type(n.inputs[0]).shape;
  if (x.empty()) return n.op->name + " on cuda: rank at least 1";
  if (x.back() > (int64_t(1) << 31) - 1) return n.op->name + " on cuda: rows of at most 2^31 - 1";
  return "";
}

std::atomic<int> g_attention_lanes{-1};  // -1: not set (the environment decides)
std::atomic<int> g_attention_kernel{-1};

}  // namespace

int attention_lanes_setting() {
  if (int v = g_attention_lanes.load(); v >= 0) return v;
  static const int from_env = std::array{0, 1, 2, 4, 8}[size_t(env_choice("RLX_CUDA_ATTENTION_LANES", {"auto", "1", "2", "4", "8"}))];
  return from_env;
}

AttentionKernel attention_kernel_setting() {
  if (int v = g_attention_kernel.load(); v >= 0) return AttentionKernel(v);
  static const AttentionKernel from_env = AttentionKernel(env_choice("RLX_CUDA_ATTENTION", {"auto", "lanes", "tile", "bf16"}));
  return from_env;
}

void set_attention_kernel(AttentionKernel k) { g_attention_kernel.store(int(k)); }

void set_attention_lanes(int lanes) {
  if (lanes != 0 && lanes != 1 && lanes != 2 && lanes != 4 && lanes != 8)
    throw InputError("attention lanes: expected 0 (auto), 1, 2, 4 or 8, got " + std::to_string(lanes));
  g_attention_lanes.store(lanes);
}

// Auto: the fewest lanes a row that still give the call 256 threads per SM (every
// lane count stages all of K and V once per block, so more lanes mean more staging).
int attention_lanes(int64_t rows) {
  if (int v = attention_lanes_setting(); v > 0) return v;
  const int64_t want = int64_t(sm_count()) * 256;
  for (int s = 1; s < 8; s *= 2)
    if (rows * s >= want) return s;
  return 8;
}

void add_nn_kernels(KernelTable& t) {
  const DTypeSet f32_f64 = bit(DType::F32) | bit(DType::F64);
  t.add({"layer_norm", f32_f64, 0,
         [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           in[0].dtype() == DType::F64 ? layer_norm<double>(n, in, out) : layer_norm<float>(n, in, out);
         },
         norm_check});
  t.add({"rms_norm", f32_f64, 0,
         [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           in[0].dtype() == DType::F64 ? rms_norm<double>(n, in, out) : rms_norm<float>(n, in, out);
         },
         norm_check});
  t.add({"softmax", f32_f64, 0,
         [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           in[0].dtype() == DType::F64 ? softmax<double>(n, in, out) : softmax<float>(n, in, out);
         },
         softmax_check});
  t.add({"attention", bit(DType::F32), 0, attention, attention_check});
  t.add({"rotary_embedding", f32_f64, 0,
         [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           in[0].dtype() == DType::F64 ? rotary_embedding<double>(n, in, out) : rotary_embedding<float>(n, in, out);
         },
         rotary_check});
  t.add({"grouped_query_attention", bit(DType::F32), 0, grouped_query_attention, gqa_check});
}

}  // namespace rlx::cuda
