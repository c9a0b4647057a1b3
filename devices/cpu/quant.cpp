// Packed weights on the cpu device (src/ir/ops/quant.cpp):
//   dequantize     every format of core/ggml_blocks.hpp, threaded over rows;
//   matmul_packed  Q8_0, Q4_0, Q4_K, BF16 and F16 natively (the other formats take the
//                  rewrite dequant-then-matmul). Few rows of x (decode, M <= kSmallM): each
//                  weight block (for BF16 and F16: kF32Block elements) is decoded straight into
//                  vector registers once per group of up to 4 rows of x and consumed at once
//                  by FMAs in f32 — the weight bytes are read once, which is what bounds a
//                  batch-1 decode step; threaded over weight rows. BF16 widens by a 16-bit
//                  shift, F16 by the F16C conversion, both exact; the AVX-512 BF16 dot
//                  instructions are not used: they round x to bf16, and the op multiplies the
//                  f32 x. More rows: a panel of weight rows is decoded into f32 scratch and
//                  multiplied by the device's sgemm (gemm.hpp).
//   matmul_small_m_f32  the decode kernel over f32 weight rows, for the cpu matmul's products
//                  with few rows (a decode step's x · W^T): OpenBLAS's sgemm packs all of W
//                  for M = 1, which reads and writes the weights where one read is the bound.
// The vector code (quant_rows.inc) is built three times, for x86-64-v4 (AVX-512, 16 lanes),
// x86-64-v3 (AVX2, 8 lanes) and the baseline (4 lanes), and picked at run time (isa.hpp). Its
// lane-wise decode computes core/ggml_blocks.hpp's products (the file is built without FP
// contraction), so the weights are the exact f32 decode; only the order of the sum over k
// differs from the reference device.
#include <algorithm>
#include <cstring>
#include <memory>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define RLX_QUANT_X86 1
#endif

#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
#include "devices/cpu/gemm.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/quant.hpp"
#include "devices/cpu/thread_pool.hpp"

