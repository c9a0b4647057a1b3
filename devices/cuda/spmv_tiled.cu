// spmv_tiled's kernels on the cuda device (spmv_tiled.hpp).
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv_tiled.hpp"

#include <cuda_pipeline.h>

#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>

namespace rlx::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// Places the row sums and the two panel buffers in shared memory (16-byte aligned panels).
__host__ __device__ inline int even(int n) { return (n + 1) & ~1; }

// Copies panel p of x into dst with cp.async (16 bytes a copy where `wide`: panel even and
// x 16-byte aligned) and commits the copies as one group.
__device__ inline void copy_panel(double* dst, const double* __restrict__ x, long long p, int panel, long long cols,
                                  bool wide) {
  const long long c0 = p * panel;
  const int m = static_cast<int>(cols - c0 < panel ? cols - c0 : panel);
  if (wide) {
    for (int i = threadIdx.x; i < m / 2; i += blockDim.x) __pipeline_memcpy_async(dst + 2 * i, x + c0 + 2 * i, 16);
    if ((m & 1) && threadIdx.x == 0) __pipeline_memcpy_async(dst + m - 1, x + c0 + m - 1, 8);
  } else {
    for (int i = threadIdx.x; i < m; i += blockDim.x) __pipeline_memcpy_async(dst + i, x + c0 + i, 8);
  }
  __pipeline_commit();
}

// Segmented inclusive scan of s over runs of lanes; `head` marks a lane that starts one.
__device__ inline double run_scan(double s, bool head, int lane) {
  const unsigned heads = __ballot_sync(kFull, head);
  const int start = 31 - __clz(heads & (((1u << lane) << 1) - 1u));
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_up_sync(kFull, s, o);
    if (lane - o >= start) s += t;
  }
  return s;
}

// A warp's share [k0, k1) of one tile, one nonzero per lane per trip, U trips loaded
// together: each trip's runs of equal rows are summed by a scan and added to ys by the
// run's last lane.
template <int U>
__device__ inline void share_by_ones(const unsigned* __restrict__ rc, const double* __restrict__ val,
                                     const double* xs, double* ys, long long k0, long long k1, int lane) {
  for (long long k = k0; k < k1; k += 32 * U) {
    int r[U];
    double s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // loads (evict-first: the matrix is read once), then gathers
      const long long kk = k + 32 * u + lane;
      const unsigned q = kk < k1 ? __ldcs(rc + kk) : 0u;
      const double v = kk < k1 ? __ldcs(val + kk) : 0.0;
      r[u] = kk < k1 ? static_cast<int>(q >> 16) : -1;
      s[u] = kk < k1 ? v * xs[q & 0xffffu] : 0.0;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k + 32 * u >= k1) break;  // (the same for the whole warp)
      const int before = __shfl_up_sync(kFull, r[u], 1), after = __shfl_down_sync(kFull, r[u], 1);
      const double t = run_scan(s[u], lane == 0 || before != r[u], lane);
      if (r[u] >= 0 && (lane == 31 || after != r[u])) ys[r[u]] += t;
      __syncwarp();  // the next trip's run of the same row adds after this one
    }
  }
}

