// Sparse CSR kernels on the cpu device: spmv_csr, spmm_csr, sptrsv_csr for f32, f64 and
// c64 values with i32 or i64 indices.
//
// Threading: spmv and spmm split the rows into one contiguous range per pool thread so
// that each range holds about the same work, counted as nnz + rows (balanced by
// nonzeros, with a per-row term so that runs of empty or short rows are not free). Small
// matrices run on the calling thread.
//
// ISA: SpMV is a reduction per row, which GCC does not vectorize without reassociation
// (these files build without -ffast-math), so the f64 and f32 row loops are written
// with AVX-512 intrinsics (x86-64-v4: masked loads and gathers, one masked vector step for
// a row of up to 8 (f64) or 16 (f32, i32 indices) nonzeros, FMA, then a horizontal sum)
// and picked once at run time with __builtin_cpu_supports("x86-64-v4"). Everything else
// (c64, CPUs without AVX-512) runs portable scalar loops that accumulate in double, which
// the out-of-order core overlaps across rows. On a 3D Poisson matrix (7 nonzeros per row)
// the AVX-512 rows ran 10 % faster than the scalar loop in cache and 10-15 % faster from
// DRAM; the larger gain is software prefetch of the values and col_idx streams
// (kPrefetch below), on every path. spmm's inner loop is a dense axpy over B's row,
// built for x86-64-v4, x86-64-v3 and baseline with target_clones.
//
// Rounding: f32/f64 spmv on the AVX-512 path accumulates in the value type with FMAs;
// the scalar paths and spmm accumulate f32 in double. Results differ from the reference
// device (double accumulation, rounded once) only in the last bits.
//
// sptrsv is forward/back substitution (accumulating in double or complex<double>),
// threaded as a pipelined sweep over blocks of rows when the matrix's structure lets
// threads work on different blocks at once (a stencil in natural order); see the
// sptrsv section.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cpu {

namespace {

using cd = std::complex<double>;

// Below this much work (nnz + rows) a product runs on the calling thread.
constexpr int64_t kParallelWork = 1 << 15;
// Software prefetch distance, in nonzeros, for the values and col_idx streams. One thread
// on a 3D Poisson SpMV (f64, i32), back to back, on the Emerald Rapids host this was tuned
// on: 1M rows 13.8 GB/s without and 19.6 GB/s with prefetching 512 ahead; 8M rows (DRAM)
// 11.4 and 12.9 GB/s; 128 ahead gains less, 1024 or an extra L2 prefetch 2048 ahead no more.
constexpr int64_t kPrefetch = 512;

// Prefetches element k + kPrefetch of p (computed as an integer: it may lie past the end,
// where a prefetch is harmless but pointer arithmetic would not be).
template <class T>
inline void prefetch_ahead(const T* p, int64_t k) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + uint64_t(k + kPrefetch) * sizeof(T)), 0, 3);
}

bool have_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool v = cpu_has_x86_64_v4();
  return v;
#else
  return false;
#endif
}

// The first row r in [lo, hi] with rp[r] + r >= target (rp[r] + r increases strictly).
template <class I>
int64_t row_at_work(const I* rp, int64_t lo, int64_t hi, int64_t target) {
  while (lo < hi) {
    int64_t m = lo + (hi - lo) / 2;
    if (int64_t(rp[m]) + m < target) lo = m + 1;
    else hi = m;
  }
  return lo;
}

// Calls f(r0, r1) on contiguous row ranges of about equal nnz + rows, one per thread.
template <class I, class F>
void for_row_ranges(const I* rp, int64_t rows, const F& f) {
  const int64_t work = int64_t(rp[rows]) + rows;
  ThreadPool& pool = ThreadPool::instance();
  if (work < kParallelWork || pool.size() == 1 || ThreadPool::in_task()) {
    f(int64_t(0), rows);
    return;
  }
  pool.run(pool.size(), [&](int t, int nt) {
    const int64_t r0 = t == 0 ? 0 : row_at_work(rp, 0, rows, work * t / nt);
    const int64_t r1 = t + 1 == nt ? rows : row_at_work(rp, 0, rows, work * (t + 1) / nt);
    if (r1 > r0) f(r0, r1);
  });
}

// ---------------------------------------------------------------- spmv

struct SpmvArgs {
  double alpha, beta;
  bool has_y0;
};

