// The cuda device's CSR SpMV: spmv.hpp describes the design.
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv.hpp"

#include <algorithm>
#include <tuple>
#include <type_traits>

namespace rlx::cuda {
namespace {

// Matrix entries are read once: with HINT they are loaded evict-first (ld.global.cs), so
// they do not push x (gathered many times) out of the caches.
template <bool HINT, class S>
__device__ __forceinline__ S once(const S* p) {
  if constexpr (HINT) return __ldcs(p);
  else return *p;
}

__device__ __forceinline__ double finish(double acc, double alpha, double beta, const void* y0, long long r, bool f64) {
  double out = alpha * acc;
  if (y0) out += beta * (f64 ? static_cast<const double*>(y0)[r] : double(static_cast<const float*>(y0)[r]));
  return out;
}

// ---------------------------------------------------------------- vector kernel
// A group of L lanes per row, rows strided over the groups of the grid.
template <int L, int UNR, bool HINT, class I, class T>
__global__ void __launch_bounds__(256) spmv_vector(const I* __restrict__ rp, const I* __restrict__ ci,
                                                   const T* __restrict__ v, const T* __restrict__ x,
                                                   const T* __restrict__ y0, double alpha, double beta,
                                                   T* __restrict__ y, long long rows) {
  const long long group = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / L;
  const int lane = threadIdx.x & (L - 1);
  const long long ngroups = static_cast<long long>(gridDim.x) * blockDim.x / L;
  // The loop is uniform across the warp (the shuffles need every lane): the warp's first
  // group decides, and groups past the last row idle through it.
  const long long first = group - (threadIdx.x & 31) / L;
  for (long long base = first; base < rows; base += ngroups) {
    const long long r = base + (group - first);
    long long b = 0, e = 0;
    if (r < rows) {
      b = static_cast<long long>(rp[r]);
      e = static_cast<long long>(rp[r + 1]);
    }
    double acc = 0;
    if constexpr (UNR == 1) {
      for (long long k = b + lane; k < e; k += L)
        acc += static_cast<double>(once<HINT>(v + k)) * static_cast<double>(__ldg(x + once<HINT>(ci + k)));
    } else {
      // Two nonzeros per lane per trip, two accumulators: twice the gathers in flight.
      double acc2 = 0;
      long long k = b + lane;
      for (; k + L < e; k += 2 * L) {
        const I c0 = once<HINT>(ci + k), c1 = once<HINT>(ci + k + L);
        const T v0 = once<HINT>(v + k), v1 = once<HINT>(v + k + L);
        acc += static_cast<double>(v0) * static_cast<double>(__ldg(x + c0));
        acc2 += static_cast<double>(v1) * static_cast<double>(__ldg(x + c1));
      }
      if (k < e) acc += static_cast<double>(once<HINT>(v + k)) * static_cast<double>(__ldg(x + once<HINT>(ci + k)));
      acc += acc2;
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o, L);
    if (lane == 0 && r < rows) y[r] = static_cast<T>(finish(acc, alpha, beta, y0, r, std::is_same_v<T, double>));
  }
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

__device__ __forceinline__ double warp_sum(double s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
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
  const long long base = w * kChunk, end = base + kChunk < nnz ? base + kChunk : nnz;
  // Products: all loads of the chunk issued before the first multiply.
  {
    I c[kSplitK];
    T a[kSplitK];
#pragma unroll
    for (int m = 0; m < kSplitK; ++m) {
      const long long k = base + m * 32 + lane;
      c[m] = k < end ? once<HINT>(ci + k) : I(0);
      a[m] = k < end ? once<HINT>(v + k) : T(0);
    }
#pragma unroll
    for (int m = 0; m < kSplitK; ++m) pr[m * 32 + lane] = static_cast<double>(a[m]) * static_cast<double>(__ldg(x + c[m]));
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
                                 T* __restrict__ y, long long nnz, long long chunks, const double* __restrict__ head,
                                 const double* __restrict__ tail, const long long* __restrict__ tail_row) {
  const long long w = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= chunks) return;
  const long long r = tail_row[w];
  if (r < 0) return;
  const long long stop = static_cast<long long>(rp[r + 1]);
  double s = tail[w];
  for (long long u = w + 1; u < chunks; ++u) {
    s += head[u];
    if (stop <= (u + 1) * kChunk) break;
  }
  y[r] = static_cast<T>(finish(s, alpha, beta, y0, r, std::is_same_v<T, double>));
}

// ---------------------------------------------------------------- slab kernel (experiment)
// For long rows with columns spread over an x much larger than L1: the columns are cut
// into slabs of W, and the grid sweeps slab by slab (slab in blockIdx.y, so every row's
// piece of slab 0 is done before slab 1 starts), so the x a multiprocessor gathers from
// at any time is one slab that fits its L1. Each row's piece of a slab is contiguous when
// the columns of a row are sorted (required). Partial sums per (slab, row) are added in
// slab order by a second kernel (deterministic).

// seg[r * (S + 1) + s] = the first nonzero of row r whose column is >= s * W (row end if
// none), for s = 0..S. A warp per row: element k starts the pieces of every slab after
// that of element k - 1, up to its own.
template <class I>
__global__ void __launch_bounds__(256) slab_offsets(const I* __restrict__ rp, const I* __restrict__ ci,
                                                    long long rows, int S, long long W, I* __restrict__ seg) {
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  for (long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
    const long long b = static_cast<long long>(rp[r]), e = static_cast<long long>(rp[r + 1]);
    I* out = seg + r * (S + 1);
    for (long long k = b + lane; k < e; k += 32) {
      const long long slab = static_cast<long long>(ci[k]) / W;
      const long long prev = k == b ? -1 : static_cast<long long>(ci[k - 1]) / W;
      for (long long t = prev + 1; t <= slab && t <= S; ++t) out[t] = static_cast<I>(k);
    }
    // Slabs after the last nonzero's (all of them for an empty row) start at the row's end.
    const long long last = e > b ? static_cast<long long>(ci[e - 1]) / W : -1;
    for (long long t = last + 1 + lane; t <= S; t += 32) out[t] = static_cast<I>(e);
  }
}

template <int L, class I, class T>
__global__ void __launch_bounds__(256) spmv_slab(const I* __restrict__ seg, const I* __restrict__ ci,
                                                 const T* __restrict__ v, const T* __restrict__ x, long long rows,
                                                 int S, double* __restrict__ partial) {
  const long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / L;
  const int lane = threadIdx.x & (L - 1);
  const int s = static_cast<int>(blockIdx.y);
  long long b = 0, e = 0;
  if (r < rows) {
    b = static_cast<long long>(seg[r * (S + 1) + s]);
    e = static_cast<long long>(seg[r * (S + 1) + s + 1]);
  }
  double acc = 0;
  for (long long k = b + lane; k < e; k += L)
    acc += static_cast<double>(__ldcs(v + k)) * static_cast<double>(__ldg(x + __ldcs(ci + k)));
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o, L);
  if (lane == 0 && r < rows) partial[static_cast<long long>(s) * rows + r] = acc;
}

template <class T>
__global__ void __launch_bounds__(256) slab_combine(const double* __restrict__ partial, int S, long long rows,
                                                    double alpha, double beta, const T* __restrict__ y0,
                                                    T* __restrict__ y) {
  const long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double acc = 0;
  for (int s = 0; s < S; ++s) acc += partial[static_cast<long long>(s) * rows + r];
  y[r] = static_cast<T>(finish(acc, alpha, beta, y0, r, std::is_same_v<T, double>));
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
                                                                           nnz, chunks, head, tail, tail_row);
  check_launch("spmv_csr (split fixup)");
}

// The slab experiment: false (nothing launched) when the columns need more than
// kMaxSlabs slabs. With reuse, the offsets of the last matrix with the same arrays and
// shape are used again (for timing the sweep apart from the offsets: the caller must not
// have changed the structure).
constexpr int kMaxSlabs = 64;

template <class I, class T>
bool launch_slab(const SpmvTuning& t, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x,
                 const Tensor* y0, double alpha, double beta, Tensor& y) {
  const long long rows = y.numel(), cols = x.numel(), W = t.slab_cols > 0 ? t.slab_cols : 32768;
  const long long slabs = (cols + W - 1) / W;
  if (slabs < 1 || slabs > kMaxSlabs) return false;
  const int S = static_cast<int>(slabs);
  // The reused offsets and what they were made from (never destroyed: a device block must
  // not be freed after the CUDA runtime has gone at process exit).
  static Tensor& kept = *new Tensor();
  static std::tuple<const void*, const void*, long long, long long, long long> kept_key;
  const auto key = std::make_tuple(rp.raw(), ci.raw(), rows, v.numel(), W);
  Tensor seg;
  if (t.slab_reuse && kept.defined() && kept_key == key) {
    seg = kept;
  } else {
    seg = Tensor::empty(rp.dtype(), {rows * (S + 1)}, allocator());
    slab_offsets<I><<<unsigned(std::min<long long>((rows * 32 + 255) / 256, 64LL * sm_count())), 256, 0, stream()>>>(
        rp.data<I>(), ci.data<I>(), rows, S, W, seg.data<I>());
    check_launch("spmv_csr (slab offsets)");
    if (t.slab_reuse) {
      kept = seg;
      kept_key = key;
    }
  }
  Scratch partial(size_t(S) * size_t(rows) * sizeof(double));
  constexpr int L = 8;
  const dim3 grid(unsigned((rows * L + 255) / 256), unsigned(S));
  spmv_slab<L, I, T><<<grid, 256, 0, stream()>>>(seg.data<I>(), ci.data<I>(), v.data<T>(), x.data<T>(), rows, S,
                                                 partial.as<double>());
  check_launch("spmv_csr (slab)");
  slab_combine<T><<<unsigned((rows + 255) / 256), 256, 0, stream()>>>(partial.as<double>(), S, rows, alpha, beta,
                                                                     y0 ? y0->data<T>() : nullptr, y.data<T>());
  check_launch("spmv_csr (slab combine)");
  return true;
}

template <class I, class T, int UNR, bool HINT>
void launch_vector(const SpmvTuning& t, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
                   double alpha, double beta, Tensor& y) {
  const long long rows = y.numel();
  const int lanes = t.lanes;
  const int threads = 256;
  // Enough groups to fill the GPU several times over; each group strides over rows.
  long long blocks = (rows * lanes + threads - 1) / threads;
  blocks = std::min<long long>(blocks, 64LL * sm_count());
  auto args = [&](auto kernel) {
    if (t.carveout >= -1)
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, t.carveout),
            "spmv_csr: setting the L1/shared carveout");
    kernel<<<unsigned(blocks), threads, 0, stream()>>>(rp.data<I>(), ci.data<I>(), v.data<T>(), x.data<T>(),
                                                      y0 ? y0->data<T>() : nullptr, alpha, beta, y.data<T>(), rows);
  };
  switch (lanes) {
    case 1: args(spmv_vector<1, UNR, HINT, I, T>); break;
    case 2: args(spmv_vector<2, UNR, HINT, I, T>); break;
    case 4: args(spmv_vector<4, UNR, HINT, I, T>); break;
    case 8: args(spmv_vector<8, UNR, HINT, I, T>); break;
    case 16: args(spmv_vector<16, UNR, HINT, I, T>); break;
    default: args(spmv_vector<32, UNR, HINT, I, T>); break;
  }
  check_launch("spmv_csr");
}