// The same with two nonzeros per lane per trip (16- and 8-byte loads from an even index;
// the layout's arrays are padded to an even length). A lane's pair is one run or two: a
// lane whose pair holds two rows ends its first row's run itself (adding the run's part in
// earlier lanes, the scan of the lane before) and starts a run with its second.
template <int U>
__device__ inline void share_by_pairs(const unsigned* __restrict__ rc, const double* __restrict__ val,
                                      const double* xs, double* ys, long long k0, long long k1, int lane) {
  for (long long k = k0 & ~1LL; k < k1; k += 64 * U) {
    int ra[U], rb[U];
    double sa[U], sb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long e = k + 64 * u + 2 * lane;
      const uint2 q = e < k1 ? __ldcs(reinterpret_cast<const uint2*>(rc + e)) : make_uint2(0u, 0u);
      const double2 v = e < k1 ? __ldcs(reinterpret_cast<const double2*>(val + e)) : make_double2(0.0, 0.0);
      const bool oka = e >= k0 && e < k1, okb = e + 1 < k1;  // (e + 1 >= k0 always)
      ra[u] = oka ? static_cast<int>(q.x >> 16) : -1;
      rb[u] = okb ? static_cast<int>(q.y >> 16) : -1;
      sa[u] = oka ? v.x * xs[q.x & 0xffffu] : 0.0;
      sb[u] = okb ? v.y * xs[q.y & 0xffffu] : 0.0;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k + 64 * u >= k1) break;  // (the same for the whole warp)
      const bool one = ra[u] == rb[u];
      const int before = __shfl_up_sync(kFull, rb[u], 1), after = __shfl_down_sync(kFull, ra[u], 1);
      const double t = run_scan(one ? sa[u] + sb[u] : sb[u], lane == 0 || !one || before != ra[u], lane);
      const double t_before = __shfl_up_sync(kFull, t, 1);
      if (!one && ra[u] >= 0) ys[ra[u]] += sa[u] + (lane > 0 && before == ra[u] ? t_before : 0.0);
      if (rb[u] >= 0 && (lane == 31 || after != rb[u])) ys[rb[u]] += t;
      __syncwarp();
    }
  }
}

// One block of up to 1024 threads per (row block, column group); out is y (one group) or
// partial[group][row]. E: nonzeros per lane per trip (1 or 2); U: trips loaded together.
// Skip: panels whose tile in this row block has no nonzeros are neither copied nor
// visited (for matrices whose row blocks touch few panels, e.g. banded ones).
template <int E, int U, bool Skip>
__global__ void __launch_bounds__(1024) spmv_rowblock(const long long* __restrict__ share,
                                                      const unsigned* __restrict__ rc, const double* __restrict__ val,
                                                      const double* __restrict__ x, double* __restrict__ out,
                                                      long long rows, long long cols, int rb, int panel,
                                                      long long panels, int groups, long long per_group, bool wide,
                                                      const double* __restrict__ y0, double alpha, double beta) {
  extern __shared__ double smem[];
  double* ys = smem;
  double* xbuf = smem + even(rb);
  const int pstride = even(panel);
  const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long b = blockIdx.x / groups;
  const int g = blockIdx.x % groups;
  const long long r0 = b * rb;
  const int n = static_cast<int>(rows - r0 < rb ? rows - r0 : rb);
  for (int i = threadIdx.x; i < n; i += blockDim.x) ys[i] = 0;
  const long long p0 = g * per_group, p1 = p0 + per_group < panels ? p0 + per_group : panels;
  if constexpr (!Skip) {
    if (p0 < p1) copy_panel(xbuf, x, p0, panel, cols, wide);
    for (long long p = p0; p < p1; ++p) {
      const double* xs = xbuf + ((p - p0) & 1) * pstride;
      if (p + 1 < p1) {
        copy_panel(xbuf + ((p + 1 - p0) & 1) * pstride, x, p + 1, panel, cols, wide);
        __pipeline_wait_prior(1);  // this thread's copies of panel p are done
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();  // everyone's copies of panel p are done (and ys is cleared)
      const long long at = (b * panels + p) * warps + warp;
      if constexpr (E == 2) share_by_pairs<U>(rc, val, xs, ys, share[at], share[at + 1], lane);
      else share_by_ones<U>(rc, val, xs, ys, share[at], share[at + 1], lane);
      __syncthreads();  // panel p's buffer is free for panel p + 2
    }
  } else {
    auto next = [&](long long p) {  // the first panel from p whose tile has nonzeros (or p1)
      while (p < p1 && share[(b * panels + p) * warps] == share[(b * panels + p + 1) * warps]) ++p;
      return p;
    };
    long long p = next(p0);
    int parity = 0;
    if (p < p1) copy_panel(xbuf, x, p, panel, cols, wide);
    while (p < p1) {
      const double* xs = xbuf + parity * pstride;
      const long long pn = next(p + 1);
      if (pn < p1) {
        copy_panel(xbuf + (parity ^ 1) * pstride, x, pn, panel, cols, wide);
        __pipeline_wait_prior(1);
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();
      const long long at = (b * panels + p) * warps + warp;
      if constexpr (E == 2) share_by_pairs<U>(rc, val, xs, ys, share[at], share[at + 1], lane);
      else share_by_ones<U>(rc, val, xs, ys, share[at], share[at + 1], lane);
      __syncthreads();
      p = pn, parity ^= 1;
    }
  }
  __syncthreads();
  if (groups > 1) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[g * rows + r0 + i] = ys[i];
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      out[r0 + i] = y0 ? alpha * ys[i] + beta * y0[r0 + i] : alpha * ys[i];
  }
}

// y[r] = alpha * (sum over groups, in order, of partial[group][r]) (+ beta y0[r]).
__global__ void spmv_rowblock_sum(const double* __restrict__ partial, long long rows, int groups,
                                  double* __restrict__ y, const double* __restrict__ y0, double alpha, double beta) {
  for (long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<long long>(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int g = 0; g < groups; ++g) s += partial[g * rows + r];
    y[r] = y0 ? alpha * s + beta * y0[r] : alpha * s;
  }
}

template <bool Skip, class F>
void by_shape(int per_lane, int unroll, F&& f) {
  if (per_lane == 2) unroll == 2 ? f(spmv_rowblock<2, 2, Skip>) : f(spmv_rowblock<2, 4, Skip>);
  else unroll == 2 ? f(spmv_rowblock<1, 2, Skip>) : f(spmv_rowblock<1, 4, Skip>);
}

template <class F>
void by_shape(int per_lane, int unroll, bool skip, F&& f) {
  skip ? by_shape<true>(per_lane, unroll, f) : by_shape<false>(per_lane, unroll, f);
}

}  // namespace

