// Packed weights on the cuda device (src/ir/ops/quant.cpp), decoded with core/ggml_blocks.hpp
// (the same element decoders as every other device; explicitly rounded products, so the
// values are ggml's bit for bit):
//   dequantize     every format: one thread per element.
//   matmul_packed  Q8_0, Q4_0, Q4_K, BF16 and F16 natively (the other formats take
//                  dequant-then-matmul). Up to 16 rows of x: a warp per weight row, each
//                  lane decoding every 32nd group of 32 weights (a block, or a Q4_K
//                  sub-block) once and multiplying it into every row of x, then a warp
//                  reduction (the GEMV of a decode step). BF16 and F16 rows are read 16 bytes
//                  (8 weights) per lane per load when rows and base are 16-byte aligned (k a
//                  multiple of 8), else a weight per lane; 9-16 rows of x over such rows
//                  stage x in shared memory and give each warp four weight rows; widened exactly to f32 and
//                  multiplied into the f32 x in f32 (no bf16 or f16 arithmetic: the op's
//                  contract is the f32 product). 17-64 rows: the same kernel over blocks of
//                  16 rows (the weight read once per block: fewer bytes than decoding it to
//                  f32 for a GEMM). More rows: the weight decoded into scratch, then a cuBLAS
//                  f32 GEMM: full f32, or TF32 tensor cores where RLX_CUDA_TF32=1 allows them
//                  (as for matmul; BF16 weights are exact in TF32, x is rounded to it).
//                  Where RLX_CUDA_BF16 allows it (library.hpp), BF16/F16 weights instead
//                  meet x rounded to their type on the tensor cores (f32 sums): up to 64
//                  rows of x in a GEMV-shaped mma.sync kernel, more in cuBLAS's GEMM: no
//                  f32 copy of the weights, and the 16-bit tensor cores' rate.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>

#include "core/ggml_blocks.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"
#include "devices/cuda/library.hpp"
#include "devices/cuda/quant.hpp"
#include "ir/graph.hpp"

namespace rlx::cuda {
namespace {

// The GEMV kernels keep one accumulator per row of x in registers: instantiated for at most
// 8 rows (a decode step of batch 1-8) and 16 (batch 9-16), so the small case keeps its
// registers. Past kGemvRows the weight is read once per block of 16 rows, up to kBlockedRows.
constexpr int kGemvRows = 16, kBlockedRows = 64;

__global__ void __launch_bounds__(256) dequantize_kernel(uint32_t type, int block, int bytes, const unsigned char* __restrict__ w,
                                                         int64_t row_bytes, int64_t k, int64_t total, float* __restrict__ y) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, e = i % k;
    y[i] = ggml::decode_element(type, w + r * row_bytes + (e / block) * bytes, int(e % block));
  }
}

// 32 consecutive weights of a row at once — a Q8_0 or Q4_0 block, or sub-block `g % 8` of a
// Q4_K block — with the group's scales read once: the values decode_element gives, bit for bit.
template <uint32_t Type>
__device__ inline void decode_group(const unsigned char* row, int64_t g, float (&v)[32]) {
  if constexpr (Type == ggml::kQ8_0) {
    const unsigned char* b = row + g * 34;
    const float d = ggml::half(b);
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = ggml::mul(float(int8_t(b[2 + j])), d);
  } else if constexpr (Type == ggml::kQ4_0) {
    const unsigned char* b = row + g * 18;
    const float d = ggml::half(b);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      v[j] = ggml::mul(float((b[2 + j] & 0xf) - 8), d);
      v[j + 16] = ggml::mul(float((b[2 + j] >> 4) - 8), d);
    }
  } else {
    const unsigned char* b = row + (g / 8) * 144;
    const int sub = int(g % 8);
    float dl, ml;
    ggml::k_sub_block(b, sub, dl, ml);
    const unsigned char* q = b + 16 + 32 * (sub / 2);
    const int shift = 4 * (sub & 1);
#pragma unroll
    for (int l = 0; l < 32; ++l) v[l] = ggml::sub(ggml::mul(dl, float((q[l] >> shift) & 0xf)), ml);
  }
}

