// tile_csr on the cuda device (spmv_tiled.hpp): the tiled layout of a CSR matrix built on
// the GPU, the same arrays bit for bit as the cpu and reference devices build.
//
//   1. check_row_ptr: the lowest row whose pointers are bad (after row_ptr[0] and
//      row_ptr[rows], read back first).
//   2. tile_keys (a warp per row, rows below the first bad one): each nonzero's tile
//      (row block * panels + panel) as a sort key, and its word (row in the block << 16 |
//      column in the panel); the lowest row with a column outside [0, cols).
//      Errors are then reported as the cpu device reports them (the lowest row's).
//   3. A stable radix sort of (tile, nonzero index) over the bits a tile number needs: the
//      nonzeros by tile, in CSR order inside each tile (by row, columns as given).
//   4. gather: rc and values in that order. tile_starts: each tile's first position, by a
//      binary search of the sorted keys. tile_shares: share w of a tile of m nonzeros at
//      the first row start at or past m * w / warps, by a binary search of the (ascending)
//      rows of the tile when the target falls inside a row.
// Work space: about 28 bytes per nonzero (keys, indices, words: 20; the sort's own buffers), from
// Scratch. Up to 2^31 - 1 nonzeros (CUB's item count) and 2^32 - 1 tiles.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv_tiled.hpp"

namespace rlx::cuda {
namespace {

unsigned grid_for(long long n, int threads) {
  return unsigned(std::clamp<long long>((n + threads - 1) / threads, 1, 65535LL * 32));
}

template <class I>
__global__ void check_row_ptr(const I* __restrict__ rp, long long rows, long long nnz, unsigned long long* bad) {
  for (long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x; r < rows; r += (long long)gridDim.x * blockDim.x) {
    const long long k0 = rp[r], k1 = rp[r + 1];
    if (k0 < 0 || k1 < k0 || k1 > nnz) atomicMin(bad, (unsigned long long)r);
  }
}

template <class I>
__global__ void tile_keys(const I* __restrict__ rp, const I* __restrict__ ci, long long rows, long long cols, int rb,
                          int panel, long long panels, unsigned* __restrict__ key, unsigned* __restrict__ word,
                          unsigned* __restrict__ index, unsigned long long* bad_col) {
  const int lane = threadIdx.x & 31;
  const long long warps = (long long)gridDim.x * blockDim.x / 32;
  for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
    const long long b = r / rb, k1 = rp[r + 1];
    const unsigned local = unsigned(r - b * rb) << 16;
    for (long long k = (long long)rp[r] + lane; k < k1; k += 32) {  // (i32: no wrap near 2^31)
      const long long c = ci[k];
      if (c < 0 || c >= cols) {
        atomicMin(bad_col, (unsigned long long)r);
        continue;
      }
      const long long p = c / panel;
      key[k] = unsigned(b * panels + p);
      word[k] = local | unsigned(c - p * panel);
      index[k] = unsigned(k);
    }
  }
}

__global__ void gather(const unsigned* __restrict__ order, const unsigned* __restrict__ word,
                       const double* __restrict__ v, long long nnz, unsigned* __restrict__ rc, double* __restrict__ val) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nnz; i += (long long)gridDim.x * blockDim.x) {
    const unsigned k = order[i];
    rc[i] = word[k];
    val[i] = v[k];
  }
}

// start[t] = the first position whose key is >= t, t in [0, tiles].
__global__ void tile_starts(const unsigned* __restrict__ key, long long nnz, long long tiles, long long* start) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t <= tiles; t += (long long)gridDim.x * blockDim.x) {
    long long lo = 0, hi = nnz;
    while (lo < hi) {
      const long long mid = (lo + hi) / 2;
      if (key[mid] < t) lo = mid + 1; else hi = mid;
    }
    start[t] = lo;
  }
}

__global__ void tile_shares(const long long* __restrict__ start, const unsigned* __restrict__ rc, long long tiles,
                            int warps, long long nnz, long long* share) {
  const long long n = tiles * warps;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i <= n; i += (long long)gridDim.x * blockDim.x) {
    if (i == n) {
      share[n] = nnz;
      continue;
    }
    const long long t = i / warps, w = i % warps, base = start[t], m = start[t + 1] - base;
    long long s = m * w / warps;
    if (s > 0 && s < m && (rc[base + s] >> 16) == (rc[base + s - 1] >> 16)) {  // inside a row: to its end
      const unsigned row = rc[base + s] >> 16;
      long long hi = m;
      while (s < hi) {
        const long long mid = (s + hi) / 2;
        if ((rc[base + mid] >> 16) <= row) s = mid + 1; else hi = mid;
      }
    }
    share[i] = base + s;
  }
}

int bits_for(unsigned long long n) {  // bits to hold 0 .. n - 1
  int b = 0;
  while (b < 64 && (n - 1) >> b) ++b;
  return std::max(b, 1);
}

template <class T>
T read_one(const T* p) {
  T v;
  check(cudaMemcpyAsync(&v, p, sizeof(T), cudaMemcpyDeviceToHost, stream()), "tile_csr: read back");
  check(cudaStreamSynchronize(stream()), "tile_csr: read back");
  return v;
}

