// sort on the cuda device: stable radix sorts over unsigned keys (CUB).
//
// Each element becomes a key (core/sort_key.hpp, the same keys the cpu device sorts: NaNs
// last, -0 == +0, descending as complemented keys) paired with its position in its row; a
// stable sort of (key, position) is the op's order; the positions give the i64 indices, and
// the sorted keys the values (sort_key::bits_of; NaNs and zeros, whose keys do not keep
// their bits, copied from x by position, so payloads and signs survive bit for bit). Rows
// need not be contiguous: the keys are read through x's view with the sorted axis moved
// last, and the results written back through the output's strides in the same order, so
// neither x nor the results are transposed.
//
// Three strategies (library.hpp's SortStrategy; Auto is the default):
//  - rows of 65 to 4096 elements (to 2048 for 64-bit keys), Auto: a thread block per row
//    sorts it in shared memory (cub::BlockRadixSort), one kernel, x read once;
//  - other rows, or Radix: CUB's device-wide radix sort — one row directly; many rows
//    with keys of 32 bits or fewer as one sort of (row, key) packed in 64 bits; 64-bit keys
//    as two stable passes (by key, then by row);
//  - Segmented (for comparison): cub::DeviceSegmentedRadixSort, a thread block per row
//    whatever its length (one long row sorts on one multiprocessor).
//
// Memory (the device-wide and segmented sorts; the block sort needs none beyond its shared
// memory): keys and positions (double-buffered), the row offsets and CUB's temporary
// storage all come from Scratch (the device's stream-ordered caching allocator, which a
// CUDA graph recording keeps hold of); everything is ordered on stream().
#include <cuda_runtime.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "core/sort_key.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"
#include "devices/cuda/library.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cuda {
namespace {

using i64 = long long;


template <class U>
__global__ void __launch_bounds__(256) make_keys(const U* __restrict__ x, View xv, U* __restrict__ keys,
                                                  int* __restrict__ pos, i64 total, int len, sort_key::Kind kind,
                                                  U inf, bool descending) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
    keys[i] = sort_key::key<U>(x[view_offset(xv, i)], kind, inf, descending);
    pos[i] = int(i % len);
  }
}

__global__ void __launch_bounds__(256) row_offsets(int* __restrict__ offsets, i64 rows, int len) {
  for (i64 r = i64(blockIdx.x) * blockDim.x + threadIdx.x; r <= rows; r += i64(gridDim.x) * blockDim.x)
    offsets[r] = int(r * len);
}

// Element i of the sorted rows (row i / len, rank i % len) came from position pos[i] of its
// row (global: pos[i] is its index among all elements, row-major over the rows). Its value
// is rebuilt from its sorted key where the sort left the keys in the same order (skeys, or
// the low bits of the packed (row, key) words wkeys; sort_key::bits_of), so x is read only
// for NaNs and zeros, whose keys do not keep their bits; with neither, every value is read
// from x by position.
template <class U>
__device__ __forceinline__ U value_from(U k, const U* __restrict__ x, View xv, i64 from, sort_key::Kind kind,
                                        bool descending) {
  bool exact = true;
  const U v = sort_key::bits_of<U>(k, kind, descending, exact);
  return exact ? v : x[view_offset(xv, from)];
}

template <class U>
__global__ void __launch_bounds__(256) write_results(const U* __restrict__ x, View xv, const int* __restrict__ pos,
                                                      const U* __restrict__ skeys, const uint64_t* __restrict__ wkeys,
                                                      View ov, U* __restrict__ values, int64_t* __restrict__ indices,
                                                      i64 total, int len, bool global, sort_key::Kind kind,
                                                      bool descending) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
    const i64 from = global ? i64(pos[i]) : i - i % len + pos[i];
    const i64 o = view_offset(ov, i);
    if (skeys) values[o] = value_from<U>(skeys[i], x, xv, from, kind, descending);
    else if (wkeys) values[o] = value_from<U>(U(wkeys[i]), x, xv, from, kind, descending);
    else values[o] = x[view_offset(xv, from)];
    indices[o] = from % len;
  }
}

