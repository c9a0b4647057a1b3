// The tiled SpMV experiment's kernel (spmv_tiled.hpp describes the layout and why).
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv_tiled.hpp"

#include <cuda_pipeline.h>

#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// Loads U trips of 32 nonzeros from k (evict-first: the matrix is read once); past k1, zeros.
template <int U>
__device__ inline void fetch(const unsigned* __restrict__ rc, const double* __restrict__ val, long long k,
                             long long k1, int lane, unsigned (&q)[U], double (&v)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long long kk = k + 32 * u + lane;
    q[u] = kk < k1 ? __ldcs(rc + kk) : 0u;
    v[u] = kk < k1 ? __ldcs(val + kk) : 0.0;
  }
}

// One block per (row block, column group). out is y (one group) or partial[group][row].
// B: blocks of 1024 threads meant to share a multiprocessor (2: at most 32 registers).
// P: the next U trips are loaded before this step's scans (a load pipeline one step deep).
template <int U, int B, bool P>
__global__ void __launch_bounds__(1024, B) spmv_rowblock(const long long* __restrict__ share,
                                                      const unsigned* __restrict__ rc, const double* __restrict__ val,
                                                      const double* __restrict__ x, double* __restrict__ out,
                                                      long long rows, long long cols, int rb, int panel,
                                                      long long panels, int groups, long long per_group, bool wide) {
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
    const long long k0 = share[at], k1 = share[at + 1];
    unsigned q[U];
    double v[U];
    if (k0 < k1) fetch<U>(rc, val, k0, k1, lane, q, v);
    for (long long k = k0; k < k1; k += 32 * U) {
      unsigned qn[U];
      double vn[U];
      if (P && k + 32 * U < k1) fetch<U>(rc, val, k + 32 * U, k1, lane, qn, vn);  // a step ahead
      // All gathers from the panel first (nothing writes the panel; the row sums, which the
      // scan below writes, share the array, so the compiler would not move them up itself).
      int r[U];
      double s[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const bool ok = k + 32 * u + lane < k1;
        r[u] = ok ? static_cast<int>(q[u] >> 16) : -1;
        s[u] = ok ? v[u] * xs[q[u] & 0xffffu] : 0.0;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (k + 32 * u >= k1) break;  // (the same for the whole warp)
        // Segmented inclusive scan over runs of equal rows; a run's last lane adds it in.
        const int before = __shfl_up_sync(kFull, r[u], 1);
        const unsigned heads = __ballot_sync(kFull, lane == 0 || before != r[u]);
        const int start = 31 - __clz(heads & (((1u << lane) << 1) - 1u));
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const double t = __shfl_up_sync(kFull, s[u], o);
          if (lane - o >= start) s[u] += t;
        }
        const int after = __shfl_down_sync(kFull, r[u], 1);
        if (r[u] >= 0 && (lane == 31 || after != r[u])) ys[r[u]] += s[u];
        __syncwarp();  // the next trip's run of the same row adds after this one
      }
      if (P) {
#pragma unroll
        for (int u = 0; u < U; ++u) q[u] = qn[u], v[u] = vn[u];
      } else if (k + 32 * U < k1) {
        fetch<U>(rc, val, k + 32 * U, k1, lane, q, v);
      }
    }
    __syncthreads();  // panel p's buffer is free for panel p + 2
  }
  __syncthreads();
  double* dst = groups == 1 ? out + r0 : out + g * rows + r0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = ys[i];
}

// y[r] = sum over groups, in order, of partial[group][r].
__global__ void spmv_rowblock_sum(const double* __restrict__ partial, long long rows, int groups,
                                  double* __restrict__ y) {
  for (long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<long long>(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int g = 0; g < groups; ++g) s += partial[g * rows + r];
    y[r] = s;
  }
}

template <class T>
Tensor upload(DType d, const std::vector<T>& v, int64_t n) {
  Tensor h = Tensor::empty(d, {n});
  if (!v.empty()) std::memcpy(h.raw(), v.data(), v.size() * sizeof(T));
  return h.to(allocator());
}

template <bool P, class F>
void by_shape(int unroll, bool two, F&& f) {
  if (unroll == 2) two ? f(spmv_rowblock<2, 2, P>) : f(spmv_rowblock<2, 1, P>);
  else two ? f(spmv_rowblock<4, 2, P>) : f(spmv_rowblock<4, 1, P>);
}

