// The cuda device's CSR SpMV: spmv.hpp describes the design.
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace rlx::cuda {
namespace {

// How the kernels load. Matrix entries are read once, x many times: with HINT the matrix
// is loaded evict-first (ld.global.cs), so it does not push x out of the caches; with
// XLAST (an experiment, SpmvTuning::x_evict_last) x is loaded with an L2 evict-last
// policy (createpolicy + ld.global.nc.L2::cache_hint), else through the read-only cache.
#define RLX_SPMV_LD(T, PT, C)                                                                     \
  if constexpr (std::is_same_v<S, T>) {                                                           \
    T r;                                                                                          \
    asm("ld.global.nc.L2::cache_hint." PT " %0, [%1], %2;" : "=" C(r) : "l"(p), "l"(policy)); \
    return r;                                                                                     \
  } else
template <class S>
__device__ __forceinline__ S ld_with_l2_policy(const S* p, uint64_t policy) {
  RLX_SPMV_LD(int, "s32", "r")
  RLX_SPMV_LD(long long, "s64", "l")
  RLX_SPMV_LD(float, "f32", "f")
  RLX_SPMV_LD(double, "f64", "d")
  static_assert(sizeof(S) == 0, "spmv: no hinted load of this type");
}
#undef RLX_SPMV_LD

template <bool HINT, bool XLAST>
struct Loads {
  uint64_t last = 0;  // the L2 evict-last policy (XLAST)
  __device__ Loads() {
    if constexpr (XLAST) asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(last));
  }
  template <class S>
  __device__ __forceinline__ S once(const S* p) const {
    if constexpr (HINT) return __ldcs(p);
    else return *p;
  }
  template <class S>
  __device__ __forceinline__ S gather(const S* p) const {
    if constexpr (XLAST) return ld_with_l2_policy(p, last);
    else return __ldg(p);
  }
};

__device__ __forceinline__ double finish(double acc, double alpha, double beta, const void* y0, long long r, bool f64) {
  double out = alpha * acc;
  if (y0) out += beta * (f64 ? static_cast<const double*>(y0)[r] : double(static_cast<const float*>(y0)[r]));
  return out;
}

// ---------------------------------------------------------------- vector kernel
// A group of L lanes per row, rows strided over the groups of the grid.
template <int L, int UNR, bool HINT, bool XLAST, class I, class T>
__global__ void __launch_bounds__(256) spmv_vector(const I* __restrict__ rp, const I* __restrict__ ci,
                                                   const T* __restrict__ v, const T* __restrict__ x,
                                                   const T* __restrict__ y0, double alpha, double beta,
                                                   T* __restrict__ y, long long rows, bool aligned) {
  const long long group = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / L;
  const int lane = threadIdx.x & (L - 1);
  const long long ngroups = static_cast<long long>(gridDim.x) * blockDim.x / L;
  // The loop is uniform across the warp (the shuffles need every lane): the warp's first
  // group decides, and groups past the last row idle through it.
  const long long first = group - (threadIdx.x & 31) / L;
  const Loads<HINT, XLAST> ld;
  for (long long base = first; base < rows; base += ngroups) {
    const long long r = base + (group - first);
    long long b = 0, e = 0;
    if (r < rows) {
      b = static_cast<long long>(rp[r]);
      e = static_cast<long long>(rp[r + 1]);
    }
    double acc = 0;
    // With `aligned`, the group's trips start at a multiple of L, so each trip's loads are
    // L aligned elements (whole sectors) instead of straddling one more sector per array;
    // lanes before the row's first nonzero skip the first trip.
    const long long start = aligned ? b - b % L : b;
    if constexpr (UNR == 1) {
      for (long long k = start + lane; k < e; k += L)
        if (k >= b) acc += static_cast<double>(ld.once(v + k)) * static_cast<double>(ld.gather(x + ld.once(ci + k)));
    } else {
      // Two nonzeros per lane per trip (k and k + L), two accumulators: twice the gathers
      // in flight.
      double acc2 = 0;
      long long k = start + lane;
      if (aligned) {  // k < b only on the first trip; k + L >= b always
        for (; k < e; k += 2 * L) {
          const bool in0 = k >= b, in1 = k + L < e;
          const I c0 = in0 ? ld.once(ci + k) : I(0), c1 = in1 ? ld.once(ci + k + L) : I(0);
          const T v0 = in0 ? ld.once(v + k) : T(0), v1 = in1 ? ld.once(v + k + L) : T(0);
          if (in0) acc += static_cast<double>(v0) * static_cast<double>(ld.gather(x + c0));
          if (in1) acc2 += static_cast<double>(v1) * static_cast<double>(ld.gather(x + c1));
        }
      } else {
        // (Unpredicated whole trips, then the odd one: on random rows of 16, 0.606 ms
        // against 0.658 for the predicated loop above.)
        for (; k + L < e; k += 2 * L) {
          const I c0 = ld.once(ci + k), c1 = ld.once(ci + k + L);
          const T v0 = ld.once(v + k), v1 = ld.once(v + k + L);
          acc += static_cast<double>(v0) * static_cast<double>(ld.gather(x + c0));
          acc2 += static_cast<double>(v1) * static_cast<double>(ld.gather(x + c1));
        }
        if (k < e) acc += static_cast<double>(ld.once(v + k)) * static_cast<double>(ld.gather(x + ld.once(ci + k)));
      }
      acc += acc2;
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o, L);
    if (lane == 0 && r < rows) y[r] = static_cast<T>(finish(acc, alpha, beta, y0, r, std::is_same_v<T, double>));
  }
}

__device__ __forceinline__ double warp_sum(double s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// ---------------------------------------------------------------- packed kernel
// A warp per R consecutive rows (R <= 31). Their nonzeros are one contiguous range, read
// in trips of 32 nonzeros aligned to 32 whatever rows they belong to, so every load of the
// matrix is whole lines and short rows share them (on the H200, SpMV with scattered columns
// is bound by L2 tag requests: one per x gather and one per line of the matrix — ncu,
// docs/benchmarks.md). The row bounds arrive in one load (lane j holds rp[r0 + j]) and the
// results leave in one store. A trip inside one row is summed lane by lane (`run`) until
// the row changes; a trip that crosses rows is summed per row by a segmented shuffle
// reduction. Lane j keeps row j's total; the order of the additions is fixed
// (deterministic). With R = 1 and the load pipeline (PIPE) it is what the device runs
// for long rows (spmv_choice()). With R > 1, on the H200's power-law rows it makes fewer L2
// tag requests than cuSPARSE (84.0 M against 85.0 M; a warp per row 89.2 M) but was not
// faster: what it gained in requests it lost in issue rate (docs/benchmarks.md); the
// pipeline, not the packing, made the difference (R = 1: 0.562 -> 0.554-0.557 ms).
// Each warp stores its own results: gathering a block's rows into one store through shared
// memory cut the L2 write requests (0.49 M -> 0.06 M) but ran 3 % slower, as the barrier
// keeps finished warps from leaving (docs/benchmarks.md).
// Not here, as they gained nothing (docs/benchmarks.md): a register cap for full occupancy
// (R = 2: 0.577 -> 0.569 ms, no gain left once pipelined) and a pipeline two trips deep
// (no gain; spills under the cap).
// THREADS per block (128 or 256). PIPE: a load pipeline — each trip issues the next trip's
// values and x gathers, whose columns were loaded a trip earlier, so a gather does not
// wait on its column load (without it, the next trip's columns, values and gathers go out
// together). ONE: compiled for one row per warp (R = 1: no trip crosses rows, 30
// registers; 40 otherwise).
template <int THREADS, bool PIPE, bool ONE, bool HINT, class I, class T>
__global__ void __launch_bounds__(THREADS) spmv_packed(const I* __restrict__ rp, const I* __restrict__ ci,
                                                             const T* __restrict__ v, const T* __restrict__ x,
                                                             const T* __restrict__ y0, double alpha, double beta,
                                                             T* __restrict__ y, long long rows, int R) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  if constexpr (ONE) R = 1;
  const long long r0 = (static_cast<long long>(blockIdx.x) * (THREADS / 32) + (threadIdx.x >> 5)) * R;
  if (r0 >= rows) return;  // whole warps: everything below is warp-uniform
  const int n = rows - r0 < R ? static_cast<int>(rows - r0) : R;  // rows of this warp
  const Loads<HINT, false> ld;
  // Nonzero offsets in the unsigned type of the index width (fewer registers for i32
  // matrices; unsigned, so k + 32 past the last offset cannot overflow).
  using Off = std::make_unsigned_t<I>;
  constexpr Off kNone = ~Off(0);
  const Off bound = lane <= n ? static_cast<Off>(ld.once(rp + r0 + lane)) : kNone;
  const Off next = __shfl_down_sync(kAll, bound, 1);  // lane j < n: the end of row j
  const Off B = __shfl_sync(kAll, bound, 0), E = __shfl_sync(kAll, bound, n);
  // Row (0 .. n-1) holding nonzero k of the range: the last j < n with bound_j <= k. The
  // same k on every lane: two ballots.
  auto row_uniform = [&](Off k) { return __popc(__ballot_sync(kAll, lane >= 1 && lane < n && bound <= k)); };
  double acc = 0;      // lane j: row j's sum so far
  double run = 0;      // per lane: the current row's products (trips inside one row)
  int run_row = ONE ? 0 : -1;
  auto flush = [&]() {
    if (run_row >= 0) {
      const double s = warp_sum(run);
      if (lane == run_row) acc += s;
    }
    run = 0;
  };
  auto in = [&](Off k) { return k >= B && k < E; };
  auto product = [&](Off k) {
    return in(k) ? static_cast<double>(ld.once(v + k)) * static_cast<double>(ld.gather(x + ld.once(ci + k))) : 0.0;
  };
  Off base = B < E ? B - B % 32 : E;  // (an empty range runs no trip)
  // Without PIPE, p is this trip's product and pn the next one's; with it, the product is
  // formed from vc * xc (this trip's loads) and c1 holds the next trip's column. (No wrap
  // in the offsets below: they fit in I, and Off has one more bit.)
  double p = 0;
  T vc = T(0), xc = T(0);
  I c1 = I(0);
  if constexpr (PIPE) {
    const Off k = base + lane;
    if (base < E && in(k)) vc = ld.once(v + k), xc = ld.gather(x + ld.once(ci + k));
    if (base < E && in(k + 32)) c1 = ld.once(ci + k + 32);
  } else {
    p = base < E ? product(base + lane) : 0.0;
  }
  for (; base < E; base += 32) {
    // The next trip's loads go out before this trip's shuffles.
    double pn = 0;
    if constexpr (PIPE) {
      const Off k1 = base + 32 + lane, kc = k1 + 32;
      const bool in1 = in(k1);
      const T vn = in1 ? ld.once(v + k1) : T(0), xn = in1 ? ld.gather(x + c1) : T(0);
      const I cc = in(kc) ? ld.once(ci + kc) : I(0);
      c1 = cc;
      p = static_cast<double>(vc) * static_cast<double>(xc);
      vc = vn, xc = xn;
    } else {
      pn = base + 32 < E ? product(base + 32 + lane) : 0.0;
    }
    if constexpr (ONE) {
      run += p;  // one row: every trip is inside it
    } else {
      const Off kf = base > B ? base : B, kl = base + 31 < E - 1 ? base + 31 : E - 1;
      const int rf = row_uniform(kf), rl = row_uniform(kl);
      if (rf == rl) {
        if (rf != run_row) {
          flush();
          run_row = rf;
        }
        run += p;
      } else {
        flush();
        run_row = -1;
        // This lane's row (binary search over the bounds held by lanes 1 .. n-1).
        const Off k = base + lane;
        int ri = 0;
#pragma unroll
        for (int step = 16; step > 0; step >>= 1) {
          const int c = ri + step;
          const Off bc = __shfl_sync(kAll, bound, c < 32 ? c : 31);
          if (c < n && bc <= k) ri = c;
        }
        // Segmented sums: after the step with offset o, lane l holds the sum of its row's
        // products over lanes l .. l + 2o - 1.
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const double q = __shfl_down_sync(kAll, p, o);
          const int rq = __shfl_down_sync(kAll, ri, o);
          if (lane + o < 32 && rq == ri) p += q;
        }
        // Row j (lane j) takes its sum from the lane of its first nonzero in this trip.
        const Off first = bound > base ? bound : base;
        const bool here = lane < n && first < next && first < base + 32;
        const double s = __shfl_sync(kAll, p, here ? static_cast<int>(first - base) : 0);
        if (here) acc += s;
      }
    }
    if constexpr (!PIPE) p = pn;
  }
  flush();
  if (lane < n) y[r0 + lane] = static_cast<T>(finish(acc, alpha, beta, y0, r0 + lane, std::is_same_v<T, double>));
}

