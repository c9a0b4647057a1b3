// The cuda device's hand-written kernels: reductions (sum prod max min argmax), the scan
// (cumsum), strided copies (permute broadcast_to slice concat pad, copy_strided), gather,
// scatter_add and the sources (iota, the counter-based RNG). Semantics are the reference
// device's (devices/reference/*.cpp), dtype for dtype:
//  - sums and products accumulate in u64 (integers, wrapping), double (f16 bf16 f32 f64)
//    or double2 (c64) and round once on store;
//  - max/min compare in i64 or double; NaN wins and stays;
//  - argmax: NaN is the max, the first index wins ties, an empty axis gives -1.
// Everything is deterministic: no float atomics, and every launch shape depends only on
// the operand shapes (never on the GPU), so a given program gives the same bits each run.
// Every launch goes on stream() and is checked with check_launch(). Two things rely on
// that one stream (graph recordings of it included): the single-launch reductions share
// a static partials buffer (g_partials), and gather/scatter_add read their index check
// back with one stream sync (skipped while a CUDA graph is being recorded).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"
#include "devices/cuda/kernels.hpp"

namespace rlx::cuda {
namespace {

using i64 = long long;
using u64 = unsigned long long;
using u32 = unsigned int;

constexpr unsigned kFullMask = 0xffffffffu;
// Threads resident on an H200 at full occupancy (132 SMs x 2048). A constant, not a
// device query, so that launch shapes (and hence summation orders) are the same on
// every GPU.
constexpr i64 kWaveThreads = 132 * 2048;

std::string node_suffix() {
  const std::string& n = current_node();
  return n.empty() ? std::string() : " (node " + n + ")";
}

// ------------------------------------------------------------------------------------
// Element types and their conversions (device side).
// ------------------------------------------------------------------------------------

// Accumulator arithmetic: u64 (wrapping integers), double, double2 (complex).
template <class W>
struct Arith;
template <>
struct Arith<u64> {
  __device__ static u64 zero() { return 0; }
  __device__ static u64 one() { return 1; }
  __device__ static u64 add(u64 a, u64 b) { return a + b; }
  __device__ static u64 mul(u64 a, u64 b) { return a * b; }
};
template <>
struct Arith<double> {
  __device__ static double zero() { return 0.0; }
  __device__ static double one() { return 1.0; }
  __device__ static double add(double a, double b) { return a + b; }
  __device__ static double mul(double a, double b) { return a * b; }
};
template <>
struct Arith<double2> {
  __device__ static double2 zero() { return make_double2(0.0, 0.0); }
  __device__ static double2 one() { return make_double2(1.0, 0.0); }
  __device__ static double2 add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }
  // No FMA contraction, as std::complex<double> on the host.
  __device__ static double2 mul(double2 a, double2 b) {
    return make_double2(__dsub_rn(__dmul_rn(a.x, b.x), __dmul_rn(a.y, b.y)),
                        __dadd_rn(__dmul_rn(a.x, b.y), __dmul_rn(a.y, b.x)));
  }
};

// Per storage type: W, the sum/prod accumulator; C, the max/min/argmax comparison type;
// wide/narrow convert to and from W (narrow rounds once); cmp/from_cmp to and from C;
// from_int and from_real store an i64 / double as the `cast` rules do.
template <class T>
struct NumInt {
  using W = u64;
  using C = i64;
  __device__ static W wide(T v) { return W(i64(v)); }
  __device__ static T narrow(W a) { return T(i64(a)); }  // two's-complement wrap
  __device__ static C cmp(T v) { return C(v); }
  __device__ static T from_cmp(C a) { return T(a); }
  __device__ static T from_int(i64 v) { return T(v); }
};
template <class T>
struct Num;
template <> struct Num<int8_t> : NumInt<int8_t> {};
template <> struct Num<uint8_t> : NumInt<uint8_t> {};
template <> struct Num<int32_t> : NumInt<int32_t> {};
template <> struct Num<int64_t> : NumInt<int64_t> {};

__device__ inline double to_double(__half v) { return double(__half2float(v)); }
__device__ inline double to_double(__nv_bfloat16 v) { return double(__bfloat162float(v)); }
__device__ inline double to_double(float v) { return double(v); }
__device__ inline double to_double(double v) { return v; }

template <class T>
__device__ T from_double(double a);
template <>
__device__ inline __half from_double<__half>(double a) {
  return __double2half(a);  // cvt.rn.f16.f64: one rounding
}
template <>
__device__ inline __nv_bfloat16 from_double<__nv_bfloat16>(double a) {
  return __double2bfloat16(a);  // cvt.rn.bf16.f64 on sm_90: one rounding
}
template <>
__device__ inline float from_double<float>(double a) {
  return __double2float_rn(a);
}
template <>
__device__ inline double from_double<double>(double a) {
  return a;
}

template <class T>
struct NumFloat {
  using W = double;
  using C = double;
  __device__ static W wide(T v) { return to_double(v); }
  __device__ static T narrow(W a) { return from_double<T>(a); }
  __device__ static C cmp(T v) { return to_double(v); }
  __device__ static T from_cmp(C a) { return from_double<T>(a); }
  __device__ static T from_int(i64 v) { return from_double<T>(__ll2double_rn(v)); }
  __device__ static T from_real(double v) { return from_double<T>(v); }
};
template <> struct Num<__half> : NumFloat<__half> {};
template <> struct Num<__nv_bfloat16> : NumFloat<__nv_bfloat16> {};
template <> struct Num<double> : NumFloat<double> {};
template <>
struct Num<float> : NumFloat<float> {
  __device__ static float from_int(i64 v) { return __ll2float_rn(v); }
};
template <>
struct Num<float2> {  // c64
  using W = double2;
  __device__ static W wide(float2 v) { return make_double2(double(v.x), double(v.y)); }
  __device__ static float2 narrow(W a) { return make_float2(__double2float_rn(a.x), __double2float_rn(a.y)); }
};
// Accumulators read back as themselves (the scan of chunk totals).
template <>
struct Num<u64> {
  using W = u64;
  __device__ static W wide(u64 v) { return v; }
  __device__ static u64 narrow(W a) { return a; }
};
template <>
struct Num<double2> {
  using W = double2;
  __device__ static W wide(double2 v) { return v; }
  __device__ static double2 narrow(W a) { return a; }
};

// Host side: calls f(T{}) with the device storage type of a numeric dtype.
template <class F>
void visit_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::I8: f(int8_t{}); return;
    case DType::U8: f(uint8_t{}); return;
    case DType::I32: f(int32_t{}); return;
    case DType::I64: f(int64_t{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F32: f(float{}); return;
    case DType::F64: f(double{}); return;
    case DType::C64: f(float2{}); return;
    default: break;
  }
  throw InternalError(std::string("cuda ") + op + ": unsupported dtype " + dtype_name(t));
}

// A trivially copyable element of each size, for the byte-moving kernels.
struct alignas(8) Bytes16 {
  u64 lo, hi;
};
template <class F>
void visit_esize(size_t esize, const char* op, F&& f) {
  switch (esize) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(u64{}); return;
    case 16: f(Bytes16{}); return;
    default: break;
  }
  throw InternalError(std::string("cuda ") + op + ": element size " + std::to_string(esize));
}

size_t element_size(const Tensor& t, const char* op) {
  if (t.dtype() == DType::I4) throw InternalError(std::string("cuda ") + op + ": i4 is not supported");
  return dtype_size(t.dtype());
}

// ------------------------------------------------------------------------------------
// Warp and block primitives.
// ------------------------------------------------------------------------------------

template <class C>
struct ArgPair {  // argmax's accumulator: a value and its index (-1: none yet)
  C v;
  i64 i;
};