// Keys of 32 bits or fewer with their row above them: one radix sort of these orders every
// row at once (row first, then key; stable, so ties keep their order).
template <class U>
__global__ void __launch_bounds__(256) row_major_keys(const U* __restrict__ keys, uint64_t* __restrict__ out,
                                                       int* __restrict__ index, i64 total, int len) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
    out[i] = (uint64_t(i / len) << (8 * sizeof(U))) | uint64_t(keys[i]);
    index[i] = int(i);
  }
}

// The row of each element, from its global index (after the pass by key).
__global__ void __launch_bounds__(256) rows_of(const int* __restrict__ index, uint32_t* __restrict__ row, i64 total,
                                               int len) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x)
    row[i] = uint32_t(index[i] / len);
}

// Bits needed to hold 0 .. n-1.
int bits_for(i64 n) {
  int b = 0;
  while (b < 63 && (i64(1) << b) < n) ++b;
  return b;
}

__global__ void __launch_bounds__(256) iota_int(int* __restrict__ p, i64 total) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) p[i] = int(i);
}

void index_sequence(int* p, i64 total) {
  iota_int<<<grid_for(total, 256), 256, 0, stream()>>>(p, total);
  check_launch("sort iota");
}

// Rows that fit one tile (THREADS x ITEMS elements): a thread block per row sorts it in
// shared memory (cub::BlockRadixSort: stable, LSD over the blocked arrangement, so equal
// keys keep the order of their positions), reading x and writing both results once.
// Positions past the row's end get the largest key and sort after every element (they
// are later in the blocked order than any element with that key too).
template <class U, int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS) block_sort(const U* __restrict__ x, View xv, View ov, U* __restrict__ values,
                                                      int64_t* __restrict__ indices, int len, sort_key::Kind kind,
                                                      U inf, bool descending) {
  using Sort = cub::BlockRadixSort<U, THREADS, ITEMS, int>;
  __shared__ typename Sort::TempStorage temp;
  const i64 row = blockIdx.x, first = row * len;
  U k[ITEMS];
  int p[ITEMS];
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int at = int(threadIdx.x) * ITEMS + j;
    p[j] = at;
    k[j] = at < len ? sort_key::key<U>(x[view_offset(xv, first + at)], kind, inf, descending) : U(~U(0));
  }
  Sort(temp).SortBlockedToStriped(k, p);
#pragma unroll
  for (int j = 0; j < ITEMS; ++j) {
    const int rank = j * THREADS + int(threadIdx.x);
    if (rank < len) {
      const i64 o = view_offset(ov, first + rank);
      values[o] = value_from<U>(k[j], x, xv, first + p[j], kind, descending);
      indices[o] = p[j];
    }
  }
}

// Rows the block sort takes: longer than kBlockSortMin (shorter rows in a 512-slot tile would
// be mostly padding, and many of them are one device-wide sort of (row, key) instead), up
// to 4096 elements for keys of 32 bits or fewer and 2048 for 64-bit keys (a 512 x 8 tile
// of 64-bit keys would fit the 48 KB of static shared memory too, ~34 KB, but has not been
// measured).
constexpr int kBlockSortMin = 64;
template <class U>
constexpr int block_sort_max() {
  return sizeof(U) <= 4 ? 4096 : 2048;
}

template <class U>
void launch_block_sort(const U* xp, View xv, View ov, Tensor& values, Tensor& indices, i64 rows, int len,
                       const sort_key::Layout& lay, bool descending) {
  U* vp = static_cast<U*>(values.raw());
  int64_t* ip = static_cast<int64_t*>(indices.raw());
  auto launch = [&](auto kernel, int threads) {
    kernel<<<unsigned(rows), threads, 0, stream()>>>(xp, xv, ov, vp, ip, len, lay.kind, U(lay.inf_bits), descending);
  };
  if (len <= 512)
    launch(block_sort<U, 128, 4>, 128);
  else if (len <= 2048)
    launch(block_sort<U, 256, 8>, 256);
  else if constexpr (block_sort_max<U>() >= 4096)
    launch(block_sort<U, 512, 8>, 512);
  else
    throw InternalError("cuda sort: a row of " + std::to_string(len) + " for one tile");
  check_launch("sort block_sort");
}

