#include "devices/cpu/gemm.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/env.hpp"
#include "core/error.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/quant.hpp"
#include "devices/cpu/thread_pool.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

namespace rlx::cpu {

// ---------------------------------------------------------------- OpenBLAS at run time

namespace {

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                          int);
using dgemm_fn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                          double*, int);
using corename_fn = char* (*)();
using set_threads_fn = void (*)(int);

struct Blas {
  BlasInfo info;
  void* handle = nullptr;  // the dlopen'ed library, when loaded
  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  set_threads_fn set_threads = nullptr;  // openblas_set_num_threads, when exported
};

bool cpu_has(const char* feature) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (std::strcmp(feature, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
  if (std::strcmp(feature, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  (void)feature;
  return false;
}

// RLX_CPU_GEMM: "builtin" (rlx's kernels only; OpenBLAS is not even loaded), "openblas"
// (every f32 product through OpenBLAS, when it loads), `auto` or unset: per shape;
// another value is an error.
enum class GemmMode { Auto, Builtin, OpenBlas };
GemmMode gemm_mode() {
  static const GemmMode m = GemmMode(env_choice("RLX_CPU_GEMM", {"auto", "builtin", "openblas"}));
  return m;
}

Blas load_blas() {
  Blas b;
  if (gemm_mode() == GemmMode::Builtin) {
    b.info.note = "RLX_CPU_GEMM=builtin";
    return b;
  }
  // OPENBLAS_CORETYPE must be set before the library initialises (at dlopen).
  std::string core_note;
  if (const char* ct = std::getenv("OPENBLAS_CORETYPE")) {
    core_note = std::string("OPENBLAS_CORETYPE=") + ct + " from the environment";
  } else {
    const char* want = cpu_has("avx512f") ? "SkylakeX" : cpu_has("avx2") ? "Haswell" : nullptr;
    if (want) {
      setenv("OPENBLAS_CORETYPE", want, 0);
      core_note = std::string("OPENBLAS_CORETYPE=") + want + " set by rlx";
    }
  }
  void* h = nullptr;
  for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      b.info.library = name;
      break;
    }
  }
  if (!h) {
    const char* e = dlerror();
    b.info.note = std::string("OpenBLAS not loadable (") + (e ? e : "dlopen failed") + ")";
    return b;
  }
  b.sgemm = reinterpret_cast<sgemm_fn>(dlsym(h, "cblas_sgemm"));
  b.dgemm = reinterpret_cast<dgemm_fn>(dlsym(h, "cblas_dgemm"));
  auto corename = reinterpret_cast<corename_fn>(dlsym(h, "openblas_get_corename"));
  auto set_threads = reinterpret_cast<set_threads_fn>(dlsym(h, "openblas_set_num_threads"));
  if (!b.sgemm || !b.dgemm) {
    b.info.note = b.info.library + " lacks cblas_sgemm/cblas_dgemm";
    b.sgemm = nullptr;
    b.dgemm = nullptr;
    return b;
  }
  if (set_threads) set_threads(ThreadPool::instance().size());
  b.set_threads = set_threads;
  b.info.loaded = true;
  b.handle = h;
  b.info.corename = corename ? corename() : "unknown";
  b.info.note = core_note;
  return b;
}

const Blas& blas() {
  static const Blas b = load_blas();
  return b;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// ---------------------------------------------------------------- built-in GEMM

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RLX_X86_TARGETS 1
#endif

// An MR x (NV*VL) tile: Ct = Ap^T Bp over kc steps. Ap holds MR values per k, Bp NR.
template <class T, int MR, int NV, int VL>
inline __attribute__((always_inline)) void micro(int64_t kc, const T* __restrict Ap, const T* __restrict Bp,
                                                 T* __restrict Ct) {
  typedef T V __attribute__((vector_size(VL * sizeof(T))));
  constexpr int NR = NV * VL;
  V c[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) c[i][j] = V{};
  for (int64_t k = 0; k < kc; ++k) {
    V b[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) __builtin_memcpy(&b[j], Bp + k * NR + j * VL, sizeof(V));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      V a = V{} + Ap[k * MR + i];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) c[i][j] += a * b[j];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) __builtin_memcpy(Ct + i * NR + j * VL, &c[i][j], sizeof(V));
}

template <class T>
using micro_fn = void (*)(int64_t, const T*, const T*, T*);

template <class T>
struct Kernel {
  int mr, nr;
  micro_fn<T> fn;
  const char* name;
};

#ifdef RLX_X86_TARGETS
__attribute__((target("arch=x86-64-v4"))) void micro_f32_v4(int64_t kc, const float* a, const float* b, float* c) {
  micro<float, 8, 2, 16>(kc, a, b, c);
}
__attribute__((target("arch=x86-64-v3"))) void micro_f32_v3(int64_t kc, const float* a, const float* b, float* c) {
  micro<float, 6, 2, 8>(kc, a, b, c);
}
__attribute__((target("arch=x86-64-v4"))) void micro_f64_v4(int64_t kc, const double* a, const double* b, double* c) {
  micro<double, 8, 2, 8>(kc, a, b, c);
}
__attribute__((target("arch=x86-64-v3"))) void micro_f64_v3(int64_t kc, const double* a, const double* b, double* c) {
  micro<double, 6, 2, 4>(kc, a, b, c);
}
#endif
void micro_f32_base(int64_t kc, const float* a, const float* b, float* c) { micro<float, 4, 2, 4>(kc, a, b, c); }
void micro_f64_base(int64_t kc, const double* a, const double* b, double* c) { micro<double, 4, 2, 2>(kc, a, b, c); }

enum class Isa { V4, V3, Base };
Isa gemm_isa() {
#ifdef RLX_X86_TARGETS
  if (cpu_has_x86_64_v4()) return Isa::V4;
  if (cpu_has_x86_64_v3()) return Isa::V3;
#endif
  return Isa::Base;
}

Kernel<float> pick(float) {
  switch (gemm_isa()) {
#ifdef RLX_X86_TARGETS
    case Isa::V4: return {8, 32, micro_f32_v4, "x86-64-v4 (AVX-512) 8x32"};
    case Isa::V3: return {6, 16, micro_f32_v3, "x86-64-v3 (AVX2+FMA) 6x16"};
#endif
    default: return {4, 8, micro_f32_base, "baseline 4x8"};
  }
}
Kernel<double> pick(double) {
  switch (gemm_isa()) {
#ifdef RLX_X86_TARGETS
    case Isa::V4: return {8, 16, micro_f64_v4, "x86-64-v4 (AVX-512) 8x16"};
    case Isa::V3: return {6, 8, micro_f64_v3, "x86-64-v3 (AVX2+FMA) 6x8"};
#endif
    default: return {4, 4, micro_f64_base, "baseline 4x4"};
  }
}

struct AlignedBuf {
  void* p = nullptr;
  size_t bytes = 0;
  ~AlignedBuf() { std::free(p); }
  template <class T>
  T* get(size_t n) {
    size_t need = (n * sizeof(T) + 63) / 64 * 64;
    if (need > bytes) {
      std::free(p);
      p = std::aligned_alloc(64, need);
      if (!p) throw Error("cpu gemm: allocation failed");
      bytes = need;
    }
    return static_cast<T*>(p);
  }
};
thread_local AlignedBuf t_apack;

// The AVX-512 f32 GEMM (below): whether this CPU runs it, and the product through it.
bool own_f32_available();
void gemm_own_f32(bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                  float* C, int64_t ldc, const float* bias);

template <class T>
void gemm_builtin_t(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                    int64_t ldb, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    return;
  }
  if constexpr (sizeof(T) == 4)
    if (!ta && own_f32_available()) return gemm_own_f32(tb, M, N, K, A, lda, B, ldb, C, ldc, nullptr);
  static const Kernel<T> kr = pick(T{});
  const int MR = kr.mr, NR = kr.nr;
  const int64_t ars = ta ? 1 : lda, acs = ta ? lda : 1;  // A(i, k) = A[i * ars + k * acs]
  const int64_t brs = tb ? 1 : ldb, bcs = tb ? ldb : 1;  // B(k, j) = B[k * brs + j * bcs]
  constexpr int64_t KC = 256;
  const int64_t MC = sizeof(T) == 4 ? 128 : 96;
  const int64_t npan = (N + NR - 1) / NR;
  const int64_t mblocks = (M + MC - 1) / MC;
  AlignedBuf bbuf;
  T* Bp = bbuf.get<T>(size_t(std::min(KC, K) * npan * NR));
  const int nthreads = ThreadPool::in_task() ? 1 : ThreadPool::instance().size();
  const bool split_m = mblocks >= nthreads || npan < nthreads;

  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t kc = std::min(KC, K - pc);
    const bool acc = pc > 0;
    parallel_for(npan, 8, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        T* dst = Bp + p * kc * NR;
        const int64_t j0 = p * NR, nj = std::min<int64_t>(NR, N - j0);
        for (int64_t k = 0; k < kc; ++k) {
          const T* src = B + (pc + k) * brs + j0 * bcs;
          T* d = dst + k * NR;
          if (bcs == 1)
            for (int64_t j = 0; j < nj; ++j) d[j] = src[j];
          else
            for (int64_t j = 0; j < nj; ++j) d[j] = src[j * bcs];
          for (int64_t j = nj; j < NR; ++j) d[j] = T(0);
        }
      }
    });
    auto work = [&](int64_t mb0, int64_t mb1, int64_t p0, int64_t p1) {
      T* Ap = t_apack.get<T>(size_t(MC + MR) * size_t(kc));
      alignas(64) T tile[16 * 32];
      for (int64_t mb = mb0; mb < mb1; ++mb) {
        const int64_t ic = mb * MC, mc = std::min(MC, M - ic);
        const int64_t mpan = (mc + MR - 1) / MR;
        for (int64_t q = 0; q < mpan; ++q) {
          T* dst = Ap + q * kc * MR;
          // Rows past the block (MC need not be a multiple of MR) belong to the next block.
          const int64_t i0 = ic + q * MR, ni = std::min<int64_t>(MR, ic + mc - i0);
          for (int64_t k = 0; k < kc; ++k) {
            const T* src = A + i0 * ars + (pc + k) * acs;
            T* d = dst + k * MR;
            for (int64_t i = 0; i < ni; ++i) d[i] = src[i * ars];
            for (int64_t i = ni; i < MR; ++i) d[i] = T(0);
          }
        }
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t j0 = p * NR, nj = std::min<int64_t>(NR, N - j0);
          for (int64_t q = 0; q < mpan; ++q) {
            const int64_t i0 = ic + q * MR, ni = std::min<int64_t>(MR, ic + mc - i0);
            kr.fn(kc, Ap + q * kc * MR, Bp + p * kc * NR, tile);
            for (int64_t i = 0; i < ni; ++i) {
              T* c = C + (i0 + i) * ldc + j0;
              const T* t = tile + i * NR;
              if (acc)
                for (int64_t j = 0; j < nj; ++j) c[j] += t[j];
              else
                for (int64_t j = 0; j < nj; ++j) c[j] = t[j];
            }
          }
        }
      }
    };
    if (split_m)
      parallel_for(mblocks, 1, [&](int64_t b0, int64_t b1) { work(b0, b1, 0, npan); });
    else
      parallel_for(npan, 1, [&](int64_t p0, int64_t p1) { work(0, mblocks, p0, p1); });
  }
}

