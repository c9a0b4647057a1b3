// ggml's block formats for weights (the types GGUF files store): what a block holds and the
// value of each of its elements, exactly as ggml's reference dequantization gives it.
// Written once and compiled for the host (GgufFile::dequantize, the reference and cpu
// kernels) and for the GPU (devices/cuda/quant.cu), so every device decodes the same bits.
//
//   const ggml::BlockFormat* f = ggml::block_format("Q4_K");   // 256 elements in 144 bytes
//   ggml::decode_block(f->type, row + b * f->bytes, out);      // 256 floats
//   float w = ggml::decode_element(f->type, block, j);         // element j alone
//
// Each product and sum rounds to f32 in ggml's order. Host files that include this header
// build without FP contraction (-ffp-contract=off); on the GPU the products and sums are
// the explicitly rounded intrinsics, since nvcc contracts a*b+c into an FMA by default,
// which would change the last bit.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.hpp"

#if defined(__CUDACC__)
#define RLX_GGML_HD __host__ __device__
#else
#define RLX_GGML_HD
#endif

namespace rlx::ggml {

// ggml's type numbers of the formats decoded here.
enum : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
                  kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30 };

struct BlockFormat {
  uint32_t type;     // ggml's number
  const char* name;  // ggml's name: "Q4_K"
  int block;         // elements per block
  int bytes;         // bytes per block
};

inline constexpr BlockFormat kBlockFormats[] = {
    {kF32, "F32", 1, 4},        {kF16, "F16", 1, 2},        {kBF16, "BF16", 1, 2},      {kQ8_0, "Q8_0", 32, 34},
    {kQ4_0, "Q4_0", 32, 18},    {kQ4_1, "Q4_1", 32, 20},    {kQ5_0, "Q5_0", 32, 22},    {kQ5_1, "Q5_1", 32, 24},
    {kQ4_K, "Q4_K", 256, 144},  {kQ5_K, "Q5_K", 256, 176},  {kQ6_K, "Q6_K", 256, 210},
};

// The format of a type number or name; nullptr for one not decoded here.
inline const BlockFormat* block_format(uint32_t type) {
  for (const BlockFormat& f : kBlockFormats)
    if (f.type == type) return &f;
  return nullptr;
}
inline const BlockFormat* block_format(std::string_view name) {
  for (const BlockFormat& f : kBlockFormats)
    if (name == f.name) return &f;
  return nullptr;
}
// The format named `name`, for kernels whose op's shape rule has already checked the name:
// InternalError when there is none.
inline const BlockFormat& format_named(std::string_view name) {
  if (const BlockFormat* f = block_format(name)) return *f;
  throw InternalError("no packed format named '" + std::string(name) + "'");
}
// "F32 F16 BF16 Q8_0 ..." for messages.
inline const char* block_format_names() { return "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K"; }

// Elements per block (kBlockFormats' `block`, where device code can read it); 0 for a type
// not decoded here.
RLX_GGML_HD inline int block_elements(uint32_t type) {
  switch (type) {
    case kF32: case kF16: case kBF16: return 1;
    case kQ8_0: case kQ4_0: case kQ4_1: case kQ5_0: case kQ5_1: return 32;
    case kQ4_K: case kQ5_K: case kQ6_K: return 256;
    default: return 0;
  }
}

// ---------------------------------------------------------------- arithmetic

RLX_GGML_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
RLX_GGML_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
RLX_GGML_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