// Portable rows: accumulate in double (complex<double> for c64).
template <class I, class T>
void spmv_rows_scalar(const I* rp, const I* ci, const T* v, const T* x, const T* y0, T* y, SpmvArgs a, int64_t r0,
                      int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = rp[r], e = rp[r + 1];
    prefetch_ahead(v, b);
    prefetch_ahead(ci, b);
    if constexpr (std::is_same_v<T, c64>) {
      double re = 0, im = 0;
      for (int64_t k = b; k < e; ++k) {
        const c64 av = v[k], xv = x[ci[k]];
        re += double(av.real()) * double(xv.real()) - double(av.imag()) * double(xv.imag());
        im += double(av.real()) * double(xv.imag()) + double(av.imag()) * double(xv.real());
      }
      re *= a.alpha;
      im *= a.alpha;
      if (a.has_y0) {
        re += a.beta * double(y0[r].real());
        im += a.beta * double(y0[r].imag());
      }
      y[r] = c64(float(re), float(im));
    } else {
      double acc = 0;
      for (int64_t k = b; k < e; ++k) acc += double(v[k]) * double(x[ci[k]]);
      acc *= a.alpha;
      if (a.has_y0) acc += a.beta * double(y0[r]);
      y[r] = T(acc);
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define RLX_V4 __attribute__((target("arch=x86-64-v4")))

// Horizontal sums. (Written with masked extracts: GCC 12's _mm512_reduce_add_* and
// unmasked gathers start from an undefined register and trip -Wmaybe-uninitialized.)
RLX_V4 inline double hsum(__m512d v) {
  const __m256d z = _mm256_setzero_pd();
  __m256d s = _mm256_add_pd(_mm512_mask_extractf64x4_pd(z, 0xf, v, 0), _mm512_mask_extractf64x4_pd(z, 0xf, v, 1));
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
RLX_V4 inline float hsum(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
RLX_V4 inline float hsum(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  const __m256d z = _mm256_setzero_pd();
  return hsum(_mm256_add_ps(_mm256_castpd_ps(_mm512_mask_extractf64x4_pd(z, 0xf, d, 0)),
                            _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(z, 0xf, d, 1))));
}

// f64 rows, 8 nonzeros per step; the last (or only) step of a row is masked.
template <class I>
RLX_V4 void spmv_rows_f64_v4(const I* rp, const I* ci, const double* v, const double* x, const double* y0, double* y,
                             SpmvArgs a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t k = rp[r];
    const int64_t e = rp[r + 1];
    prefetch_ahead(v, k);
    prefetch_ahead(ci, k);
    __m512d acc = _mm512_setzero_pd();
    for (; k + 8 <= e; k += 8) {  // long rows: one more line of each stream per step
      prefetch_ahead(v, k + 8);
      prefetch_ahead(ci, k + 8);
      __m512d xv;
      if constexpr (sizeof(I) == 4)
        xv = _mm512_mask_i32gather_pd(_mm512_setzero_pd(), 0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ci + k)), x, 8);
      else
        xv = _mm512_mask_i64gather_pd(_mm512_setzero_pd(), 0xff, _mm512_loadu_si512(ci + k), x, 8);
      acc = _mm512_fmadd_pd(_mm512_loadu_pd(v + k), xv, acc);
    }
    if (k < e) {
      const __mmask8 m = __mmask8((1u << (e - k)) - 1);
      __m512d xv;
      if constexpr (sizeof(I) == 4)
        xv = _mm512_mask_i32gather_pd(_mm512_setzero_pd(), m, _mm256_maskz_loadu_epi32(m, ci + k), x, 8);
      else
        xv = _mm512_mask_i64gather_pd(_mm512_setzero_pd(), m, _mm512_maskz_loadu_epi64(m, ci + k), x, 8);
      acc = _mm512_fmadd_pd(_mm512_maskz_loadu_pd(m, v + k), xv, acc);
    }
    double s = hsum(acc) * a.alpha;
    if (a.has_y0) s += a.beta * y0[r];
    y[r] = s;
  }
}

// f32 rows: 16 nonzeros per step with i32 indices, 8 with i64.
template <class I>
RLX_V4 void spmv_rows_f32_v4(const I* rp, const I* ci, const float* v, const float* x, const float* y0, float* y,
                             SpmvArgs a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t k = rp[r];
    const int64_t e = rp[r + 1];
    prefetch_ahead(v, k);
    prefetch_ahead(ci, k);
    float s;
    if constexpr (sizeof(I) == 4) {
      __m512 acc = _mm512_setzero_ps();
      for (; k + 16 <= e; k += 16) {
        prefetch_ahead(v, k + 16);
        prefetch_ahead(ci, k + 16);
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(v + k),
                              _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, _mm512_loadu_si512(ci + k), x, 4), acc);
      }
      if (k < e) {
        const __mmask16 m = __mmask16((1u << (e - k)) - 1);
        __m512 xv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, _mm512_maskz_loadu_epi32(m, ci + k), x, 4);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, v + k), xv, acc);
      }
      s = hsum(acc);
    } else {
      __m256 acc = _mm256_setzero_ps();
      for (; k + 8 <= e; k += 8) {
        prefetch_ahead(ci, k + 8);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + k),
                              _mm512_mask_i64gather_ps(_mm256_setzero_ps(), 0xff, _mm512_loadu_si512(ci + k), x, 4), acc);
      }
      if (k < e) {
        const __mmask8 m = __mmask8((1u << (e - k)) - 1);
        __m256 xv = _mm512_mask_i64gather_ps(_mm256_setzero_ps(), m, _mm512_maskz_loadu_epi64(m, ci + k), x, 4);
        acc = _mm256_fmadd_ps(_mm256_maskz_loadu_ps(m, v + k), xv, acc);
      }
      s = hsum(acc);
    }
    double out = double(s) * a.alpha;
    if (a.has_y0) out += a.beta * double(y0[r]);
    y[r] = float(out);
  }
}
#endif

template <class I, class T>
void spmv_typed(const Tensor& rp_t, const Tensor& ci_t, const Tensor& v_t, const Tensor& x_t, const Tensor* y0_t,
                Tensor& y_t, SpmvArgs a) {
  const I* rp = rp_t.data<I>();
  const I* ci = ci_t.data<I>();
  const T* v = v_t.data<T>();
  const T* x = x_t.data<T>();
  const T* y0 = y0_t ? y0_t->data<T>() : nullptr;
  T* y = y_t.data<T>();
  const int64_t rows = rp_t.numel() - 1;
#if defined(__x86_64__) && defined(__GNUC__)
  if (have_avx512()) {
    if constexpr (std::is_same_v<T, double>) {
      for_row_ranges(rp, rows, [&](int64_t r0, int64_t r1) { spmv_rows_f64_v4<I>(rp, ci, v, x, y0, y, a, r0, r1); });
      return;
    } else if constexpr (std::is_same_v<T, float>) {
      for_row_ranges(rp, rows, [&](int64_t r0, int64_t r1) { spmv_rows_f32_v4<I>(rp, ci, v, x, y0, y, a, r0, r1); });
      return;
    }
  }
#endif
  for_row_ranges(rp, rows, [&](int64_t r0, int64_t r1) { spmv_rows_scalar<I, T>(rp, ci, v, x, y0, y, a, r0, r1); });
}

