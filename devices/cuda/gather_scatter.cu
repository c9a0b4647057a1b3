// gather, scatter_add and update_slice on the cuda device, and the sort scatter_add groups
// its indices with. Each reads its index (or start) check back with one stream sync (while a
// CUDA graph is being recorded, through a recorded_check word instead): that relies on every
// launch going on the one stream().
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "devices/cuda/kernels.cuh"
#include "devices/cuda/kernels.hpp"

namespace rlx::cuda {
namespace {

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

// The message for index position `first` of idx (at device address ip), read back once the
// stream is synchronized.
std::string bad_index(const void* ip, DType t, u64 first, i64 A, int axis, const char* op, const std::string& where) {
  int64_t v = 0;
  if (t == DType::I32) {
    int32_t w = 0;
    check(cudaMemcpy(&w, static_cast<const int32_t*>(ip) + first, sizeof(w), cudaMemcpyDeviceToHost), "index check");
    v = w;
  } else {
    check(cudaMemcpy(&v, static_cast<const int64_t*>(ip) + first, sizeof(v), cudaMemcpyDeviceToHost), "index check");
  }
  return std::string(op) + ": index " + std::to_string(v) + " is out of range for axis " + std::to_string(axis) +
         " of extent " + std::to_string(A) + where;
}

// Validates and normalizes the indices into nidx (J int64 values). Throws InputError
// naming the first bad index, as the reference does: this synchronizes the stream once
// (the error has to be known before returning). While a CUDA graph is being recorded it
// cannot: the check then reports through a recorded_check word (common.hpp), bad indices
// read element 0 meanwhile, and the replay's results are refused where they are read.
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
  const DType t = idx.dtype();
  const bool recording = capturing();
  std::optional<Scratch> word;
  u64* bad = nullptr;
  if (recording) {
    const std::string where = node_suffix() + ", in a replayed CUDA graph";
    bad = recorded_check([=](u64 first) { return bad_index(ip, t, first, A, axis, op, where); });
  } else {
    word.emplace(sizeof(u64));
    bad = word->as<u64>();
    check(cudaMemsetAsync(bad, 0xff, sizeof(u64), stream()), "index check");
  }
  if (t == DType::I32)
    check_indices<int32_t><<<grid_for(J, 256), 256, 0, stream()>>>(static_cast<const int32_t*>(ip), J, A, nidx, bad);
  else
    check_indices<int64_t><<<grid_for(J, 256), 256, 0, stream()>>>(static_cast<const int64_t*>(ip), J, A, nidx, bad);
  check_launch("check_indices");
  if (recording) return;
  u64 first = ~0ull;
  check(cudaMemcpyAsync(&first, bad, sizeof(u64), cudaMemcpyDeviceToHost, stream()), "index check");
  check(cudaStreamSynchronize(stream()), "index check");
  if (first != ~0ull) throw InputError(bad_index(ip, t, first, A, axis, op, node_suffix()));
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

// y[(o, s + j, in)] = b[(o, j, in)] over [outer, U, inner] with s = *start, when s lies in
// [0, room]; otherwise nothing is written and *bad drops to 0 (update_slice's check word).
template <class W, class I>
__global__ void __launch_bounds__(256) write_block(W* __restrict__ y, const W* __restrict__ b, const I* __restrict__ start,
                                                   i64 n, i64 U, i64 inner, i64 A, i64 room, u64* bad) {
  const i64 s = i64(*start);
  if (s < 0 || s > room) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicMin(bad, 0ull);
    return;
  }
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) {
    const i64 t = i / inner, in = i - t * inner;
    const i64 o = t / U, j = t - o * U;
    y[(o * A + s + j) * inner + in] = b[i];
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

}  // namespace

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

// out = x (skipped in place: out over x's buffer, update_slice's inplace_input), then one
// launch writes the block; the start is read on the device, so a recorded step takes each
// replay's position. Its range check reports as gather's does: one stream sync, or a
// recorded_check word inside a recording.
void update_slice(const Tensor& x, const Tensor& block, const Tensor& start, int axis, Tensor& out) {
  const size_t es = element_size(x, "update_slice");
  if (axis < 0) axis += x.rank();
  if (out.raw() != x.raw() && out.numel() > 0) copy_strided(x.raw(), view_of(x), out.raw(), es);
  const i64 n = block.numel();
  if (n == 0) return;
  i64 outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  const i64 A = x.shape()[size_t(axis)], U = block.shape()[size_t(axis)], room = A - U;
  const void* bp = block.raw();
  std::optional<Scratch> bcopy;
  if (!block.is_contiguous()) {
    bcopy.emplace(size_t(n) * es);
    copy_strided(block.raw(), view_of(block), bcopy->get(), es);
    bp = bcopy->get();
  }
  const void* sp = start.raw();
  const bool wide = start.dtype() == DType::I64;
  auto describe = [sp, wide, U, A, axis](const std::string& where) {
    int64_t v = 0;
    if (wide) {
      check(cudaMemcpy(&v, sp, sizeof(v), cudaMemcpyDeviceToHost), "update_slice check");
    } else {
      int32_t w = 0;
      check(cudaMemcpy(&w, sp, sizeof(w), cudaMemcpyDeviceToHost), "update_slice check");
      v = w;
    }
    return update_slice_bad_start(v, A, U, axis) + where;
  };
  const bool recording = capturing();
  std::optional<Scratch> word;
  u64* bad = nullptr;
  if (recording) {
    const std::string where = node_suffix() + ", in a replayed CUDA graph";
    bad = recorded_check([=](u64) { return describe(where); });
  } else {
    word.emplace(sizeof(u64));
    bad = word->as<u64>();
    check(cudaMemsetAsync(bad, 0xff, sizeof(u64), stream()), "update_slice check");
  }
  visit_esize(es, "update_slice", [&](auto tag) {
    using W = decltype(tag);
    W* y = static_cast<W*>(out.raw());
    const W* b = static_cast<const W*>(bp);
    if (wide)
      write_block<W, int64_t><<<grid_for(n, 256), 256, 0, stream()>>>(y, b, static_cast<const int64_t*>(sp), n, U, inner,
                                                                       A, room, bad);
    else
      write_block<W, int32_t><<<grid_for(n, 256), 256, 0, stream()>>>(y, b, static_cast<const int32_t*>(sp), n, U, inner,
                                                                       A, room, bad);
    check_launch("update_slice");
  });
  if (recording) return;
  u64 first = ~0ull;
  check(cudaMemcpyAsync(&first, bad, sizeof(u64), cudaMemcpyDeviceToHost, stream()), "update_slice check");
  check(cudaStreamSynchronize(stream()), "update_slice check");
  if (first != ~0ull) throw InputError(describe(node_suffix()));
}

}  // namespace rlx::cuda