// ---------------------------------------------------------------- f32 GEMM for AVX-512
//
// Products whose A is row-major (op(A) = A, each row contiguous in k). The micro-kernels
// broadcast A straight from its rows (MR row pointers, no packing of A) against B packed
// into panels of NV 512-bit vectors per k, with MR x NV accumulators in registers over the
// whole k range (or KC of it), so C is read and written once per tile.
//
// Two ways of using them:
// - "rows": C tiles of 8 x 48, B panels packed (transposed, when B is a weight [N, K]) one
//   at a time right before the tiles that use them, while the panel is still in L1/L2;
//   threads over panels of N (or over rows of A when there are few panels). Past kWholeRows
//   rows a thread packs all its panels first and walks A in blocks of kRowBlock rows.
// - "weight rows" (C^T = W x^T), for few rows times a transposed weight W [N, K]: the
//   weight's rows are broadcast in place (6 at a time) against x^T packed in panels of 64
//   rows of x, so the weight — the large operand at these shapes — is never repacked; each
//   tile of C^T is written back transposed. Threads over rows of W; each packs x itself.
#ifdef RLX_X86_TARGETS
#define RLX_V4 __attribute__((target("arch=x86-64-v4")))

// C[MR, NV*16] (+)= A[MR, kc] . Bp[kc, NV*16] (+ bias[NV*16] per row, when bias is not
// null); A row i at A + i * lda; Bp 64-byte aligned. With PF, also prefetches the MR rows at
// pf (same stride), one cache line of each per 16 k: the next rows of A while these compute.
template <int MR, int NV, bool ACC, bool PF = false>
RLX_V4 void micro_rows(int64_t kc, const float* __restrict A, int64_t lda, const float* __restrict Bp,
                       float* __restrict C, int64_t ldc, const float* pf = nullptr, const float* bias = nullptr) {
  constexpr int NR = NV * 16;
  __m512 c[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) c[i][j] = _mm512_setzero_ps();
  const float* a[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) a[i] = A + i * lda;
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    if (PF && (k & 15) == 0)
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) _mm_prefetch(reinterpret_cast<const char*>(pf + i * lda + k), _MM_HINT_T0);
    __m512 b[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) b[j] = _mm512_load_ps(Bp + k * NR + j * 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i][k]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) c[i][j] = _mm512_fmadd_ps(av, b[j], c[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      float* p = C + i * ldc + j * 16;
      if (ACC) c[i][j] = _mm512_add_ps(c[i][j], _mm512_loadu_ps(p));
      if (bias) c[i][j] = _mm512_add_ps(c[i][j], _mm512_loadu_ps(bias + j * 16));
      _mm512_storeu_ps(p, c[i][j]);
    }
}