// v with axis `ax` moved last.
View axis_last(View v, int ax) {
  View r = v;
  for (int d = ax; d + 1 < v.rank; ++d) {
    r.shape[d] = v.shape[d + 1];
    r.strides[d] = v.strides[d + 1];
  }
  r.shape[v.rank - 1] = v.shape[ax];
  r.strides[v.rank - 1] = v.strides[ax];
  return r;
}

template <class U>
void sort_typed(const Tensor& x, int ax, bool descending, Tensor& values, Tensor& indices) {
  const i64 total = x.numel();
  const int len = int(x.shape()[size_t(ax)]);
  if (total == 0) return;
  const i64 rows = total / len;
  const sort_key::Layout lay = sort_key::layout_of(x.dtype());
  const View xv = axis_last(view_of(x), ax), ov = axis_last(view_of(values), ax);
  const U* xp = static_cast<const U*>(x.raw());
  const SortStrategy strategy = sort_strategy();
  if (strategy == SortStrategy::Auto && len > kBlockSortMin && len <= block_sort_max<U>())
    return launch_block_sort<U>(xp, xv, ov, values, indices, rows, len, lay, descending);

  Scratch keys(2 * size_t(total) * sizeof(U)), pos(2 * size_t(total) * sizeof(int));
  U* keys_in = keys.as<U>();
  U* keys_out = keys_in + total;
  int* pos_in = pos.as<int>();
  int* pos_out = pos_in + total;
  make_keys<U><<<grid_for(total, 256), 256, 0, stream()>>>(xp, xv, keys_in, pos_in, total, len, lay.kind,
                                                        U(lay.inf_bits), descending);
  check_launch("sort make_keys");
  const int key_bits = int(sizeof(U) * 8);
  // CUB's calls take their temporary storage size first (a call with no storage), then run.
  auto cub_call = [&](const char* what, auto&& call) {
    size_t bytes = 0;
    check(call(nullptr, bytes), std::string(what) + " (sizing)");
    Scratch temp(bytes > 0 ? bytes : 1);
    check(call(temp.get(), bytes), what);
  };
  const int* result = pos_out;
  bool global = false;
  const U* skeys = keys_out;           // sorted keys in the result's order (or null)
  const uint64_t* wkeys = nullptr;     // or packed (row, key) words
  if (strategy != SortStrategy::Segmented && rows == 1) {
    cub_call("cub::DeviceRadixSort::SortPairs", [&](void* t, size_t& b) {
      return cub::DeviceRadixSort::SortPairs(t, b, keys_in, keys_out, pos_in, pos_out, int(total), 0, key_bits,
                                             stream());
    });
  } else if (strategy != SortStrategy::Segmented) {
    if constexpr (sizeof(U) <= 4) {
      // One pass over (row, key): 64-bit keys, the row in the bits above the key's.
      Scratch wide(2 * size_t(total) * sizeof(uint64_t));
      uint64_t* wk_in = wide.as<uint64_t>();
      uint64_t* wk_out = wk_in + total;
      row_major_keys<U><<<grid_for(total, 256), 256, 0, stream()>>>(keys_in, wk_in, pos_in, total, len);
      check_launch("sort row_major_keys");
      cub_call("cub::DeviceRadixSort::SortPairs", [&](void* t, size_t& b) {
        return cub::DeviceRadixSort::SortPairs(t, b, wk_in, wk_out, pos_in, pos_out, int(total), 0,
                                               key_bits + bits_for(rows), stream());
      });
      global = true;
      skeys = nullptr;
      wkeys = wk_out;
    } else {
      // 64-bit keys: by key over all elements, then (stably) by row.
      index_sequence(pos_in, total);
      cub_call("cub::DeviceRadixSort::SortPairs", [&](void* t, size_t& b) {
        return cub::DeviceRadixSort::SortPairs(t, b, keys_in, keys_out, pos_in, pos_out, int(total), 0, key_bits,
                                               stream());
      });
      Scratch rk(2 * size_t(total) * sizeof(uint32_t));
      uint32_t* row_in = rk.as<uint32_t>();
      uint32_t* row_out = row_in + total;
      rows_of<<<grid_for(total, 256), 256, 0, stream()>>>(pos_out, row_in, total, len);
      check_launch("sort rows_of");
      cub_call("cub::DeviceRadixSort::SortPairs (by row)", [&](void* t, size_t& b) {
        return cub::DeviceRadixSort::SortPairs(t, b, row_in, row_out, pos_out, pos_in, int(total), 0, bits_for(rows),
                                               stream());
      });
      result = pos_in;
      global = true;
      skeys = nullptr;  // (keys_out is in key order, not the final one: values by position)
    }
  } else {
    Scratch offsets(size_t(rows + 1) * sizeof(int));
    row_offsets<<<grid_for(rows + 1, 256), 256, 0, stream()>>>(offsets.as<int>(), rows, len);
    check_launch("sort row_offsets");
    const int* begin = offsets.as<int>();
    cub_call("cub::DeviceSegmentedRadixSort::SortPairs", [&](void* t, size_t& b) {
      return cub::DeviceSegmentedRadixSort::SortPairs(t, b, keys_in, keys_out, pos_in, pos_out, int(total), int(rows),
                                                      begin, begin + 1, 0, key_bits, stream());
    });
  }
  write_results<U><<<grid_for(total, 256), 256, 0, stream()>>>(
      xp, xv, result, skeys, wkeys, ov, static_cast<U*>(values.raw()), static_cast<int64_t*>(indices.raw()), total, len,
      global, lay.kind, descending);
  check_launch("sort write_results");
}