// ---------------------------------------------------------------- split kernel
// Each warp takes kChunk consecutive nonzeros, whatever rows they belong to, so long and
// short rows cost the same per nonzero. The warp stages its products in shared memory,
// then sums each row segment of its chunk (all lanes, a fixed-order shuffle tree):
//   - rows that start and end in the chunk: y written here;
//   - the row the chunk starts inside of (begun by an earlier warp): head[w];
//   - the row that starts here and runs past the chunk: tail[w], tail_row[w].
// A second kernel completes each row that spans chunks: tail of its first chunk, then the
// heads of the following chunks, in order (deterministic). A row "starts" in the chunk
// holding its first nonzero; an empty row in the chunk holding its start offset (the last
// chunk also takes empty rows at the very end).
constexpr int kSplitK = 8;
constexpr int kChunk = 32 * kSplitK;
constexpr int kSplitThreads = 256;

// First index in rp[lo, hi) whose value is >= val (hi if none), the warp probing 32
// places per round: 3-4 dependent rounds for millions of rows instead of ~22.
template <class I>
__device__ long long lower_bound_warp(const I* rp, long long lo, long long hi, long long val, int lane) {
  while (hi - lo > 32) {
    const long long step = (hi - lo + 31) / 32;
    const long long p = lo + lane * step;
    const bool below = p < hi && static_cast<long long>(rp[p]) < val;
    const int c = __popc(__ballot_sync(0xffffffffu, below));
    if (c == 0) return lo;
    const long long nlo = lo + (c - 1) * step + 1, nhi = lo + c * step;
    lo = nlo;
    hi = nhi < hi ? nhi : hi;
  }
  const long long p = lo + lane;
  const bool below = p < hi && static_cast<long long>(rp[p]) < val;
  return lo + __popc(__ballot_sync(0xffffffffu, below));
}