// ---------------------------------------------------------------- spmm

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define RLX_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RLX_CLONES
#endif

// c[j] += a * b[j] (accumulators in double).
RLX_CLONES void axpy_d(double a, const double* __restrict b, double* __restrict c, int64_t n) {
  for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
}
RLX_CLONES void axpy_f(double a, const float* __restrict b, double* __restrict c, int64_t n) {
  for (int64_t j = 0; j < n; ++j) c[j] += a * double(b[j]);
}
// Interleaved complex: (c_re, c_im) += (a_re, a_im) * (b_re, b_im), b as float pairs.
RLX_CLONES void axpy_c(double are, double aim, const float* __restrict b, double* __restrict c, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const double br = b[2 * j], bi = b[2 * j + 1];
    c[2 * j] += are * br - aim * bi;
    c[2 * j + 1] += are * bi + aim * br;
  }
}

template <class I, class T>
void spmm_typed(const Tensor& rp_t, const Tensor& ci_t, const Tensor& v_t, const Tensor& b_t, Tensor& c_t) {
  const I* rp = rp_t.data<I>();
  const I* ci = ci_t.data<I>();
  const T* v = v_t.data<T>();
  const T* B = b_t.data<T>();
  T* C = c_t.data<T>();
  const int64_t rows = rp_t.numel() - 1, w = b_t.shape()[1];
  if (w == 0) return;
  constexpr int64_t lanes = std::is_same_v<T, c64> ? 2 : 1;
  for_row_ranges(rp, rows, [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(size_t(w * lanes));
    for (int64_t r = r0; r < r1; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = rp[r]; k < rp[r + 1]; ++k) {
        const T* brow = B + int64_t(ci[k]) * w;
        if constexpr (std::is_same_v<T, double>)
          axpy_d(v[k], brow, acc.data(), w);
        else if constexpr (std::is_same_v<T, float>)
          axpy_f(double(v[k]), brow, acc.data(), w);
        else
          axpy_c(double(v[k].real()), double(v[k].imag()), reinterpret_cast<const float*>(brow), acc.data(), w);
      }
      T* out = C + r * w;
      for (int64_t j = 0; j < w; ++j) {
        if constexpr (std::is_same_v<T, c64>)
          out[j] = c64(float(acc[size_t(2 * j)]), float(acc[size_t(2 * j + 1)]));
        else
          out[j] = T(acc[size_t(j)]);
      }
    }
  });
}

// ---------------------------------------------------------------- sptrsv
//
// Forward (lower) or back (upper) substitution. In sweep order -- step s is row s of a
// lower solve and row n-1-s of an upper one -- every value a row reads was solved at an
// earlier step. Each row accumulates in double (complex<double>) in stored order and
// divides by its diagonal once; the threaded and the sequential sweep run the same row
// code, so they give the same bits (and the same IEEE infinities and NaNs for a zero
// diagonal: nothing here throws). f64 solves write straight into the output (x[r] is
// written after b[r] is read, so the output may be b's buffer); f32 and c64 keep x in
// double and round it block by block. The values and col_idx streams are prefetched
// kPrefetch nonzeros ahead in sweep direction, as in spmv. On the IC(0) factor of 3D
// Poisson 100^3 (the 2-vCPU dev host, an Intel Xeon VM) these two changes alone took
// the sequential solve from about 11 to 6.6 (lower) and 7.7 ms (upper).
//
// Threaded: a pipelined sweep that keeps the sequential memory order (a level-scheduled
// solve was tried and was slower: level order destroys locality). The steps are cut into
// blocks of B consecutive steps dealt round-robin to T threads; each thread solves its
// blocks in order and publishes how far it has got (an atomic "next step" per thread,
// release stores every kPublish steps, at each block start and before it waits). A row
// that reads x at a step outside its thread's current block checks first that the owner
// has passed that step (the last value it loaded, acquire, says so). If not, the row is
// abandoned before that read, the thread waits (pause, then yield) and solves the row
// again from the start. For a step in the previous block it waits until the owner is
// slack_for(B) steps past it (or done with the block), so that it reads lines the owner
// is finished with -- prefetched kDepPrefetch steps ahead -- instead of pulling them
// between cores line by line. The lowest unsolved step always has its inputs and a
// waiting thread has published its own position, so the sweep cannot deadlock whatever
// B is; B only decides the speed. A thread that fails sets a flag that every waiting
// thread checks, so none spins forever, and the pool reports its exception.
//
// B is the smallest multiple of the bandwidth in sweep order (max of s - s' over the
// dependencies) of at least kMinBlock steps, so a row depends on its own block or the
// previous one. That pays off when a block's rows depend on rows at about the same
// offset of the previous block -- a stencil in natural order, B one grid plane: T threads
// solve T planes at once -- and not when a block's first rows need the previous block's
// last ones (a tridiagonal matrix), which chains the blocks one after the other. So the
// analysis also measures the lead, how far past s - B the previous block must be solved
// when step s is (1 for a 3D Poisson factor, about B for a tridiagonal matrix), and a
// pipeline model decides: block k starts a lead plus the slack after block k-1, and
// after its thread's previous block ends; threaded only when that is 4/3 faster on paper.
//
// Analysis: a separate pass over the indices cost 2-6 ms per pass on the 100^3 factor
// (4M nonzeros), as much as a threaded solve, so it rides along with the sequential
// sweep instead: the first solve with a matrix measures the bandwidth, the second the
// lead, and the result is cached (plan_cache) for the solves after -- a preconditioner
// solves with the same factor every iteration.
//
// Contention guard: the pipeline needs its threads to run at the same time. When they
// cannot (another process holds a core; simulated by pinning both threads to one core)
// a threaded solve of the 100^3 factor took 11-13 ms against 6.6-7.9 sequential. So the
// cached plan also keeps the fastest sequential solve seen; two threaded solves in a row
// slower than 0.9 of it send the next 16 solves (doubling while it keeps failing, up to
// 1024) back to the sequential sweep, after which the threaded one is tried again.
// Results are the same bits either way; only the time depends on the machine's load.
//
// RLX_CPU_SPTRSV=seq forces the sequential sweep; =pipe the threaded one whenever there
// are 2+ pool threads and the call is not nested in a pool task (B from the bandwidth,
// made smaller when needed to give every thread 2 blocks; no model, no guard); =pipe:B
// the threaded one with blocks of B steps (tests use tiny blocks to make threads wait).