// dst[k * NR + j] = src[j * ld + k] for j < n, 0 for n <= j < NR (k < kc): NR rows of a
// row-major matrix as a k-major panel, 16 x 16 blocks transposed in registers.
template <int NR>
RLX_V4 void pack_transposed(int64_t kc, int64_t n, const float* src, int64_t ld, float* dst) {
  constexpr __mmask16 kAll = 0xFFFF;
  int64_t k = 0;
  if (n == NR) {
    for (; k + 16 <= kc; k += 16) {
      for (int jb = 0; jb < NR; jb += 16) {
        __m512 r[16], t[16];
        for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(src + (jb + j) * ld + k);
        for (int j = 0; j < 16; j += 2) {
          t[j] = _mm512_maskz_unpacklo_ps(kAll, r[j], r[j + 1]);
          t[j + 1] = _mm512_maskz_unpackhi_ps(kAll, r[j], r[j + 1]);
        }
        for (int j = 0; j < 16; j += 4) {
          r[j] = _mm512_maskz_shuffle_ps(kAll, t[j], t[j + 2], 0x44);
          r[j + 1] = _mm512_maskz_shuffle_ps(kAll, t[j], t[j + 2], 0xEE);
          r[j + 2] = _mm512_maskz_shuffle_ps(kAll, t[j + 1], t[j + 3], 0x44);
          r[j + 3] = _mm512_maskz_shuffle_ps(kAll, t[j + 1], t[j + 3], 0xEE);
        }
        for (int j = 0; j < 16; j += 8)
          for (int q = 0; q < 4; ++q) {
            t[j + q] = _mm512_maskz_shuffle_f32x4(kAll, r[j + q], r[j + 4 + q], 0x88);
            t[j + 4 + q] = _mm512_maskz_shuffle_f32x4(kAll, r[j + q], r[j + 4 + q], 0xDD);
          }
        for (int q = 0; q < 4; ++q) {
          r[q] = _mm512_maskz_shuffle_f32x4(kAll, t[q], t[8 + q], 0x88);
          r[8 + q] = _mm512_maskz_shuffle_f32x4(kAll, t[q], t[8 + q], 0xDD);
          r[4 + q] = _mm512_maskz_shuffle_f32x4(kAll, t[4 + q], t[12 + q], 0x88);
          r[12 + q] = _mm512_maskz_shuffle_f32x4(kAll, t[4 + q], t[12 + q], 0xDD);
        }
        for (int q = 0; q < 16; ++q) _mm512_store_ps(dst + (k + q) * NR + jb, r[q]);
      }
    }
  }
  for (; k < kc; ++k)
    for (int64_t j = 0; j < NR; ++j) dst[k * NR + j] = j < n ? src[j * ld + k] : 0.0f;
}

// dst[k * NR + j] = src[k * ld + j] for j < n, 0 for n <= j < NR (k < kc).
template <int NR>
void pack_rows(int64_t kc, int64_t n, const float* src, int64_t ld, float* dst) {
  for (int64_t k = 0; k < kc; ++k) {
    float* d = dst + k * NR;
    const float* s = src + k * ld;
    for (int64_t j = 0; j < n; ++j) d[j] = s[j];
    for (int64_t j = n; j < NR; ++j) d[j] = 0.0f;
  }
}

thread_local AlignedBuf t_bpack, t_edge;

constexpr int kRowsMR = 8, kRowsNV = 3, kRowsNR = kRowsNV * 16;
constexpr int64_t kRowsKC = 1536;       // k per pass: B panel 48 x 1536 floats, 288 KiB (L2)
constexpr int64_t kWholeRows = 512;     // past this many rows: all panels packed first, then
constexpr int64_t kRowBlock = 256;      // A in blocks of this many rows