// Warp w of the grid computes y[:, w] (weight row w) for the m <= kWarpM rows of x: lane l
// decodes the row's 32-weight groups l, l + 32, ... (whole blocks, so a lane's loads stay in
// one block and the scales are read once per group), multiplies each into every row of x,
// and the warp adds its lanes' sums.
template <uint32_t Type, int kWarpM>
__global__ void __launch_bounds__(256) gemv_kernel(const unsigned char* __restrict__ w, int64_t n, int64_t row_bytes,
                                                   int64_t k, const float* __restrict__ x, int m, float* __restrict__ y) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together (n rows, 32 lanes each)
  const unsigned char* p = w + row * row_bytes;
  float acc[kWarpM] = {};
  const int64_t groups = k / 32;
  for (int64_t g = lane; g < groups; g += 32) {
    float v[32];
    decode_group<Type>(p, g, v);
#pragma unroll
    for (int i = 0; i < kWarpM; ++i) {
      if (i >= m) break;
      const float4* xr = reinterpret_cast<const float4*>(x + int64_t(i) * k + g * 32);
      float a = acc[i];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const float4 xv = xr[q];
        a = fmaf(xv.x, v[4 * q], a);
        a = fmaf(xv.y, v[4 * q + 1], a);
        a = fmaf(xv.z, v[4 * q + 2], a);
        a = fmaf(xv.w, v[4 * q + 3], a);
      }
      acc[i] = a;
    }
  }
#pragma unroll
  for (int i = 0; i < kWarpM; ++i) {
    float s = acc[i];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0 && i < m) y[int64_t(i) * n + row] = s;
  }
}

