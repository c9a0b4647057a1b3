// The tiled SpMV experiment's kernels (spmv_tiled.hpp describes the layout and why).
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv_tiled.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace rlx::cuda {
namespace {

constexpr int kTileThreads = 1024;

// One block per tile: the tile's panel of x is copied to shared memory, then each group of
// L lanes sums a row of the tile (matrix loaded evict-first, x from shared memory) and
// writes it to partial[panel][row]. Every row of the block is written, empty ones as 0,
// so the second kernel needs no bookkeeping.
template <int L>
__global__ void __launch_bounds__(kTileThreads) spmv_tile(const long long* __restrict__ tile_start,
                                                          const int* __restrict__ tile_rows,
                                                          const unsigned short* __restrict__ col,
                                                          const double* __restrict__ val, const double* __restrict__ x,
                                                          double* __restrict__ partial, long long rows, long long cols,
                                                          int rb, int panel, long long panels) {
  extern __shared__ double xs[];
  const long long tile = blockIdx.x;
  const long long b = tile / panels, p = tile % panels;
  const long long c0 = p * panel;
  const int ncols = static_cast<int>(cols - c0 < panel ? cols - c0 : panel);
  for (int i = threadIdx.x; i < ncols; i += blockDim.x) xs[i] = __ldg(x + c0 + i);
  __syncthreads();
  const long long r0 = b * rb;
  const int n = static_cast<int>(rows - r0 < rb ? rows - r0 : rb);
  const int* lr = tile_rows + tile * (static_cast<long long>(rb) + 1);
  const long long base = tile_start[tile];
  const int lane = threadIdx.x & (L - 1);
  const int group = threadIdx.x / L, ngroups = blockDim.x / L;
  // The warp's first group decides the loop (the shuffles need every lane of the warp).
  const int first = group - (threadIdx.x & 31) / L;
  for (int i0 = first; i0 < n; i0 += ngroups) {
    const int i = i0 + (group - first);
    const bool ok = i < n;
    const int s = ok ? lr[i] : 0, e = ok ? lr[i + 1] : 0;
    double acc = 0;
    for (long long k = base + s + lane; k < base + e; k += L) acc += __ldcs(val + k) * xs[__ldcs(col + k)];
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o, L);
    if (ok && lane == 0) partial[p * rows + r0 + i] = acc;
  }
}

// y[r] = sum over panels, in panel order, of partial[panel][r].
__global__ void spmv_tile_sum(const double* __restrict__ partial, long long rows, long long panels,
                              double* __restrict__ y) {
  for (long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<long long>(gridDim.x) * blockDim.x) {
    double s = 0;
    for (long long p = 0; p < panels; ++p) s += partial[p * rows + r];
    y[r] = s;
  }
}

template <class T>
Tensor upload(DType d, const std::vector<T>& v, int64_t n) {
  Tensor h = Tensor::empty(d, {n});
  if (!v.empty()) std::memcpy(h.raw(), v.data(), v.size() * sizeof(T));
  return h.to(allocator());
}

template <class F>
void by_lanes(int lanes, F&& f) {
  if (lanes == 4) f(spmv_tile<4>);
  else if (lanes == 16) f(spmv_tile<16>);
  else f(spmv_tile<8>);
}

}  // namespace

TiledSpmv::TiledSpmv(const TiledCsr& t, int lanes)
    : rows_(t.rows), cols_(t.cols), row_blocks_(t.row_blocks), panels_(t.panels), rb_(t.rb), panel_(t.panel),
      lanes_(lanes) {
  if (lanes != 4 && lanes != 8 && lanes != 16)
    throw InputError("tiled spmv: lanes per row " + std::to_string(lanes) + " (4, 8 or 16)");
  int dev = 0, optin = 0;
  check(cudaGetDevice(&dev), "tiled spmv: cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "tiled spmv: shared memory size");
  const size_t smem = size_t(panel_) * sizeof(double);
  if (smem > size_t(optin))
    throw InputError("tiled spmv: a panel of " + std::to_string(panel_) + " columns needs " + std::to_string(smem) +
                     " bytes of shared memory; this GPU gives a block at most " + std::to_string(optin));
  if (row_blocks_ * panels_ > 0x7fffffffLL) throw InputError("tiled spmv: more tiles than a grid holds");
  by_lanes(lanes_, [&](auto kernel) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "tiled spmv: shared memory opt-in");
  });
  tile_start_ = upload(DType::I64, t.tile_start, int64_t(t.tile_start.size()));
  tile_rows_ = upload(DType::I32, t.tile_rows, int64_t(t.tile_rows.size()));
  col_ = upload(DType::U8, t.col, int64_t(t.col.size()) * 2);  // 16-bit offsets, as bytes
  val_ = upload(DType::F64, t.val, int64_t(t.val.size()));
  partial_ = Tensor::empty(DType::F64, {panels_ * rows_}, allocator());
  // NaN until written, so that a row the tile kernel missed cannot pass for a result.
  check(cudaMemsetAsync(partial_.raw(), 0xFF, partial_.nbytes(), stream()), "tiled spmv: clearing partial sums");
}

void TiledSpmv::run(const Tensor& x, Tensor& y) const {
  if (x.dtype() != DType::F64 || y.dtype() != DType::F64 || x.numel() != cols_ || y.numel() != rows_ ||
      !is_device(x) || !is_device(y))
    throw InputError("tiled spmv: x and y are f64 device tensors of " + std::to_string(cols_) + " and " +
                     std::to_string(rows_) + " elements");
  if (rows_ == 0) return;
  by_lanes(lanes_, [&](auto kernel) {
    kernel<<<unsigned(row_blocks_ * panels_), kTileThreads, size_t(panel_) * sizeof(double), stream()>>>(
        tile_start_.data<long long>(), tile_rows_.data<int>(), reinterpret_cast<const unsigned short*>(col_.raw()),
        val_.data<double>(), x.data<double>(), partial_.data<double>(), rows_, cols_, rb_, panel_, panels_);
  });
  check_launch("spmv (tiled)");
  const long long blocks = std::min<long long>((rows_ + 255) / 256, 64LL * sm_count());
  spmv_tile_sum<<<unsigned(blocks), 256, 0, stream()>>>(partial_.data<double>(), rows_, panels_, y.data<double>());
  check_launch("spmv (tiled, sum over panels)");
}

}  // namespace rlx::cuda