// One thread's share of C = A op(B) (+ bias[N], added as each tile is stored — a pass over C
// afterwards would read it back from memory): rows [i0, i1), panels [p0, p1) of kRowsNR columns.
void rows_part(bool tb, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
               int64_t ldc, int64_t i0, int64_t i1, int64_t p0, int64_t p1, const float* bias) {
  constexpr int MR = kRowsMR, NR = kRowsNR;
  const int64_t KC = std::min(K, kRowsKC);
  const int64_t M = i1 - i0;
  const bool whole = M > kWholeRows && p1 - p0 > 1;
  const int64_t MB = whole ? kRowBlock : M;
  float* Bbuf = t_bpack.get<float>(size_t((whole ? p1 - p0 : 1) * NR * KC));
  float* E = t_edge.get<float>(size_t(MR * KC));
  alignas(64) float tile[MR * NR];
  auto pack = [&](int64_t p, int64_t pc, int64_t kc, float* dst) {
    const int64_t j0 = p * NR, nj = std::min<int64_t>(NR, N - j0);
    if (tb)
      pack_transposed<NR>(kc, nj, B + j0 * ldb + pc, ldb, dst);
    else
      pack_rows<NR>(kc, nj, B + pc * ldb + j0, ldb, dst);
  };
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t kc = std::min(KC, K - pc);
    const bool acc = pc > 0;
    const bool last = pc + kc >= K;  // the pass that adds the bias
    if (whole)
      for (int64_t p = p0; p < p1; ++p) pack(p, pc, kc, Bbuf + (p - p0) * NR * kc);
    for (int64_t ib = i0; ib < i1; ib += MB) {
      const int64_t ie = std::min(i1, ib + MB);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t j0 = p * NR, nj = std::min<int64_t>(NR, N - j0);
        float* Bp = whole ? Bbuf + (p - p0) * NR * kc : Bbuf;
        if (!whole) pack(p, pc, kc, Bp);
        for (int64_t i = ib; i < ie; i += MR) {
          const int64_t ni = std::min<int64_t>(MR, ie - i);
          const float* a = A + i * lda + pc;
          int64_t la = lda;
          if (ni < MR) {  // the last rows, padded with zero rows
            for (int r = 0; r < MR; ++r)
              for (int64_t k = 0; k < kc; ++k) E[r * kc + k] = r < ni ? a[r * lda + k] : 0.0f;
            a = E;
            la = kc;
          }
          const float* bj = bias && last ? bias + j0 : nullptr;
          if (ni == MR && nj == NR) {
            if (acc)
              micro_rows<MR, kRowsNV, true>(kc, a, la, Bp, C + i * ldc + j0, ldc, nullptr, bj);
            else
              micro_rows<MR, kRowsNV, false>(kc, a, la, Bp, C + i * ldc + j0, ldc, nullptr, bj);
          } else {
            micro_rows<MR, kRowsNV, false>(kc, a, la, Bp, tile, NR);
            for (int64_t r = 0; r < ni; ++r) {
              float* c = C + (i + r) * ldc + j0;
              const float* t = tile + r * NR;
              if (acc)
                for (int64_t j = 0; j < nj; ++j) c[j] += t[j];
              else
                for (int64_t j = 0; j < nj; ++j) c[j] = t[j];
              if (bj)
                for (int64_t j = 0; j < nj; ++j) c[j] += bj[j];
            }
          }
        }
      }
    }
  }
}

constexpr int kWrMR = 6, kWrNV = 4, kWrNR = kWrNV * 16;

// C[m, j] = tile[j * kWrNR + m] (+ bias[j]) for m < nm, j < nj: a tile of C^T back into C,
// 16 values of m at a time transposed in registers (8 rows, two of them zero) and written as
// masked 8-float stores. (Zero-masked shuffles: see pack_transposed.)
RLX_V4 void store_transposed(const float* tile, int64_t nm, int64_t nj, const float* bias, float* C, int64_t ldc) {
  static_assert(kWrMR <= 8);
  constexpr __mmask16 kAll = 0xFFFF;
  const __mmask8 mask = __mmask8((1u << nj) - 1);
  const __m256 b = bias ? _mm256_maskz_loadu_ps(mask, bias) : _mm256_setzero_ps();
  for (int64_t g = 0; g * 16 < nm; ++g) {
    __m512 r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) r[i] = i < kWrMR ? _mm512_load_ps(tile + i * kWrNR + g * 16) : _mm512_setzero_ps();
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm512_maskz_unpacklo_ps(kAll, r[i], r[i + 1]);
      t[i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[i], r[i + 1]);
    }
    // u[e] (u[4 + e]): in each 128-bit lane L, rows 0-3 (4-7) of m = 4L + e
    for (int h = 0; h < 8; h += 4) {
      u[h] = _mm512_maskz_shuffle_ps(kAll, t[h], t[h + 2], 0x44);
      u[h + 1] = _mm512_maskz_shuffle_ps(kAll, t[h], t[h + 2], 0xEE);
      u[h + 2] = _mm512_maskz_shuffle_ps(kAll, t[h + 1], t[h + 3], 0x44);
      u[h + 3] = _mm512_maskz_shuffle_ps(kAll, t[h + 1], t[h + 3], 0xEE);
    }
    for (int e = 0; e < 4; ++e) {
      // lanes (0, 0', 1, 1') and (2, 2', 3, 3') of u[e], u[4 + e]: m = e, 4 + e, 8 + e, 12 + e
      const __m512 lo = _mm512_maskz_shuffle_f32x4(kAll, u[e], u[4 + e], 0x44);
      const __m512 hi = _mm512_maskz_shuffle_f32x4(kAll, u[e], u[4 + e], 0xEE);
      const __m512 v[2] = {_mm512_maskz_shuffle_f32x4(kAll, lo, lo, 0xD8), _mm512_maskz_shuffle_f32x4(kAll, hi, hi, 0xD8)};
      for (int q = 0; q < 4; ++q) {
        const int64_t m = g * 16 + q * 4 + e;
        if (m >= nm) continue;
        const __m256 x = q & 1 ? _mm512_maskz_extractf32x8_ps(0xFF, v[q >> 1], 1) : _mm512_maskz_extractf32x8_ps(0xFF, v[q >> 1], 0);
        _mm256_mask_storeu_ps(C + m * ldc, mask, _mm256_add_ps(x, b));
      }
    }
  }
}