__device__ inline u64 shfl_down(u64 v, int o) { return __shfl_down_sync(kFullMask, v, o); }
__device__ inline i64 shfl_down(i64 v, int o) { return __shfl_down_sync(kFullMask, v, o); }
__device__ inline double shfl_down(double v, int o) { return __shfl_down_sync(kFullMask, v, o); }
__device__ inline double2 shfl_down(double2 v, int o) {
  return make_double2(__shfl_down_sync(kFullMask, v.x, o), __shfl_down_sync(kFullMask, v.y, o));
}
template <class C>
__device__ inline ArgPair<C> shfl_down(ArgPair<C> v, int o) {
  ArgPair<C> r;
  r.v = shfl_down(v.v, o);
  r.i = shfl_down(v.i, o);
  return r;
}
__device__ inline u64 shfl_idx(u64 v, int l) { return __shfl_sync(kFullMask, v, l); }
__device__ inline double shfl_idx(double v, int l) { return __shfl_sync(kFullMask, v, l); }
__device__ inline double2 shfl_idx(double2 v, int l) {
  return make_double2(__shfl_sync(kFullMask, v.x, l), __shfl_sync(kFullMask, v.y, l));
}
__device__ inline u64 shfl_up(u64 v, int o) { return __shfl_up_sync(kFullMask, v, o); }
__device__ inline double shfl_up(double v, int o) { return __shfl_up_sync(kFullMask, v, o); }
__device__ inline double2 shfl_up(double2 v, int o) {
  return make_double2(__shfl_up_sync(kFullMask, v.x, o), __shfl_up_sync(kFullMask, v.y, o));
}

// Combines v over the block (blockDim.x a multiple of 32, at most 1024) in a fixed tree
// order; the result is valid in thread 0. Ends with a barrier so it may be called again.
template <class Op>
__device__ typename Op::A block_reduce(typename Op::A v) {
  using A = typename Op::A;
  __shared__ A part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, shfl_down(v, o));
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? part[lane] : Op::identity();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, shfl_down(v, o));
  }
  __syncthreads();
  return v;
}


// ------------------------------------------------------------------------------------
// Reductions. The operand is described as M rows of K elements: row m starts at
// view_offset(kept, m) (kept: the kept dims, collapsed, with x's strides) and its
// elements are sK apart. Ops: identity, load (element k of a row), combine (a is the
// earlier operand), store.
// ------------------------------------------------------------------------------------

template <class T>
struct SumOp {
  using In = T;
  using A = typename Num<T>::W;
  using Out = T;
  __device__ static A identity() { return Arith<A>::zero(); }
  __device__ static A load(T v, i64) { return Num<T>::wide(v); }
  __device__ static A combine(A a, A b) { return Arith<A>::add(a, b); }
  __device__ static Out store(A a) { return Num<T>::narrow(a); }
};
template <class T>
struct ProdOp {
  using In = T;
  using A = typename Num<T>::W;
  using Out = T;
  __device__ static A identity() { return Arith<A>::one(); }
  __device__ static A load(T v, i64) { return Num<T>::wide(v); }
  __device__ static A combine(A a, A b) { return Arith<A>::mul(a, b); }
  __device__ static Out store(A a) { return Num<T>::narrow(a); }
};

__device__ inline bool is_nan(i64) { return false; }
__device__ inline bool is_nan(double v) { return v != v; }
__device__ inline i64 lowest(i64) { return std::numeric_limits<i64>::min(); }
__device__ inline i64 highest(i64) { return std::numeric_limits<i64>::max(); }
__device__ inline double lowest(double) { return __longlong_as_double(0xfff0000000000000ll); }  // -inf
__device__ inline double highest(double) { return __longlong_as_double(0x7ff0000000000000ll); }  // +inf

template <class T, bool Greater>
struct MaxMinOp {
  using In = T;
  using C = typename Num<T>::C;
  using A = C;
  using Out = T;
  __device__ static A identity() { return Greater ? lowest(C()) : highest(C()); }
  __device__ static A load(T v, i64) { return Num<T>::cmp(v); }
  // NaN wins and then stays; ties keep the earlier operand.
  __device__ static A combine(A a, A b) {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return (Greater ? b > a : b < a) ? b : a;
  }
  __device__ static Out store(A a) { return Num<T>::from_cmp(a); }
};

template <class T>
struct ArgMaxOp {
  using In = T;
  using C = typename Num<T>::C;
  using A = ArgPair<C>;
  using Out = int64_t;
  __device__ static A identity() {
    A r;
    r.v = C();
    r.i = -1;
    return r;
  }
  __device__ static A load(T v, i64 k) {
    A r;
    r.v = Num<T>::cmp(v);
    r.i = k;
    return r;
  }
  // NaN is the max; among equal values (or NaNs) the smaller index wins. Independent of
  // the order the pairs are combined in.
  __device__ static A combine(A a, A b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an != bn) return an ? a : b;
    if (!an) {
      if (a.v > b.v) return a;
      if (b.v > a.v) return b;
    }
    return a.i <= b.i ? a : b;
  }
  __device__ static Out store(A a) { return Out(a.i); }
};

// 16 bytes of a row as elements (the row pointer 16-byte aligned).
template <class T>
__device__ inline void load16(const T* p, T (&e)[16 / sizeof(T)]) {
  const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
  memcpy(&e[0], &r, 16);
}

// Partials of the single-launch reductions (few rows): every kernel of this file runs
// on the one stream(), so two launches never use them at the same time. g_rowcount[m]
// counts the blocks of row m that are done; the last one combines the row and resets it.
constexpr i64 kStaticPartials = 2048;
__device__ double2 g_partials[kStaticPartials];  // 16 bytes each: the largest accumulator
__device__ unsigned g_rowcount[kStaticPartials];

// Loads through L2 (partials written by other blocks of the same launch).
__device__ inline u64 load_cg(const u64* p) { return __ldcg(p); }
__device__ inline i64 load_cg(const i64* p) { return __ldcg(p); }
__device__ inline double load_cg(const double* p) { return __ldcg(p); }
__device__ inline double2 load_cg(const double2* p) { return __ldcg(p); }
template <class C>
__device__ inline ArgPair<C> load_cg(const ArgPair<C>* p) {
  ArgPair<C> r;
  r.v = __ldcg(&p->v);
  r.i = __ldcg(&p->i);
  return r;
}

// Blocks over rows: block b handles part bx = b % nbx of row m = b / nbx (threads take
// elements k = bx*blockDim + tid + j*nbx*blockDim). With nbx == 1 the block writes
// out[m]; otherwise partial[b], combined by reduce_finish, or with `fused` (M * nbx <=
// kStaticPartials) by the row's last block in the same launch (partials in
// g_partials). Contiguous rows (sK == 1) that start 16-byte aligned are read 16 bytes at
// a time, two loads in flight.
template <class Op>
__global__ void __launch_bounds__(256) reduce_blocks(const typename Op::In* __restrict__ x, View kept, i64 M, i64 K,
                                                     i64 sK, int nbx, typename Op::A* __restrict__ partial,
                                                     typename Op::Out* __restrict__ out, bool fused) {
  using T = typename Op::In;
  using A = typename Op::A;
  constexpr int V = int(16 / sizeof(T));
  const i64 total = M * nbx;
  const i64 step = i64(nbx) * blockDim.x;
  for (i64 b = blockIdx.x; b < total; b += gridDim.x) {
    const i64 m = b / nbx;
    const int bx = int(b - m * nbx);
    const T* row = x + view_offset(kept, m);
    A acc = Op::identity();
    const i64 k0 = i64(bx) * blockDim.x + threadIdx.x;
    if (sK == 1 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
      const i64 nv = K / V;  // whole 16-byte vectors
      i64 v = k0;
      for (; v + step < nv; v += 2 * step) {
        T e0[V], e1[V];
        load16(row + v * V, e0);
        load16(row + (v + step) * V, e1);
#pragma unroll
        for (int j = 0; j < V; ++j) acc = Op::combine(acc, Op::load(e0[j], v * V + j));
#pragma unroll
        for (int j = 0; j < V; ++j) acc = Op::combine(acc, Op::load(e1[j], (v + step) * V + j));
      }
      if (v < nv) {
        T e0[V];
        load16(row + v * V, e0);
#pragma unroll
        for (int j = 0; j < V; ++j) acc = Op::combine(acc, Op::load(e0[j], v * V + j));
      }
      for (i64 k = nv * V + k0; k < K; k += step) acc = Op::combine(acc, Op::load(row[k], k));
    } else {
      for (i64 k = k0; k < K; k += step) acc = Op::combine(acc, Op::load(row[k * sK], k));
    }
    acc = block_reduce<Op>(acc);
    if (fused) {
      static_assert(sizeof(A) <= sizeof(double2) && alignof(A) <= alignof(double2));
      A* part = reinterpret_cast<A*>(g_partials);
      __shared__ bool last;
      if (threadIdx.x == 0) {
        part[b] = acc;
        __threadfence();
        last = atomicAdd(&g_rowcount[m], 1u) == unsigned(nbx - 1);
      }
      __syncthreads();
      if (last) {
        __threadfence();
        A r = Op::identity();
        for (int j = threadIdx.x; j < nbx; j += blockDim.x) r = Op::combine(r, load_cg(part + m * nbx + j));
        r = block_reduce<Op>(r);
        if (threadIdx.x == 0) {
          out[m] = Op::store(r);
          g_rowcount[m] = 0;
        }
      }
    } else if (threadIdx.x == 0) {
      if (partial)
        partial[b] = acc;
      else
        out[m] = Op::store(acc);
    }
  }
}