template <class F>
void by_shape(int unroll, bool two, bool pipeline, F&& f) {
  pipeline ? by_shape<true>(unroll, two, f) : by_shape<false>(unroll, two, f);
}

}  // namespace

size_t TiledSpmv::shared_bytes(int rb, int panel) { return (size_t(even(rb)) + 2 * size_t(even(panel))) * 8; }

TiledSpmv::TiledSpmv(const TiledCsr& t, int groups, int unroll, bool pipeline)
    : rows_(t.rows), cols_(t.cols), row_blocks_(t.row_blocks), panels_(t.panels), rb_(t.rb), panel_(t.panel),
      warps_(t.warps), groups_(groups), unroll_(unroll), pipeline_(pipeline) {
  if (unroll != 2 && unroll != 4) throw InputError("tiled spmv: trips loaded together " + std::to_string(unroll) + " (2 or 4)");
  if (groups < 1 || groups > 1024) throw InputError("tiled spmv: column groups " + std::to_string(groups) + " (1 to 1024)");
  if (warps_ < 1 || warps_ > 32) throw InputError("tiled spmv: warps per block " + std::to_string(warps_) + " (1 to 32)");
  int dev = 0, optin = 0;
  check(cudaGetDevice(&dev), "tiled spmv: cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "tiled spmv: shared memory size");
  const size_t smem = shared_bytes(rb_, panel_);
  if (smem > size_t(optin))
    throw InputError("tiled spmv: " + std::to_string(rb_) + " rows and two panels of " + std::to_string(panel_) +
                     " columns need " + std::to_string(smem) + " bytes of shared memory; this GPU gives a block at most " +
                     std::to_string(optin));
  if (row_blocks_ * groups_ > 0x7fffffffLL) throw InputError("tiled spmv: more blocks than a grid holds");
  // Two blocks a multiprocessor where their shared memory fits (1 KB of it reserved per block).
  int per_sm = 0;
  check(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev), "tiled spmv: shared memory");
  two_ = 2 * (smem + 1024) <= size_t(per_sm);
  by_shape(unroll_, two_, pipeline_, [&](auto kernel) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "tiled spmv: shared memory opt-in");
  });
  share_ = upload(DType::I64, t.share, int64_t(t.share.size()));
  rc_ = upload(DType::U8, t.rc, int64_t(t.rc.size()) * 4);  // 32-bit words, as bytes
  val_ = upload(DType::F64, t.val, int64_t(t.val.size()));
  if (groups_ > 1) partial_ = Tensor::empty(DType::F64, {groups_ * rows_}, allocator());
}

void TiledSpmv::run(const Tensor& x, Tensor& y) const {
  if (x.dtype() != DType::F64 || y.dtype() != DType::F64 || x.numel() != cols_ || y.numel() != rows_ ||
      !is_device(x) || !is_device(y))
    throw InputError("tiled spmv: x and y are f64 device tensors of " + std::to_string(cols_) + " and " +
                     std::to_string(rows_) + " elements");
  if (rows_ == 0) return;
  const bool wide = panel_ % 2 == 0 && reinterpret_cast<uintptr_t>(x.data<double>()) % 16 == 0;
  const long long per_group = (panels_ + groups_ - 1) / groups_;
  double* out = groups_ == 1 ? y.data<double>() : partial_.data<double>();
  by_shape(unroll_, two_, pipeline_, [&](auto kernel) {
    kernel<<<unsigned(row_blocks_ * groups_), unsigned(32 * warps_), shared_bytes(rb_, panel_), stream()>>>(
        share_.data<long long>(), reinterpret_cast<const unsigned*>(rc_.raw()), val_.data<double>(), x.data<double>(),
        out, rows_, cols_, rb_, panel_, panels_, groups_, per_group, wide);
  });
  check_launch("spmv (tiled)");
  if (groups_ == 1) return;
  const long long blocks = std::min<long long>((rows_ + 255) / 256, 64LL * sm_count());
  spmv_rowblock_sum<<<unsigned(blocks), 256, 0, stream()>>>(partial_.data<double>(), rows_, groups_, y.data<double>());
  check_launch("spmv (tiled, sum over column groups)");
}

}  // namespace rlx::cuda