template <class I, class T>
void launch(SpmvTuning t, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
            double alpha, double beta, Tensor& y) {
  const long long rows = y.numel(), nnz = v.numel();
  if (rows == 0) return;
  if (t.kernel <= 0) t = spmv_choice(rows, nnz);
  if (t.lanes <= 0) t.lanes = spmv_choice(rows, nnz).lanes;
  if (t.kernel == 2 && nnz > 0) return launch_split<I, T>(t.stream_hint, rp, ci, v, x, y0, alpha, beta, y);
  if (t.kernel == 3 && launch_slab<I, T>(t, rp, ci, v, x, y0, alpha, beta, y)) return;
  if (t.unroll == 2) {
    if (t.stream_hint) launch_vector<I, T, 2, true>(t, rp, ci, v, x, y0, alpha, beta, y);
    else launch_vector<I, T, 2, false>(t, rp, ci, v, x, y0, alpha, beta, y);
  } else {
    if (t.stream_hint) launch_vector<I, T, 1, true>(t, rp, ci, v, x, y0, alpha, beta, y);
    else launch_vector<I, T, 1, false>(t, rp, ci, v, x, y0, alpha, beta, y);
  }
}

}  // namespace

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
  //    0.130): the rest of each sector has left L1 by the next trip;
  //  - long rows (mean >= 64): a warp per row, evict-first (power-law rows of 1 to 1000:
  //    0.608; the split kernel 0.622).
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
  } else {
    t.lanes = 32;
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