// A warp per row (rows of up to a few thousand elements, many rows): lanes stride the
// row (16-byte loads when contiguous and aligned), then a shuffle tree; no shared
// memory or barriers.
template <class Op>
__global__ void __launch_bounds__(256) reduce_warps(const typename Op::In* __restrict__ x, View kept, i64 M, i64 K,
                                                    i64 sK, typename Op::Out* __restrict__ out) {
  using T = typename Op::In;
  using A = typename Op::A;
  constexpr int V = int(16 / sizeof(T));
  const int lane = threadIdx.x & 31;
  const i64 nwarps = (i64(gridDim.x) * blockDim.x) >> 5;
  for (i64 m = (i64(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; m < M; m += nwarps) {
    const T* row = x + view_offset(kept, m);
    A acc = Op::identity();
    if (sK == 1 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
      const i64 nv = K / V;
#pragma unroll 2
      for (i64 v = lane; v < nv; v += 32) {
        T e[V];
        load16(row + v * V, e);
#pragma unroll
        for (int j = 0; j < V; ++j) acc = Op::combine(acc, Op::load(e[j], v * V + j));
      }
      for (i64 k = nv * V + lane; k < K; k += 32) acc = Op::combine(acc, Op::load(row[k], k));
    } else {
#pragma unroll 4
      for (i64 k = lane; k < K; k += 32) acc = Op::combine(acc, Op::load(row[k * sK], k));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc = Op::combine(acc, shfl_down(acc, o));
    if (lane == 0) out[m] = Op::store(acc);
  }
}

// One thread per (row, split): thread t = s*M + m reduces elements [s*chunk, (s+1)*chunk)
// of row m (adjacent threads take adjacent rows: coalesced when the rows are adjacent in
// memory, i.e. reductions over an outer axis). splits == 1 writes out[m]; otherwise
// partial[m*splits + s].
template <class Op>
__global__ void __launch_bounds__(256) reduce_threads(const typename Op::In* __restrict__ x, View kept, i64 M, i64 K,
                                                      i64 sK, i64 splits, i64 chunk,
                                                      typename Op::A* __restrict__ partial,
                                                      typename Op::Out* __restrict__ out) {
  using T = typename Op::In;
  using A = typename Op::A;
  const i64 total = M * splits;
  for (i64 t = i64(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += i64(gridDim.x) * blockDim.x) {
    const i64 s = t / M, m = t - s * M;
    const T* p = x + view_offset(kept, m);
    const i64 k0 = s * chunk, k1 = min(K, k0 + chunk);
    A acc = Op::identity();
#pragma unroll 4
    for (i64 k = k0; k < k1; ++k) acc = Op::combine(acc, Op::load(p[k * sK], k));
    if (partial)
      partial[m * splits + s] = acc;
    else
      out[m] = Op::store(acc);
  }
}

// Second pass: block per row combines the row's n partials.
template <class Op>
__global__ void __launch_bounds__(256) reduce_finish(const typename Op::A* __restrict__ partial, i64 M, int n,
                                                     typename Op::Out* __restrict__ out) {
  using A = typename Op::A;
  for (i64 m = blockIdx.x; m < M; m += gridDim.x) {
    A acc = Op::identity();
    for (int j = threadIdx.x; j < n; j += blockDim.x) acc = Op::combine(acc, partial[m * n + j]);
    acc = block_reduce<Op>(acc);
    if (threadIdx.x == 0) out[m] = Op::store(acc);
  }
}

// The reduction's geometry: M rows of K elements, sK apart, rows at view_offset(kept, m).
struct Rows {
  const void* x = nullptr;
  View kept;
  i64 M = 1, K = 1, sK = 1;
};

// Design: rows that are contiguous and not tiny (and any problem with few rows) go to
// reduce_blocks: full reductions and last-axis sums get ~one wave of 256-thread blocks
// split over the rows and 16-byte loads; the row's last block combines the partials in
// the same launch (no scratch) or, above kStaticPartials partials, reduce_finish does.
// Measured on an H200: f32/f64 full sums of 1e8 elements ~4.1-4.2 TB/s, of 1e6 ~6 us.
// Many contiguous rows of 17..4096 elements take a warp each (reduce_warps).
// Many short or strided rows (outer-axis reductions) go to reduce_threads (~2.1 TB/s
// for column sums), split along K when there are too few rows to fill the GPU. Reduced
// dims that do not collapse to one strided dim cost an extra copy of x.
template <class Op>
void run_reduce(const Rows& r, void* out_p, const char* name) {
  using T = typename Op::In;
  using A = typename Op::A;
  using Out = typename Op::Out;
  const T* x = static_cast<const T*>(r.x);
  Out* out = static_cast<Out*>(out_p);
  const i64 M = r.M, K = r.K;
  if (M == 0) return;
  if (r.sK == 1 && K > 16 && K <= 4096 && M >= 1024) {
    reduce_warps<Op><<<grid_for(M, 8), 256, 0, stream()>>>(x, r.kept, M, K, r.sK, out);
    check_launch(name);
    return;
  }
  if ((r.sK == 1 && K > 16) || M < 32) {
    const int bd = K <= 64 ? 32 : K <= 256 ? 64 : K <= 1024 ? 128 : 256;
    const i64 want = ceil_div(kWaveThreads / bd, M);  // blocks per row for one full wave
    const i64 most = ceil_div(K, i64(bd) * 16);       // keep >= ~16 elements per thread
    const int nbx = int(std::clamp<i64>(std::min(want, most), 1, 1024));
    const i64 total = M * nbx;
    const unsigned grid = unsigned(std::min(total, kMaxGrid));
    if (nbx == 1 || total <= kStaticPartials) {  // one launch
      reduce_blocks<Op><<<grid, bd, 0, stream()>>>(x, r.kept, M, K, r.sK, nbx, nullptr, out, nbx > 1);
      check_launch(name);
      return;
    }
    Scratch part(size_t(total) * sizeof(A));
    reduce_blocks<Op><<<grid, bd, 0, stream()>>>(x, r.kept, M, K, r.sK, nbx, part.as<A>(), out, false);
    check_launch(name);
    const int fbd = nbx <= 64 ? 32 : nbx <= 256 ? 128 : 256;
    reduce_finish<Op><<<unsigned(std::min(M, kMaxGrid)), fbd, 0, stream()>>>(part.as<A>(), M, nbx, out);
    check_launch(name);
    return;
  }
  i64 splits = 1, chunk = K;
  if (K > 0) {
    splits = std::clamp<i64>(ceil_div(kWaveThreads, M), 1, std::max<i64>(1, K / 64));
    chunk = ceil_div(K, splits);
    splits = ceil_div(K, chunk);
  }
  const i64 total = M * splits;
  if (splits == 1) {
    reduce_threads<Op><<<grid_for(total, 256), 256, 0, stream()>>>(x, r.kept, M, K, r.sK, 1, chunk, nullptr, out);
    check_launch(name);
    return;
  }
  Scratch part(size_t(total) * sizeof(A));
  reduce_threads<Op><<<grid_for(total, 256), 256, 0, stream()>>>(x, r.kept, M, K, r.sK, splits, chunk, part.as<A>(),
                                                                 out);
  check_launch(name);
  reduce_finish<Op><<<unsigned(std::min(M, kMaxGrid)), 32, 0, stream()>>>(part.as<A>(), M, int(splits), out);
  check_launch(name);
}

struct Dim {
  i64 n, s;
};

// Drops extent-1 dims and merges neighbours that are contiguous with each other.
std::vector<Dim> merge_dims(const std::vector<Dim>& in) {
  std::vector<Dim> r;
  for (const Dim& d : in) {
    if (d.n == 1) continue;
    if (!r.empty() && r.back().s == d.s * d.n)
      r.back() = {r.back().n * d.n, d.s};
    else
      r.push_back(d);
  }
  return r;
}

View view_from(const std::vector<Dim>& dims) {
  View v;
  v.rank = int32_t(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    v.shape[d] = dims[d].n;
    v.strides[d] = dims[d].s;
  }
  return v;
}

// x's elements as rows: kept dims first, reduced dims last. When the reduced dims do
// not collapse to one strided dim, x is copied (kept-major, reduced-minor) into `copy`.
Rows make_rows(const Tensor& x, const std::vector<bool>& red, std::optional<Scratch>& copy) {
  const View v = view_of(x);
  std::vector<Dim> kept, rd;
  for (int d = 0; d < v.rank; ++d) (red[size_t(d)] ? rd : kept).push_back({v.shape[d], v.strides[d]});
  kept = merge_dims(kept);
  std::vector<Dim> rdm = merge_dims(rd);
  Rows r;
  r.x = x.raw();
  r.M = 1;
  for (const Dim& d : kept) r.M *= d.n;
  r.K = 1;
  for (const Dim& d : rdm) r.K *= d.n;
  if (rdm.size() <= 1) {
    r.kept = view_from(kept);
    r.sK = rdm.empty() ? 1 : rdm[0].s;
    return r;
  }
  // Copy into [M, K] row-major.
  std::vector<Dim> all = kept;
  all.insert(all.end(), rdm.begin(), rdm.end());
  const View pv = view_from(all);
  const size_t es = dtype_size(x.dtype());
  const i64 n = r.M * r.K;
  copy.emplace(size_t(std::max<i64>(n, 1)) * es);
  if (n > 0) copy_strided(x.raw(), pv, copy->get(), es);
  r.x = copy->get();
  r.kept = view_from(r.M == 1 ? std::vector<Dim>{} : std::vector<Dim>{{r.M, r.K}});
  r.sK = 1;
  return r;
}

// ------------------------------------------------------------------------------------
// Strided copies.
// ------------------------------------------------------------------------------------

struct CopyView {  // a shape with source and destination strides (elements)
  int32_t rank = 0;
  i64 shape[kMaxRank] = {};
  i64 ss[kMaxRank] = {};
  i64 ds[kMaxRank] = {};
};

// Each warp copies 128 consecutive elements per step, lane l taking elements l, l+32,
// l+64, l+96 (coalesced): one index decomposition per thread and step, then increments
// along the last dim while it does not wrap. U: u32 when every index and offset fits.
template <class E, class U>
__global__ void __launch_bounds__(256) copy_kernel(const E* __restrict__ src, E* __restrict__ dst, CopyView v, U n) {
  using S = std::make_signed_t<U>;
  const int last = v.rank - 1;
  const U nl = U(v.shape[last]);
  const S sl = S(v.ss[last]) * 32, dl = S(v.ds[last]) * 32;
  const U lane = threadIdx.x & 31;
  const U nwarps = (U(gridDim.x) * blockDim.x) >> 5;
  auto locate = [&](U i, S& so, S& dof, U& il) {
    U rem = i;
    so = 0;
    dof = 0;
    for (int d = last; d > 0; --d) {
      const U s = U(v.shape[d]);
      const U q = rem / s;
      const U r = rem - q * s;
      if (d == last) il = r;
      so += S(r) * S(v.ss[d]);
      dof += S(r) * S(v.ds[d]);
      rem = q;
    }
    if (last == 0) il = rem;
    so += S(rem) * S(v.ss[0]);
    dof += S(rem) * S(v.ds[0]);
  };
  for (U w0 = ((U(blockIdx.x) * blockDim.x + threadIdx.x) >> 5) * 128; w0 < n; w0 += nwarps * 128) {
    U i = w0 + lane;
    if (i >= n) continue;
    S so, dof;
    U il = 0;
    locate(i, so, dof, il);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      dst[dof] = src[so];
      i += 32;
      if (r == 3 || i >= n) break;
      il += 32;
      if (il < nl) {
        so += sl;
        dof += dl;
      } else {
        locate(i, so, dof, il);
      }
    }
  }
}

// Transpose-like copies: the destination's last dim (stride 1) and dim p, the source's
// unit-stride dim, in 32x32 tiles through shared memory so both sides are coalesced.
template <class E>
__global__ void __launch_bounds__(256) copy_tiled(const E* __restrict__ src, E* __restrict__ dst, CopyView v, int p,
                                                  i64 tiles_l, i64 tiles_p, i64 nblocks) {
  __shared__ E tile[32][33];
  const int last = v.rank - 1;
  const i64 nl = v.shape[last], np = v.shape[p];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (i64 b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const i64 tl = b % tiles_l;
    i64 r = b / tiles_l;
    const i64 tp = r % tiles_p;
    r /= tiles_p;
    i64 so = 0, dof = 0;
    for (int d = last - 1; d >= 0; --d) {
      if (d == p) continue;
      const i64 q = r / v.shape[d];
      const i64 ix = r - q * v.shape[d];
      so += ix * v.ss[d];
      dof += ix * v.ds[d];
      r = q;
    }
    const i64 l0 = tl * 32, p0 = tp * 32;
    for (int yy = ty; yy < 32; yy += 8) {
      const i64 pi = p0 + tx, li = l0 + yy;
      if (pi < np && li < nl) tile[yy][tx] = src[so + pi * v.ss[p] + li * v.ss[last]];
    }
    __syncthreads();
    for (int yy = ty; yy < 32; yy += 8) {
      const i64 li = l0 + tx, pi = p0 + yy;
      if (pi < np && li < nl) dst[dof + pi * v.ds[p] + li] = tile[tx][yy];
    }
    __syncthreads();
  }
}

template <class E>
__global__ void __launch_bounds__(256) fill_kernel(E* __restrict__ dst, E value, i64 n) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) dst[i] = value;
}

i64 max_offset(const CopyView& v, const i64* strides) {
  i64 m = 0;
  for (int d = 0; d < v.rank; ++d) m += (v.shape[d] - 1) * (strides[d] < 0 ? -strides[d] : strides[d]);
  return m;
}

// dst (strides vd) = src (strides vs) over vs's shape, elements of esize bytes.
void copy_view(const void* src, const View& vs, void* dst, const View& vd, size_t esize) {
  CopyView c;
  i64 n = 1;
  for (int d = 0; d < vs.rank; ++d) {
    n *= vs.shape[d];
    if (vs.shape[d] == 1) continue;
    if (c.rank > 0 && c.ss[c.rank - 1] == vs.strides[d] * vs.shape[d] &&
        c.ds[c.rank - 1] == vd.strides[d] * vs.shape[d]) {
      c.shape[c.rank - 1] *= vs.shape[d];
      c.ss[c.rank - 1] = vs.strides[d];
      c.ds[c.rank - 1] = vd.strides[d];
    } else {
      c.shape[c.rank] = vs.shape[d];
      c.ss[c.rank] = vs.strides[d];
      c.ds[c.rank] = vd.strides[d];
      ++c.rank;
    }
  }
  if (n == 0) return;
  if (c.rank == 0) {
    check(cudaMemcpyAsync(dst, src, esize, cudaMemcpyDeviceToDevice, stream()), "copy of one element");
    return;
  }
  if (c.rank == 1 && c.ss[0] == 1 && c.ds[0] == 1) {
    check(cudaMemcpyAsync(dst, src, size_t(n) * esize, cudaMemcpyDeviceToDevice, stream()), "contiguous copy");
    return;
  }
  const int last = c.rank - 1;
  int p = -1;
  if (c.rank >= 2 && c.ds[last] == 1 && c.ss[last] != 1 && c.shape[last] >= 8)
    for (int d = last - 1; d >= 0; --d)
      if (c.ss[d] == 1 && c.shape[d] >= 8) {
        p = d;
        break;
      }
  visit_esize(esize, "copy", [&](auto tag) {
    using E = decltype(tag);
    const E* s = static_cast<const E*>(src);
    E* t = static_cast<E*>(dst);
    if (p >= 0) {
      const i64 tiles_l = ceil_div(c.shape[last], 32), tiles_p = ceil_div(c.shape[p], 32);
      const i64 nblocks = tiles_l * tiles_p * (n / (c.shape[last] * c.shape[p]));
      copy_tiled<E><<<unsigned(std::min(nblocks, kMaxGrid)), dim3(32, 8), 0, stream()>>>(s, t, c, p, tiles_l, tiles_p,
                                                                                          nblocks);
      check_launch("copy_tiled");
    } else if (n < (i64(1) << 31) && max_offset(c, c.ss) < (i64(1) << 31) && max_offset(c, c.ds) < (i64(1) << 31)) {
      copy_kernel<E, u32><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(s, t, c, u32(n));
      check_launch("copy_strided");
    } else {
      copy_kernel<E, u64><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(s, t, c, u64(n));
      check_launch("copy_strided");
    }
  });
}

View contiguous_view(const Shape& s) {
  View v;
  v.rank = int32_t(s.size());
  if (s.size() > size_t(kMaxRank)) throw InputError("cuda: rank " + std::to_string(s.size()) + " above 8");
  int64_t acc = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = s[size_t(d)];
    v.strides[d] = acc;
    acc *= s[size_t(d)];
  }
  return v;
}

