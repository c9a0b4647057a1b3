// spmv_csr and spmm_csr on the cpu device, for f32, f64 and c64 values with i32 or i64
// indices, and add_sparse_kernels, which registers them with the rest of the sparse family
// (sptrsv.cpp: sptrsv_csr; tiled.cpp: spmv_tiled, tile_csr).
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
// and picked at run time with __builtin_cpu_supports("x86-64-v4"). Everything else
// (c64, CPUs without AVX-512, AMD) runs portable scalar loops that accumulate in double,
// which the out-of-order core overlaps across rows. On a 3D Poisson matrix (7 nonzeros per
// row) the AVX-512 rows ran 10 % faster than the scalar loop in cache and 10-15 % faster
// from DRAM on one Intel Xeon (family 6 model 167), but 1.9x (f64) and 2.2x (f32) slower on
// an AMD EPYC (Zen 4), whose masked gathers are microcoded, and 1.6x slower on the Xeon of
// the 16-core GPU machine (45.9 against 29.1 ms a 128^3 product on one core): the scalar
// rows are the default everywhere, the AVX-512 rows on request (docs/benchmarks.md, "SpMV
// rows on AMD" and "the 16-core machine again"). The larger gain is software prefetch of
// the values and col_idx streams (sparse.hpp), on every path. spmm's inner loop is
// a dense axpy over B's row, built for x86-64-v4, x86-64-v3 and baseline with target_clones.
//
// Rounding: f32/f64 spmv on the AVX-512 path accumulates in the value type with FMAs;
// the scalar paths and spmm accumulate f32 in double. Results differ from the reference
// device (double accumulation, rounded once) only in the last bits.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/env.hpp"
#include "core/error.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/sparse.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cpu {

int64_t sparse_prefetch_distance() {
  static const int64_t d = env_int("RLX_CPU_SPMV_PREFETCH", 0, 65536, kPrefetchDefault);
  return d;
}

namespace {

// Below this much work (nnz + rows) a product runs on the calling thread.
constexpr int64_t kParallelWork = 1 << 15;

// Prefetches element k of p (computed as an integer: it lies a prefetch distance ahead, maybe
// past the end, where a prefetch is harmless but pointer arithmetic would not be).
template <int kLocality = 3, class T>
inline void prefetch_ahead(const T* p, int64_t k) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + uint64_t(k) * sizeof(T)), 0, kLocality);
}

// RLX_CPU_SPMV_PREFETCH_HINT: the scalar rows' prefetch instruction, "t0" (into every cache
// level), "t1", "t2" (from the second or third level out) or "nta" (by the outer caches,
// which then keep x). Returns the locality, 3..0. Read once per process.
int prefetch_locality() {
  static const int loc = 3 - env_choice("RLX_CPU_SPMV_PREFETCH_HINT", {"t0", "t1", "t2", "nta"});
  return loc;
}

// RLX_CPU_SPMV: "gather" (the AVX-512 rows; an error on a CPU without AVX-512), "scalar"
// (the portable rows), `auto` or unset: the scalar rows (two of the three CPUs measured
// run them faster; header comment). Read per product: tests switch it.
bool gather_rows() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool v4 = cpu_has_x86_64_v4();
  switch (env_choice("RLX_CPU_SPMV", {"auto", "gather", "scalar"})) {
    case 1:
      if (!v4) throw InputError("RLX_CPU_SPMV=gather: this CPU has no AVX-512 (x86-64-v4)");
      return true;
    default: return false;
  }
#else
  if (env_choice("RLX_CPU_SPMV", {"auto", "gather", "scalar"}) == 1)
    throw InputError("RLX_CPU_SPMV=gather: the AVX-512 rows are built for x86-64 only");
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
  int64_t pf;  // prefetch distance in nonzeros (sparse_prefetch_distance)
};

