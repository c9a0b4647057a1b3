// sort on the cuda device: CUB's stable segmented radix sort over unsigned keys.
//
// Each element becomes a key (core/sort_key.hpp, the same keys the cpu device sorts: NaNs
// last, -0 == +0, descending as complemented keys) paired with its position in its row;
// cub::DeviceSegmentedRadixSort::SortPairs sorts every row (a segment) stably, which is the
// op's order; then the positions give the values (copied bit for bit from x) and the i64
// indices. Rows need not be contiguous: the keys are read through x's view with the
// sorted axis moved last, and the results written back through the output's strides in
// the same order, so neither x nor the results are ever transposed in memory.
//
// Memory: keys and positions (double-buffered), the row offsets and CUB's temporary
// storage all come from Scratch (the device's stream-ordered caching allocator, which a
// CUDA graph recording keeps hold of); everything is ordered on stream().
#include <cuda_runtime.h>

#include <cub/device/device_segmented_radix_sort.cuh>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/sort_key.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/library.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cuda {
namespace {

using i64 = long long;

unsigned blocks_for(i64 n) {
  const i64 b = (n + 255) / 256;
  return unsigned(b < 65535 ? (b > 0 ? b : 1) : 65535);  // grid-stride loops cover the rest
}

// Offset of element i (row-major over v.shape) through v.strides.
__device__ i64 offset_of(const View& v, i64 i) {
  i64 off = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    off += (i % v.shape[d]) * v.strides[d];
    i /= v.shape[d];
  }
  return off;
}

template <class U>
__global__ void __launch_bounds__(256) make_keys(const U* __restrict__ x, View xv, U* __restrict__ keys,
                                                  int* __restrict__ pos, i64 total, int len, sort_key::Kind kind,
                                                  U inf, bool descending) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
    keys[i] = sort_key::key<U>(x[offset_of(xv, i)], kind, inf, descending);
    pos[i] = int(i % len);
  }
}

__global__ void __launch_bounds__(256) row_offsets(int* __restrict__ offsets, i64 rows, int len) {
  for (i64 r = i64(blockIdx.x) * blockDim.x + threadIdx.x; r <= rows; r += i64(gridDim.x) * blockDim.x)
    offsets[r] = int(r * len);
}

// Element i of the sorted rows (row i / len, rank i % len) came from position pos[i] of its row.
template <class U>
__global__ void __launch_bounds__(256) write_results(const U* __restrict__ x, View xv, const int* __restrict__ pos,
                                                      View ov, U* __restrict__ values, int64_t* __restrict__ indices,
                                                      i64 total, int len) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += i64(gridDim.x) * blockDim.x) {
    const i64 p = pos[i];
    const i64 o = offset_of(ov, i);
    values[o] = x[offset_of(xv, i - i % len + p)];
    indices[o] = p;
  }
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

  Scratch keys(2 * size_t(total) * sizeof(U)), pos(2 * size_t(total) * sizeof(int));
  Scratch offsets(size_t(rows + 1) * sizeof(int));
  U* keys_in = keys.as<U>();
  U* keys_out = keys_in + total;
  int* pos_in = pos.as<int>();
  int* pos_out = pos_in + total;
  make_keys<U><<<blocks_for(total), 256, 0, stream()>>>(xp, xv, keys_in, pos_in, total, len, lay.kind,
                                                        U(lay.inf_bits), descending);
  check_launch("sort make_keys");
  row_offsets<<<blocks_for(rows + 1), 256, 0, stream()>>>(offsets.as<int>(), rows, len);
  check_launch("sort row_offsets");

  const int* begin = offsets.as<int>();
  size_t temp_bytes = 0;
  check(cub::DeviceSegmentedRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out, int(total),
                                                 int(rows), begin, begin + 1, 0, int(sizeof(U) * 8), stream()),
        "cub::DeviceSegmentedRadixSort::SortPairs (sizing)");
  Scratch temp(temp_bytes > 0 ? temp_bytes : 1);
  check(cub::DeviceSegmentedRadixSort::SortPairs(temp.get(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                 int(total), int(rows), begin, begin + 1, 0, int(sizeof(U) * 8),
                                                 stream()),
        "cub::DeviceSegmentedRadixSort::SortPairs");

  write_results<U><<<blocks_for(total), 256, 0, stream()>>>(xp, xv, pos_out, ov, static_cast<U*>(values.raw()),
                                                           static_cast<int64_t*>(indices.raw()), total, len);
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
                          " elements (CUB's segmented radix sort counts with int: at most 2^31 - 1)");
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

void add_sort_kernels(std::vector<LibraryKernel>& t) { t.push_back({"sort", sort_supports, sort_run}); }

}  // namespace rlx::cuda