// Float -> integer as `cast`: truncate toward zero, saturate, NaN -> 0.
int64_t saturate(double v, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  if (v <= double(lo)) return lo;
  if (v >= double(hi)) return hi;
  return int64_t(v);
}

// The bytes of one element of dtype t holding v, converted as store_real does.
void encode_real(DType t, double v, unsigned char* out) {
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof(x)); };
  switch (t) {
    case DType::Bool: put(uint8_t(v != 0.0)); return;  // NaN != 0: true
    case DType::I8: put(int8_t(saturate(v, INT8_MIN, INT8_MAX))); return;
    case DType::U8: put(uint8_t(saturate(v, 0, UINT8_MAX))); return;
    case DType::I32: put(int32_t(saturate(v, INT32_MIN, INT32_MAX))); return;
    case DType::I64: put(int64_t(saturate(v, INT64_MIN, INT64_MAX))); return;
    case DType::F16: put(__double2half(v)); return;  // one rounding (host path too)
    case DType::BF16: put(__double2bfloat16(v)); return;
    case DType::F32: put(float(v)); return;
    case DType::F64: put(v); return;
    case DType::C64: put(float2{float(v), 0.0f}); return;
    case DType::I4: break;
  }
  throw InternalError("cuda pad: i4 is not supported");
}

