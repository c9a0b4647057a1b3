// Reductions on the cuda device: reduce (sum prod max min) and argmax. Semantics are the
// reference device's (devices/reference/*.cpp), dtype for dtype:
//  - sums and products accumulate in u64 (integers, wrapping), double (f16 bf16 f32 f64)
//    or double2 (c64) and round once on store;
//  - max/min compare in i64 or double; NaN wins and stays;
//  - argmax: NaN is the max, the first index wins ties, an empty axis gives -1.
// The single-launch reductions share a static partials buffer (g_partials): that relies
// on every launch going on the one stream() (graph recordings of it included).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "devices/cuda/kernels.cuh"
#include "devices/cuda/kernels.hpp"

namespace rlx::cuda {
namespace {

// Threads resident on an H200 at full occupancy (132 SMs x 2048). A constant, not a
// device query, so that launch shapes (and hence summation orders) are the same on
// every GPU.
constexpr i64 kWaveThreads = 132 * 2048;

// ------------------------------------------------------------------------------------
// Reductions. The operand is described as M rows of K elements: row m starts at
// view_offset(kept, m) (kept: the kept dims, collapsed, with x's strides) and its
// elements are sK apart. Ops: identity, load (element k of a row), combine (a is the
// earlier operand), store. (SumOp is in kernels.cuh: the scan uses it too.)
// ------------------------------------------------------------------------------------

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

}  // namespace

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

}  // namespace rlx::cuda