template <bool HINT, class I, class T>
__global__ void __launch_bounds__(kSplitThreads) spmv_split(const I* __restrict__ rp, const I* __restrict__ ci,
                                                           const T* __restrict__ v, const T* __restrict__ x,
                                                           const T* __restrict__ y0, double alpha, double beta,
                                                           T* __restrict__ y, long long rows, long long nnz,
                                                           long long chunks, double* __restrict__ head,
                                                           double* __restrict__ tail, long long* __restrict__ tail_row) {
  __shared__ double prod[kSplitThreads / 32][kChunk];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const long long w = static_cast<long long>(blockIdx.x) * (kSplitThreads / 32) + wib;
  if (w >= chunks) return;  // whole warps only: the shuffles below stay warp-uniform
  constexpr bool f64 = std::is_same_v<T, double>;
  double* pr = prod[wib];
  const Loads<HINT, false> ld;
  const long long base = w * kChunk, end = base + kChunk < nnz ? base + kChunk : nnz;
  // Products: all loads of the chunk issued before the first multiply.
  {
    I c[kSplitK];
    T a[kSplitK];
#pragma unroll
    for (int m = 0; m < kSplitK; ++m) {
      const long long k = base + m * 32 + lane;
      c[m] = k < end ? ld.once(ci + k) : I(0);
      a[m] = k < end ? ld.once(v + k) : T(0);
    }
#pragma unroll
    for (int m = 0; m < kSplitK; ++m) pr[m * 32 + lane] = static_cast<double>(a[m]) * static_cast<double>(ld.gather(x + c[m]));
  }
  __syncwarp();
  const bool last = w == chunks - 1;
  // Rows starting in the chunk: rf..rl.
  const long long rf = lower_bound_warp(rp, 0, rows + 1, base, lane);
  const long long rl = last ? rows - 1 : lower_bound_warp(rp, rf, rows + 1, end, lane) - 1;
  auto seg = [&](long long a, long long b) {  // sum of products a..b-1 (global indices)
    double s = 0;
    for (long long k = a + lane; k < b; k += 32) s += pr[k - base];
    return warp_sum(s);
  };
  // The row the chunk begins inside of.
  const long long first_start = rf <= rows ? static_cast<long long>(rp[rf]) : nnz;
  double h = 0;
  if (first_start > base) h = seg(base, first_start < end ? first_start : end);
  if (lane == 0) {
    head[w] = h;
    tail_row[w] = -1;
  }
  for (long long r0 = rf; r0 <= rl; r0 += 32) {
    // Row bounds for up to 32 rows at a time, one row per lane, then shuffled out.
    const long long r = r0 + lane;
    long long a = 0, b = 0;
    if (r <= rl) {
      a = static_cast<long long>(rp[r]);
      b = static_cast<long long>(rp[r + 1]);
    }
    const int n = rl - r0 + 1 < 32 ? static_cast<int>(rl - r0 + 1) : 32;
    for (int j = 0; j < n; ++j) {
      const long long sa = __shfl_sync(0xffffffffu, a, j), sb = __shfl_sync(0xffffffffu, b, j);
      const double s = seg(sa, sb < end ? sb : end);
      if (lane == 0) {
        if (sb <= end) {
          y[r0 + j] = static_cast<T>(finish(s, alpha, beta, y0, r0 + j, f64));
        } else {
          tail[w] = s;
          tail_row[w] = r0 + j;
        }
      }
    }
  }
}