// One thread's share of C = X W^T (+ bias): columns [n0, n1) of C, i.e. rows of W.
void weight_rows_part(int64_t M, int64_t K, const float* X, int64_t ldx, const float* W, int64_t ldw, float* C,
                      int64_t ldc, const float* bias, int64_t n0, int64_t n1) {
  constexpr int MR = kWrMR, NR = kWrNR;
  const int64_t mpan = (M + NR - 1) / NR;
  float* Xp = t_bpack.get<float>(size_t(mpan * NR * K));
  float* E = t_edge.get<float>(size_t(MR * K));
  alignas(64) float tile[MR * NR];
  for (int64_t q = 0; q < mpan; ++q)
    pack_transposed<NR>(K, std::min<int64_t>(NR, M - q * NR), X + q * NR * ldx, ldx, Xp + q * NR * K);
  for (int64_t j0 = n0; j0 < n1; j0 += MR) {
    const int64_t nj = std::min<int64_t>(MR, n1 - j0);
    const float* w = W + j0 * ldw;
    int64_t lw = ldw;
    if (nj < MR) {  // the last rows of W, padded with zero rows
      for (int r = 0; r < MR; ++r)
        for (int64_t k = 0; k < K; ++k) E[r * K + k] = r < nj ? w[r * ldw + k] : 0.0f;
      w = E;
      lw = K;
    }
    for (int64_t q = 0; q < mpan; ++q) {
      const int64_t m0 = q * NR, nm = std::min<int64_t>(NR, M - m0);
      // The first panel of x reads these rows of W from memory: meanwhile the next rows come
      // in (a weight read once per product is not in any cache; 10-15% at 128 rows).
      if (q == 0 && j0 + 2 * MR <= n1)
        micro_rows<MR, kWrNV, false, true>(K, w, lw, Xp, tile, NR, w + MR * ldw);
      else
        micro_rows<MR, kWrNV, false>(K, w, lw, Xp + q * NR * K, tile, NR);
      store_transposed(tile, nm, nj, bias ? bias + j0 : nullptr, C + m0 * ldc + j0, ldc);
    }
  }
}
#endif

// Rows of C up to which x W^T takes the weight-rows form.
constexpr int64_t kWeightRowsMaxM = 256;

// Where the kernels above run by default, OpenBLAS elsewhere (docs/cpu.md, "GEMM": measured
// per shape class on the MiniLM shapes): x W^T of kOwnDefaultMinM to kWeightRowsMaxM rows (the
// weight-rows form); with more rows, x W^T whose k is at least twice n (the 8 x 48 tiles; a
// BERT FFN's second product) and, on AMD, every x W^T: there OpenBLAS's SkylakeX kernels run
// 8-18 % behind the tiles at 1,024 and 4,096 rows, where on Intel the two tie.
constexpr int64_t kOwnDefaultMinM = 48;
bool own_by_default(bool tb, int64_t M, int64_t N, int64_t K) {
  if (!tb || M < kOwnDefaultMinM) return false;
  static const bool amd = cpu_is_amd();
  return M <= kWeightRowsMaxM || K >= 2 * N || amd;
}

bool own_f32_available() {
#ifdef RLX_X86_TARGETS
  return gemm_isa() == Isa::V4;
#else
  return false;
#endif
}

template <class T>
void add_bias(T* C, int64_t ldc, const T* bias, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

// C = A op(B) (+ bias) with the kernels above, threaded over the pool (inline from a task).
// Needs own_f32_available(); A row-major (no transpose); M, N, K > 0.
void gemm_own_f32(bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                  float* C, int64_t ldc, const float* bias) {
#ifdef RLX_X86_TARGETS
  const int nt = ThreadPool::in_task() ? 1 : ThreadPool::instance().size();
  if (tb && M <= kWeightRowsMaxM) {
    const int64_t blocks = (N + kWrMR - 1) / kWrMR;
    parallel_for(blocks, 4, [&](int64_t b0, int64_t b1) {
      weight_rows_part(M, K, A, lda, B, ldb, C, ldc, bias, b0 * kWrMR, std::min(N, b1 * kWrMR));
    });
    return;
  }
  const int64_t npan = (N + kRowsNR - 1) / kRowsNR;
  if (npan >= 2 * nt || M < 2 * kRowsMR * nt) {
    parallel_for(npan, 1, [&](int64_t p0, int64_t p1) { rows_part(tb, N, K, A, lda, B, ldb, C, ldc, 0, M, p0, p1, bias); });
  } else {
    const int64_t units = (M + kRowsMR - 1) / kRowsMR;
    parallel_for(units, 2, [&](int64_t u0, int64_t u1) {
      const int64_t i0 = u0 * kRowsMR, i1 = std::min(M, u1 * kRowsMR);
      rows_part(tb, N, K, A, lda, B, ldb, C, ldc, i0, i1, 0, npan, bias);
    });
  }
#else
  (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)bias;
  throw InternalError("cpu gemm: no AVX-512 kernels in this build");
#endif
}

// Products below this many flops run as one call (OpenBLAS's own threading decides).
constexpr double kSplitFlops = 4.0e6;

// C[i0..i1)[j0..j1) += bias[j0..j1): the epilogue of a product, on the block a thread has
// just written (still in its cache).
template <class T>
void add_bias(T* C, int64_t ldc, const T* bias, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) C[i * ldc + j] += bias[j];
}

