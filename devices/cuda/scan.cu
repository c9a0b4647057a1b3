// cumsum on the cuda device (the scan), inclusive or exclusive, forward or reversed.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "devices/cuda/kernels.cuh"
#include "devices/cuda/kernels.hpp"

namespace rlx::cuda {
namespace {

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

}  // namespace

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

}  // namespace rlx::cuda