void fill_bytes(void* dst, const unsigned char* value, size_t esize, i64 n) {
  if (n == 0) return;
  bool zero = true;
  for (size_t i = 0; i < esize; ++i) zero = zero && value[i] == 0;
  if (zero) {
    check(cudaMemsetAsync(dst, 0, size_t(n) * esize, stream()), "fill");
    return;
  }
  visit_esize(esize, "fill", [&](auto tag) {
    using E = decltype(tag);
    E v;
    std::memcpy(&v, value, sizeof(E));
    fill_kernel<E><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(static_cast<E*>(dst), v, n);
    check_launch("fill");
  });
}

// ------------------------------------------------------------------------------------
// Indices (gather, scatter_add).
// ------------------------------------------------------------------------------------

// nidx[j] = idx[j] normalized into [0, A); *bad = the smallest j out of range (integer
// atomicMin: the result does not depend on the order).
template <class I>
__global__ void __launch_bounds__(256) check_indices(const I* __restrict__ idx, i64 J, i64 A, i64* __restrict__ nidx,
                                                     u64* bad) {
  for (i64 j = i64(blockIdx.x) * blockDim.x + threadIdx.x; j < J; j += i64(gridDim.x) * blockDim.x) {
    const i64 v = i64(idx[j]);
    if (v < -A || v >= A) {
      atomicMin(bad, u64(j));
      nidx[j] = 0;  // stays in bounds when nobody looks at *bad (graph capture)
    } else {
      nidx[j] = v < 0 ? v + A : v;
    }
  }
}

// Validates and normalizes the indices into nidx (J int64 values). Throws InputError
// naming the first bad index, as the reference does: this synchronizes the stream once
// (the error has to be known before returning). While a CUDA graph is being recorded
// it cannot: bad indices then read element 0 and go unreported.
void normalize_indices(const Tensor& idx, i64 A, int axis, const char* op, i64* nidx) {
  const i64 J = idx.numel();
  if (J == 0) return;
  if (idx.dtype() != DType::I32 && idx.dtype() != DType::I64)
    throw InternalError(std::string("cuda ") + op + ": indices are " + dtype_name(idx.dtype()) + ", not i32/i64");
  const size_t es = dtype_size(idx.dtype());
  const void* ip = idx.raw();
  std::optional<Scratch> tmp;
  if (!idx.is_contiguous()) {
    tmp.emplace(size_t(J) * es);
    copy_strided(idx.raw(), view_of(idx), tmp->get(), es);
    ip = tmp->get();
  }
  Scratch bad(sizeof(u64));
  check(cudaMemsetAsync(bad.get(), 0xff, sizeof(u64), stream()), "index check");
  if (idx.dtype() == DType::I32)
    check_indices<int32_t><<<grid_for(J, 256), 256, 0, stream()>>>(static_cast<const int32_t*>(ip), J, A, nidx,
                                                                   bad.as<u64>());
  else
    check_indices<int64_t><<<grid_for(J, 256), 256, 0, stream()>>>(static_cast<const int64_t*>(ip), J, A, nidx,
                                                                   bad.as<u64>());
  check_launch("check_indices");
  if (capturing()) return;
  u64 first = ~0ull;
  check(cudaMemcpyAsync(&first, bad.get(), sizeof(u64), cudaMemcpyDeviceToHost, stream()), "index check");
  check(cudaStreamSynchronize(stream()), "index check");
  if (first == ~0ull) return;
  int64_t v = 0;
  if (idx.dtype() == DType::I32) {
    int32_t w = 0;
    check(cudaMemcpy(&w, static_cast<const int32_t*>(ip) + first, sizeof(w), cudaMemcpyDeviceToHost), "index check");
    v = w;
  } else {
    check(cudaMemcpy(&v, static_cast<const int64_t*>(ip) + first, sizeof(v), cudaMemcpyDeviceToHost), "index check");
  }
  throw InputError(std::string(op) + ": index " + std::to_string(v) + " is out of range for axis " +
                   std::to_string(axis) + " of extent " + std::to_string(A) + node_suffix());
}

// out[i] for i = (o, j, in) over [outer, J, inner] = x[(o, nidx[j], in)] (x contiguous).
template <class E, class U>
__global__ void __launch_bounds__(256) gather_kernel(const E* __restrict__ x, const i64* __restrict__ nidx,
                                                     E* __restrict__ y, U n, U J, U inner, U A) {
  for (U i = U(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += U(gridDim.x) * blockDim.x) {
    const U t = i / inner, in = i - t * inner;
    const U o = t / J, j = t - o * J;
    y[i] = x[(o * A + U(nidx[j])) * inner + in];
  }
}

// scatter_add with few indices: thread per output element (o, a, in) scans all J
// indices. Cost numel(out) * J; used for J <= 64.
template <class T>
__global__ void __launch_bounds__(256) scatter_direct(T* __restrict__ y, const T* __restrict__ upd,
                                                      const i64* __restrict__ nidx, i64 n, i64 J, i64 inner, i64 A) {
  using W = typename Num<T>::W;
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    const i64 t = i / inner, in = i - t * inner;
    const i64 o = t / A, a = t - o * A;
    const T* u = upd + o * J * inner + in;
    W acc = Num<T>::wide(y[i]);
    bool any = false;
    for (i64 j = 0; j < J; ++j)
      if (nidx[j] == a) {
        acc = Arith<W>::add(acc, Num<T>::wide(u[j * inner]));
        any = true;
      }
    if (any) y[i] = Num<T>::narrow(acc);
  }
}

// keys[p] = (nidx[p] << 32) | p, padded with ~0 to a power of two.
__global__ void __launch_bounds__(256) make_keys(const i64* __restrict__ nidx, i64 J, i64 n2, u64* __restrict__ keys) {
  for (i64 p = i64(blockIdx.x) * blockDim.x + threadIdx.x; p < n2; p += i64(gridDim.x) * blockDim.x)
    keys[p] = p < J ? (u64(nidx[p]) << 32) | u64(p) : ~0ull;
}

// Bitonic sort of unique keys: one compare-exchange stage (distance j, sequence size k).
__global__ void __launch_bounds__(256) bitonic_global(u64* keys, i64 n2, i64 j, i64 k) {
  for (i64 t = i64(blockIdx.x) * blockDim.x + threadIdx.x; t < n2 / 2; t += i64(gridDim.x) * blockDim.x) {
    const i64 i = 2 * j * (t / j) + t % j, l = i + j;
    const bool asc = (i & k) == 0;
    const u64 a = keys[i], b = keys[l];
    if ((a > b) == asc) {
      keys[i] = b;
      keys[l] = a;
    }
  }
}