// f64 matrix-vector products (N == 1), one read of the matrix: OpenBLAS 0.3.21's dgemm does
// not hand N = 1 to its GEMV and ran a Krylov basis product [15, 10^6] x [10^6] at ~10 GB/s.
// c_i = sum_k A(i, k) b_k with A(i, k) at A[i * lda + k] (ta false) or A[k * lda + i]
// (ta true). ta false: the rows' dot products walk k in blocks of kGemvBlock, every row
// against the same block of b (kept in L2); each block's partial sums, in eight lanes, are
// added in block order, so the result does not depend on the thread count. ta true: each
// output element accumulates over k in order (the vectors of a basis combined).
constexpr int64_t kGemvBlock = 8192;
// Software prefetch distance of the rows' dot products (elements): the hardware prefetchers
// follow their 15-30 row streams poorly; 1,024 ahead measured ~25 % faster than none on a
// Zen 4, 256 slower.
constexpr int64_t kGemvAhead = 1024;
// The block steps gemv_f64 and project_out share, so that the two give the same bits by
// construction. block_combine: acc[i] = sum over rows r (in order) of A(r, c0 + i) h[r * inch],
// i < len. block_dot: a . b over len elements in eight lanes (the tail into lane 0), the lanes
// added as a tree; with kPrefetch, a's row is fetched kGemvAhead elements ahead (each row is a
// stream of its own; the address is formed as an integer, since it may lie past the row's
// end, where a prefetch is harmless but pointer arithmetic is not). sum_blocks: row i's
// partial sums of nblocks blocks (partial[q * rows + i]) added in block order.
template <class T>
inline void block_combine(T* __restrict acc, const T* A, int64_t lda, int64_t c0, const T* h, int64_t inch, int64_t rows,
                          int64_t len) {
  for (int64_t i = 0; i < len; ++i) acc[i] = T(0);
  for (int64_t r = 0; r < rows; ++r) {
    const T hr = h[r * inch];
    const T* __restrict a = A + r * lda + c0;
    for (int64_t i = 0; i < len; ++i) acc[i] += a[i] * hr;
  }
}
template <bool kPrefetch, class T>
inline T block_dot(const T* __restrict a, const T* __restrict b, int64_t len) {
  T lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= len; k += 8) {
    if constexpr (kPrefetch)
      __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(a + k) + kGemvAhead * sizeof(T)), 0, 3);
    for (int l = 0; l < 8; ++l) lanes[l] += a[k + l] * b[k + l];
  }
  for (; k < len; ++k) lanes[0] += a[k] * b[k];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}
template <class T>
inline T sum_blocks(const std::vector<T>& partial, int64_t nblocks, int64_t rows, int64_t i) {
  T acc = 0;
  for (int64_t q = 0; q < nblocks; ++q) acc += partial[size_t(q * rows + i)];
  return acc;
}

void gemv_f64(bool ta, int64_t M, int64_t K, const double* A, int64_t lda, const double* b, int64_t incb, double* C,
              int64_t ldc) {
  ThreadPool& pool = ThreadPool::instance();
  if (ta) {
    const int64_t nblocks = (M + kGemvBlock - 1) / kGemvBlock;
    pool.parallel_for(nblocks, 8, [&](int64_t q0, int64_t q1) {
      double acc[kGemvBlock];
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t i0 = q * kGemvBlock, n = std::min(M, i0 + kGemvBlock) - i0;
        block_combine(acc, A, lda, i0, b, incb, K, n);
        for (int64_t i = 0; i < n; ++i) C[(i0 + i) * ldc] = acc[i];
      }
    });
    return;
  }
  const int64_t nblocks = (K + kGemvBlock - 1) / kGemvBlock;
  std::vector<double> partial(size_t(nblocks * M));
  std::vector<double> bc;
  const double* bv = b;
  if (incb != 1) {  // (a strided b: gathered once)
    bc.resize(size_t(K));
    for (int64_t k = 0; k < K; ++k) bc[size_t(k)] = b[k * incb];
    bv = bc.data();
  }
  pool.parallel_for(nblocks, 8, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t k0 = q * kGemvBlock, len = std::min(K, k0 + kGemvBlock) - k0;
      for (int64_t i = 0; i < M; ++i) partial[size_t(q * M + i)] = block_dot<true>(A + i * lda + k0, bv + k0, len);
    }
  });
  for (int64_t i = 0; i < M; ++i) C[i * ldc] = sum_blocks(partial, nblocks, M, i);
}

// project_out with one column (w, h vectors): u = w - A^T h and c = A u for A [k, n] (rows
// lda apart), in one read of A from memory: per block of kGemvBlock columns, the block of u
// (block_combine, as gemv_f64's ta branch, then subtracted from w), then every row's
// block_dot with it while the block of A is still in cache, the blocks' partial sums added
// in block order. The same steps as the two products and the subtraction apart, so for f64
// the same bits as they have in the default GEMM mode (RLX_CPU_GEMM=openblas sends those
// products to OpenBLAS instead); GMRES's CGS2 then reads its basis three times a step, not
// four. Measured on a Zen 4 core (n = 10^6, a standalone copy of the loops; docs/benchmarks.md,
// "GMRES against PETSc"): 8.9 against 13.1 ms apart at 16 rows, 17.4
// against 23.2 at 30 (the second read of a 30-row block, 1.9 MiB, comes from L3); slices of
// 512-2,048 columns, for L2, were slower (their row streams too short for the prefetchers),
// and so was software prefetch in the update.
template <class T>
void project_out_t(int64_t k, int64_t n, const T* A, int64_t lda, const T* w, const T* h, T* u, T* c) {
  const int64_t nblocks = (n + kGemvBlock - 1) / kGemvBlock;
  std::vector<T> partial(size_t(nblocks * k));
  ThreadPool::instance().parallel_for(nblocks, 8, [&](int64_t q0, int64_t q1) {
    T acc[kGemvBlock];
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t c0 = q * kGemvBlock, len = std::min(n, c0 + kGemvBlock) - c0;
      block_combine(acc, A, lda, c0, h, 1, k, len);
      T* __restrict ub = u + c0;
      for (int64_t i = 0; i < len; ++i) ub[i] = w[c0 + i] - acc[i];
      for (int64_t r = 0; r < k; ++r) partial[size_t(q * k + r)] = block_dot<false>(A + r * lda + c0, ub, len);
    }
  });
  for (int64_t r = 0; r < k; ++r) c[r] = sum_blocks(partial, nblocks, k, r);
}