// Portable rows: accumulate in double (complex<double> for c64). kPf: software prefetch of
// the value and index streams (a distance of 0 leaves them to the hardware prefetcher), with
// locality kLoc.
template <bool kPf, int kLoc, class I, class T>
void spmv_rows_scalar(const I* rp, const I* ci, const T* v, const T* x, const T* y0, T* y, SpmvArgs a, int64_t r0,
                      int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = rp[r], e = rp[r + 1];
    if constexpr (kPf) {
      prefetch_ahead<kLoc>(v, b + a.pf);
      prefetch_ahead<kLoc>(ci, b + a.pf);
    }
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
    prefetch_ahead(v, k + a.pf);
    prefetch_ahead(ci, k + a.pf);
    __m512d acc = _mm512_setzero_pd();
    for (; k + 8 <= e; k += 8) {  // long rows: one more line of each stream per step
      prefetch_ahead(v, k + 8 + a.pf);
      prefetch_ahead(ci, k + 8 + a.pf);
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
    prefetch_ahead(v, k + a.pf);
    prefetch_ahead(ci, k + a.pf);
    float s;
    if constexpr (sizeof(I) == 4) {
      __m512 acc = _mm512_setzero_ps();
      for (; k + 16 <= e; k += 16) {
        prefetch_ahead(v, k + 16 + a.pf);
        prefetch_ahead(ci, k + 16 + a.pf);
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
        prefetch_ahead(ci, k + 8 + a.pf);
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
  const bool gather = (std::is_same_v<T, double> || std::is_same_v<T, float>) && gather_rows();  // (no c64 form)
  const int loc = prefetch_locality();
  auto rows_fn = [&](int64_t r0, int64_t r1) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (gather) {
      if constexpr (std::is_same_v<T, double>) return spmv_rows_f64_v4<I>(rp, ci, v, x, y0, y, a, r0, r1);
      if constexpr (std::is_same_v<T, float>) return spmv_rows_f32_v4<I>(rp, ci, v, x, y0, y, a, r0, r1);
    }
#endif
    if (a.pf == 0) return spmv_rows_scalar<false, 3, I, T>(rp, ci, v, x, y0, y, a, r0, r1);
    switch (loc) {
      case 0: return spmv_rows_scalar<true, 0, I, T>(rp, ci, v, x, y0, y, a, r0, r1);
      case 1: return spmv_rows_scalar<true, 1, I, T>(rp, ci, v, x, y0, y, a, r0, r1);
      case 2: return spmv_rows_scalar<true, 2, I, T>(rp, ci, v, x, y0, y, a, r0, r1);
      default: return spmv_rows_scalar<true, 3, I, T>(rp, ci, v, x, y0, y, a, r0, r1);
    }
  };
  // y += alpha A x in place (the memory plan gave the result y0's buffer): a row without
  // entries keeps its value, so only the runs of rows with entries are visited — the
  // off-diagonal block of a distributed matrix has entries in few of its rows. Row pointers
  // never decrease, so a stretch of empty rows ends where the pointer first grows: found by
  // bisection, not by reading every pointer of the stretch.
  if (y0 == y && a.beta == 1.0) {
    for_row_ranges(rp, rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1;) {
        if (rp[r] == rp[r + 1])  // (at least one row on: progress whatever the pointers hold)
          r = std::max<int64_t>(r + 1, int64_t(std::upper_bound(rp + r, rp + r1 + 1, rp[r]) - rp) - 1);
        int64_t e = r;
        while (e < r1 && rp[e] != rp[e + 1]) ++e;
        if (r < e) rows_fn(r, e);
        r = e;
      }
    });
    return;
  }
  for_row_ranges(rp, rows, rows_fn);
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

// ---------------------------------------------------------------- dispatch

Capability csr_supported(const ir::Node& n, const ir::Graph& g) {
  const DType index = g.type(n.inputs.at(0)).dtype, value = g.type(n.inputs.at(2)).dtype;
  if (index != DType::I32 && index != DType::I64)
    return Capability::no("no " + std::string(dtype_name(index)) + "-indexed " + n.op->name + " kernel on cpu");
  if (value != DType::F32 && value != DType::F64 && value != DType::C64)
    return Capability::no("no " + std::string(dtype_name(value)) + " " + n.op->name + " kernel on cpu");
  return Capability::yes();
}

void run_spmv(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  SpmvArgs a{n.attrs.get_float("alpha"), n.attrs.get_float("beta"), in.size() == 5, sparse_prefetch_distance()};
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

}  // namespace

void add_sparse_kernels(KernelTable& t) {
  add_sparse_family(t, {csr_supported, tiled_supported, tile_csr_supported, run_spmv, run_spmm, run_sptrsv, run_spmv_tiled,
                        run_tile_csr});
}

}  // namespace rlx::cpu
