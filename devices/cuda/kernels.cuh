// What the hand-written kernel files of the cuda device share (reduce.cu, scan.cu,
// movement.cu, gather_scatter.cu, sources.cu; their entry points are declared in
// kernels.hpp): the element types and their accumulator arithmetic, the host-side
// visitors over dtypes and element sizes, and the warp and block primitives.
// Semantics are the reference device's (devices/reference/*.cpp), dtype for dtype.
// Everything is deterministic: no float atomics, and every launch shape depends only on
// the operand shapes (never on the GPU), so a given program gives the same bits each run.
// Every launch goes on stream() and is checked with check_launch().
// CUDA-only (include from .cu files).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"

namespace rlx::cuda {

using i64 = long long;
using u64 = unsigned long long;
using u32 = unsigned int;

constexpr unsigned kFullMask = 0xffffffffu;

inline std::string node_suffix() {
  const std::string& n = current_node();
  return n.empty() ? std::string() : " (node " + n + ")";
}

// ------------------------------------------------------------------------------------
// Element types and their conversions (device side).
// ------------------------------------------------------------------------------------

// Accumulator arithmetic: u64 (wrapping integers), double, double2 (complex).
template <class W>
struct Arith;
template <>
struct Arith<u64> {
  __device__ static u64 zero() { return 0; }
  __device__ static u64 one() { return 1; }
  __device__ static u64 add(u64 a, u64 b) { return a + b; }
  __device__ static u64 mul(u64 a, u64 b) { return a * b; }
};
template <>
struct Arith<double> {
  __device__ static double zero() { return 0.0; }
  __device__ static double one() { return 1.0; }
  __device__ static double add(double a, double b) { return a + b; }
  __device__ static double mul(double a, double b) { return a * b; }
};
template <>
struct Arith<double2> {
  __device__ static double2 zero() { return make_double2(0.0, 0.0); }
  __device__ static double2 one() { return make_double2(1.0, 0.0); }
  __device__ static double2 add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }
  // No FMA contraction, as std::complex<double> on the host.
  __device__ static double2 mul(double2 a, double2 b) {
    return make_double2(__dsub_rn(__dmul_rn(a.x, b.x), __dmul_rn(a.y, b.y)),
                        __dadd_rn(__dmul_rn(a.x, b.y), __dmul_rn(a.y, b.x)));
  }
};

// Per storage type: W, the sum/prod accumulator; C, the max/min/argmax comparison type;
// wide/narrow convert to and from W (narrow rounds once); cmp/from_cmp to and from C;
// from_int and from_real store an i64 / double as the `cast` rules do.
template <class T>
struct NumInt {
  using W = u64;
  using C = i64;
  __device__ static W wide(T v) { return W(i64(v)); }
  __device__ static T narrow(W a) { return T(i64(a)); }  // two's-complement wrap
  __device__ static C cmp(T v) { return C(v); }
  __device__ static T from_cmp(C a) { return T(a); }
  __device__ static T from_int(i64 v) { return T(v); }
};
template <class T>
struct Num;
template <> struct Num<int8_t> : NumInt<int8_t> {};
template <> struct Num<uint8_t> : NumInt<uint8_t> {};
template <> struct Num<int32_t> : NumInt<int32_t> {};
template <> struct Num<int64_t> : NumInt<int64_t> {};

__device__ inline double to_double(__half v) { return double(__half2float(v)); }
__device__ inline double to_double(__nv_bfloat16 v) { return double(__bfloat162float(v)); }
__device__ inline double to_double(float v) { return double(v); }
__device__ inline double to_double(double v) { return v; }

template <class T>
__device__ T from_double(double a);
template <>
__device__ inline __half from_double<__half>(double a) {
  return __double2half(a);  // cvt.rn.f16.f64: one rounding
}
template <>
__device__ inline __nv_bfloat16 from_double<__nv_bfloat16>(double a) {
  return __double2bfloat16(a);  // cvt.rn.bf16.f64 on sm_90: one rounding
}
template <>
__device__ inline float from_double<float>(double a) {
  return __double2float_rn(a);
}
template <>
__device__ inline double from_double<double>(double a) {
  return a;
}

