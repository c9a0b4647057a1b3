// The order of the `sort` op as unsigned integer keys, shared by every device that sorts
// keys instead of comparing values (cpu, and cuda's radix sort, which compiles this header
// with nvcc), so that they agree bit for bit.
//
// The order (docs/ir.md `sort`): ascending by value; -0.0 and +0.0 are equal; every NaN
// is equal to every other NaN and greater than +inf (NumPy and PyTorch put NaNs last).
// Descending is the reverse order of the same keys. A stable sort of the keys is then the
// op: equal keys keep their input order, in both directions.
#pragma once
#include <cstdint>

#include "core/dtype.hpp"

#if defined(__CUDACC__)
#define RLX_SORT_KEY_FN __host__ __device__ inline
#else
#define RLX_SORT_KEY_FN inline
#endif

namespace rlx::sort_key {

// How a dtype's bits become a key: the key has the element's width (1, 2, 4 or 8 bytes).
enum class Kind : uint8_t { Unsigned, Signed, Float };
struct Layout {
  Kind kind = Kind::Unsigned;
  int bytes = 0;
  uint64_t inf_bits = 0;  // Float: the bits of +inf (larger magnitudes are NaNs)
};

// The layout of a real numeric dtype (i8 u8 i32 i64 f16 bf16 f32 f64); bytes = 0 for others.
inline Layout layout_of(DType t) {
  switch (t) {
    case DType::U8: return {Kind::Unsigned, 1, 0};
    case DType::I8: return {Kind::Signed, 1, 0};
    case DType::I32: return {Kind::Signed, 4, 0};
    case DType::I64: return {Kind::Signed, 8, 0};
    case DType::F16: return {Kind::Float, 2, 0x7C00};
    case DType::BF16: return {Kind::Float, 2, 0x7F80};
    case DType::F32: return {Kind::Float, 4, 0x7F800000};
    case DType::F64: return {Kind::Float, 8, 0x7FF0000000000000};
    default: return {};
  }
}

// The key of an element with raw bits `bits` (U: the unsigned type of the element's width).
// Floats: NaN -> all ones (the largest key), -0 -> +0, then negatives have all bits flipped
// and non-negatives the sign bit set, so unsigned order is numeric order. Signed ints: the
// sign bit flipped. Descending keys are the complement.
template <class U>
RLX_SORT_KEY_FN U key(U bits, Kind kind, U inf_bits, bool descending) {
  const U sign = U(U(1) << (sizeof(U) * 8 - 1));
  U k = bits;
  if (kind == Kind::Signed) {
    k = U(bits ^ sign);
  } else if (kind == Kind::Float) {
    const U magnitude = U(bits & U(~sign));
    if (magnitude > inf_bits)
      k = U(~U(0));
    else if (magnitude == 0)
      k = sign;
    else
      k = (bits & sign) ? U(~bits) : U(bits | sign);
  }
  return descending ? U(~k) : k;
}

// The raw bits of the element whose key is `k` (the inverse of key()), exact for every
// element but two kinds of float: NaNs (all one key, whatever their payload) and zeros (-0
// and +0 share a key). For those `exact` is false and the caller copies the element itself.
template <class U>
RLX_SORT_KEY_FN U bits_of(U k, Kind kind, bool descending, bool& exact) {
  const U sign = U(U(1) << (sizeof(U) * 8 - 1));
  if (descending) k = U(~k);
  exact = true;
  if (kind == Kind::Signed) return U(k ^ sign);
  if (kind == Kind::Float) {
    if (k == U(~U(0)) || k == sign) {
      exact = false;
      return k;
    }
    return (k & sign) ? U(k ^ sign) : U(~k);
  }
  return k;
}

}  // namespace rlx::sort_key