template <class I, class T>
__global__ void spmv_split_fixup(const I* __restrict__ rp, const T* __restrict__ y0, double alpha, double beta,
                                 T* __restrict__ y, long long chunk, long long chunks, const double* __restrict__ head,
                                 const double* __restrict__ tail, const long long* __restrict__ tail_row) {
  const long long w = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= chunks) return;
  const long long r = tail_row[w];
  if (r < 0) return;
  const long long stop = static_cast<long long>(rp[r + 1]);
  double s = tail[w];
  for (long long u = w + 1; u < chunks; ++u) {
    s += head[u];
    if (stop <= (u + 1) * chunk) break;
  }
  y[r] = static_cast<T>(finish(s, alpha, beta, y0, r, std::is_same_v<T, double>));
}

template <class I, class T>
void launch_split(bool hint, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
                  double alpha, double beta, Tensor& y) {
  const long long rows = y.numel(), nnz = v.numel();
  const long long chunks = (nnz + kChunk - 1) / kChunk;
  Scratch s(size_t(chunks) * (2 * sizeof(double) + sizeof(long long)));
  double* head = s.as<double>();
  double* tail = head + chunks;
  long long* tail_row = reinterpret_cast<long long*>(tail + chunks);
  const int wpb = kSplitThreads / 32;
  const unsigned blocks = unsigned((chunks + wpb - 1) / wpb);
  const T* y0p = y0 ? y0->data<T>() : nullptr;
  auto k = hint ? spmv_split<true, I, T> : spmv_split<false, I, T>;
  k<<<blocks, kSplitThreads, 0, stream()>>>(rp.data<I>(), ci.data<I>(), v.data<T>(), x.data<T>(), y0p, alpha, beta,
                                           y.data<T>(), rows, nnz, chunks, head, tail, tail_row);
  check_launch("spmv_csr (split)");
  spmv_split_fixup<I, T><<<unsigned((chunks + 255) / 256), 256, 0, stream()>>>(rp.data<I>(), y0p, alpha, beta, y.data<T>(),
                                                                           kChunk, chunks, head, tail, tail_row);
  check_launch("spmv_csr (split fixup)");
}