RLX_GGML_HD inline uint32_t load_u32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
RLX_GGML_HD inline float float_of_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
// IEEE half (little-endian at p) to float, exactly.
RLX_GGML_HD inline float half(const unsigned char* p) {
  const uint32_t h = uint32_t(p[0]) | uint32_t(p[1]) << 8;
  const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return float_of_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    // Zero or subnormal: m * 2^-24 (exact in f32).
    const float v = float(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return float_of_bits(sign | ((e + 112) << 23) | (m << 13));
}

// ---------------------------------------------------------------- one element
//
// Block layouts (ggml-quants.h):
//   Q8_0: f16 d, 32 int8 q;                           x = q * d
//   Q4_0: f16 d, 16 bytes of nibbles;                 x = (q - 8) * d
//   Q4_1: f16 d, f16 m, nibbles;                      x = q * d + m
//   Q5_0: f16 d, 32 fifth bits, nibbles;              x = (q - 16) * d
//   Q5_1: f16 d, f16 m, fifth bits, nibbles;          x = q * d + m
// The nibbles: element j < 16 is the low nibble of byte j, element j >= 16 the high nibble
// of byte j - 16; the fifth bit of element j is bit j of the 32-bit word.
RLX_GGML_HD inline int nibble(const unsigned char* qs, int j) { return j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4; }
RLX_GGML_HD inline int fifth(const unsigned char* h, int j) { return int((load_u32(h) >> j) & 1u) << 4; }

// K-quants (Q4_K, Q5_K): f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks
// of 32, for Q5_K 32 bytes of fifth bits (bit j of byte l for element l of sub-block j), then
// 128 bytes of nibbles (sub-block 2c from the low nibbles of bytes 32c..32c+31, 2c+1 from
// their high nibbles); x = (d * sc) * q - dmin * mn.
RLX_GGML_HD inline void k_scale_min(const unsigned char* s, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// The scale (d * sc) and offset (dmin * mn) of sub-block j.
RLX_GGML_HD inline void k_sub_block(const unsigned char* b, int j, float& dl, float& ml) {
  int sc, mn;
  k_scale_min(b + 4, j, sc, mn);
  dl = mul(half(b), float(sc));
  ml = mul(half(b + 2), float(mn));
}
RLX_GGML_HD inline int k_quant(const unsigned char* q, const unsigned char* fifth_bits, int j, int l) {
  const int v = (q[32 * (j / 2) + l] >> (4 * (j & 1))) & 0xf;
  return fifth_bits ? v | (((fifth_bits[l] >> j) & 1) << 4) : v;
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 int8 scales (one per 16
// elements), f16 d. In each half h of 128 elements, element r takes nibble r / 64 of low
// byte 64h + r % 64 and bit pair r / 32 of high byte 32h + r % 32; x = (d * scale) * (q - 32).
RLX_GGML_HD inline float q6_k(const unsigned char* b, int e) {
  const int h = e / 128, r = e % 128;
  const int lo = (b[64 * h + r % 64] >> (4 * (r / 64))) & 0xf;
  const int hi = (b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
  return mul(mul(half(b + 208), float(int8_t(b[192 + e / 16]))), float((lo | (hi << 4)) - 32));
}

// Element j of a block of `type` at b (type one of kBlockFormats; 0 for any other).
RLX_GGML_HD inline float decode_element(uint32_t type, const unsigned char* b, int j) {
  switch (type) {
    case kF32: return float_of_bits(load_u32(b));
    case kF16: return half(b);
    case kBF16: return float_of_bits((uint32_t(b[0]) | uint32_t(b[1]) << 8) << 16);
    case kQ8_0: return mul(float(int8_t(b[2 + j])), half(b));
    case kQ4_0: return mul(float(nibble(b + 2, j) - 8), half(b));
    case kQ4_1: return add(mul(float(nibble(b + 4, j)), half(b)), half(b + 2));
    case kQ5_0: return mul(float((nibble(b + 6, j) | fifth(b + 2, j)) - 16), half(b));
    case kQ5_1: return add(mul(float(nibble(b + 8, j) | fifth(b + 4, j)), half(b)), half(b + 2));
    case kQ4_K: case kQ5_K: {
      float dl, ml;
      k_sub_block(b, j / 32, dl, ml);
      const int v = type == kQ4_K ? k_quant(b + 16, nullptr, j / 32, j % 32) : k_quant(b + 48, b + 16, j / 32, j % 32);
      return sub(mul(dl, float(v)), ml);
    }
    case kQ6_K: return q6_k(b, j);
    default: return 0.0f;
  }
}

// ---------------------------------------------------------------- whole blocks
//
// The same values as decode_element, a block at a time, with each block's scales read once
// (the loops vectorize on the host).

RLX_GGML_HD inline void decode_q8_0(const unsigned char* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = mul(float(int8_t(b[2 + j])), d);
}
RLX_GGML_HD inline void decode_q4_0(const unsigned char* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = mul(float((b[2 + j] & 0xf) - 8), d);
    y[j + 16] = mul(float((b[2 + j] >> 4) - 8), d);
  }
}
RLX_GGML_HD inline void decode_q4_k(const unsigned char* b, float* y) {
  for (int j = 0; j < 8; ++j) {
    float dl, ml;
    k_sub_block(b, j, dl, ml);
    const unsigned char* q = b + 16 + 32 * (j / 2);
    const int shift = 4 * (j & 1);
    for (int l = 0; l < 32; ++l) y[32 * j + l] = sub(mul(dl, float((q[l] >> shift) & 0xf)), ml);
  }
}

// A whole block of `type` at b into y[0 .. block).
RLX_GGML_HD inline void decode_block(uint32_t type, const unsigned char* b, float* y) {
  switch (type) {
    case kQ8_0: return decode_q8_0(b, y);
    case kQ4_0: return decode_q4_0(b, y);
    case kQ4_K: return decode_q4_k(b, y);
    case kQ5_K: {
      for (int j = 0; j < 8; ++j) {
        float dl, ml;
        k_sub_block(b, j, dl, ml);
        for (int l = 0; l < 32; ++l) y[32 * j + l] = sub(mul(dl, float(k_quant(b + 48, b + 16, j, l))), ml);
      }
      return;
    }
    default: {
      const int n = block_elements(type);
      for (int j = 0; j < n; ++j) y[j] = decode_element(type, b, j);
      return;
    }
  }
}

}  // namespace rlx::ggml
