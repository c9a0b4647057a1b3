// Data movement on the cuda device: strided copies (copy_strided, which the whole device
// uses through common.hpp) and the ops made of them: permute broadcast_to slice concat pad.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "devices/cuda/kernels.cuh"
#include "devices/cuda/kernels.hpp"

namespace rlx::cuda {
namespace {

// ------------------------------------------------------------------------------------
// Strided copies.
// ------------------------------------------------------------------------------------

struct CopyView {  // a shape with source and destination strides (elements)
  int32_t rank = 0;
  i64 shape[kMaxRank] = {};
  i64 ss[kMaxRank] = {};
  i64 ds[kMaxRank] = {};
};

// Each warp copies 128 consecutive elements per step, lane l taking elements l, l+32,
// l+64, l+96 (coalesced): one index decomposition per thread and step, then increments
// along the last dim while it does not wrap. U: u32 when every index and offset fits.
template <class E, class U>
__global__ void __launch_bounds__(256) copy_kernel(const E* __restrict__ src, E* __restrict__ dst, CopyView v, U n) {
  using S = std::make_signed_t<U>;
  const int last = v.rank - 1;
  const U nl = U(v.shape[last]);
  const S sl = S(v.ss[last]) * 32, dl = S(v.ds[last]) * 32;
  const U lane = threadIdx.x & 31;
  const U nwarps = (U(gridDim.x) * blockDim.x) >> 5;
  auto locate = [&](U i, S& so, S& dof, U& il) {
    U rem = i;
    so = 0;
    dof = 0;
    for (int d = last; d > 0; --d) {
      const U s = U(v.shape[d]);
      const U q = rem / s;
      const U r = rem - q * s;
      if (d == last) il = r;
      so += S(r) * S(v.ss[d]);
      dof += S(r) * S(v.ds[d]);
      rem = q;
    }
    if (last == 0) il = rem;
    so += S(rem) * S(v.ss[0]);
    dof += S(rem) * S(v.ds[0]);
  };
  for (U w0 = ((U(blockIdx.x) * blockDim.x + threadIdx.x) >> 5) * 128; w0 < n; w0 += nwarps * 128) {
    U i = w0 + lane;
    if (i >= n) continue;
    S so, dof;
    U il = 0;
    locate(i, so, dof, il);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      dst[dof] = src[so];
      i += 32;
      if (r == 3 || i >= n) break;
      il += 32;
      if (il < nl) {
        so += sl;
        dof += dl;
      } else {
        locate(i, so, dof, il);
      }
    }
  }
}

// Transpose-like copies: the destination's last dim (stride 1) and dim p, the source's
// unit-stride dim, in 32x32 tiles through shared memory so both sides are coalesced.
template <class E>
__global__ void __launch_bounds__(256) copy_tiled(const E* __restrict__ src, E* __restrict__ dst, CopyView v, int p,
                                                  i64 tiles_l, i64 tiles_p, i64 nblocks) {
  __shared__ E tile[32][33];
  const int last = v.rank - 1;
  const i64 nl = v.shape[last], np = v.shape[p];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (i64 b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const i64 tl = b % tiles_l;
    i64 r = b / tiles_l;
    const i64 tp = r % tiles_p;
    r /= tiles_p;
    i64 so = 0, dof = 0;
    for (int d = last - 1; d >= 0; --d) {
      if (d == p) continue;
      const i64 q = r / v.shape[d];
      const i64 ix = r - q * v.shape[d];
      so += ix * v.ss[d];
      dof += ix * v.ds[d];
      r = q;
    }
    const i64 l0 = tl * 32, p0 = tp * 32;
    for (int yy = ty; yy < 32; yy += 8) {
      const i64 pi = p0 + tx, li = l0 + yy;
      if (pi < np && li < nl) tile[yy][tx] = src[so + pi * v.ss[p] + li * v.ss[last]];
    }
    __syncthreads();
    for (int yy = ty; yy < 32; yy += 8) {
      const i64 li = l0 + tx, pi = p0 + yy;
      if (pi < np && li < nl) dst[dof + pi * v.ds[p] + li] = tile[tx][yy];
    }
    __syncthreads();
  }
}

template <class E>
__global__ void __launch_bounds__(256) fill_kernel(E* __restrict__ dst, E value, i64 n) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += i64(gridDim.x) * blockDim.x) dst[i] = value;
}

i64 max_offset(const CopyView& v, const i64* strides) {
  i64 m = 0;
  for (int d = 0; d < v.rank; ++d) m += (v.shape[d] - 1) * (strides[d] < 0 ? -strides[d] : strides[d]);
  return m;
}