template <class T>
struct NumFloat {
  using W = double;
  using C = double;
  __device__ static W wide(T v) { return to_double(v); }
  __device__ static T narrow(W a) { return from_double<T>(a); }
  __device__ static C cmp(T v) { return to_double(v); }
  __device__ static T from_cmp(C a) { return from_double<T>(a); }
  __device__ static T from_int(i64 v) { return from_double<T>(__ll2double_rn(v)); }
  __device__ static T from_real(double v) { return from_double<T>(v); }
};
template <> struct Num<__half> : NumFloat<__half> {};
template <> struct Num<__nv_bfloat16> : NumFloat<__nv_bfloat16> {};
template <> struct Num<double> : NumFloat<double> {};
template <>
struct Num<float> : NumFloat<float> {
  __device__ static float from_int(i64 v) { return __ll2float_rn(v); }
};
template <>
struct Num<float2> {  // c64
  using W = double2;
  __device__ static W wide(float2 v) { return make_double2(double(v.x), double(v.y)); }
  __device__ static float2 narrow(W a) { return make_float2(__double2float_rn(a.x), __double2float_rn(a.y)); }
};
// Accumulators read back as themselves (the scan of chunk totals).
template <>
struct Num<u64> {
  using W = u64;
  __device__ static W wide(u64 v) { return v; }
  __device__ static u64 narrow(W a) { return a; }
};
template <>
struct Num<double2> {
  using W = double2;
  __device__ static W wide(double2 v) { return v; }
  __device__ static double2 narrow(W a) { return a; }
};

// Host side: calls f(T{}) with the device storage type of a numeric dtype.
template <class F>
void visit_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::I8: f(int8_t{}); return;
    case DType::U8: f(uint8_t{}); return;
    case DType::I32: f(int32_t{}); return;
    case DType::I64: f(int64_t{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F32: f(float{}); return;
    case DType::F64: f(double{}); return;
    case DType::C64: f(float2{}); return;
    default: break;
  }
  throw InternalError(std::string("cuda ") + op + ": unsupported dtype " + dtype_name(t));
}

// A trivially copyable element of each size, for the byte-moving kernels (16 bytes: one
// 128-bit load or store; no dtype is that wide, so only the copies' widened chunks use it).
struct alignas(16) Bytes16 {
  u64 lo, hi;
};
template <class F>
void visit_esize(size_t esize, const char* op, F&& f) {
  switch (esize) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(u64{}); return;
    case 16: f(Bytes16{}); return;
    default: break;
  }
  throw InternalError(std::string("cuda ") + op + ": element size " + std::to_string(esize));
}

inline size_t element_size(const Tensor& t, const char* op) {
  if (t.dtype() == DType::I4) throw InternalError(std::string("cuda ") + op + ": i4 is not supported");
  return dtype_size(t.dtype());
}

// ------------------------------------------------------------------------------------
// Warp and block primitives.
// ------------------------------------------------------------------------------------

template <class C>
struct ArgPair {  // argmax's accumulator: a value and its index (-1: none yet)
  C v;
  i64 i;
};

__device__ inline u64 shfl_down(u64 v, int o) { return __shfl_down_sync(kFullMask, v, o); }
__device__ inline i64 shfl_down(i64 v, int o) { return __shfl_down_sync(kFullMask, v, o); }
__device__ inline double shfl_down(double v, int o) { return __shfl_down_sync(kFullMask, v, o); }
__device__ inline double2 shfl_down(double2 v, int o) {
  return make_double2(__shfl_down_sync(kFullMask, v.x, o), __shfl_down_sync(kFullMask, v.y, o));
}
template <class C>
__device__ inline ArgPair<C> shfl_down(ArgPair<C> v, int o) {
  ArgPair<C> r;
  r.v = shfl_down(v.v, o);
  r.i = shfl_down(v.i, o);
  return r;
}
__device__ inline u64 shfl_idx(u64 v, int l) { return __shfl_sync(kFullMask, v, l); }
__device__ inline double shfl_idx(double v, int l) { return __shfl_sync(kFullMask, v, l); }
__device__ inline double2 shfl_idx(double2 v, int l) {
  return make_double2(__shfl_sync(kFullMask, v.x, l), __shfl_sync(kFullMask, v.y, l));
}
__device__ inline u64 shfl_up(u64 v, int o) { return __shfl_up_sync(kFullMask, v, o); }
__device__ inline double shfl_up(double v, int o) { return __shfl_up_sync(kFullMask, v, o); }
__device__ inline double2 shfl_up(double2 v, int o) {
  return make_double2(__shfl_up_sync(kFullMask, v.x, o), __shfl_up_sync(kFullMask, v.y, o));
}

// Combines v over the block (blockDim.x a multiple of 32, at most 1024) in a fixed tree
// order; the result is valid in thread 0. Ends with a barrier so it may be called again.
template <class Op>
__device__ typename Op::A block_reduce(typename Op::A v) {
  using A = typename Op::A;
  __shared__ A part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, shfl_down(v, o));
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? part[lane] : Op::identity();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, shfl_down(v, o));
  }
  __syncthreads();
  return v;
}

// The sum as a reduction op (reduce.cu describes the ops' shape); the scan's chunk
// totals use it too.
template <class T>
struct SumOp {
  using In = T;
  using A = typename Num<T>::W;
  using Out = T;
  __device__ static A identity() { return Arith<A>::zero(); }
  __device__ static A load(T v, i64) { return Num<T>::wide(v); }
  __device__ static A combine(A a, A b) { return Arith<A>::add(a, b); }
  __device__ static Out store(A a) { return Num<T>::narrow(a); }
};

}  // namespace rlx::cuda