template <class T>
using AccOf = std::conditional_t<std::is_same_v<T, c64>, cd, double>;

// Steps between progress publications (a power of two).
constexpr int64_t kPublish = 32;
// How far (in steps) a thread stays behind the previous block's owner: kSlack, or an
// eighth of a block for small blocks.
constexpr int64_t kSlack = 1024;
inline int64_t slack_for(int64_t B) { return std::min(kSlack, B / 8); }
// How far ahead (in steps) a thread prefetches x in the previous block.
constexpr int64_t kDepPrefetch = 64;
// Smallest block: B is the smallest multiple of the bandwidth that reaches it.
constexpr int64_t kMinBlock = 256;
// Below this much work (nnz + rows) the sweep is sequential.
constexpr int64_t kParallelTrsv = 1 << 15;
// Pause instructions a waiting thread spins through before it starts yielding its core.
constexpr uint32_t kSpinPauses = 256;

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Prefetches p[k] (computed as an integer: it may lie outside the array).
template <class T>
inline void prefetch_at(const T* p, int64_t k) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + uint64_t(k) * sizeof(T)), 0, 3);
}

std::atomic<int64_t> g_pipelined_solves{0};

template <bool kLower, bool kUnit, class I, class T>
struct Sweep {
  using A = AccOf<T>;
  const I* rp;
  const I* ci;
  const T* v;
  const T* b;
  A* x;    // solved values in full precision (the output itself when T is double)
  T* out;  // the output, rounded from x by store() when T is not double
  int64_t n;

  static A widen(T t) {
    if constexpr (std::is_same_v<T, c64>) return cd(t.real(), t.imag());
    else return double(t);
  }
  int64_t row(int64_t s) const { return kLower ? s : n - 1 - s; }

  // Solves the row at step s. ready(s') is asked before x at step s' < s is read; when
  // it says no, the row is abandoned (nothing written) and solve returns false.
  template <class Ready>
  inline bool solve(int64_t s, const Ready& ready) const {
    const int64_t r = row(s);
    const int64_t k0 = rp[r], e = rp[r + 1];
    prefetch_at(v, kLower ? k0 + kPrefetch : k0 - kPrefetch);
    prefetch_at(ci, kLower ? k0 + kPrefetch : k0 - kPrefetch);
    A acc = widen(b[r]), d = 0;
    for (int64_t k = k0; k < e; ++k) {
      const int64_t c = ci[k];
      if (c == r) {
        d += widen(v[k]);
      } else if (kLower ? c < r : c > r) {
        if (!ready(kLower ? c : n - 1 - c)) [[unlikely]]
          return false;
        acc -= widen(v[k]) * x[c];
      }
    }
    x[r] = kUnit ? acc : acc / d;
    return true;
  }

  // Rounds the solved steps [s0, s1) into out.
  void store(int64_t s0, int64_t s1) const {
    if constexpr (!std::is_same_v<T, A>) {
      const int64_t r0 = kLower ? s0 : n - s1, r1 = kLower ? s1 : n - s0;
      for (int64_t r = r0; r < r1; ++r) {
        if constexpr (std::is_same_v<T, c64>) out[r] = c64(float(x[r].real()), float(x[r].imag()));
        else out[r] = T(x[r]);
      }
    }
  }

  // The sequential sweep in blocks of B steps, each rounded into out while in cache.
  // on_dep(s, s', lo) sees every dependency (lo: the start of s's block).
  template <class OnDep>
  void sequential(int64_t B, const OnDep& on_dep) const {
    for (int64_t lo = 0; lo < n; lo += B) {
      const int64_t hi = std::min(n, lo + B);
      for (int64_t s = lo; s < hi; ++s) solve(s, [&](int64_t sc) { return on_dep(s, sc, lo), true; });
      store(lo, hi);
    }
  }
  void sequential() const {
    sequential(4096, [](int64_t, int64_t, int64_t) {});
  }

  struct alignas(64) Progress {
    std::atomic<int64_t> next{0};  // its thread has solved every step of its blocks below this
  };
  struct Abandoned {};  // another thread failed: stop; its exception is the one reported

  template <class Ready>
  static void spin_until(const std::atomic<bool>& failed, const Ready& ready) {
    for (uint32_t i = 0; !ready(); ++i) {
      if (failed.load(std::memory_order_relaxed)) throw Abandoned{};
      if (i < kSpinPauses) cpu_pause();
      else std::this_thread::yield();
    }
  }