// dst (strides vd) = src (strides vs) over vs's shape, elements of esize bytes.
void copy_view(const void* src, const View& vs, void* dst, const View& vd, size_t esize) {
  CopyView c;
  i64 n = 1;
  for (int d = 0; d < vs.rank; ++d) {
    n *= vs.shape[d];
    if (vs.shape[d] == 1) continue;
    if (c.rank > 0 && c.ss[c.rank - 1] == vs.strides[d] * vs.shape[d] &&
        c.ds[c.rank - 1] == vd.strides[d] * vs.shape[d]) {
      c.shape[c.rank - 1] *= vs.shape[d];
      c.ss[c.rank - 1] = vs.strides[d];
      c.ds[c.rank - 1] = vd.strides[d];
    } else {
      c.shape[c.rank] = vs.shape[d];
      c.ss[c.rank] = vs.strides[d];
      c.ds[c.rank] = vd.strides[d];
      ++c.rank;
    }
  }
  if (n == 0) return;
  if (c.rank == 0) {
    check(cudaMemcpyAsync(dst, src, esize, cudaMemcpyDeviceToDevice, stream()), "copy of one element");
    return;
  }
  if (c.rank == 1 && c.ss[0] == 1 && c.ds[0] == 1) {
    check(cudaMemcpyAsync(dst, src, size_t(n) * esize, cudaMemcpyDeviceToDevice, stream()), "contiguous copy");
    return;
  }
  const int last = c.rank - 1;
  // Where the innermost dim is contiguous on both sides and whole 16-byte (else 8-byte)
  // chunks of it line up on both sides, the copy moves chunks: a quarter of the loads and
  // stores for f32 (a head-splitting permute, the cache's pad, a slice of whole rows).
  for (const size_t w : {size_t(16), size_t(8)}) {
    if (w <= esize || c.ss[last] != 1 || c.ds[last] != 1) break;
    const i64 f = i64(w / esize);
    bool fits = c.shape[last] % f == 0 && reinterpret_cast<uintptr_t>(src) % w == 0 && reinterpret_cast<uintptr_t>(dst) % w == 0;
    for (int d = 0; d < last; ++d) fits = fits && c.ss[d] % f == 0 && c.ds[d] % f == 0;
    if (!fits) continue;
    c.shape[last] /= f;
    for (int d = 0; d < last; ++d) c.ss[d] /= f, c.ds[d] /= f;
    n /= f;
    esize = w;
    break;
  }
  int p = -1;
  if (c.rank >= 2 && c.ds[last] == 1 && c.ss[last] != 1 && c.shape[last] >= 8)
    for (int d = last - 1; d >= 0; --d)
      if (c.ss[d] == 1 && c.shape[d] >= 8) {
        p = d;
        break;
      }
  visit_esize(esize, "copy", [&](auto tag) {
    using E = decltype(tag);
    const E* s = static_cast<const E*>(src);
    E* t = static_cast<E*>(dst);
    if (p >= 0) {
      const i64 tiles_l = ceil_div(c.shape[last], 32), tiles_p = ceil_div(c.shape[p], 32);
      const i64 nblocks = tiles_l * tiles_p * (n / (c.shape[last] * c.shape[p]));
      copy_tiled<E><<<unsigned(std::min(nblocks, kMaxGrid)), dim3(32, 8), 0, stream()>>>(s, t, c, p, tiles_l, tiles_p,
                                                                                          nblocks);
      check_launch("copy_tiled");
    } else if (n < (i64(1) << 31) && max_offset(c, c.ss) < (i64(1) << 31) && max_offset(c, c.ds) < (i64(1) << 31)) {
      copy_kernel<E, u32><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(s, t, c, u32(n));
      check_launch("copy_strided");
    } else {
      copy_kernel<E, u64><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(s, t, c, u64(n));
      check_launch("copy_strided");
    }
  });
}

View contiguous_view(const Shape& s) {
  View v;
  v.rank = int32_t(s.size());
  if (s.size() > size_t(kMaxRank)) throw InputError("cuda: rank " + std::to_string(s.size()) + " above 8");
  int64_t acc = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.shape[d] = s[size_t(d)];
    v.strides[d] = acc;
    acc *= s[size_t(d)];
  }
  return v;
}

// Float -> integer as `cast`: truncate toward zero, saturate, NaN -> 0.
int64_t saturate(double v, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  if (v <= double(lo)) return lo;
  if (v >= double(hi)) return hi;
  return int64_t(v);
}