template <class I, class T>
void launch_packed(const SpmvTuning& t, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x,
                   const Tensor* y0, double alpha, double beta, Tensor& y) {
  const long long rows = y.numel();
  const long long warps = (rows + t.rows_per_warp - 1) / t.rows_per_warp;
  const int wpb = t.threads / 32;
  const long long blocks = (warps + wpb - 1) / wpb;
  if (blocks > 0x7fffffffLL)  // (each warp takes its rows once: no grid-stride loop)
    throw InputError("spmv_csr: " + std::to_string(rows) + " rows are too many for the packed kernel at " +
                     std::to_string(t.rows_per_warp) + " rows per warp");
  auto go = [&](auto kernel) {
    kernel<<<unsigned(blocks), t.threads, 0, stream()>>>(rp.data<I>(), ci.data<I>(), v.data<T>(), x.data<T>(),
                                                        y0 ? y0->data<T>() : nullptr, alpha, beta, y.data<T>(), rows,
                                                        t.rows_per_warp);
  };
  auto pick = [&](auto threads, auto pipe) {
    constexpr int TH = decltype(threads)::value;
    constexpr bool P = decltype(pipe)::value;
    if (t.rows_per_warp == 1) {
      if (t.stream_hint) go(spmv_packed<TH, P, true, true, I, T>);
      else go(spmv_packed<TH, P, true, false, I, T>);
    } else {
      if (t.stream_hint) go(spmv_packed<TH, P, false, true, I, T>);
      else go(spmv_packed<TH, P, false, false, I, T>);
    }
  };
  auto by_pipe = [&](auto threads) {
    if (t.pipeline) pick(threads, std::true_type{});
    else pick(threads, std::false_type{});
  };
  if (t.threads == 128) by_pipe(std::integral_constant<int, 128>{});
  else by_pipe(std::integral_constant<int, 256>{});
  check_launch("spmv_csr (packed)");
}