// Shared memory a block may opt in to: this GPU's, or (no usable GPU: the capability
// table is read without one, e.g. by `rlx ops`) sm_90's, the architecture the device is
// built for.
int shared_optin() {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();  // (clear it)
    return 232448;
  }
  return optin;
}

// Lets a kernel take as much shared memory as a block may (once per kernel and process;
// `which` numbers the kernel).
template <class K>
void opt_in(K kernel, int which) {
  static std::once_flag once[8];
  std::call_once(once[which], [&] {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_optin()),
          "spmv_tiled: shared memory opt-in");
  });
}

size_t tiled_shared_bytes(int rb, int panel) { return (size_t(even(rb)) + 2 * size_t(even(panel))) * 8; }

std::string tiled_refusal(const TiledArgs& a) {
  if (a.warps < 1 || a.warps > 32) return "spmv_tiled on cuda: " + std::to_string(a.warps) + " warps per block (1 to 32)";
  if (a.rb < 1 || a.rb > 65536 || a.panel < 1 || a.panel > 65536)
    return "spmv_tiled on cuda: tiles of " + std::to_string(a.rb) + " rows x " + std::to_string(a.panel) +
           " columns (1 to 65536 each)";
  const int optin = shared_optin();
  const size_t smem = tiled_shared_bytes(a.rb, a.panel);
  if (smem > size_t(optin))
    return "spmv_tiled on cuda: " + std::to_string(a.rb) + " rows and two panels of " + std::to_string(a.panel) +
           " columns need " + std::to_string(smem) + " bytes of shared memory; this GPU gives a block at most " +
           std::to_string(optin) + " (lay the matrix out for it: sparse::tiled_shape)";
  return "";
}