// A 16-bit float (BF16 or F16) widened to f32, exactly.
template <uint32_t Type>
__device__ inline float widen16(uint32_t h) {
  if constexpr (Type == ggml::kBF16) return __uint_as_float(h << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// y[:, row] for the m <= kWarpM rows of x over a BF16 or F16 weight row, a warp per row.
// Wide: lane l reads the row's 16-byte chunks l, l + 32, ... (8 weights each; rows 16-byte
// aligned), and the matching 8 floats of each row of x as two float4. Otherwise a weight per
// lane per step.
template <uint32_t Type, bool Wide, int kWarpM>
__global__ void __launch_bounds__(256) gemv16_kernel(const unsigned char* __restrict__ w, int64_t n, int64_t row_bytes,
                                                     int64_t k, const float* __restrict__ x, int m, float* __restrict__ y) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  float acc[kWarpM] = {};
  if constexpr (Wide) {
    const uint4* p = reinterpret_cast<const uint4*>(w + row * row_bytes);
    const int64_t chunks = k / 8;
#pragma unroll 4
    for (int64_t c = lane; c < chunks; c += 32) {
      const uint4 q = __ldg(p + c);
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
      float v[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // (little-endian: the low half is the earlier weight)
        v[2 * j] = widen16<Type>(words[j] & 0xffffu);
        v[2 * j + 1] = widen16<Type>(words[j] >> 16);
      }
#pragma unroll
      for (int i = 0; i < kWarpM; ++i) {
        if (i >= m) break;
        const float4* xr = reinterpret_cast<const float4*>(x + int64_t(i) * k + c * 8);
        const float4 a = xr[0], b = xr[1];
        float s = acc[i];
        s = fmaf(a.x, v[0], s);
        s = fmaf(a.y, v[1], s);
        s = fmaf(a.z, v[2], s);
        s = fmaf(a.w, v[3], s);
        s = fmaf(b.x, v[4], s);
        s = fmaf(b.y, v[5], s);
        s = fmaf(b.z, v[6], s);
        s = fmaf(b.w, v[7], s);
        acc[i] = s;
      }
    }
  } else {
    const unsigned short* p = reinterpret_cast<const unsigned short*>(w + row * row_bytes);
    for (int64_t e = lane; e < k; e += 32) {
      const float v = widen16<Type>(p[e]);
#pragma unroll
      for (int i = 0; i < kWarpM; ++i) {
        if (i >= m) break;
        acc[i] = fmaf(x[int64_t(i) * k + e], v, acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kWarpM; ++i) {
    float s = acc[i];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0 && i < m) y[int64_t(i) * n + row] = s;
  }
}

// y[:, rows] for 9-16 rows of x over BF16 or F16 weight rows (rows 16-byte aligned, k a
// multiple of 8): the warp-per-row kernel above reloads all of x for every weight row, so at
// 16 rows x's traffic from cache is 32 bytes per weight byte and bounds the product. Here a
// block stages x in shared memory a tile of kTileK columns at a time, and each warp computes
// kRowsPerWarp weight rows, so each staged x value serves four rows: 8 bytes of shared-memory
// reads per weight byte. Lane l handles the tile's columns 8l .. 8l + 7 of every row.
constexpr int kRowsPerWarp = 4, kTileK = 256;
//
// A projection of few weight rows (1,024 rows: 32 blocks) leaves most SMs idle, so the
// columns may be split (split-K): block (x, s) takes columns [s kchunk, (s + 1) kchunk) and
// writes its partial sums to part[s][i][row]; the block of column x that finishes last (a
// counter per x, zeroed before the launch) adds the partials in split order and writes y,
// so the result does not depend on which block ran first.
template <uint32_t Type>
__global__ void __launch_bounds__(256) gemv16_rows_kernel(const unsigned char* __restrict__ w, int64_t n, int64_t row_bytes,
                                                          int64_t k, const float* __restrict__ x, int m,
                                                          float* __restrict__ y, int64_t kchunk, float* __restrict__ part,
                                                          unsigned* __restrict__ done) {
  __shared__ float4 xs[kGemvRows][kTileK / 4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * (blockDim.x / 32) + warp) * kRowsPerWarp;
  const int64_t kbegin = int64_t(blockIdx.y) * kchunk, kend = kbegin + kchunk < k ? kbegin + kchunk : k;
  const bool split = gridDim.y > 1;
  float* dst = split ? part + int64_t(blockIdx.y) * m * n : y;
  float acc[kRowsPerWarp][kGemvRows] = {};
  for (int64_t k0 = kbegin; k0 < kend; k0 += kTileK) {
    const int kt = int(kend - k0 < kTileK ? kend - k0 : kTileK), quads = kt / 4;
    __syncthreads();  // (the previous tile is no longer read)
    for (int e = threadIdx.x; e < m * quads; e += blockDim.x)
      xs[e / quads][e % quads] = reinterpret_cast<const float4*>(x + int64_t(e / quads) * k + k0)[e % quads];
    __syncthreads();
    if (lane * 8 >= kt) continue;
    float v[kRowsPerWarp][8];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      uint4 q = make_uint4(0, 0, 0, 0);
      if (row0 + r < n) q = __ldg(reinterpret_cast<const uint4*>(w + (row0 + r) * row_bytes) + k0 / 8 + lane);
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[r][2 * j] = widen16<Type>(words[j] & 0xffffu);
        v[r][2 * j + 1] = widen16<Type>(words[j] >> 16);
      }
    }
#pragma unroll
    for (int i = 0; i < kGemvRows; ++i) {
      if (i >= m) break;
      const float4 a = xs[i][2 * lane], b = xs[i][2 * lane + 1];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        float s = acc[r][i];
        s = fmaf(a.x, v[r][0], s);
        s = fmaf(a.y, v[r][1], s);
        s = fmaf(a.z, v[r][2], s);
        s = fmaf(a.w, v[r][3], s);
        s = fmaf(b.x, v[r][4], s);
        s = fmaf(b.y, v[r][5], s);
        s = fmaf(b.z, v[r][6], s);
        s = fmaf(b.w, v[r][7], s);
        acc[r][i] = s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < kGemvRows; ++i) {
      float s = acc[r][i];
      for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0 && i < m && row0 + r < n) dst[int64_t(i) * n + row0 + r] = s;
    }
  if (!split) return;
  __shared__ bool last;
  __threadfence();  // (this block's partials visible before its count)
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(done + blockIdx.x, 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int per_block = int(blockDim.x / 32) * kRowsPerWarp;
  const int64_t first = int64_t(blockIdx.x) * per_block;
  for (int e = threadIdx.x; e < m * per_block; e += blockDim.x) {
    const int i = e / per_block;
    const int64_t row = first + e % per_block;
    if (row >= n) continue;
    float s = 0;
    for (unsigned sp = 0; sp < gridDim.y; ++sp) s += __ldcg(part + (int64_t(sp) * m + i) * n + row);
    y[int64_t(i) * n + row] = s;
  }
}

// How many column splits the 9-16-row kernel takes for n weight rows of k columns: enough
// blocks for two per SM, each split a whole number of tiles. RLX_CUDA_GEMV_SPLIT=0 turns it off.
int64_t gemv_splits(int64_t n, int64_t k) {
  static const bool off = env_choice("RLX_CUDA_GEMV_SPLIT", {"1", "0"}) == 1;
  const int64_t blocks = (n + 8 * kRowsPerWarp - 1) / (8 * kRowsPerWarp), tiles = (k + kTileK - 1) / kTileK;
  if (off) return 1;
  return std::clamp<int64_t>((2 * int64_t(sm_count()) + blocks - 1) / blocks, 1, tiles);
}

// Up to 64 rows of x over BF16 or F16 weights on the tensor cores, where RLX_CUDA_BF16 lets x
// be rounded to the weights' type (the contract of half_gemm below): a decode step of batch
// 9-64 (1-64 under `all`). cuBLAS's GEMM at 16 rows costs ~20 µs for a 4 MB projection, five
// times its bytes' time at the card's bandwidth; this kernel is the GEMV's shape with
// `mma.sync m16n8k16` in place of the FMAs: a block of 8 warps takes 8 · kMmaTiles weight
// rows, its warps taking every 8th 32-column step of k, and adds the warps' partial sums
// in shared memory in warp order (a fixed order, so results repeat run to run).
//
// Each lane reads 16 bytes of a weight row per step (row g = lane / 4, columns 8t .. 8t + 7
// for t = lane % 4) and feeds them to two MMAs as B; the MMA's k slots are a permutation of
// the step's 32 columns that both operands share (the sum does not depend on the order of
// its terms): slots 2t, 2t+1, 2t+8, 2t+9 of the first MMA are columns 8t .. 8t + 3, of the
// second 8t + 4 .. 8t + 7. So B needs no shuffle, and the lane's A operand is the same eight
// columns of rows g and g + 8 of x, read as f32 and rounded as they are packed. k is a
// multiple of 32, the weight rows 16-byte aligned.
constexpr int kMmaTiles = 2, kMmaWarps = 8, kMmaUnroll = 4;

template <uint32_t Type>
__device__ inline uint32_t pack16(float lo, float hi) {  // (the earlier column in the low half)
  if constexpr (Type == ggml::kBF16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

template <uint32_t Type>
__device__ inline void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (Type == ggml::kBF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The 8 floats of x's row r at column c (zeros past the m rows).
__device__ inline void load8(const float* __restrict__ x, int64_t k, int r, int m, int64_t c, float (&v)[8]) {
  float4 a = make_float4(0, 0, 0, 0), b = a;
  if (r < m) {
    const float4* p = reinterpret_cast<const float4*>(x + int64_t(r) * k + c);
    a = __ldg(p);
    b = __ldg(p + 1);
  }
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <uint32_t Type, int MT>
__global__ void __launch_bounds__(kMmaWarps * 32) mma16_kernel(const unsigned char* __restrict__ w, int64_t n,
                                                                int64_t row_bytes, int64_t k, const float* __restrict__ x,
                                                                int m, float* __restrict__ y) {
  __shared__ float red[kMmaWarps][MT][kMmaTiles][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * 8 * kMmaTiles, steps = k / 32;
  const uint4* wrow[kMmaTiles];
  bool have[kMmaTiles];
#pragma unroll
  for (int j = 0; j < kMmaTiles; ++j) {
    have[j] = n0 + 8 * j + g < n;
    wrow[j] = reinterpret_cast<const uint4*>(w + (have[j] ? n0 + 8 * j + g : 0) * row_bytes) + t;
  }
  float acc[MT][kMmaTiles][4] = {};
  for (int64_t s0 = warp; s0 < steps; s0 += int64_t(kMmaWarps) * kMmaUnroll) {
    uint4 b[kMmaUnroll][kMmaTiles];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kMmaTiles; ++j) {
        const int64_t st = s0 + int64_t(u) * kMmaWarps;
        b[u][j] = st < steps && have[j] ? __ldg(wrow[j] + st * 4) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int64_t st = s0 + int64_t(u) * kMmaWarps;
      if (st >= steps) break;
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        float lo[8], hi[8];  // rows g and g + 8 of this 16-row tile of x
        load8(x, k, 16 * i + g, m, st * 32 + 8 * t, lo);
        load8(x, k, 16 * i + g + 8, m, st * 32 + 8 * t, hi);
        const uint32_t a0 = pack16<Type>(lo[0], lo[1]), a1 = pack16<Type>(hi[0], hi[1]);
        const uint32_t a2 = pack16<Type>(lo[2], lo[3]), a3 = pack16<Type>(hi[2], hi[3]);
        const uint32_t a4 = pack16<Type>(lo[4], lo[5]), a5 = pack16<Type>(hi[4], hi[5]);
        const uint32_t a6 = pack16<Type>(lo[6], lo[7]), a7 = pack16<Type>(hi[6], hi[7]);
#pragma unroll
        for (int j = 0; j < kMmaTiles; ++j) {
          mma16816<Type>(acc[i][j], a0, a1, a2, a3, b[u][j].x, b[u][j].y);
          mma16816<Type>(acc[i][j], a4, a5, a6, a7, b[u][j].z, b[u][j].w);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][i][j][r][lane] = acc[i][j][r];
  __syncthreads();
  // Accumulator register r of lane l holds row 16 i + l / 4 (+ 8 for r >= 2), column
  // 2 (l % 4) + (r & 1) of the tile.
  for (int e = threadIdx.x; e < MT * kMmaTiles * 4 * 32; e += blockDim.x) {
    const int l = e % 32, r = (e / 32) % 4, j = (e / 128) % kMmaTiles, i = e / (128 * kMmaTiles);
    const int row = 16 * i + l / 4 + (r >= 2 ? 8 : 0);
    const int64_t col = n0 + 8 * j + 2 * (l % 4) + (r & 1);
    if (row >= m || col >= n) continue;
    float sum = 0;
    for (int v = 0; v < kMmaWarps; ++v) sum += red[v][i][j][r][l];
    y[int64_t(row) * n + col] = sum;
  }
}

// y[m, rows] for m <= kBlockedRows through mma16_kernel.
void mma16(uint32_t type, const Tensor& w, const float* x, int64_t m, int64_t rows, int64_t k, float* y) {
  const unsigned blocks = unsigned((rows + 8 * kMmaTiles - 1) / (8 * kMmaTiles));
  auto go = [&](auto tiles) {
    constexpr int MT = decltype(tiles)::value;
    if (type == ggml::kBF16)
      mma16_kernel<ggml::kBF16, MT><<<blocks, kMmaWarps * 32, 0, stream()>>>(w.data<unsigned char>(), rows, w.shape()[1], k,
                                                                             x, int(m), y);
    else
      mma16_kernel<ggml::kF16, MT><<<blocks, kMmaWarps * 32, 0, stream()>>>(w.data<unsigned char>(), rows, w.shape()[1], k,
                                                                            x, int(m), y);
  };
  static_assert(kBlockedRows == 64, "mma16 instantiates 1-4 tiles of 16 rows");
  if (m <= 16) go(std::integral_constant<int, 1>{});
  else if (m <= 32) go(std::integral_constant<int, 2>{});
  else if (m <= 48) go(std::integral_constant<int, 3>{});
  else go(std::integral_constant<int, 4>{});
  check_launch("matmul_packed (16-bit tensor-core GEMV)");
}

// x rounded to the weights' 16-bit type (round to nearest even), for the tensor-core GEMM.
template <class H>
__global__ void __launch_bounds__(256) round16_kernel(const float* __restrict__ x, int64_t total, H* __restrict__ y) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<H, __nv_bfloat16>) y[i] = __float2bfloat16_rn(x[i]);
    else y[i] = __float2half_rn(x[i]);
  }
}

// y[m, rows] = x[m, k] · w[rows, k]^T over BF16 or F16 weights on the tensor cores: x rounded
// to the weights' type once, the weights read as stored (no f32 copy), f32 sums and result.
void half_gemm(uint32_t type, const Tensor& w, const float* x, int64_t m, int64_t rows, int64_t k, float* y) {
  const bool bf = type == ggml::kBF16;
  Scratch xh(size_t(m * k) * 2);
  if (bf) round16_kernel<<<grid_for(m * k, 256), 256, 0, stream()>>>(x, m * k, xh.as<__nv_bfloat16>());
  else round16_kernel<<<grid_for(m * k, 256), 256, 0, stream()>>>(x, m * k, xh.as<__half>());
  check_launch("matmul_packed (x to 16 bits)");
  const cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_16F;
  const float one = 1.0f, zero = 0.0f;
  // Row-major y = x · w^T is column-major y^T = w^T(op T) · x^T, as for the f32 GEMM below.
  check_cublas(cublasGemmEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(m), int(k), &one, w.raw(), t, int(k),
                            xh.get(), t, int(k), &zero, y, CUDA_R_32F, int(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (matmul_packed, 16-bit)");
}

void dequantize_into(const ggml::BlockFormat& f, const Tensor& w, int64_t k, float* y) {
  const int64_t total = w.shape()[0] * k;
  if (total == 0) return;
  dequantize_kernel<<<grid_for(total, 256), 256, 0, stream()>>>(f.type, f.block, f.bytes, w.data<unsigned char>(),
                                                                 w.shape()[1], k, total, y);
  check_launch("dequantize");
}

void run_dequantize(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor w = contiguous(in[0]);
  dequantize_into(ggml::format_named(n.attrs.get_string("type")), w, n.attrs.get_int("k"), out[0].data<float>());
}

bool native_type(const std::string& t) { return t == "Q8_0" || t == "Q4_0" || t == "Q4_K" || t == "BF16" || t == "F16"; }

void run_matmul_packed(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ggml::BlockFormat& f = ggml::format_named(n.attrs.get_string("type"));
  Tensor x = contiguous(in[0]);
  const Tensor w = contiguous(in[1]);
  // (the GEMV reads x four floats at a time: a view starting off a 16-byte boundary is copied)
  if (reinterpret_cast<uintptr_t>(x.raw()) % 16 != 0) x = x.to(allocator());
  const int64_t k = n.attrs.get_int("k"), rows = w.shape()[0], m = x.numel() / k;
  float* y = out[0].data<float>();
  if (m == 0 || rows == 0) return;
  const int64_t half_from = half_gemm_min_rows();
  if ((f.type == ggml::kBF16 || f.type == ggml::kF16) && half_from > 0 && m >= half_from && w.shape()[1] == 2 * k &&
      std::max({m, rows, k}) <= INT32_MAX) {
    if (m <= kBlockedRows && k % 32 == 0 && reinterpret_cast<uintptr_t>(w.raw()) % 16 == 0)
      mma16(f.type, w, x.data<float>(), m, rows, k, y);
    else
      half_gemm(f.type, w, x.data<float>(), m, rows, k, y);
    return;
  }
  if (m <= kBlockedRows) {
    const bool wide = k % 8 == 0 && reinterpret_cast<uintptr_t>(w.raw()) % 16 == 0;
    for (int64_t r0 = 0; r0 < m; r0 += kGemvRows) {
      const int rows_here = int(std::min<int64_t>(kGemvRows, m - r0));
      const float* xr = x.data<float>() + r0 * k;
      float* yr = y + r0 * rows;
      auto go = [&](auto kernel) {
        kernel<<<grid_for(rows * 32, 256), 256, 0, stream()>>>(w.data<unsigned char>(), rows, w.shape()[1], k, xr,
                                                               rows_here, yr);
      };
      auto by_type = [&](auto max_rows) {
        constexpr int R = decltype(max_rows)::value;
        if (f.type == ggml::kQ8_0) go(gemv_kernel<ggml::kQ8_0, R>);
        else if (f.type == ggml::kQ4_0) go(gemv_kernel<ggml::kQ4_0, R>);
        else if (f.type == ggml::kQ4_K) go(gemv_kernel<ggml::kQ4_K, R>);
        else if (f.type == ggml::kBF16) wide ? go(gemv16_kernel<ggml::kBF16, true, R>) : go(gemv16_kernel<ggml::kBF16, false, R>);
        else wide ? go(gemv16_kernel<ggml::kF16, true, R>) : go(gemv16_kernel<ggml::kF16, false, R>);
      };
      const bool half16 = f.type == ggml::kBF16 || f.type == ggml::kF16;
      if (rows_here <= 8) {
        by_type(std::integral_constant<int, 8>{});
      } else if (half16 && wide) {
        auto tiled = f.type == ggml::kBF16 ? gemv16_rows_kernel<ggml::kBF16> : gemv16_rows_kernel<ggml::kF16>;
        const int64_t rows_per_block = 8 * kRowsPerWarp, blocks = (rows + rows_per_block - 1) / rows_per_block;
        const int64_t tiles = (k + kTileK - 1) / kTileK;
        int64_t splits = gemv_splits(rows, k);
        const int64_t kchunk = (tiles + splits - 1) / splits * kTileK;
        splits = (k + kchunk - 1) / kchunk;
        std::optional<Scratch> part, done;
        if (splits > 1) {
          part.emplace(size_t(splits * rows_here * rows) * sizeof(float));
          done.emplace(size_t(blocks) * sizeof(unsigned));
          check(cudaMemsetAsync(done->get(), 0, size_t(blocks) * sizeof(unsigned), stream()), "matmul_packed (split)");
        }
        tiled<<<dim3(unsigned(blocks), unsigned(splits)), 256, 0, stream()>>>(
            w.data<unsigned char>(), rows, w.shape()[1], k, xr, rows_here, yr, kchunk,
            part ? part->as<float>() : nullptr, done ? done->as<unsigned>() : nullptr);
      } else {
        by_type(std::integral_constant<int, kGemvRows>{});
      }
      check_launch("matmul_packed (gemv)");
    }
    return;
  }
  Scratch wd(size_t(rows * k) * sizeof(float));
  dequantize_into(f, w, k, wd.as<float>());
  // Row-major y[m, rows] = x[m, k] · wd[rows, k]^T is column-major y^T = wd^T(op T) · x^T.
  const float one = 1.0f, zero = 0.0f;
  const cublasComputeType_t compute = tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check_cublas(cublasGemmEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(m), int(k), &one, wd.as<float>(),
                            CUDA_R_32F, int(k), x.data<float>(), CUDA_R_32F, int(k), &zero, y, CUDA_R_32F, int(rows),
                            compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx (matmul_packed)");
}

}  // namespace

void add_quant_kernels(KernelTable& t) {
  t.add({"dequantize", bit(DType::U8), 0, run_dequantize, {}});
  t.add({"matmul_packed", bit(DType::F32), 0, run_matmul_packed, [](const ir::Node& n, const ir::Graph& g) {
           const std::string& type = n.attrs.get_string("type");
           if (!native_type(type)) return "no " + type + " matmul_packed kernel on cuda (it has Q8_0 Q4_0 Q4_K BF16 F16)";
           const int64_t k = n.attrs.get_int("k"), rows = g.type(n.inputs[1]).shape[0];
           const int64_t m = k == 0 ? 0 : numel(g.type(n.inputs[0]).shape) / k;
           if (m > kBlockedRows && (rows > INT32_MAX || m > INT32_MAX || k > INT32_MAX))
             return std::string("matmul_packed on cuda: sizes past 2^31 for cuBLAS");
           return std::string();
         }});
}

}  // namespace rlx::cuda