  // Thread t of nt: blocks t, t + nt, ... of B steps. A row that meets a dependency not
  // known to be solved is abandoned, the thread waits, and the row starts over: the solve's
  // inner loop has no call in it (with a call there GCC kept the accumulators in memory
  // and the row loop ran 35-65 % slower; a separate pass checking each row's dependencies
  // first cost 1.5 cycles per nonzero).
  void sweep_blocks(int t, int nt, int64_t B, Progress* prog, const std::atomic<bool>& failed) const {
    std::atomic<int64_t>& mine = prog[t].next;
    std::atomic<int64_t>& before = prog[(t + nt - 1) % nt].next;  // the previous block's owner
    int64_t known = 0;  // a value of `before`: its owner has solved its steps below this
    int64_t floor = 0;  // every step below this is solved
    const int64_t slack = slack_for(B);
    // Waits until p passes target; returns the value seen.
    auto wait = [&](std::atomic<int64_t>& p, int64_t s, int64_t target) __attribute__((noinline)) {
      int64_t seen = p.load(std::memory_order_acquire);
      if (seen <= target) {
        mine.store(s, std::memory_order_release);  // others may be waiting for this thread
        spin_until(failed, [&] { return (seen = p.load(std::memory_order_acquire)) > target; });
      }
      return seen;
    };
    // A dependency in an older block than the previous one (only when B is below the
    // bandwidth): waits until every thread has passed it.
    auto wait_all = [&](int64_t s, int64_t sc) __attribute__((noinline)) {
      int64_t f = s;
      for (int u = 0; u < nt; ++u)
        if (u != t) f = std::min(f, wait(prog[u].next, s, sc));
      return f;
    };
    for (int64_t lo = int64_t(t) * B; lo < n; lo += int64_t(nt) * B) {
      const int64_t hi = std::min(n, lo + B), prev_lo = lo - B;
      mine.store(lo, std::memory_order_release);
      int64_t pending = 0;
      auto ready = [&](int64_t sc) {
        if (sc >= lo || sc < floor || (sc < known && sc >= prev_lo)) return true;
        pending = sc;
        return false;
      };
      for (int64_t s = lo; s < hi; ++s) {
        if ((s & (kPublish - 1)) == 0) mine.store(s, std::memory_order_release);
        // x one block back, where a stencil's dependencies lie, in lines its owner is done with.
        const int64_t ahead = s + kDepPrefetch - B;
        if (ahead >= prev_lo && ahead < known) prefetch_at(x, row(ahead));
        while (!solve(s, ready)) {
          if (pending >= prev_lo) known = wait(before, s, std::min(pending + slack, lo - 1));
          else floor = wait_all(s, pending);
        }
      }
      store(lo, hi);
    }
    mine.store(n, std::memory_order_release);
  }

  void pipelined(int64_t B, int nt) const {
    std::vector<Progress> prog(static_cast<size_t>(nt));
    std::atomic<bool> failed{false};
    g_pipelined_solves.fetch_add(1, std::memory_order_relaxed);
    ThreadPool::instance().run(nt, [&](int t, int got) {
      if (got != nt) {  // run inline by the pool (the caller checks that it is not nested)
        sequential();
        return;
      }
      try {
        sweep_blocks(t, nt, B, prog.data(), failed);
      } catch (const Abandoned&) {
      } catch (...) {
        failed.store(true, std::memory_order_relaxed);
        throw;
      }
    });
  }
};

// ---- analysis and scheduling

// The smallest multiple of the bandwidth that is at least kMinBlock.
int64_t block_for(int64_t bandwidth) {
  const int64_t bw = std::max<int64_t>(bandwidth, 1);
  return bw * ((kMinBlock + bw - 1) / bw);
}

// Max of s - s' over the dependencies (step s reads step s'), as a pass of its own
// (RLX_CPU_SPTRSV=pipe only; the automatic path measures it during a sequential sweep).
template <bool kLower, class I>
int64_t sweep_bandwidth(const I* rp, const I* ci, int64_t n) {
  int64_t bw = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = rp[r], e = rp[r + 1]; k < e; ++k)
      bw = std::max<int64_t>(bw, kLower ? r - int64_t(ci[k]) : int64_t(ci[k]) - r);
  return bw;
}

struct TrsvPlan {
  int64_t bandwidth = -1;  // -1: not measured yet
  int64_t lead = -1;       // with blocks of block_for(bandwidth) steps; -1: not measured yet
  double seq_seconds = 0;  // the fastest sequential solve so far
  int strikes = 0;         // threaded solves in a row slower than 0.9 seq_seconds
  int skip = 0;            // solves left to run sequentially (contention guard)
  int backoff = 16;        // the next skip
};

// Analyses are cached by the arrays' addresses and sizes plus a fingerprint of sampled
// entries. A stale hit (the same buffers refilled with another matrix that samples
// alike) cannot give wrong results: the sweep is correct for any B, only slower.
struct PlanKey {
  const void* rp = nullptr;
  const void* ci = nullptr;
  int64_t n = 0, nnz = 0;
  uint64_t fingerprint = 0;
  bool lower = false;
  bool operator==(const PlanKey&) const = default;
};

template <class I>
uint64_t fingerprint(const I* rp, const I* ci, int64_t n) {
  const int64_t nnz = rp[n];
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  constexpr int64_t kSamples = 64;
  for (int64_t i = 0; i < kSamples; ++i) {
    mix(uint64_t(rp[n * i / kSamples]));
    if (nnz > 0) mix(uint64_t(ci[nnz * i / kSamples]));
  }
  return h;
}