// The stages with distance < 1024 in shared memory: sizes k_lo..k_hi, the first of them
// starting at distance j_first. Blocks of `blockDim.x * 2` keys.
__global__ void __launch_bounds__(512) bitonic_local(u64* keys, i64 k_lo, i64 k_hi, i64 j_first) {
  __shared__ u64 s[1024];
  const int w = int(blockDim.x) * 2;
  const i64 base = i64(blockIdx.x) * w;
  for (int e = threadIdx.x; e < w; e += blockDim.x) s[e] = keys[base + e];
  __syncthreads();
  const int t = threadIdx.x;
  for (i64 k = k_lo; k <= k_hi; k <<= 1)
    for (i64 j = (k == k_lo ? j_first : k / 2); j > 0; j >>= 1) {
      const int i = int(2 * j * (t / j) + t % j), l = i + int(j);
      const bool asc = ((base + i) & k) == 0;
      const u64 a = s[i], b = s[l];
      if ((a > b) == asc) {
        s[i] = b;
        s[l] = a;
      }
      __syncthreads();
    }
  for (int e = threadIdx.x; e < w; e += blockDim.x) keys[base + e] = s[e];
}

// Bucket a holds sorted positions [start[a], end[a]).
__global__ void __launch_bounds__(256) bucket_bounds(const u64* __restrict__ keys, i64 J, u32* __restrict__ start,
                                                     u32* __restrict__ end) {
  for (i64 p = i64(blockIdx.x) * blockDim.x + threadIdx.x; p < J; p += i64(gridDim.x) * blockDim.x) {
    const u64 a = keys[p] >> 32;
    if (p == 0 || (keys[p - 1] >> 32) != a) start[a] = u32(p);
    if (p == J - 1 || (keys[p + 1] >> 32) != a) end[a] = u32(p + 1);
  }
}

// scatter_add with many indices: thread per output element (o, a, in) adds the updates
// of bucket a in increasing j (the reference's order). Cost numel(out) + numel(updates).
template <class T>
__global__ void __launch_bounds__(256) scatter_sorted(T* __restrict__ y, const T* __restrict__ upd,
                                                      const u64* __restrict__ keys, const u32* __restrict__ start,
                                                      const u32* __restrict__ end, i64 n, i64 J, i64 inner, i64 A) {
  using W = typename Num<T>::W;
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    const i64 t = i / inner, in = i - t * inner;
    const i64 o = t / A, a = t - o * A;
    const u32 p0 = start[a], p1 = end[a];
    if (p0 == p1) continue;
    const T* u = upd + o * J * inner + in;
    W acc = Num<T>::wide(y[i]);
    for (u32 p = p0; p < p1; ++p) acc = Arith<W>::add(acc, Num<T>::wide(u[i64(keys[p] & 0xffffffffull) * inner]));
    y[i] = Num<T>::narrow(acc);
  }
}

// ------------------------------------------------------------------------------------
// cumsum. The operand (made contiguous) is L = outer*inner lines of len elements, inner
// apart; line l starts at (l / inner) * len * inner + l % inner. Logical position p of a
// line is element p, or len-1-p when reversed. Accumulates in Num<T>::W.
// ------------------------------------------------------------------------------------

constexpr int kScanThreads = 256, kScanItems = 8, kScanChunk = kScanThreads * kScanItems;

__device__ inline i64 line_base(i64 l, i64 len, i64 inner) { return (l / inner) * len * inner + l % inner; }

// Thread per line, sequential (the reference's order). For many lines.
template <class T>
__global__ void __launch_bounds__(256) cumsum_seq(const T* __restrict__ x, T* __restrict__ y, i64 L, i64 len,
                                                  i64 inner, bool exclusive, bool reverse) {
  using W = typename Num<T>::W;
  for (i64 l = i64(blockIdx.x) * blockDim.x + threadIdx.x; l < L; l += i64(gridDim.x) * blockDim.x) {
    const i64 base = line_base(l, len, inner);
    W acc = Arith<W>::zero();
    for (i64 p = 0; p < len; ++p) {
      const i64 o = base + (reverse ? len - 1 - p : p) * inner;
      const W v = Num<T>::wide(x[o]);
      if (exclusive) {
        y[o] = Num<T>::narrow(acc);
        acc = Arith<W>::add(acc, v);
      } else {
        acc = Arith<W>::add(acc, v);
        y[o] = Num<T>::narrow(acc);
      }
    }
  }
}

// A warp per line (contiguous lines, inner == 1, of moderate length): 32 elements per
// step, a shuffle scan and a running carry.
template <class T>
__global__ void __launch_bounds__(256) cumsum_warps(const T* __restrict__ x, T* __restrict__ y, i64 L, i64 len,
                                                    bool exclusive, bool reverse) {
  using W = typename Num<T>::W;
  using Ar = Arith<W>;
  const int lane = threadIdx.x & 31;
  const i64 nwarps = (i64(gridDim.x) * blockDim.x) >> 5;
  for (i64 l = (i64(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; l < L; l += nwarps) {
    const T* xl = x + l * len;
    T* yl = y + l * len;
    W carry = Ar::zero();
    for (i64 q0 = 0; q0 < len; q0 += 32) {
      const i64 p = q0 + lane, k = reverse ? len - 1 - p : p;
      const W v = p < len ? Num<T>::wide(xl[k]) : Ar::zero();
      W inc = v;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const W n = shfl_up(inc, o);
        if (lane >= o) inc = Ar::add(n, inc);
      }
      W res = inc;
      if (exclusive) {
        res = shfl_up(inc, 1);
        if (lane == 0) res = Ar::zero();
      }
      if (p < len) yl[k] = Num<T>::narrow(Ar::add(carry, res));
      carry = Ar::add(carry, shfl_idx(inc, 31));
    }
  }
}

// Phase 1 of the long-line scan: partial[b] = the sum of chunks [g*per, (g+1)*per) of
// line l (b = l*groups + g).
template <class T>
__global__ void __launch_bounds__(kScanThreads) scan_chunk_totals(const T* __restrict__ x, i64 L, i64 len, i64 inner,
                                                                  bool reverse, i64 per, i64 groups,
                                                                  typename Num<T>::W* __restrict__ partial) {
  using W = typename Num<T>::W;
  for (i64 b = blockIdx.x; b < L * groups; b += gridDim.x) {
    const i64 l = b / groups, g = b - l * groups;
    const i64 base = line_base(l, len, inner);
    const i64 p1 = min(len, (g + 1) * per * kScanChunk);
    W acc = Arith<W>::zero();
    for (i64 p = g * per * kScanChunk + threadIdx.x; p < p1; p += kScanThreads)
      acc = Arith<W>::add(acc, Num<T>::wide(x[base + (reverse ? len - 1 - p : p) * inner]));
    acc = block_reduce<SumOp<T>>(acc);
    if (threadIdx.x == 0) partial[b] = acc;
  }
}

// Shared-memory slot of chunk element e: one pad slot every 8, so that thread t's items
// (8t .. 8t+7) fall in distinct banks across a (half-)warp.
__device__ inline int scan_slot(int e) { return e + (e >> 3); }

// Block scan over chunks of kScanChunk: block b takes line b / groups and that line's
// chunks [g*cpb, (g+1)*cpb) (g = b % groups) in order, starting from carries[b] (or 0).
// In and Out are storage types (or accumulators, for the scan of chunk totals); x may
// alias y.
template <class In, class Out>
__global__ void __launch_bounds__(kScanThreads) scan_lines(const In* x, Out* y, i64 L, i64 len, i64 inner,
                                                           bool exclusive, bool reverse, i64 groups, i64 cpb,
                                                           const typename Num<In>::W* carries) {
  using A = typename Num<In>::W;
  static_assert(std::is_same_v<A, typename Num<Out>::W>);
  using Ar = Arith<A>;
  __shared__ A s[kScanChunk + kScanChunk / 8];
  __shared__ A wsum[kScanThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const i64 nc = ceil_div(len, kScanChunk);
  for (i64 b = blockIdx.x; b < L * groups; b += gridDim.x) {
    const i64 l = b / groups, g = b - l * groups;
    const i64 base = line_base(l, len, inner);
    A carry = carries ? carries[b] : Ar::zero();
    const i64 c1 = min(nc, (g + 1) * cpb);
    for (i64 c = g * cpb; c < c1; ++c) {
      const i64 q0 = c * kScanChunk;
      for (int e = tid; e < kScanChunk; e += kScanThreads) {
        const i64 p = q0 + e;
        s[scan_slot(e)] = p < len ? Num<In>::wide(x[base + (reverse ? len - 1 - p : p) * inner]) : Ar::zero();
      }
      __syncthreads();
      A items[kScanItems];
      A tot = Ar::zero();
#pragma unroll
      for (int j = 0; j < kScanItems; ++j) {
        items[j] = s[scan_slot(tid * kScanItems + j)];
        tot = Ar::add(tot, items[j]);
      }
      A inc = tot;  // warp inclusive scan of the thread totals
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const A n = shfl_up(inc, o);
        if (lane >= o) inc = Ar::add(n, inc);
      }
      A exc = shfl_up(inc, 1);
      if (lane == 0) exc = Ar::zero();
      if (lane == 31) wsum[warp] = inc;
      __syncthreads();
      A wpre = Ar::zero(), block = Ar::zero();
#pragma unroll
      for (int w = 0; w < kScanThreads / 32; ++w) {
        if (w < warp) wpre = Ar::add(wpre, wsum[w]);
        block = Ar::add(block, wsum[w]);
      }
      A r = Ar::add(Ar::add(carry, wpre), exc);
#pragma unroll
      for (int j = 0; j < kScanItems; ++j) {
        if (exclusive) {
          s[scan_slot(tid * kScanItems + j)] = r;
          r = Ar::add(r, items[j]);
        } else {
          r = Ar::add(r, items[j]);
          s[scan_slot(tid * kScanItems + j)] = r;
        }
      }
      __syncthreads();
      for (int e = tid; e < kScanChunk; e += kScanThreads) {
        const i64 p = q0 + e;
        if (p < len) y[base + (reverse ? len - 1 - p : p) * inner] = Num<Out>::narrow(s[scan_slot(e)]);
      }
      carry = Ar::add(carry, block);
      __syncthreads();  // s and wsum are reused
    }
  }
}

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

template <class T>
__global__ void __launch_bounds__(256) rng_uniform_kernel(T* __restrict__ y, i64 n, u64 seed_mixed, double low,
                                                          double high) {
  const double width = __dsub_rn(high, low);
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x)
    y[i] = Num<T>::from_real(__dadd_rn(low, __dmul_rn(width, d_rng_unit(seed_mixed, u64(i)))));
}