// The bytes of one element of dtype t holding v, converted as store_real does.
void encode_real(DType t, double v, unsigned char* out) {
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof(x)); };
  switch (t) {
    case DType::Bool: put(uint8_t(v != 0.0)); return;  // NaN != 0: true
    case DType::I8: put(int8_t(saturate(v, INT8_MIN, INT8_MAX))); return;
    case DType::U8: put(uint8_t(saturate(v, 0, UINT8_MAX))); return;
    case DType::I32: put(int32_t(saturate(v, INT32_MIN, INT32_MAX))); return;
    case DType::I64: put(int64_t(saturate(v, INT64_MIN, INT64_MAX))); return;
    case DType::F16: put(__double2half(v)); return;  // one rounding (host path too)
    case DType::BF16: put(__double2bfloat16(v)); return;
    case DType::F32: put(float(v)); return;
    case DType::F64: put(v); return;
    case DType::C64: put(float2{float(v), 0.0f}); return;
    case DType::I4: break;
  }
  throw InternalError("cuda pad: i4 is not supported");
}

void fill_bytes(void* dst, const unsigned char* value, size_t esize, i64 n) {
  if (n == 0) return;
  bool zero = true;
  for (size_t i = 0; i < esize; ++i) zero = zero && value[i] == 0;
  if (zero) {
    check(cudaMemsetAsync(dst, 0, size_t(n) * esize, stream()), "fill");
    return;
  }
  visit_esize(esize, "fill", [&](auto tag) {
    using E = decltype(tag);
    E v;
    std::memcpy(&v, value, sizeof(E));
    fill_kernel<E><<<grid_for(n, 256 * 4), 256, 0, stream()>>>(static_cast<E*>(dst), v, n);
    check_launch("fill");
  });
}

}  // namespace

void copy_strided(const void* src, const View& v, void* dst, size_t esize) {
  copy_view(src, v, dst, contiguous_view(Shape(v.shape, v.shape + v.rank)), esize);
}

void permute(const Tensor& x, const std::vector<int64_t>& perm, Tensor& out) {
  const size_t es = element_size(x, "permute");
  const View xv = view_of(x);
  View v;
  v.rank = xv.rank;
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = xv.shape[perm[size_t(d)]];
    v.strides[d] = xv.strides[perm[size_t(d)]];
  }
  copy_strided(x.raw(), v, out.raw(), es);
}

void broadcast_to(const Tensor& x, Tensor& out) {
  const size_t es = element_size(x, "broadcast_to");
  copy_strided(x.raw(), broadcast_view(x, out.shape()), out.raw(), es);
}

void slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps, Tensor& out) {
  const size_t es = element_size(x, "slice");
  if (out.numel() == 0) return;
  const View xv = view_of(x);
  View v;
  v.rank = xv.rank;
  int64_t off = 0;
  for (int d = 0; d < v.rank; ++d) {
    off += starts[size_t(d)] * xv.strides[d];
    v.shape[d] = out.shape()[size_t(d)];
    v.strides[d] = xv.strides[d] * steps[size_t(d)];
  }
  copy_strided(static_cast<const char*>(x.raw()) + off * int64_t(es), v, out.raw(), es);
}

void concat(std::span<const Tensor> xs, int axis, Tensor& out) {
  const size_t es = element_size(out, "concat");
  if (axis < 0) axis += out.rank();
  const View ov = contiguous_view(out.shape());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    element_size(x, "concat");
    View dv = ov;
    const View xv = view_of(x);
    for (int d = 0; d < dv.rank; ++d) dv.shape[d] = xv.shape[d];
    char* dst = static_cast<char*>(out.raw()) + at * ov.strides[axis] * int64_t(es);
    copy_view(x.raw(), xv, dst, dv, es);
    at += x.shape()[size_t(axis)];
  }
}

void pad(const Tensor& x, const std::vector<int64_t>& low, double value, Tensor& out) {
  const size_t es = element_size(x, "pad");
  unsigned char v[16] = {};
  encode_real(out.dtype(), value, v);
  fill_bytes(out.raw(), v, es, out.numel());
  const View ov = contiguous_view(out.shape());
  const View xv = view_of(x);
  View dv = ov;
  int64_t off = 0;
  for (int d = 0; d < dv.rank; ++d) {
    off += low[size_t(d)] * ov.strides[d];
    dv.shape[d] = xv.shape[d];
  }
  copy_view(x.raw(), xv, static_cast<char*>(out.raw()) + off * int64_t(es), dv, es);
}

}  // namespace rlx::cuda
