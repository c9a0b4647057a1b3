// The cuda device's CSR SpMV: spmv.hpp describes the design.
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv.hpp"

#include <type_traits>

namespace rlx::cuda {
namespace {

template <int L, int UNR, class I, class T>
__global__ void __launch_bounds__(256) spmv_kernel(const I* __restrict__ rp, const I* __restrict__ ci,
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
      for (long long k = b + lane; k < e; k += L) acc += static_cast<double>(v[k]) * static_cast<double>(__ldg(x + ci[k]));
    } else {
      // Two nonzeros per lane per trip, two accumulators: twice the gathers in flight.
      double acc2 = 0;
      long long k = b + lane;
      for (; k + L < e; k += 2 * L) {
        const I c0 = ci[k], c1 = ci[k + L];
        const T v0 = v[k], v1 = v[k + L];
        acc += static_cast<double>(v0) * static_cast<double>(__ldg(x + c0));
        acc2 += static_cast<double>(v1) * static_cast<double>(__ldg(x + c1));
      }
      if (k < e) acc += static_cast<double>(v[k]) * static_cast<double>(__ldg(x + ci[k]));
      acc += acc2;
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o, L);
    if (lane == 0 && r < rows) {
      double out = alpha * acc;
      if (y0) out += beta * static_cast<double>(y0[r]);
      y[r] = static_cast<T>(out);
    }
  }
}

template <class I, class T, int UNR>
void launch(int lanes, const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
            double alpha, double beta, Tensor& y) {
  const long long rows = y.numel();
  if (rows == 0) return;
  const int threads = 256;
  // Enough groups to fill the GPU several times over; each group strides over rows.
  long long blocks = (rows * lanes + threads - 1) / threads;
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  blocks = blocks < 64LL * sms ? blocks : 64LL * sms;
  auto args = [&](auto kernel) {
    kernel<<<unsigned(blocks), threads, 0, stream()>>>(rp.data<I>(), ci.data<I>(), v.data<T>(), x.data<T>(),
                                                      y0 ? y0->data<T>() : nullptr, alpha, beta, y.data<T>(), rows);
  };
  switch (lanes) {
    case 1: args(spmv_kernel<1, UNR, I, T>); break;
    case 2: args(spmv_kernel<2, UNR, I, T>); break;
    case 4: args(spmv_kernel<4, UNR, I, T>); break;
    case 8: args(spmv_kernel<8, UNR, I, T>); break;
    case 16: args(spmv_kernel<16, UNR, I, T>); break;
    default: args(spmv_kernel<32, UNR, I, T>); break;
  }
  check_launch("spmv_csr");
}

}  // namespace

int spmv_lanes(int64_t rows, int64_t nnz) {
  // The largest power of two not above a third of the mean row length (1 to 32): each
  // lane takes about three nonzeros, so more rows are in flight per warp. On the H200,
  // 3D Poisson 160^3 (7 per row): 2 lanes 0.130 ms, 4 lanes 0.147, 8 lanes 0.200.
  const double mean = rows > 0 ? double(nnz) / double(rows) : 0.0;
  int l = 1;
  while (l < 32 && 2 * l <= mean / 3) l *= 2;
  return l;
}

void spmv_csr_native(const Tensor& rp, const Tensor& ci, const Tensor& v, const Tensor& x, const Tensor* y0,
                     double alpha, double beta, Tensor& y, int lanes, int unroll) {
  if (lanes <= 0) lanes = spmv_lanes(y.numel(), v.numel());
  const bool i64 = rp.dtype() == DType::I64;
  auto go = [&](auto unr) {
    constexpr int U = decltype(unr)::value;
    if (v.dtype() == DType::F64) {
      if (i64) launch<long long, double, U>(lanes, rp, ci, v, x, y0, alpha, beta, y);
      else launch<int, double, U>(lanes, rp, ci, v, x, y0, alpha, beta, y);
    } else {
      if (i64) launch<long long, float, U>(lanes, rp, ci, v, x, y0, alpha, beta, y);
      else launch<int, float, U>(lanes, rp, ci, v, x, y0, alpha, beta, y);
    }
  };
  if (unroll == 2) go(std::integral_constant<int, 2>{});
  else go(std::integral_constant<int, 1>{});
}

}  // namespace rlx::cuda
