// Elementwise chunk kernels of the cpu device: each call applies one op to n elements
// of contiguous arrays in the op's compute type. The fused executor (fused.cpp) strings
// these together over cache-sized chunks.
//
// Compute kinds: values inside a chunk are held as bool (u8 0/1), i8, u8, i32, i64,
// f32 (also for f16 and bf16: converted on load, rounded on store), f64 or c64.
//
// ISA: every loop is compiled three times through GCC's target_clones
// (x86-64-v4 = AVX-512F/BW/DQ/VL, x86-64-v3 = AVX2+FMA+F16C, and baseline x86-64);
// the dynamic loader's ifunc resolver picks the best clone for the running CPU once,
// at load time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.hpp"

namespace rlx::cpu {

enum class CK : uint8_t { B, I8, U8, I32, I64, F32, F64, C64 };
CK ck_of(DType t);
size_t ck_size(CK k);
const char* ck_name(CK k);

enum class EwOp : uint8_t {
  // unary
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Erf, Recip, Floor, Ceil, Round, Sign, LogicalNot,
  Real, Imag, Conj,
  // binary
  Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge, LogicalAnd, LogicalOr, MakeComplex,
  // others
  Where, Cast,
};
std::optional<EwOp> ew_op_from_name(std::string_view name);
const char* ew_op_name(EwOp op);
int ew_arity(EwOp op);
// Whether the cpu kernels implement op on operands of dtype t (the first operand's
// dtype; for where, the value operands'; for cast, the source). Cast targets: any but i4.
bool ew_supported(EwOp op, DType t);

// o[i] = op(a[i]); a has kind k. Result kind: k, except abs/real/imag of c64 -> f32.
void ew_unary(EwOp op, CK k, const void* a, void* o, int64_t n);
// Binary forms: 0 = both arrays, 1 = b is one scalar, 2 = a is one scalar.
// Result kind: k, except comparisons -> B and make_complex -> C64.
void ew_binary(EwOp op, CK k, int form, const void* a, const void* b, void* o, int64_t n);
// Folded scalar steps (f32, f64): pre and post transforms x * mul + add, with the product
// and the sum each rounded, exactly as the separate mul/add/sub nodes they replace
// (identity: mul = 1, add = -0). nullptr: none.
template <class T>
struct AffineT {
  T mul = T(1);
  T add = T(-0.0);
};
using Affine = AffineT<float>;
using AffineD = AffineT<double>;
// Ops whose f32 kernels take a pre transform on operand a and a post transform; the f64
// kernels take them for the binary ones of these (add, sub, mul, div, maximum, minimum).
bool ew_affine_ok(EwOp op);
bool ew_affine_ok_f64(EwOp op);
// Memory work done in the background of an f32 kernel, spread evenly over its
// loop so that it overlaps the arithmetic: prefetches of the next chunk's inputs, and
// streaming copies of the previous chunk's outputs to memory.
struct Background {
  const char* prefetch[6] = {};
  int64_t prefetch_bytes[6] = {};
  int nprefetch = 0;
  char* copy_dst[4] = {};
  const char* copy_src[4] = {};
  int64_t copy_bytes[4] = {};
  int ncopy = 0;
  bool empty() const { return nprefetch == 0 && ncopy == 0; }
};
// o[i] = post(op(pre(a[i]))).
void ew_unary_f32_affine(EwOp op, const float* a, float* o, int64_t n, const Affine* pre, const Affine* post,
                         const Background* bg = nullptr);
// o[i] = post(op(pre(a[i]), b[i])), forms as ew_binary.
void ew_binary_f32_affine(EwOp op, int form, const float* a, const float* b, float* o, int64_t n,
                          const Affine* pre, const Affine* post, const Background* bg = nullptr);
void ew_binary_f64_affine(EwOp op, int form, const double* a, const double* b, double* o, int64_t n,
                          const AffineD* pre, const AffineD* post);

// The fused executor's chunk sums, over f32 or f64 arrays, in double in one fixed order
// (eight lanes, then pairwise): ew_sum of x[i]; ew_dot of a[i] * b[i], each product rounded
// to the value type as a mul step stores it — the same bits as ew_sum of the stored products.
double ew_sum(CK k, const void* x, int64_t n);
double ew_dot(CK k, const void* a, const void* b, int64_t n);

// o[i] = c[i] ? a[i] : b[i], all arrays.
void ew_where(CK k, const uint8_t* c, const void* a, const void* b, void* o, int64_t n);
// o[i] = cast<to>(a[i]) held in compute kind ck_of(to) (f16/bf16 targets: rounded to
// the target's precision, held as f32). Semantics as docs/ir.md.
void ew_cast(CK from, DType to, const void* a, void* o, int64_t n);

// Copies `bytes` to dst with non-temporal (cache-bypassing) stores where the CPU has
// them; stream_fence() orders those stores before later ones (call before a thread
// publishes its results).
void stream_store(void* dst, const void* src, size_t bytes);
void stream_fence();

// Rounds f32 values in place to the precision of t (f16 or bf16; others: no-op).
void round_to_storage(DType t, float* p, int64_t n);

// Storage <-> compute conversions, contiguous.
void load_convert(DType storage, const void* src, void* dst, int64_t n);
void store_convert(DType storage, const void* src, void* dst, int64_t n);
// Loads n elements starting at flat index `start` of a strided view (strides in
// elements, 0 for broadcast dims) over `shape`, converting to the compute kind.
void load_strided(DType storage, const void* base, const int64_t* shape, const int64_t* strides, int rank,
                  int64_t start, int64_t n, void* dst);
// Fills n elements of kind k with the value at src (one element of kind k).
void fill_ck(CK k, const void* src, void* dst, int64_t n);

// Branch-free f16/bf16 conversions (bit-identical to core/half.hpp; vectorizable).
inline float f16_bits_to_float(uint16_t h) {
  uint32_t o = uint32_t(h & 0x7fffu) << 13;
  uint32_t e = o & 0x0f800000u;
  uint32_t on = o + 0x38000000u;
  uint32_t oi = o + 0x70000000u;
  float fd = __builtin_bit_cast(float, o + 0x38800000u) - __builtin_bit_cast(float, 0x38800000u);
  uint32_t r = e == 0x0f800000u ? oi : (e == 0 ? __builtin_bit_cast(uint32_t, fd) : on);
  return __builtin_bit_cast(float, r | (uint32_t(h & 0x8000u) << 16));
}
inline uint16_t float_to_f16_bits(float x) {
  uint32_t u = __builtin_bit_cast(uint32_t, x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  // subnormal f16 (|x| < 2^-14): let the FPU round by adding 0.5.
  float fd = __builtin_bit_cast(float, a) + 0.5f;
  uint32_t rd = __builtin_bit_cast(uint32_t, fd) - 0x3f000000u;
  uint32_t rn = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;  // rebias -112 << 23, round to even
  uint32_t r = a < 0x38800000u ? rd : rn;
  r = a >= 0x477ff000u ? 0x7c00u : r;
  r = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : r;
  return uint16_t(sign | r);
}
// f64 -> f32 rounding to odd (truncate, then set the last bit when inexact): rounding
// that value to f16/bf16 equals rounding the f64 once.
inline float f64_to_f32_odd(double x) {
  float f = float(x);
  if (!(double(f) != x) || x != x) return f;
  uint32_t b = __builtin_bit_cast(uint32_t, f);
  if (__builtin_fabs(double(f)) > __builtin_fabs(x)) b -= 1;
  return __builtin_bit_cast(float, b | 1u);
}
inline float bf16_bits_to_float(uint16_t h) { return __builtin_bit_cast(float, uint32_t(h) << 16); }
inline uint16_t float_to_bf16_bits(float x) {
  uint32_t u = __builtin_bit_cast(uint32_t, x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : r);
}

}  // namespace rlx::cpu
