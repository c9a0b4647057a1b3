// layer_norm, rms_norm, softmax (last axis) and attention as native kernels. Their lowerings
// (src/ir/ops/nn.cpp) run as 3 to 8 kernels that each read and write the whole tensor — for
// attention the [.., Lq, Lk] scores five times over; these read their inputs once and write
// their result once (for rms_norm, a decoder's four norms per layer, the kernels saved are
// what counts: a batch-1 decode step's norms are a few KB each, and each kernel costs its
// launch). Each keeps the lowering's arithmetic (layer_norm: mean, then the mean of the
// squared deviations, then c * rsqrt(var + eps) * gamma + beta; rms_norm: x * rsqrt(mean(x^2)
// + eps) * gamma; softmax: exp(x - max) / sum), so they differ from it by the order of f32
// sums only. Their VJPs stay the ops' IR
// expressions.
#include <cfloat>
#include <cmath>

#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"
#include "devices/cuda/library.hpp"
#include "ir/graph.hpp"

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

// The scores' leading (batch) dimensions, at most kMaxBatchDims, and the bias's strides
// over them and over (query, key) — 0 where the bias broadcasts.
constexpr int kMaxBatchDims = 4;
struct AttentionArgs {
  int batch_dims = 0;
  i64 batch_shape[kMaxBatchDims] = {};
  i64 bias_batch_stride[kMaxBatchDims] = {};
  i64 bias_q_stride = 0, bias_k_stride = 0;
  int lq = 0, lk = 0, d = 0, dv = 0;
  float scale = 1;
  bool causal = false, has_bias = false;
};

constexpr int kQueriesPerBlock = 128;  // a thread per query row
constexpr int kKeysPerStage = 32;      // keys staged in shared memory at a time

// One thread per query row of one (batch, head): the scores against every key, one at a
// time, in an online softmax (running max m, running sum l, the output accumulated with
// weights exp(s - m) and rescaled when m grows), so the [Lq, Lk] scores never leave
// registers. K and V go through shared memory kKeysPerStage rows at a time, read by every
// thread of the block (broadcast). KD/KV: the head sizes rounded up to 32, 64 or 128.
// Masked keys (causal, or a bias of -inf) add nothing; a row with every key masked divides
// 0 by 0, NaN, as the lowering's softmax of a row of -inf does.
template <int KD, int KV>
__global__ void __launch_bounds__(kQueriesPerBlock) attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                                                     const float* __restrict__ v,
                                                                     const float* __restrict__ bias, float* __restrict__ o,
                                                                     AttentionArgs a) {
  __shared__ float ks[kKeysPerStage][KD];
  __shared__ float vs[kKeysPerStage][KV];
  const i64 bh = blockIdx.y;
  const int i = int(blockIdx.x) * kQueriesPerBlock + int(threadIdx.x);
  const bool active = i < a.lq;
  i64 bias_base = 0;
  if (a.has_bias) {
    i64 rest = bh;
    for (int dim = a.batch_dims - 1; dim >= 0; --dim) {
      const i64 idx = rest % a.batch_shape[dim];
      rest /= a.batch_shape[dim];
      bias_base += idx * a.bias_batch_stride[dim];
    }
    bias_base += i64(active ? i : 0) * a.bias_q_stride;
  }
  float qr[KD], acc[KV];
#pragma unroll
  for (int c = 0; c < KD; ++c) qr[c] = (active && c < a.d) ? q[(bh * a.lq + i) * a.d + c] * a.scale : 0.f;
#pragma unroll
  for (int c = 0; c < KV; ++c) acc[c] = 0.f;
  float m = -INFINITY, l = 0.f;
  bool nan = false;
  const float* kb = k + bh * i64(a.lk) * a.d;
  const float* vb = v + bh * i64(a.lk) * a.dv;
  // The last key row i may see under the causal mask (col <= row + lk - lq).
  const int last = a.causal ? min(a.lk - 1, i + a.lk - a.lq) : a.lk - 1;
  int block_last = a.lk - 1;
  if (a.causal) block_last = min(a.lk - 1, int(blockIdx.x) * kQueriesPerBlock + kQueriesPerBlock - 1 + a.lk - a.lq);
  for (int j0 = 0; j0 <= block_last; j0 += kKeysPerStage) {
    const int n = min(kKeysPerStage, a.lk - j0);
    __syncthreads();
    for (int e = int(threadIdx.x); e < kKeysPerStage * KD; e += kQueriesPerBlock) {
      const int r = e / KD, c = e % KD;
      ks[r][c] = (r < n && c < a.d) ? kb[i64(j0 + r) * a.d + c] : 0.f;
    }
    for (int e = int(threadIdx.x); e < kKeysPerStage * KV; e += kQueriesPerBlock) {
      const int r = e / KV, c = e % KV;
      vs[r][c] = (r < n && c < a.dv) ? vb[i64(j0 + r) * a.dv + c] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < n && j0 + r <= last; ++r) {
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < KD; ++c) s += qr[c] * ks[r][c];
      if (a.has_bias) s += bias[bias_base + i64(j0 + r) * a.bias_k_stride];
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
      for (int c = 0; c < KV; ++c) acc[c] += p * vs[r][c];
    }
  }
  if (!active) return;
  const float inv = nan ? NAN : 1.f / l;
  float* orow = o + (bh * a.lq + i) * a.dv;