class PlanCache {
 public:
  // Calls f(plan) on k's plan (a new one when k is not cached) under the lock.
  template <class F>
  void with(const PlanKey& k, const F& f) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& e : entries_)
      if (e.first == k) return f(e.second);
    auto& e = entries_[next_++ % entries_.size()];
    e = {k, TrsvPlan{}};
    f(e.second);
  }

 private:
  std::mutex mu_;
  std::array<std::pair<PlanKey, TrsvPlan>, 16> entries_{};
  size_t next_ = 0;
};

PlanCache& plan_cache() {
  static PlanCache c;
  return c;
}

struct TrsvSchedule {
  enum Kind { Sequential, MeasureBandwidth, MeasureLead, Pipelined } kind = Sequential;
  int threads = 1;
  int64_t block = 4096;
  bool cached = false;  // key names a cached plan to update after the solve
  PlanKey key;
};

template <bool kLower, class I>
TrsvSchedule schedule_sweep(const I* rp, const I* ci, int64_t n) {
  TrsvSchedule sc;
  const int pool = ThreadPool::instance().size();
  const char* env = std::getenv("RLX_CPU_SPTRSV");
  const std::string mode = env ? env : "";
  if (mode == "seq" || pool < 2 || ThreadPool::in_task() || n < 2) return sc;
  if (mode.rfind("pipe", 0) == 0) {
    sc.kind = TrsvSchedule::Pipelined;
    sc.threads = pool;
    if (mode.size() > 5 && mode[4] == ':') {
      sc.block = std::max<int64_t>(1, std::atoll(mode.c_str() + 5));
    } else {
      sc.block = block_for(sweep_bandwidth<kLower>(rp, ci, n));
      if ((n + sc.block - 1) / sc.block < 2 * pool) sc.block = std::max<int64_t>(1, (n + 2 * pool - 1) / (2 * pool));
    }
    return sc;
  }
  if (int64_t(rp[n]) + n < kParallelTrsv) return sc;
  sc.cached = true;
  sc.key = {rp, ci, n, int64_t(rp[n]), fingerprint(rp, ci, n), kLower};
  plan_cache().with(sc.key, [&](TrsvPlan& plan) {
    if (plan.bandwidth < 0) {
      sc.kind = TrsvSchedule::MeasureBandwidth;
      return;
    }
    const int64_t B = block_for(plan.bandwidth), blocks = (n + B - 1) / B;
    const int nt = int(std::min<int64_t>(pool, blocks / 2));
    if (nt < 2) return;
    if (plan.lead < 0) {
      sc.kind = TrsvSchedule::MeasureLead;
      sc.block = B;
      return;
    }
    // Pipeline model in row times: block k starts a lead (plus the slack) after block
    // k-1 and after its thread's previous block ends.
    const int64_t step = std::min(B, plan.lead + slack_for(B));
    const int64_t rounds = (blocks + nt - 1) / nt;
    const int64_t t_par = std::max((blocks - 1) * step, (rounds - 1) * B) + B;
    if (t_par * 4 > n * 3) return;
    if (plan.skip > 0) {
      --plan.skip;
      return;
    }
    sc.kind = TrsvSchedule::Pipelined;
    sc.threads = nt;
    sc.block = B;
  });
  return sc;
}

template <class I, class T>
void sptrsv_typed(const Tensor& rp_t, const Tensor& ci_t, const Tensor& v_t, const Tensor& b_t, Tensor& x_t, bool lower,
                  bool unit) {
  const I* rp = rp_t.data<I>();
  const I* ci = ci_t.data<I>();
  const T* v = v_t.data<T>();
  const T* b = b_t.data<T>();
  T* out = x_t.data<T>();
  const int64_t n = rp_t.numel() - 1;
  using A = AccOf<T>;
  std::unique_ptr<A[]> tmp;
  A* x;
  if constexpr (std::is_same_v<T, A>) {
    x = out;
  } else {
    tmp.reset(new A[static_cast<size_t>(n)]);
    x = tmp.get();
  }
  auto go = [&](auto lower_c, auto unit_c) {
    constexpr bool kLower = decltype(lower_c)::value, kUnit = decltype(unit_c)::value;
    const Sweep<kLower, kUnit, I, T> sw{rp, ci, v, b, x, out, n};
    const TrsvSchedule sc = schedule_sweep<kLower>(rp, ci, n);
    const auto t0 = std::chrono::steady_clock::now();
    int64_t bandwidth = 0, lead = 0;
    switch (sc.kind) {
      case TrsvSchedule::Sequential:
        sw.sequential();
        break;
      case TrsvSchedule::Pipelined:
        sw.pipelined(sc.block, sc.threads);
        break;
      case TrsvSchedule::MeasureBandwidth:
        sw.sequential(sc.block, [&](int64_t s, int64_t s1, int64_t) { bandwidth = std::max(bandwidth, s - s1); });
        break;
      case TrsvSchedule::MeasureLead:
        sw.sequential(sc.block, [&, B = sc.block](int64_t s, int64_t s1, int64_t lo) {
          if (s1 < lo) lead = std::max(lead, s1 + 1 - (s - B));
        });
        break;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!sc.cached) return;
    plan_cache().with(sc.key, [&](TrsvPlan& plan) {
      if (sc.kind == TrsvSchedule::MeasureBandwidth) plan.bandwidth = bandwidth;
      if (sc.kind == TrsvSchedule::MeasureLead) plan.lead = lead;
      if (sc.kind != TrsvSchedule::Pipelined) {
        if (plan.seq_seconds == 0 || seconds < plan.seq_seconds) plan.seq_seconds = seconds;
      } else if (seconds <= 0.9 * plan.seq_seconds) {
        plan.strikes = 0;
        plan.backoff = 16;
      } else if (++plan.strikes == 2) {
        plan.strikes = 0;
        plan.skip = plan.backoff;
        plan.backoff = std::min(2 * plan.backoff, 1024);
      }
    });
  };
  using Y = std::true_type;
  using N = std::false_type;
  if (lower) unit ? go(Y{}, Y{}) : go(Y{}, N{});
  else unit ? go(N{}, Y{}) : go(N{}, N{});
}