template <class T>
__global__ void __launch_bounds__(256) rng_normal_kernel(T* __restrict__ y, i64 n, u64 seed_mixed, double mean,
                                                         double stddev) {
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

// ======================================================================================
// Entry points.
// ======================================================================================

void copy_strided(const void* src, const View& v, void* dst, size_t esize) {
  copy_view(src, v, dst, contiguous_view(Shape(v.shape, v.shape + v.rank)), esize);
}

void reduce(ReduceOp op, const Tensor& x, const std::vector<int>& axes, Tensor& out) {
  visit_numeric(x.dtype(), "reduce", [](auto) {});  // rejects bool and i4 up front
  if (out.numel() == 0) return;
  std::vector<bool> red(size_t(x.rank()), false);
  for (int a : axes) red[size_t(a)] = true;
  std::optional<Scratch> copy;
  const Rows r = make_rows(x, red, copy);
  if (r.K == 0 && (op == ReduceOp::Max || op == ReduceOp::Min))
    throw InputError(std::string(op == ReduceOp::Max ? "max" : "min") + " over an empty axis of " +
                     shape_str(x.shape()) + " has no value" + node_suffix());
  visit_numeric(x.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case ReduceOp::Sum: run_reduce<SumOp<T>>(r, out.raw(), "reduce_sum"); return;
      case ReduceOp::Prod: run_reduce<ProdOp<T>>(r, out.raw(), "reduce_prod"); return;
      case ReduceOp::Max:
      case ReduceOp::Min:
        if constexpr (std::is_same_v<T, float2>) {
          throw InternalError("cuda reduce: max/min of c64");
        } else {
          if (op == ReduceOp::Max)
            run_reduce<MaxMinOp<T, true>>(r, out.raw(), "reduce_max");
          else
            run_reduce<MaxMinOp<T, false>>(r, out.raw(), "reduce_min");
        }
        return;
    }
  });
}

void argmax(const Tensor& x, int axis, Tensor& out) {
  visit_numeric(x.dtype(), "argmax", [](auto) {});
  if (out.numel() == 0) return;
  if (out.dtype() != DType::I64) throw InternalError("cuda argmax: the result must be i64");
  if (axis < 0) axis += x.rank();
  const View v = view_of(x);
  std::vector<Dim> kept;
  for (int d = 0; d < v.rank; ++d)
    if (d != axis) kept.push_back({v.shape[d], v.strides[d]});
  kept = merge_dims(kept);
  Rows r;
  r.x = x.raw();
  r.kept = view_from(kept);
  r.M = 1;
  for (const Dim& d : kept) r.M *= d.n;
  r.K = v.shape[axis];
  r.sK = v.strides[axis];
  visit_numeric(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float2>)
      throw InternalError("cuda argmax: c64 operand");
    else
      run_reduce<ArgMaxOp<T>>(r, out.raw(), "argmax");
  });
}

// Design: many contiguous lines of moderate length take a warp each (shuffle scan, 32
// elements a step); many strided lines (or short ones) a thread each, sequentially,
// coalesced across lines. Otherwise each
// line is scanned in chunks of 2048 by 256-thread blocks (a block scan per chunk plus a
// running carry); with few long lines, three phases spread one line over many blocks:
// totals of groups of up to 16 chunks, an exclusive scan of the totals (the same block
// scan), then every group scanned from its carry. Costs: sequential lines read len
// strided elements per thread; the three-phase scan reads the input twice.
void cumsum(const Tensor& x, int axis, bool exclusive, bool reverse, Tensor& out) {
  if (out.numel() == 0) return;
  if (axis < 0) axis += x.rank();
  const size_t es = element_size(x, "cumsum");
  const void* xp = x.raw();
  std::optional<Scratch> copy;
  if (!x.is_contiguous()) {
    copy.emplace(size_t(x.numel()) * es);
    copy_strided(x.raw(), view_of(x), copy->get(), es);
    xp = copy->get();
  }
  i64 outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  const i64 len = x.shape()[size_t(axis)], L = outer * inner;
  visit_numeric(x.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    using W = typename Num<T>::W;
    const T* xs = static_cast<const T*>(xp);
    T* y = out.data<T>();
    if (inner == 1 && len > 16 && len <= 4096 && L >= 264) {
      cumsum_warps<T><<<grid_for(L, 8), 256, 0, stream()>>>(xs, y, L, len, exclusive, reverse);
      check_launch("cumsum_warps");
      return;
    }
    if (len <= 16 || (inner > 1 && L >= 2048)) {
      cumsum_seq<T><<<grid_for(L, 256), 256, 0, stream()>>>(xs, y, L, len, inner, exclusive, reverse);
      check_launch("cumsum_seq");
      return;
    }
    const i64 nc = ceil_div(len, kScanChunk);
    if (nc == 1 || L >= 264) {
      scan_lines<T, T><<<unsigned(std::min(L, kMaxGrid)), kScanThreads, 0, stream()>>>(xs, y, L, len, inner, exclusive,
                                                                                        reverse, 1, nc, nullptr);
      check_launch("cumsum_scan");
      return;
    }
    // Three phases over groups of `per` chunks (about two waves of blocks).
    const i64 per = std::clamp<i64>(nc * L / 2112, 1, 16), groups = ceil_div(nc, per), blocks = L * groups;
    Scratch part(size_t(blocks) * sizeof(W));
    W* pw = part.as<W>();
    scan_chunk_totals<T><<<unsigned(std::min(blocks, kMaxGrid)), kScanThreads, 0, stream()>>>(xs, L, len, inner,
                                                                                               reverse, per, groups, pw);
    check_launch("cumsum_chunk_totals");
    scan_lines<W, W><<<unsigned(std::min(L, kMaxGrid)), kScanThreads, 0, stream()>>>(
        pw, pw, L, groups, 1, true, false, 1, ceil_div(groups, kScanChunk), nullptr);
    check_launch("cumsum_scan_totals");
    scan_lines<T, T><<<unsigned(std::min(blocks, kMaxGrid)), kScanThreads, 0, stream()>>>(
        xs, y, L, len, inner, exclusive, reverse, groups, per, pw);
    check_launch("cumsum_scan_chunks");
  });
}