template <class I, class T, int UNR, bool HINT, bool XLAST>
void launch_vector(const SpmvTuning& t, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
                   double alpha, double beta, Tensor& y) {
  const long long rows = y.numel();
  const int lanes = t.lanes;
  const int threads = t.threads;
  // Enough groups to fill the GPU several times over; each group strides over rows (with
  // no cap, one group per row and the block scheduler balances).
  long long blocks = (rows * lanes + threads - 1) / threads;
  if (t.blocks_per_sm > 0) blocks = std::min<long long>(blocks, t.blocks_per_sm * static_cast<long long>(sm_count()));
  blocks = std::min<long long>(blocks, 0x7fffffffLL);
  auto args = [&](auto kernel) {
    if (t.carveout >= -1)
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, t.carveout),
            "spmv_csr: setting the L1/shared carveout");
    kernel<<<unsigned(blocks), threads, 0, stream()>>>(rp.data<I>(), ci.data<I>(), v.data<T>(), x.data<T>(),
                                                      y0 ? y0->data<T>() : nullptr, alpha, beta, y.data<T>(), rows,
                                                      t.aligned);
  };
  if (t.persist_x) persist_in_l2(x.raw(), static_cast<size_t>(x.nbytes()));
  switch (lanes) {
    case 1: args(spmv_vector<1, UNR, HINT, XLAST, I, T>); break;
    case 2: args(spmv_vector<2, UNR, HINT, XLAST, I, T>); break;
    case 4: args(spmv_vector<4, UNR, HINT, XLAST, I, T>); break;
    case 8: args(spmv_vector<8, UNR, HINT, XLAST, I, T>); break;
    case 16: args(spmv_vector<16, UNR, HINT, XLAST, I, T>); break;
    default: args(spmv_vector<32, UNR, HINT, XLAST, I, T>); break;
  }
  check_launch("spmv_csr");
}

template <class I, class T, int UNR>
void launch_mode(const SpmvTuning& t, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x,
                 const Tensor* y0, double alpha, double beta, Tensor& y) {
  if constexpr (std::is_same_v<T, double>) {  // the x_evict_last experiment: f64 only
    if (t.x_evict_last)
      return t.stream_hint ? launch_vector<I, T, UNR, true, true>(t, rp, ci, v, x, y0, alpha, beta, y)
                           : launch_vector<I, T, UNR, false, true>(t, rp, ci, v, x, y0, alpha, beta, y);
  }
  if (t.x_evict_last) throw InputError("spmv_csr: SpmvTuning::x_evict_last is for f64 values only");
  if (t.stream_hint) return launch_vector<I, T, UNR, true, false>(t, rp, ci, v, x, y0, alpha, beta, y);
  launch_vector<I, T, UNR, false, false>(t, rp, ci, v, x, y0, alpha, beta, y);
}