// C = op(A) op(B) [+ bias, one value per column, when bias is not null].
template <class T>
void gemm_t(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
            T* C, int64_t ldc, const T* bias = nullptr) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    if (bias) add_bias(C, ldc, bias, 0, M, 0, N);
    return;
  }
  if constexpr (sizeof(T) == 8)
    if (N == 1 && gemm_mode() != GemmMode::OpenBlas) {
      gemv_f64(ta, M, K, A, lda, B, tb ? 1 : ldb, C, ldc);
      if (bias) add_bias(C, ldc, bias, 0, M, 0, N);
      return;
    }
  // A few rows times a transposed f32 weight (a decode step's x · W^T): one read of the weight.
  if constexpr (sizeof(T) == 4)
    if (!ta && tb && lda == K && ldc == N && matmul_small_m_f32(A, M, K, B, ldb, C, N)) {
      if (bias) add_bias(C, ldc, bias, 0, M, 0, N);
      return;
    }
  const Blas& b = blas();
  if constexpr (sizeof(T) == 4)
    if (!ta && own_f32_available()) {
      const GemmMode mode = gemm_mode();
      const bool own = !b.info.loaded || mode == GemmMode::Builtin ||
                       (mode == GemmMode::Auto && own_by_default(tb, M, N, K));
      if (own) return gemm_own_f32(tb, M, N, K, A, lda, B, ldb, C, ldc, bias);
    }
  bool ok = b.info.loaded && fits_int(M) && fits_int(N) && fits_int(K) && fits_int(lda) && fits_int(ldb) &&
            fits_int(ldc);
  if (ok) {
    const int ta_ = ta ? kTrans : kNoTrans, tb_ = tb ? kTrans : kNoTrans;
    // With a bias, the block of C is first filled with it and the product added to it (beta
    // 1): OpenBLAS would otherwise clear C itself (beta 0) and the bias take a third pass.
    auto call = [&](int64_t m, int64_t n, const T* a, const T* bm, T* c, const T* bs) {
      if (bs)
        for (int64_t i = 0; i < m; ++i) std::copy(bs, bs + n, c + i * ldc);
      const T beta = bs ? T(1) : T(0);
      if constexpr (sizeof(T) == 4)
        b.sgemm(kRowMajor, ta_, tb_, int(m), int(n), int(K), 1.0f, a, int(lda), bm, int(ldb), beta, c, int(ldc));
      else
        b.dgemm(kRowMajor, ta_, tb_, int(m), int(n), int(K), 1.0, a, int(lda), bm, int(ldb), beta, c, int(ldc));
    };
    // Threads: the pool's, each running single-threaded OpenBLAS on its share of the rows
    // of C (or of its columns, when there are more of those). OpenBLAS's own threads would
    // keep spinning after each product while the pool's threads run the next kernels: on a
    // machine with as many cores as threads, the two sets of threads take turns instead.
    const int nt = ThreadPool::in_task() ? 1 : ThreadPool::instance().size();
    if (nt > 1 && b.set_threads && 2.0 * double(M) * double(N) * double(K) >= kSplitFlops) {
      struct OneBlasThread {  // (restored however the tasks end)
        const Blas& b;
        int nt;
        ~OneBlasThread() { b.set_threads(nt); }
      } one{b, nt};
      b.set_threads(1);
      constexpr int64_t kStep = 16;  // rows or columns per unit (whole vectors of C)
      if (M >= N) {
        parallel_for((M + kStep - 1) / kStep, 1, [&](int64_t u0, int64_t u1) {
          const int64_t i0 = u0 * kStep, i1 = std::min(M, u1 * kStep);
          call(i1 - i0, N, A + i0 * (ta ? 1 : lda), B, C + i0 * ldc, bias);
        });
      } else {
        parallel_for((N + kStep - 1) / kStep, 1, [&](int64_t u0, int64_t u1) {
          const int64_t j0 = u0 * kStep, j1 = std::min(N, u1 * kStep);
          call(M, j1 - j0, A, B + j0 * (tb ? ldb : 1), C + j0, bias ? bias + j0 : nullptr);
        });
      }
      return;
    }
    call(M, N, A, B, C, bias);
    return;
  }
  gemm_builtin_t(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
  if (bias) add_bias(C, ldc, bias, 0, M, 0, N);
}

// One operand's last two dims as a BLAS matrix: element (r, c) at r * rs + c * cs.
// Returns false when neither dim is unit-stride (the caller copies).
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool& transposed, int64_t& ld) {
  if (rows <= 1) rs = std::max<int64_t>(cols, 1);
  if (cols <= 1) cs = 1;
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) {
    transposed = false;
    ld = rs;
    return true;
  }
  if (rows <= 1 && cols > 1) {  // a single row with strided columns: read it as a column
    if (cs >= 1) {
      transposed = true;
      ld = cs;
      return true;
    }
  }
  if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) {
    transposed = true;
    ld = cs;
    return true;
  }
  return false;
}

