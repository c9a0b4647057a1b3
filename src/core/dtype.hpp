// Element types. I4 is packed two-per-byte signed 4-bit storage (quantized weights);
// every other dtype has a whole-byte element.
#pragma once
#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/checked.hpp"
#include "core/half.hpp"

namespace rlx {

enum class DType : uint8_t { Bool, I8, U8, I32, I64, F16, BF16, F32, F64, C64, I4 };

inline constexpr DType kAllDTypes[] = {DType::Bool, DType::I8,   DType::U8,  DType::I32, DType::I64, DType::F16,
                                       DType::BF16, DType::F32,  DType::F64, DType::C64, DType::I4};

using c64 = std::complex<float>;

const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view s);
int dtype_bits(DType t);  // storage bits per element (4 for I4)
inline size_t dtype_size(DType t) { return size_t(dtype_bits(t) + 7) / 8; }
// Bytes for n elements, I4 packed; throws SizeError when n is negative or the bytes pass 2^62.
inline size_t dtype_storage_bytes(DType t, int64_t n) {
  if (t == DType::I4) return size_t(checked_add(n, 1, "bytes of a packed i4 tensor") / 2);
  return size_t(checked_mul(n, int64_t(dtype_size(t)), std::string("bytes of a ") + dtype_name(t) + " tensor"));
}
bool is_float(DType t);    // f16 bf16 f32 f64
bool is_complex(DType t);  // c64
bool is_integer(DType t);  // i8 u8 i32 i64 i4
inline bool is_inexact(DType t) { return is_float(t) || is_complex(t); }
// Whole-byte integers (i8 u8 i32 i64: not bool, not packed i4).
inline bool is_byte_integer(DType t) { return t == DType::I8 || t == DType::U8 || t == DType::I32 || t == DType::I64; }
inline bool is_real_numeric(DType t) { return is_byte_integer(t) || is_float(t); }  // ints and floats
inline bool is_numeric(DType t) { return is_real_numeric(t) || t == DType::C64; }   // ... and c64

template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<c64> { static constexpr DType value = DType::C64; };

// Calls f(T{}) with the C++ storage type of a whole-byte dtype (not I4).
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Bool: return f(bool{});
    case DType::I8: return f(int8_t{});
    case DType::U8: return f(uint8_t{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::C64: return f(c64{});
    case DType::I4: break;
  }
  return f(int8_t{});  // I4 is unpacked to i8 by callers before visiting
}

}  // namespace rlx