// ---------------------------------------------------------------- dispatch

template <class F>
decltype(auto) visit_csr(DType index, DType value, F&& f) {
  auto with_index = [&](auto i) -> decltype(auto) {
    using I = decltype(i);
    switch (value) {
      case DType::F32: return f(I{}, float{});
      case DType::F64: return f(I{}, double{});
      case DType::C64: return f(I{}, c64{});
      default: break;
    }
    throw InternalError(std::string("cpu sparse: no kernel for ") + dtype_name(value) + " values");
  };
  if (index == DType::I32) return with_index(int32_t{});
  if (index == DType::I64) return with_index(int64_t{});
  throw InternalError(std::string("cpu sparse: no kernel for ") + dtype_name(index) + " indices");
}

Capability csr_supported(const ir::Node& n, const ir::Graph& g) {
  const DType index = g.type(n.inputs.at(0)).dtype, value = g.type(n.inputs.at(2)).dtype;
  if (index != DType::I32 && index != DType::I64)
    return Capability::no("no " + std::string(dtype_name(index)) + "-indexed " + n.op->name + " kernel on cpu");
  if (value != DType::F32 && value != DType::F64 && value != DType::C64)
    return Capability::no("no " + std::string(dtype_name(value)) + " " + n.op->name + " kernel on cpu");
  return Capability::yes();
}

// The kernels read raw arrays: strided inputs are copied to contiguous ones first.
std::vector<Tensor> contiguous_inputs(std::span<const Tensor> in) {
  std::vector<Tensor> r(in.begin(), in.end());
  for (Tensor& t : r)
    if (!t.is_contiguous()) t = t.contiguous();
  return r;
}

void run_spmv(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  SpmvArgs a{n.attrs.get_float("alpha"), n.attrs.get_float("beta"), in.size() == 5};
  visit_csr(in[0].dtype(), in[2].dtype(), [&](auto i, auto t) {
    spmv_typed<decltype(i), decltype(t)>(in[0], in[1], in[2], in[3], a.has_y0 ? &in[4] : nullptr, out[0], a);
  });
}

void run_spmm(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  visit_csr(in[0].dtype(), in[2].dtype(), [&](auto i, auto t) {
    spmm_typed<decltype(i), decltype(t)>(in[0], in[1], in[2], in[3], out[0]);
  });
}

void run_sptrsv(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  const bool lower = n.attrs.get_bool("lower"), unit = n.attrs.get_bool("unit_diagonal");
  visit_csr(in[0].dtype(), in[2].dtype(), [&](auto i, auto t) {
    sptrsv_typed<decltype(i), decltype(t)>(in[0], in[1], in[2], in[3], out[0], lower, unit);
  });
}

// spmv_tiled (solvers/sparse/tiled.hpp): row blocks in parallel (a row block's tiles touch
// only its rows), each row's products summed in double over the tiles in order. The
// layout is trusted, as CSR structure is (the oracle checks it); shares are read as
// tile bounds only.
void run_spmv_tiled(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  const int64_t rows = n.attrs.get_int("rows"), cols = n.attrs.get_int("cols"), rb = n.attrs.get_int("rb"),
                panel = n.attrs.get_int("panel"), warps = n.attrs.get_int("warps");
  const double alpha = n.attrs.get_float("alpha"), beta = n.attrs.get_float("beta");
  const int64_t panels = std::max<int64_t>(1, (cols + panel - 1) / panel), row_blocks = (rows + rb - 1) / rb;
  const int64_t* share = in[0].data<int64_t>();
  const uint32_t* rc = reinterpret_cast<const uint32_t*>(in[1].data<int32_t>());
  const double *v = in[2].data<double>(), *x = in[3].data<double>();
  const double* y0 = in.size() == 5 ? in[4].data<double>() : nullptr;
  double* y = out[0].data<double>();
  const int64_t grain = std::max<int64_t>(1, row_blocks / 64);
  parallel_for(row_blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<double> acc(static_cast<size_t>(rb));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * rb, nr = std::min(rb, rows - r0);
      std::fill(acc.begin(), acc.begin() + nr, 0.0);
      for (int64_t p = 0; p < panels; ++p) {
        const double* xp = x + p * panel;
        const int64_t t = b * panels + p;
        for (int64_t k = share[t * warps]; k < share[(t + 1) * warps]; ++k)
          acc[rc[k] >> 16] += v[k] * xp[rc[k] & 0xffff];
      }
      for (int64_t i = 0; i < nr; ++i) y[r0 + i] = y0 ? alpha * acc[size_t(i)] + beta * y0[r0 + i] : alpha * acc[size_t(i)];
    }
  });
}