template <class I, class T>
void launch(SpmvTuning t, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
            double alpha, double beta, Tensor& y) {
  const long long rows = y.numel(), nnz = v.numel();
  if (rows == 0) return;
  if (t.kernel <= 0) t = spmv_choice(rows, nnz);
  if (t.lanes <= 0) t.lanes = spmv_choice(rows, nnz).lanes;
  // The experiment knobs, checked rather than ignored.
  if (t.kernel < 1 || t.kernel > 3)
    throw InputError("spmv_csr: SpmvTuning::kernel " + std::to_string(t.kernel) + " (1, 2 or 3)");
  if (t.lanes > 32 || (t.lanes & (t.lanes - 1)) != 0)
    throw InputError("spmv_csr: SpmvTuning::lanes " + std::to_string(t.lanes) + " (1, 2, 4, 8, 16 or 32)");
  if (t.unroll != 1 && t.unroll != 2) throw InputError("spmv_csr: SpmvTuning::unroll " + std::to_string(t.unroll) + " (1 or 2)");
  if (t.blocks_per_sm < 0)
    throw InputError("spmv_csr: SpmvTuning::blocks_per_sm " + std::to_string(t.blocks_per_sm) + " (0: no cap, or more)");
  if (t.carveout < -2 || t.carveout > 100)
    throw InputError("spmv_csr: SpmvTuning::carveout " + std::to_string(t.carveout) + " (-2, -1 or 0 to 100)");
  if (t.threads != 64 && t.threads != 128 && t.threads != 256)
    throw InputError("spmv_csr: SpmvTuning::threads " + std::to_string(t.threads) + " (64, 128 or 256)");
  if (t.kernel == 2 && (t.x_evict_last || t.aligned || t.unroll != 1 || t.persist_x || t.carveout != -2))
    throw InputError("spmv_csr: the split kernel takes no x policy, aligned trips, unroll, L2 window or carveout");
  if (t.kernel == 3 && (t.x_evict_last || t.aligned || t.unroll != 1 || t.persist_x || t.carveout != -2))
    throw InputError("spmv_csr: the packed kernel takes no x policy, aligned trips, unroll, L2 window or carveout");
  if (t.kernel == 3 && (t.rows_per_warp < 1 || t.rows_per_warp > 31))
    throw InputError("spmv_csr: SpmvTuning::rows_per_warp " + std::to_string(t.rows_per_warp) + " (1 to 31)");
  // (Blocks of 64 run no faster than 128 or 256 on power-law or random rows: docs/benchmarks.md.)
  if (t.kernel == 3 && t.threads == 64) throw InputError("spmv_csr: the packed kernel runs blocks of 128 or 256 threads");
  if (t.kernel != 3 && t.pipeline) throw InputError("spmv_csr: SpmvTuning::pipeline is for the packed kernel");
  if (t.kernel == 2 && nnz > 0) return launch_split<I, T>(t.stream_hint, rp, ci, v, x, y0, alpha, beta, y);
  if (t.kernel == 3) return launch_packed<I, T>(t, rp, ci, v, x, y0, alpha, beta, y);
  if (t.unroll == 2) launch_mode<I, T, 2>(t, rp, ci, v, x, y0, alpha, beta, y);
  else launch_mode<I, T, 1>(t, rp, ci, v, x, y0, alpha, beta, y);
}

}  // namespace

namespace {
// The window persist_in_l2 last opened (none: base null), so that repeated calls for the
// same x cost nothing inside a timed loop.
const void* g_window_base = nullptr;
size_t g_window_bytes = 0;
}  // namespace

void persist_in_l2(const void* base, size_t bytes) {
  if (capturing()) throw InputError("spmv_csr: the L2 window (persist_x) cannot be opened while recording a CUDA graph");
  if (base == g_window_base && bytes == g_window_bytes) return;
  int dev = 0, max_window = 0, max_persist = 0;
  check(cudaGetDevice(&dev), "spmv_csr: cudaGetDevice");
  check(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, dev), "spmv_csr: window size");
  check(cudaDeviceGetAttribute(&max_persist, cudaDevAttrMaxPersistingL2CacheSize, dev), "spmv_csr: persisting L2 size");
  if (max_window <= 0 || max_persist <= 0) return;  // the device has no persisting L2
  const size_t window = std::min(bytes, static_cast<size_t>(max_window));
  check(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, std::min(window, static_cast<size_t>(max_persist))),
        "spmv_csr: setting the persisting L2 size");
  cudaStreamAttrValue a = {};
  a.accessPolicyWindow.base_ptr = const_cast<void*>(base);
  a.accessPolicyWindow.num_bytes = window;
  a.accessPolicyWindow.hitRatio = std::min(1.0f, static_cast<float>(max_persist) / static_cast<float>(window));
  a.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  check(cudaStreamSetAttribute(stream(), cudaStreamAttributeAccessPolicyWindow, &a), "spmv_csr: L2 access window");
  g_window_base = base;
  g_window_bytes = bytes;
}

void reset_l2_persistence() {
  if (capturing()) throw InputError("the L2 window cannot be closed while recording a CUDA graph");
  g_window_base = nullptr;
  g_window_bytes = 0;
  cudaStreamAttrValue a = {};
  a.accessPolicyWindow.num_bytes = 0;
  check(cudaStreamSetAttribute(stream(), cudaStreamAttributeAccessPolicyWindow, &a), "closing the L2 access window");
  check(cudaStreamSynchronize(stream()), "closing the L2 access window");
  check(cudaCtxResetPersistingL2Cache(), "releasing persisting L2 lines");
  check(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0), "releasing the persisting L2 set-aside");
}