Capability sort_supports(const ir::Node& n, const ir::Graph& g) {
  const TensorType& t = g.type(n.inputs.at(0));
  if (sort_key::layout_of(t.dtype).bytes == 0)
    return Capability::no("no " + std::string(dtype_name(t.dtype)) + " sort kernel on cuda");
  if (t.shape.size() > size_t(kMaxRank))
    return Capability::no("cuda sort: rank " + std::to_string(t.shape.size()) + " (at most " +
                          std::to_string(kMaxRank) + ")");
  if (numel(t.shape) > i64(INT32_MAX))
    return Capability::no("cuda sort: " + std::to_string(numel(t.shape)) +
                          " elements (positions and CUB's item counts are int: at most 2^31 - 1)");
  return Capability::yes();
}

void sort_run(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const int ax = normalize_axis(n.attrs.get_int("axis"), x.rank());
  const bool desc = n.attrs.get_bool("descending");
  switch (sort_key::layout_of(x.dtype()).bytes) {
    case 1: return sort_typed<uint8_t>(x, ax, desc, out[0], out[1]);
    case 2: return sort_typed<uint16_t>(x, ax, desc, out[0], out[1]);
    case 4: return sort_typed<uint32_t>(x, ax, desc, out[0], out[1]);
    case 8: return sort_typed<uint64_t>(x, ax, desc, out[0], out[1]);
    default: throw InternalError(std::string("cuda sort: given ") + dtype_name(x.dtype()));
  }
}

}  // namespace

namespace {
// 0: not set (the environment decides), else 1 + SortStrategy.
std::atomic<int> g_strategy{0};
}  // namespace

SortStrategy sort_strategy() {
  if (int v = g_strategy.load(); v > 0) return SortStrategy(v - 1);
  static const SortStrategy from_env =
      std::array{SortStrategy::Auto, SortStrategy::Radix, SortStrategy::Segmented}[size_t(
          env_choice("RLX_CUDA_SORT", {"auto", "radix", "segmented"}))];
  return from_env;
}

void set_sort_strategy(SortStrategy s) { g_strategy.store(1 + int(s)); }

const char* sort_strategy_name(SortStrategy s) {
  switch (s) {
    case SortStrategy::Auto: return "auto";
    case SortStrategy::Radix: return "radix";
    case SortStrategy::Segmented: return "segmented";
  }
  return "?";
}

void add_sort_kernels(KernelTable& t) { t.add(PredicateKernel{"sort", sort_supports, sort_run}); }

}  // namespace rlx::cuda