// tile_csr (solvers/sparse/tiled.hpp): two passes, row blocks in parallel (a row block's
// tiles, entries and shares are its own): nonzeros per tile, then the entries and each
// tile's shares. Share w of a tile of m nonzeros starts at the first row start at or past
// m * w / warps (so a row never spans two warps); row starts are seen as each row's first
// entry in a panel is placed, the rest resolve to the tile's end. On bad structure each
// thread stops at its first error; the lowest row block's is thrown, as a sequential pass
// would.
template <class I>
void tile_csr_typed(const ir::Node& n, const std::vector<Tensor>& in, std::span<Tensor> out) {
  const int64_t rows = in[0].numel() - 1, nnz = in[1].numel(), cols = n.attrs.get_int("cols"),
                rb = n.attrs.get_int("rb"), panel = n.attrs.get_int("panel"), warps = n.attrs.get_int("warps");
  const I* row_ptr = in[0].data<I>();
  const I* col_idx = in[1].data<I>();
  const double* v = in[2].data<double>();
  if (row_ptr[0] != 0) throw InputError("tile_csr: row_ptr starts at " + std::to_string(row_ptr[0]) + ", not 0");
  if (row_ptr[rows] != nnz)
    throw InputError("tile_csr: row_ptr ends at " + std::to_string(row_ptr[rows]) + " for " + std::to_string(nnz) +
                     " nonzeros");
  const int64_t row_blocks = (rows + rb - 1) / rb, panels = std::max<int64_t>(1, (cols + panel - 1) / panel);
  const int64_t tiles = row_blocks * panels;
  const int nt = nnz < (int64_t(1) << 20) ? 1 : int(std::clamp<int64_t>(num_threads(), 1, std::max<int64_t>(row_blocks, 1)));
  auto by_blocks = [&](const std::function<void(int64_t, int64_t)>& f) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(nt));
    ThreadPool::instance().run(nt, [&](int t, int nts) {
      const int64_t per = (row_blocks + nts - 1) / nts, b0 = t * per, b1 = std::min(row_blocks, b0 + per);
      try {
        if (b0 < b1) f(b0, b1);
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
      }
    });
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  };
  // Pass 1: nonzeros per tile (tile_start[i + 1]), then their running sum.
  std::vector<int64_t> tile_start(size_t(tiles) + 1, 0);
  by_blocks([&](int64_t b0, int64_t b1) {
    for (int64_t r = b0 * rb; r < std::min(rows, b1 * rb); ++r) {
      const int64_t b = r / rb, k0 = row_ptr[r], k1 = row_ptr[r + 1];
      if (k0 < 0 || k1 < k0 || k1 > nnz)
        throw InputError("tile_csr: row_ptr not ascending (or past nnz) at row " + std::to_string(r));
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t c = col_idx[k];
        if (c < 0 || c >= cols)
          throw InputError("tile_csr: column " + std::to_string(c) + " of row " + std::to_string(r) + " outside [0, " +
                           std::to_string(cols) + ")");
        ++tile_start[size_t(b * panels + c / panel) + 1];
      }
    }
  });
  for (int64_t i = 0; i < tiles; ++i) tile_start[size_t(i) + 1] += tile_start[size_t(i)];
  // Pass 2: the entries, and each tile's shares.
  int64_t* share = out[0].data<int64_t>();
  uint32_t* rc = reinterpret_cast<uint32_t*>(out[1].data<int32_t>());
  double* val = out[2].data<double>();
  for (int64_t k = nnz; k < out[1].numel(); ++k) rc[k] = 0, val[k] = 0;
  share[tiles * warps] = nnz;
  by_blocks([&](int64_t b0, int64_t b1) {
    std::vector<int64_t> cursor(static_cast<size_t>(panels)), last_row(static_cast<size_t>(panels));
    std::vector<int> next_share(static_cast<size_t>(panels));
    auto resolve = [&](int64_t tile, int64_t p, int64_t upto) {  // shares whose target is <= upto start there
      const int64_t m = tile_start[size_t(tile) + 1] - tile_start[size_t(tile)];
      int& w = next_share[size_t(p)];
      while (w < warps && m * w / warps <= upto) share[tile * warps + w++] = tile_start[size_t(tile)] + upto;
    };
    for (int64_t b = b0; b < b1; ++b) {
      std::fill(cursor.begin(), cursor.end(), 0);
      std::fill(last_row.begin(), last_row.end(), -1);
      std::fill(next_share.begin(), next_share.end(), 0);
      for (int64_t r = b * rb; r < std::min(rows, (b + 1) * rb); ++r)
        for (int64_t k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
          const int64_t c = col_idx[k], p = c / panel, tile = b * panels + p;
          if (last_row[size_t(p)] != r) resolve(tile, p, cursor[size_t(p)]), last_row[size_t(p)] = r;
          const int64_t pos = tile_start[size_t(tile)] + cursor[size_t(p)]++;
          rc[pos] = uint32_t(r - b * rb) << 16 | uint32_t(c - p * panel);
          val[pos] = v[k];
        }
      for (int64_t p = 0; p < panels; ++p) resolve(b * panels + p, p, cursor[size_t(p)]);
    }
  });
}

void run_tile_csr(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  if (in[0].dtype() == DType::I32) tile_csr_typed<int32_t>(n, in, out);
  else tile_csr_typed<int64_t>(n, in, out);
}

Capability tile_csr_supported(const ir::Node& n, const ir::Graph& g) {
  const DType index = g.type(n.inputs.at(0)).dtype;
  if (index != DType::I32 && index != DType::I64) return Capability::no("tile_csr on cpu: i32 or i64 indices");
  return Capability::yes();
}

Capability tiled_supported(const ir::Node& n, const ir::Graph& g) {
  if (g.type(n.inputs.at(2)).dtype != DType::F64) return Capability::no("spmv_tiled on cpu: f64 only");
  return Capability::yes();
}

}  // namespace

// The number of threaded (pipelined) sptrsv sweeps so far: lets tests check that the
// threaded path really ran (declared where used; not part of any interface).
int64_t sptrsv_pipelined_solves() { return g_pipelined_solves.load(std::memory_order_relaxed); }

void add_sparse_kernels(KernelTable& t) {
  add_sparse_family(t, {csr_supported, tiled_supported, tile_csr_supported, run_spmv, run_spmm, run_sptrsv, run_spmv_tiled,
                        run_tile_csr});
}

}  // namespace rlx::cpu