template <class I>
void build(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, long long cols, int rb, int panel,
           int warps, Tensor& share, Tensor& rc, Tensor& val) {
  const long long rows = row_ptr.numel() - 1, nnz = col_idx.numel();
  const I* rp = row_ptr.data<I>();
  const I* ci = col_idx.data<I>();
  const long long first = read_one(rp), last = read_one(rp + rows);
  if (first != 0) throw InputError("tile_csr: row_ptr starts at " + std::to_string(first) + ", not 0");
  if (last != nnz)
    throw InputError("tile_csr: row_ptr ends at " + std::to_string(last) + " for " + std::to_string(nnz) + " nonzeros");
  const long long row_blocks = (rows + rb - 1) / rb, panels = std::max<long long>(1, (cols + panel - 1) / panel);
  const long long tiles = row_blocks * panels;
  Scratch flags(2 * sizeof(unsigned long long));
  unsigned long long* bad = flags.as<unsigned long long>();
  check(cudaMemsetAsync(bad, 0xff, 2 * sizeof(unsigned long long), stream()), "tile_csr: flags");
  if (rows > 0) {
    check_row_ptr<I><<<grid_for(rows, 256), 256, 0, stream()>>>(rp, rows, nnz, bad);
    check_launch("tile_csr (row pointers)");
  }
  const unsigned long long bad_ptr = read_one(bad);
  const long long good_rows = bad_ptr < (unsigned long long)rows ? (long long)bad_ptr : rows;
  // Keys, words and indices, then the sort's outputs (keys and indices).
  const size_t n = size_t(std::max<long long>(nnz, 1));
  Scratch work(5 * n * sizeof(unsigned));
  unsigned *key = work.as<unsigned>(), *word = key + n, *index = word + n, *key_sorted = index + n,
           *order = key_sorted + n;
  if (good_rows > 0) {
    tile_keys<I><<<grid_for(good_rows * 32, 256), 256, 0, stream()>>>(rp, ci, good_rows, cols, rb, panel, panels, key,
                                                                       word, index, bad + 1);
    check_launch("tile_csr (tile keys)");
  }
  const unsigned long long bad_col = read_one(bad + 1);
  if (bad_col < (unsigned long long)good_rows) {  // the first bad column of that row, as the cpu names it
    const long long k0 = read_one(rp + bad_col), k1 = read_one(rp + bad_col + 1);
    std::vector<I> c(size_t(k1 - k0));
    check(cudaMemcpyAsync(c.data(), ci + k0, c.size() * sizeof(I), cudaMemcpyDeviceToHost, stream()), "tile_csr: read back");
    check(cudaStreamSynchronize(stream()), "tile_csr: read back");
    for (I x : c)
      if (x < 0 || x >= cols)
        throw InputError("tile_csr: column " + std::to_string(x) + " of row " + std::to_string(bad_col) +
                         " outside [0, " + std::to_string(cols) + ")");
  }
  if (good_rows < rows)
    throw InputError("tile_csr: row_ptr not ascending (or past nnz) at row " + std::to_string(good_rows));
  if (nnz > 0) {
    size_t bytes = 0;
    const int end_bit = bits_for((unsigned long long)tiles);
    check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, key, key_sorted, index, order, int(nnz), 0, end_bit, stream()),
          "tile_csr: cub::DeviceRadixSort::SortPairs (sizing)");
    Scratch temp(std::max<size_t>(bytes, 1));
    check(cub::DeviceRadixSort::SortPairs(temp.get(), bytes, key, key_sorted, index, order, int(nnz), 0, end_bit,
                                          stream()),
          "tile_csr: cub::DeviceRadixSort::SortPairs");
    gather<<<grid_for(nnz, 256), 256, 0, stream()>>>(order, word, values.data<double>(), nnz,
                                                     reinterpret_cast<unsigned*>(rc.raw()), val.data<double>());
    check_launch("tile_csr (gather)");
  }
  if (rc.numel() > nnz) {  // the pad entry
    check(cudaMemsetAsync(reinterpret_cast<unsigned*>(rc.raw()) + nnz, 0, sizeof(unsigned), stream()), "tile_csr: pad");
    check(cudaMemsetAsync(val.data<double>() + nnz, 0, sizeof(double), stream()), "tile_csr: pad");
  }
  Scratch starts(size_t(tiles + 1) * sizeof(long long));
  tile_starts<<<grid_for(tiles + 1, 256), 256, 0, stream()>>>(key_sorted, nnz, tiles, starts.as<long long>());
  check_launch("tile_csr (tile starts)");
  tile_shares<<<grid_for(tiles * warps + 1, 256), 256, 0, stream()>>>(
      starts.as<long long>(), reinterpret_cast<const unsigned*>(rc.raw()), tiles, warps, nnz, share.data<long long>());
  check_launch("tile_csr (shares)");
}

}  // namespace

std::string tile_csr_refusal(int64_t nnz, int64_t tiles) {
  if (nnz > 0x7fffffffLL)
    return "tile_csr on cuda: " + std::to_string(nnz) + " nonzeros (at most 2^31 - 1: the sort's item count)";
  if (tiles > 0xffffffffLL) return "tile_csr on cuda: " + std::to_string(tiles) + " tiles (at most 2^32 - 1)";
  return "";
}

void tile_csr_native(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, int64_t cols, int rb,
                     int panel, int warps, Tensor& share, Tensor& rc, Tensor& val) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&row_ptr, &col_idx, &values, &share, &rc, &val})
    if (!is_device(*t) || !t->is_contiguous()) throw InputError("tile_csr: contiguous cuda tensors");
  const int64_t rows = row_ptr.numel() - 1, row_blocks = (rows + rb - 1) / rb,
                panels = std::max<int64_t>(1, (cols + panel - 1) / panel);
  if (const std::string why = tile_csr_refusal(col_idx.numel(), row_blocks * panels); !why.empty())
    throw InputError(why);
  if (row_ptr.dtype() == DType::I32) build<int32_t>(row_ptr, col_idx, values, cols, rb, panel, warps, share, rc, val);
  else build<int64_t>(row_ptr, col_idx, values, cols, rb, panel, warps, share, rc, val);
}

}  // namespace rlx::cuda