void spmv_tiled_native(const Tensor& share, const Tensor& rc, const Tensor& values, const Tensor& x, const Tensor* y0,
                       double alpha, double beta, Tensor& y, const TiledArgs& a, int groups, int unroll,
                       int per_lane, bool skip_empty) {
  if (per_lane != 1 && per_lane != 2)
    throw InputError("spmv_tiled: nonzeros per lane per trip " + std::to_string(per_lane) + " (1 or 2)");
  if (unroll != 2 && unroll != 4) throw InputError("spmv_tiled: trips loaded together " + std::to_string(unroll) + " (2 or 4)");
  if (groups < 0 || groups > 1024) throw InputError("spmv_tiled: column groups " + std::to_string(groups) + " (0 to 1024)");
  if (const std::string why = tiled_refusal(a); !why.empty()) throw InputError(why);
  const int64_t row_blocks = (a.rows + a.rb - 1) / a.rb, panels = std::max<int64_t>(1, (a.cols + a.panel - 1) / a.panel);
  const int64_t n = values.numel();
  for (const Tensor* t : std::initializer_list<const Tensor*>{&share, &rc, &values, &x, &y})
    if (!is_device(*t) || !t->is_contiguous()) throw InputError("spmv_tiled: the arrays, x and y are contiguous cuda tensors");
  if (share.dtype() != DType::I64 || share.numel() != row_blocks * panels * a.warps + 1 || rc.dtype() != DType::I32 ||
      rc.numel() != n || n % 2 != 0 || values.dtype() != DType::F64 || x.dtype() != DType::F64 ||
      x.numel() != a.cols || y.dtype() != DType::F64 || y.numel() != a.rows ||
      (y0 && (y0->dtype() != DType::F64 || y0->numel() != a.rows || !is_device(*y0) || !y0->is_contiguous())))
    throw InputError("spmv_tiled: share i64 [" + std::to_string(row_blocks * panels * a.warps + 1) +
                     "], rc i32 and values f64 of one even length, x f64 [" + std::to_string(a.cols) + "], y" +
                     (y0 ? " and y0" : "") + " f64 [" + std::to_string(a.rows) + "]");
  if (a.rows == 0) return;
  if (groups == 0) groups = int(std::clamp<int64_t>(std::min<int64_t>(sm_count() / row_blocks, panels), 1, 1024));
  // Pair loads need rc 8-byte and values 16-byte aligned (a view into another tensor may
  // not be): one nonzero per lane otherwise.
  if (per_lane == 2 && (reinterpret_cast<uintptr_t>(rc.raw()) % 8 != 0 ||
                        reinterpret_cast<uintptr_t>(values.raw()) % 16 != 0))
    per_lane = 1;
  if (row_blocks * groups > 0x7fffffffLL) throw InputError("spmv_tiled: more blocks than a grid holds");
  const size_t smem = tiled_shared_bytes(a.rb, a.panel);
  const bool wide = a.panel % 2 == 0 && reinterpret_cast<uintptr_t>(x.data<double>()) % 16 == 0;
  const long long per_group = (panels + groups - 1) / groups;
  Tensor partial;
  if (groups > 1) partial = Tensor::empty(DType::F64, {groups * a.rows}, allocator());
  double* out = groups == 1 ? y.data<double>() : partial.data<double>();
  const double* y0p = y0 ? y0->data<double>() : nullptr;
  by_shape(per_lane, unroll, skip_empty, [&](auto kernel) {
    opt_in(kernel, (per_lane - 1) * 2 + (unroll == 4) + 4 * skip_empty);
    kernel<<<unsigned(row_blocks * groups), unsigned(32 * a.warps), smem, stream()>>>(
        share.data<long long>(), reinterpret_cast<const unsigned*>(rc.raw()), values.data<double>(),
        x.data<double>(), out, a.rows, a.cols, a.rb, a.panel, panels, groups, per_group, wide, y0p, alpha, beta);
  });
  check_launch("spmv_tiled");
  if (groups == 1) return;
  const long long blocks = std::min<long long>((a.rows + 255) / 256, 64LL * sm_count());
  spmv_rowblock_sum<<<unsigned(blocks), 256, 0, stream()>>>(partial.data<double>(), a.rows, groups, y.data<double>(),
                                                            y0p, alpha, beta);
  check_launch("spmv_tiled (sum over column groups)");
}

}  // namespace rlx::cuda