namespace rlx::cpu {
namespace {

constexpr int64_t kSmallM = 16;  // up to this many rows of x: the decode-and-FMA kernel
constexpr int kF32Block = 64;    // f32, bf16 and f16 rows through the same kernel: elements per step

struct RowsArgs {
  const unsigned char* w;  // packed rows
  int64_t row_bytes, k;
  const float* x;  // [m, k]
  int64_t m;
  float* y;  // [m, n]
  int64_t n;
};
using RowsFn = void (*)(const RowsArgs&, int64_t, int64_t);
using WidenFn = void (*)(const unsigned char*, int64_t, float*);

// quant_rows.inc once per instruction set, each inside a target region so that the
// intrinsics and the inlined block decoders are compiled for it.
#ifdef RLX_QUANT_X86
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v4")
namespace v4 {
typedef float VF __attribute__((vector_size(64)));
constexpr int VL = 16;
inline VF fma_v(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline float half_at(const unsigned char* p) { uint16_t h; std::memcpy(&h, p, 2); return _cvtsh_ss(h); }
inline VF load_i8(const unsigned char* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline VF load_nibbles(const unsigned char* p, int shift) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i n = _mm_and_si128(shift ? _mm_srli_epi16(q, 4) : q, _mm_set1_epi8(0xf));
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(n));
}
inline VF load_bf16(const unsigned char* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline VF load_f16(const unsigned char* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
#include "devices/cpu/quant_rows.inc"
}  // namespace v4
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")
namespace v3 {
typedef float VF __attribute__((vector_size(32)));
constexpr int VL = 8;
inline VF fma_v(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline float half_at(const unsigned char* p) { uint16_t h; std::memcpy(&h, p, 2); return _cvtsh_ss(h); }
inline VF load_i8(const unsigned char* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline VF load_nibbles(const unsigned char* p, int shift) {
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i n = _mm_and_si128(shift ? _mm_srli_epi16(q, 4) : q, _mm_set1_epi8(0xf));
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(n));
}
inline VF load_bf16(const unsigned char* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline VF load_f16(const unsigned char* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#include "devices/cpu/quant_rows.inc"
}  // namespace v3
#pragma GCC pop_options
#endif
namespace base {
typedef float VF __attribute__((vector_size(16)));
constexpr int VL = 4;
inline VF fma_v(VF a, VF b, VF c) { return a * b + c; }
inline float half_at(const unsigned char* p) { return ggml::half(p); }
inline VF load_i8(const unsigned char* p) { return VF{float(int8_t(p[0])), float(int8_t(p[1])), float(int8_t(p[2])), float(int8_t(p[3]))}; }
inline VF load_nibbles(const unsigned char* p, int shift) {
  return VF{float((p[0] >> shift) & 0xf), float((p[1] >> shift) & 0xf), float((p[2] >> shift) & 0xf), float((p[3] >> shift) & 0xf)};
}
inline VF load_bf16(const unsigned char* p) {
  auto e = [p](int j) { return ggml::decode_element(ggml::kBF16, p + 2 * j, 0); };
  return VF{e(0), e(1), e(2), e(3)};
}
inline VF load_f16(const unsigned char* p) { return VF{ggml::half(p), ggml::half(p + 2), ggml::half(p + 4), ggml::half(p + 6)}; }
#include "devices/cpu/quant_rows.inc"
}  // namespace base

enum class Isa { V4, V3, Base };
Isa quant_isa() {
#ifdef RLX_QUANT_X86
  static const Isa isa = cpu_has_x86_64_v4() ? Isa::V4 : cpu_has_x86_64_v3() ? Isa::V3 : Isa::Base;
  return isa;
#else
  return Isa::Base;
#endif
}

RowsFn rows_fn(uint32_t type) {
  switch (quant_isa()) {
#ifdef RLX_QUANT_X86
    case Isa::V4: return v4::rows_fn(type);
    case Isa::V3: return v3::rows_fn(type);
#endif
    default: return base::rows_fn(type);
  }
}

WidenFn widen_fn(uint32_t type) {
  switch (quant_isa()) {
#ifdef RLX_QUANT_X86
    case Isa::V4: return v4::widen_fn(type);
    case Isa::V3: return v3::widen_fn(type);
#endif
    default: return base::widen_fn(type);
  }
}

RowsFn f32_rows() {
  switch (quant_isa()) {
#ifdef RLX_QUANT_X86
    case Isa::V4: return v4::f32_rows_fn();
    case Isa::V3: return v3::f32_rows_fn();
#endif
    default: return base::f32_rows_fn();
  }
}

// Rows [r0, r1) of the packed weight decoded into w (row-major, k per row).
void decode_rows(const ggml::BlockFormat& f, const unsigned char* p, int64_t row_bytes, int64_t k, int64_t r0,
                 int64_t r1, float* w) {
  const int64_t blocks = k / f.block;
  if (WidenFn widen = widen_fn(f.type)) {  // (BF16, F16: vector widening, not a call per element)
    for (int64_t r = r0; r < r1; ++r) widen(p + r * row_bytes, k, w + r * k);
    return;
  }
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < blocks; ++b) ggml::decode_block(f.type, p + r * row_bytes + b * f.bytes, w + r * k + b * f.block);
}

void dequantize_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ggml::BlockFormat& f = ggml::format_named(n.attrs.get_string("type"));
  const Tensor w = in[0].contiguous();
  const int64_t k = n.attrs.get_int("k"), row_bytes = w.shape()[1];
  const auto* p = w.data<unsigned char>();
  float* y = out[0].data<float>();
  parallel_for(w.shape()[0], std::max<int64_t>(1, 65536 / std::max<int64_t>(k, 1)),
               [&](int64_t r0, int64_t r1) { decode_rows(f, p, row_bytes, k, r0, r1, y); });
}

void matmul_packed_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ggml::BlockFormat& f = ggml::format_named(n.attrs.get_string("type"));
  const Tensor x = in[0].contiguous(), w = in[1].contiguous();
  const int64_t k = n.attrs.get_int("k");
  matmul_packed(f.type, w.data<unsigned char>(), w.shape()[0], w.shape()[1], k, x.data<float>(), x.numel() / k,
                out[0].data<float>());
}

}  // namespace

bool matmul_packed_native(uint32_t type) { return rows_fn(type) != nullptr; }

bool matmul_small_m_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t ldw, float* y, int64_t n) {
  if (m < 1 || m > kSmallM || n < 1 || k < kF32Block || k % kF32Block || ldw < k) return false;
  const RowsArgs a{reinterpret_cast<const unsigned char*>(w), ldw * int64_t(sizeof(float)), k, x, m, y, n};
  RowsFn fn = f32_rows();
  parallel_for(n, 8, [&](int64_t r0, int64_t r1) { fn(a, r0, r1); });
  return true;
}

void matmul_packed(uint32_t type, const unsigned char* w, int64_t n, int64_t row_bytes, int64_t k, const float* x,
                   int64_t m, float* y) {
  const ggml::BlockFormat* f = ggml::block_format(type);
  RowsFn fn = rows_fn(type);
  if (!f || !fn) throw InternalError("cpu matmul_packed: no kernel for ggml type " + std::to_string(type));
  if (m <= 0 || n <= 0) return;
  if (m <= kSmallM) {
    const RowsArgs a{w, row_bytes, k, x, m, y, n};
    parallel_for(n, 8, [&](int64_t r0, int64_t r1) { fn(a, r0, r1); });
    return;
  }
  // Panels of weight rows decoded to f32 (up to 32 MiB each, a multiple of 16 rows), each
  // multiplied as y[:, panel] = x · panel^T. Large panels keep the sgemm calls few and wide
  // (a narrow N costs OpenBLAS more than the decode saves); the decode is a small share of
  // the work once M is large (one pass over N K weights against 2 M N K flops).
  const int64_t rows = std::min(n, std::max<int64_t>(16, (int64_t(1) << 23) / std::max<int64_t>(k, 1) / 16 * 16));
  // The scratch is kept per calling thread between calls: a fresh 32 MiB would be zeroed
  // and faulted in on every call.
  thread_local std::unique_ptr<float[]> scratch;
  thread_local size_t scratch_size = 0;
  if (scratch_size < size_t(rows * k)) {
    scratch.reset(new float[size_t(rows * k)]);
    scratch_size = size_t(rows * k);
  }
  float* panel = scratch.get();
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t nr = std::min(rows, n - r0);
    parallel_for(nr, 4, [&](int64_t a, int64_t b) { decode_rows(*f, w + r0 * row_bytes, row_bytes, k, a, b, panel); });
    gemm(false, true, m, nr, k, x, k, panel, k, y + r0, n);
  }
}

void add_quant_kernels(KernelTable& t) {
  t.add({"dequantize", bit(DType::U8), 0, dequantize_kernel, {}});
  t.add({"matmul_packed", bit(DType::F32), 0, matmul_packed_kernel, [](const ir::Node& n, const ir::Graph&) {
           const std::string& type = n.attrs.get_string("type");
           const ggml::BlockFormat* f = ggml::block_format(type);
           if (f && matmul_packed_native(f->type)) return std::string();
           return "no " + type + " matmul_packed kernel on cpu (it has Q8_0 Q4_0 Q4_K BF16 F16)";
         }});
}

}  // namespace rlx::cpu