SpmvTuning spmv_choice(int64_t rows, int64_t nnz) {
  // Fitted on the H200 to the five matrices of `rlx-bench cuda --only sweep` (ms, f64):
  //  - short rows (mean < 12): lanes the largest power of two not above a third of the
  //    mean, two nonzeros per lane per trip (3D Poisson, 7 per row: 2x2 0.121, 2 lanes
  //    0.130, 4 lanes 0.148; banded, 11 per row: 2x2 0.160, 2 lanes 0.164);
  //  - medium rows: lanes the largest power of two not above half the mean (rounded), two per lane,
  //    so one trip covers a typical row, and the matrix loaded evict-first, which keeps x
  //    in L2 (random, 16 per row over 4 M columns: 8x2 evict-first 0.596, 4 lanes 0.779;
  //    block diagonal, 16 per row: 0.268 against its best, 4 lanes, 0.230). Evict-first
  //    hurts where a group reads a row over several trips (Poisson, 2 lanes: 0.198 against
  //    0.130): the rest of each sector has left L1 by the next trip. One group per row
  //    (no grid cap) in blocks of 128: random 0.587 against 0.602-0.608 with the cap of 64
  //    blocks per multiprocessor (cuSPARSE 0.598-0.603), block diagonal 0.253 against 0.243
  //    (cuSPARSE 0.306) — the one choice ahead of cuSPARSE on both;
  //  - long rows (mean >= 64): a warp per row, evict-first, one warp per row in the grid
  //    (no cap: the block scheduler balances rows of very different length; power-law rows
  //    of 1 to 1000: 0.585 against 0.608 with at most 64 blocks per multiprocessor, each
  //    warp then striding over ~7 rows; the split kernel 0.622), and each row's trips
  //    aligned to 32 nonzeros, so a trip reads whole sectors (0.578 against 0.585; ncu saw
  //    101.7 M L2 sectors unaligned against cuSPARSE's 98.2 M, both at 94-97 % of the L2's
  //    throughput). Not for medium rows (random, 16 per row: aligned 0.733 against 0.658).
  //    That warp per row runs as the packed kernel compiled for one row per warp, with its
  //    load pipeline one trip deep (columns loaded a trip before their x gathers; 30
  //    registers): power-law 0.554 / 0.556-0.557 against 0.576-0.580 for the vector kernel
  //    so laid out, cuSPARSE 0.558 / 0.561 in the same runs (two calls); two
  //    trips deep 0.557-0.558, more rows per warp 0.558-0.571. Not for medium rows: the
  //    packed kernel with 8 rows per warp was ahead on random rows (0.577 against 0.588)
  //    but behind on block-diagonal ones (0.409 against 0.255), which the mean row length
  //    cannot tell apart.
  const double mean = rows > 0 ? double(nnz) / double(rows) : 0.0;
  SpmvTuning t;
  t.kernel = 1;
  t.lanes = 1;
  if (mean < 12) {
    while (t.lanes < 32 && 2 * t.lanes <= mean / 3) t.lanes *= 2;
    t.unroll = 2;
  } else if (mean < 64) {
    while (t.lanes < 32 && 2 * t.lanes <= mean / 2 + 0.5) t.lanes *= 2;  // (random:16, 15.99997 per row: 8)
    t.unroll = 2;
    t.stream_hint = true;
    t.blocks_per_sm = 0;
    t.threads = 128;
  } else {
    t.kernel = 3;
    t.rows_per_warp = 1;
    t.pipeline = true;
    t.stream_hint = true;
  }
  return t;
}

void spmv_csr_native(const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
                     double alpha, double beta, Tensor& y, const SpmvTuning& t) {
  const bool i64 = rp.dtype() == DType::I64;
  if (v.dtype() == DType::F64) {
    if (i64) launch<long long, double>(t, rp, ci, v, x, y0, alpha, beta, y);
    else launch<int, double>(t, rp, ci, v, x, y0, alpha, beta, y);
  } else {
    if (i64) launch<long long, float>(t, rp, ci, v, x, y0, alpha, beta, y);
    else launch<int, float>(t, rp, ci, v, x, y0, alpha, beta, y);
  }
}

}  // namespace rlx::cuda