template <class T>
void matmul_t(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, Tensor& out, const T* bias) {
  Tensor a = a_in, b = b_in;
  const int ra = a.rank(), rb = b.rank(), ro = out.rank();
  const int64_t M = out.shape()[size_t(ro - 2)], N = out.shape()[size_t(ro - 1)];
  const int64_t K = a.shape()[size_t(ta ? ra - 2 : ra - 1)];
  auto layout = [](Tensor& t, bool& tr, int64_t& ld) {
    int r = t.rank();
    int64_t rows = t.shape()[size_t(r - 2)], cols = t.shape()[size_t(r - 1)];
    if (!blas_layout(rows, cols, t.strides()[size_t(r - 2)], t.strides()[size_t(r - 1)], tr, ld)) {
      t = t.contiguous();
      blas_layout(rows, cols, t.strides()[size_t(r - 2)], t.strides()[size_t(r - 1)], tr, ld);
    }
  };
  bool a_tr = false, b_tr = false;
  int64_t lda = 0, ldb = 0;
  layout(a, a_tr, lda);
  layout(b, b_tr, ldb);
  const bool fa = ta != a_tr, fb = tb != b_tr;  // flags for the stored row-major matrices
  const T* A = a.data<T>();
  const T* B = b.data<T>();
  T* C = out.data<T>();

  // Batch dims of out, with each operand's strides (0 where broadcast).
  const int nb = ro - 2;
  Shape bshape(out.shape().begin(), out.shape().begin() + nb);
  std::vector<int64_t> sa(size_t(nb), 0), sb(size_t(nb), 0);
  for (int d = 0; d < nb; ++d) {
    int da = d - (nb - (ra - 2)), db = d - (nb - (rb - 2));
    if (da >= 0 && a.shape()[size_t(da)] != 1) sa[size_t(d)] = a.strides()[size_t(da)];
    if (db >= 0 && b.shape()[size_t(db)] != 1) sb[size_t(d)] = b.strides()[size_t(db)];
  }
  const int64_t batch = numel(bshape);
  if (batch == 0 || M == 0 || N == 0) return;

  // b shared by every batch and a's rows stacked evenly: one GEMM with batch * M rows.
  bool b_shared = std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; });
  if (batch > 1 && b_shared && !fa && a_in.is_contiguous() && a.raw() == a_in.raw() &&
      std::all_of(sa.begin(), sa.end(), [](int64_t s) { return s != 0; })) {
    gemm_t<T>(false, fb, batch * M, N, K, A, lda, B, ldb, C, N, bias);
    return;
  }
  auto offsets = [&](int64_t i, int64_t& oa, int64_t& ob) {
    oa = ob = 0;
    for (int d = nb - 1; d >= 0; --d) {
      int64_t ix = i % bshape[size_t(d)];
      i /= bshape[size_t(d)];
      oa += ix * sa[size_t(d)];
      ob += ix * sb[size_t(d)];
    }
  };
  // Many small products: one per thread at a time with the built-in kernel; large ones
  // in sequence, each threaded inside.
  const double flops = 2.0 * double(M) * double(N) * double(K);
  if (batch > 1 && flops < 2.0 * 96 * 96 * 96) {
    parallel_for(batch, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        int64_t oa, ob;
        offsets(i, oa, ob);
        gemm_builtin_t<T>(fa, fb, M, N, K, A + oa, lda, B + ob, ldb, C + i * M * N, N);
        if (bias) add_bias(C + i * M * N, N, bias, 0, M, 0, N);
      }
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i) {
    int64_t oa, ob;
    offsets(i, oa, ob);
    gemm_t<T>(fa, fb, M, N, K, A + oa, lda, B + ob, ldb, C + i * M * N, N, bias);
  }
}

}  // namespace

const BlasInfo& blas_info() { return blas().info; }

void* blas_symbol(const char* name) {
  const Blas& b = blas();
  return b.handle ? dlsym(b.handle, name) : nullptr;
}

std::string gemm_builtin_isa() {
  if (own_f32_available())
    return "x86-64-v4 (AVX-512) 8x48 and 6x64 weight-rows f32 (8x32 for a transposed A), " +
           std::string(pick(double{}).name) + " f64";
  return std::string(pick(float{}).name) + " f32, " + pick(double{}).name + " f64";
}

std::string gemm_description() {
  const BlasInfo& i = blas_info();
  if (i.loaded) {
    std::string d = "GEMM: OpenBLAS " + i.library + " core " + i.corename + (i.note.empty() ? "" : " (" + i.note + ")");
    if (own_f32_available() && gemm_mode() == GemmMode::Auto)
      d += "; f32 x·Wᵀ of " + std::to_string(kOwnDefaultMinM) + "-" + std::to_string(kWeightRowsMaxM) +
           (cpu_is_amd() ? " rows, or more rows (AMD)" : " rows, or more rows with k >= 2n") +
           ": built-in x86-64-v4 (AVX-512) 6x64 weight-rows / 8x48 kernels";
    if (gemm_mode() == GemmMode::OpenBlas) d += " (RLX_CPU_GEMM=openblas: every product)";
    return d;
  }
  return "GEMM: built-in " + gemm_builtin_isa() + " (" + i.note + ")";
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          float* C, int64_t ldc) {
  gemm_t<float>(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
          int64_t ldb, double* C, int64_t ldc) {
  gemm_t<double>(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}
void gemm_builtin(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float* C, int64_t ldc) {
  gemm_builtin_t<float>(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}
void gemm_builtin(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
                  int64_t ldb, double* C, int64_t ldc) {
  gemm_builtin_t<double>(ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
}

void project_out(const Tensor& V, const Tensor& w, const Tensor& h, Tensor& u, Tensor& c) {
  if (V.rank() != 2 || w.numel() != V.shape()[1] || h.numel() != V.shape()[0] || u.numel() != w.numel() ||
      c.numel() != h.numel() || !u.is_contiguous() || !c.is_contiguous())
    throw InternalError("cpu project_out: operands are not V [k, n], w [n, 1], h [k, 1]");
  // V's rows may lie apart (a basis's first rows); anything else strided is copied once.
  const Tensor Vr = V.strides()[1] == 1 && V.strides()[0] >= V.shape()[1] ? V : V.contiguous();
  const Tensor wc = w.contiguous(), hc = h.contiguous();
  const int64_t k = V.shape()[0], n = V.shape()[1], lda = k > 1 ? Vr.strides()[0] : n;
  if (V.dtype() == DType::F64)
    return project_out_t<double>(k, n, Vr.data<double>(), lda, wc.data<double>(), hc.data<double>(), u.data<double>(),
                                 c.data<double>());
  if (V.dtype() == DType::F32)
    return project_out_t<float>(k, n, Vr.data<float>(), lda, wc.data<float>(), hc.data<float>(), u.data<float>(),
                                c.data<float>());
  throw InternalError(std::string("cpu project_out: no ") + dtype_name(V.dtype()) + " kernel");
}

void matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& out, const Tensor* bias) {
  if (a.dtype() != b.dtype() || a.dtype() != out.dtype()) throw InternalError("cpu matmul: dtypes differ");
  Tensor bc;
  if (bias) {
    if (bias->dtype() != out.dtype() || bias->numel() != out.shape().back())
      throw InternalError("cpu matmul: the bias is not one value per column of the result");
    bc = bias->contiguous();
  }
  if (a.dtype() == DType::F32) return matmul_t<float>(a, b, transpose_a, transpose_b, out, bias ? bc.data<float>() : nullptr);
  if (a.dtype() == DType::F64) return matmul_t<double>(a, b, transpose_a, transpose_b, out, bias ? bc.data<double>() : nullptr);
  throw InternalError(std::string("cpu matmul: no ") + dtype_name(a.dtype()) + " kernel");
}

}  // namespace rlx::cpu
