// IEEE binary16 and bfloat16 storage types. Conversions from float round to
// nearest, ties to even; NaN and Inf are preserved (NaN stays quiet NaN).
#pragma once
#include <cstdint>
#include <cstring>

namespace rlx {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return bits_float(uint32_t(bits) << 16); }
  static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;  // round to nearest even; overflow carries into Inf correctly
    return uint16_t(u >> 16);
  }
};

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: Inf
    if (a < 0x38800000u) {
      // Result is subnormal or zero: scale so the integer part is the f16 mantissa.
      if (a < 0x33000000u) return uint16_t(sign);  // below half the smallest subnormal
      uint32_t e = a >> 23;
      uint32_t m = (a & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - e;  // 113 - e + 13
      uint32_t q = m >> shift;
      uint32_t rem = m & ((1u << shift) - 1);
      uint32_t half = 1u << (shift - 1);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      return uint16_t(sign | q);
    }
    // Normal: rebias exponent, round mantissa from 23 to 10 bits.
    uint32_t r = a - 0x38000000u;  // exponent 127 -> 15
    uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return uint16_t(sign | (r >> 13));
  }
  static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
      if (m == 0) return bits_float(sign);
      // subnormal: value = m * 2^-24
      float v = float(m) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return bits_float(sign | ((e + 112) << 23) | (m << 13));
  }
};

}  // namespace rlx