void permute(const Tensor& x, const std::vector<int64_t>& perm, Tensor& out) {
  const size_t es = element_size(x, "permute");
  const View xv = view_of(x);
  View v;
  v.rank = xv.rank;
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = xv.shape[perm[size_t(d)]];
    v.strides[d] = xv.strides[perm[size_t(d)]];
  }
  copy_strided(x.raw(), v, out.raw(), es);
}

void broadcast_to(const Tensor& x, Tensor& out) {
  const size_t es = element_size(x, "broadcast_to");
  copy_strided(x.raw(), broadcast_view(x, out.shape()), out.raw(), es);
}

void slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps, Tensor& out) {
  const size_t es = element_size(x, "slice");
  if (out.numel() == 0) return;
  const View xv = view_of(x);
  View v;
  v.rank = xv.rank;
  int64_t off = 0;
  for (int d = 0; d < v.rank; ++d) {
    off += starts[size_t(d)] * xv.strides[d];
    v.shape[d] = out.shape()[size_t(d)];
    v.strides[d] = xv.strides[d] * steps[size_t(d)];
  }
  copy_strided(static_cast<const char*>(x.raw()) + off * int64_t(es), v, out.raw(), es);
}

void concat(std::span<const Tensor> xs, int axis, Tensor& out) {
  const size_t es = element_size(out, "concat");
  if (axis < 0) axis += out.rank();
  const View ov = contiguous_view(out.shape());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    element_size(x, "concat");
    View dv = ov;
    const View xv = view_of(x);
    for (int d = 0; d < dv.rank; ++d) dv.shape[d] = xv.shape[d];
    char* dst = static_cast<char*>(out.raw()) + at * ov.strides[axis] * int64_t(es);
    copy_view(x.raw(), xv, dst, dv, es);
    at += x.shape()[size_t(axis)];
  }
}

void pad(const Tensor& x, const std::vector<int64_t>& low, double value, Tensor& out) {
  const size_t es = element_size(x, "pad");
  unsigned char v[16] = {};
  encode_real(out.dtype(), value, v);
  fill_bytes(out.raw(), v, es, out.numel());
  const View ov = contiguous_view(out.shape());
  const View xv = view_of(x);
  View dv = ov;
  int64_t off = 0;
  for (int d = 0; d < dv.rank; ++d) {
    off += low[size_t(d)] * ov.strides[d];
    dv.shape[d] = xv.shape[d];
  }
  copy_view(x.raw(), xv, static_cast<char*>(out.raw()) + off * int64_t(es), dv, es);
}

// Design: indices are validated and normalized first (one stream sync, see
// normalize_indices), x is made contiguous when strided, then one thread per output
// element copies its element (32-bit index math when sizes allow).
void gather(const Tensor& x, const Tensor& idx, int axis, Tensor& out) {
  const size_t es = element_size(x, "gather");
  if (axis < 0) axis += x.rank();
  if (out.numel() == 0) return;
  i64 outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  const i64 A = x.shape()[size_t(axis)], J = idx.numel(), n = out.numel();
  Scratch nidx(size_t(J) * sizeof(i64));
  normalize_indices(idx, A, axis, "gather", nidx.as<i64>());
  const void* xp = x.raw();
  std::optional<Scratch> copy;
  if (!x.is_contiguous()) {
    copy.emplace(size_t(x.numel()) * es);
    copy_strided(x.raw(), view_of(x), copy->get(), es);
    xp = copy->get();
  }
  visit_esize(es, "gather", [&](auto tag) {
    using E = decltype(tag);
    const E* xs = static_cast<const E*>(xp);
    E* y = static_cast<E*>(out.raw());
    if (n < (i64(1) << 31) && x.numel() < (i64(1) << 31))
      gather_kernel<E, u32><<<grid_for(n, 256), 256, 0, stream()>>>(xs, nidx.as<i64>(), y, u32(n), u32(J), u32(inner),
                                                                    u32(A));
    else
      gather_kernel<E, u64><<<grid_for(n, 256), 256, 0, stream()>>>(xs, nidx.as<i64>(), y, u64(n), u64(J), u64(inner),
                                                                    u64(A));
    check_launch("gather");
  });
}

// Design (deterministic, no atomics on values): out = x; indices validated (one stream
// sync); then every output element adds its updates in increasing j, in the wide type,
// and rounds once — the reference's order. J <= 64: each output thread scans all J
// indices (cost numel(out) * J). Otherwise the keys (index << 32 | j) are bitonic-sorted
// (O(J log^2 J) work, ~log^2(J/1024)/2 + log(J) launches), bucket bounds found, and each
// output thread walks its bucket (cost numel(out) + numel(updates)). Limits: J < 2^31.
void scatter_add(const Tensor& x, const Tensor& idx, const Tensor& updates, int axis, Tensor& out) {
  const size_t es = element_size(x, "scatter_add");
  if (axis < 0) axis += x.rank();
  visit_numeric(x.dtype(), "scatter_add", [](auto) {});  // rejects bool
  if (out.numel() == 0) return;
  copy_strided(x.raw(), view_of(x), out.raw(), es);
  const i64 J = idx.numel();
  if (updates.numel() == 0 || J == 0) return;
  i64 outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  const i64 A = x.shape()[size_t(axis)], n = out.numel();
  if (J >= (i64(1) << 31) || A >= (i64(1) << 31)) throw InternalError("cuda scatter_add: more than 2^31 indices");
  Scratch nidx(size_t(J) * sizeof(i64));
  normalize_indices(idx, A, axis, "scatter_add", nidx.as<i64>());
  const void* up = updates.raw();
  std::optional<Scratch> ucopy;
  if (!updates.is_contiguous()) {
    ucopy.emplace(size_t(updates.numel()) * es);
    copy_strided(updates.raw(), view_of(updates), ucopy->get(), es);
    up = ucopy->get();
  }
  visit_numeric(x.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    T* y = out.data<T>();
    const T* u = static_cast<const T*>(up);
    if (J <= 64) {
      scatter_direct<T><<<grid_for(n, 256), 256, 0, stream()>>>(y, u, nidx.as<i64>(), n, J, inner, A);
      check_launch("scatter_add");
      return;
    }
    i64 n2 = 1;
    while (n2 < J) n2 <<= 1;
    Scratch keys(size_t(n2) * sizeof(u64));
    u64* k = keys.as<u64>();
    make_keys<<<grid_for(n2, 256), 256, 0, stream()>>>(nidx.as<i64>(), J, n2, k);
    check_launch("scatter_add_keys");
    const i64 local = std::min<i64>(n2, 1024);
    const unsigned lblocks = unsigned(n2 / local), lthreads = unsigned(local / 2);
    bitonic_local<<<lblocks, lthreads, 0, stream()>>>(k, 2, local, 1);
    check_launch("scatter_add_sort");
    for (i64 kk = 2 * local; kk <= n2; kk <<= 1) {
      for (i64 j = kk / 2; j >= local; j >>= 1) {
        bitonic_global<<<grid_for(n2 / 2, 256), 256, 0, stream()>>>(k, n2, j, kk);
        check_launch("scatter_add_sort");
      }
      bitonic_local<<<lblocks, lthreads, 0, stream()>>>(k, kk, kk, local / 2);
      check_launch("scatter_add_sort");
    }
    Scratch bounds(size_t(A) * 2 * sizeof(u32));
    u32* start = bounds.as<u32>();
    u32* end = start + A;
    check(cudaMemsetAsync(start, 0, size_t(A) * 2 * sizeof(u32), stream()), "scatter_add");
    bucket_bounds<<<grid_for(J, 256), 256, 0, stream()>>>(k, J, start, end);
    check_launch("scatter_add_bounds");
    scatter_sorted<T><<<grid_for(n, 256), 256, 0, stream()>>>(y, u, k, start, end, n, J, inner, A);
    check_launch("scatter_add");
  });
}

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

void rng_uniform(uint64_t seed, double low, double high, Tensor& out) {
  const i64 n = out.numel();
  visit_float(out.dtype(), "rng_uniform", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    rng_uniform_kernel<T><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(out.data<T>(), n, h_splitmix64(seed), low, high);
    check_launch("rng_uniform");
  });
}

void rng_normal(uint64_t seed, double mean, double stddev, Tensor& out) {
  const i64 n = out.numel();
  visit_float(out.dtype(), "rng_normal", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    rng_normal_kernel<T><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(out.data<T>(), n, h_splitmix64(seed), mean, stddev);
    check_launch("rng_normal");
  });
}

}  // namespace rlx::cuda