#pragma unroll
  for (int c = 0; c < KV; ++c)
    if (c < a.dv) orow[c] = acc[c] * inv;
}

int padded_head(int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : 128; }

// What the kernel takes: f32; q [.., Lq, D], k [.., Lk, D], v [.., Lk, Dv] with the same
// leading dimensions (at most 4 of them), D and Dv at most 128; a bias broadcasting to the
// scores [.., Lq, Lk]. Other cases run the lowering.
std::string attention_check(const ir::Node& n, const ir::Graph& g) {
  const Shape &q = g.type(n.inputs[0]).shape, &k = g.type(n.inputs[1]).shape, &v = g.type(n.inputs[2]).shape;
  if (q.size() < 2 || q.size() > 2 + kMaxBatchDims) return "attention on cuda: q of rank 2 to 6";
  if (k.size() != q.size() || v.size() != q.size() || !std::equal(q.begin(), q.end() - 2, k.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()))
    return "attention on cuda: q, k and v with the same leading dimensions";
  if (q.back() > 128 || v.back() > 128) return "attention on cuda: head sizes of at most 128";
  if (q.back() < 1 || v.back() < 1) return "attention on cuda: empty heads";
  if (n.inputs.size() == 4) {
    const Shape& b = g.type(n.inputs[3]).shape;
    if (b.size() > q.size()) return "attention on cuda: a bias of rank at most q's";
  }
  return "";
}

void attention(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor q = contiguous(in[0]), k = contiguous(in[1]), v = contiguous(in[2]);
  const Shape& qs = q.shape();
  AttentionArgs a;
  a.batch_dims = int(qs.size()) - 2;
  a.lq = int(qs[qs.size() - 2]);
  a.d = int(qs.back());
  a.lk = int(k.shape()[k.shape().size() - 2]);
  a.dv = int(v.shape().back());
  double scale = n.attrs.get_float("scale");
  if (scale == 0.0) scale = 1.0 / std::sqrt(double(a.d));
  a.scale = float(scale);
  a.causal = n.attrs.get_string("mask") == "causal";
  i64 bh = 1;
  for (int dim = 0; dim < a.batch_dims; ++dim) a.batch_shape[dim] = qs[size_t(dim)], bh *= qs[size_t(dim)];
  Tensor bias;
  if (in.size() == 4) {
    bias = contiguous(in[3]);
    a.has_bias = true;
    // Right-aligned against the scores [batch.., Lq, Lk]; a dimension of 1 broadcasts (stride 0).
    const Shape& bs = bias.shape();
    const int r = int(bs.size()), full = a.batch_dims + 2;
    std::vector<i64> stride(size_t(full), 0);
    i64 st = 1;
    for (int dim = r - 1; dim >= 0; --dim) {
      const int at = full - r + dim;
      stride[size_t(at)] = bs[size_t(dim)] == 1 ? 0 : st;
      st *= bs[size_t(dim)];
    }
    for (int dim = 0; dim < a.batch_dims; ++dim) a.bias_batch_stride[dim] = stride[size_t(dim)];
    a.bias_q_stride = stride[size_t(full - 2)];
    a.bias_k_stride = stride[size_t(full - 1)];
  }
  if (out[0].numel() == 0) return;
  const dim3 grid(unsigned(ceil_div(a.lq, kQueriesPerBlock)), unsigned(bh));
  const float* bp = a.has_bias ? bias.data<float>() : nullptr;
  auto go = [&](auto kernel) {
    kernel<<<grid, kQueriesPerBlock, 0, stream()>>>(q.data<float>(), k.data<float>(), v.data<float>(), bp,
                                                    out[0].data<float>(), a);
  };
  const int kd = padded_head(a.d), kv = padded_head(a.dv);
  if (kd == 32 && kv == 32) go(attention_kernel<32, 32>);
  else if (kd <= 64 && kv <= 64) go(attention_kernel<64, 64>);
  else go(attention_kernel<128, 128>);
  check_launch("attention");
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

}  // namespace

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
}

}  // namespace rlx::cuda
