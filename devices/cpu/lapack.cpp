// Dense linear algebra on the cpu device through LAPACK: the Fortran routines of the
// OpenBLAS that gemm.cpp loads at run time (s/d/c variants; never linked).
//
// Layout. rlx matrices are row-major; LAPACK's are column-major, so a row-major buffer
// read by LAPACK is the transpose. Most ops are arranged to need no transposes at all:
//   cholesky          potrf('U') on the buffer: A^T = conj(A) = U^H U, so L = U^T, which
//                     is exactly U's storage read row-major (for blocks up to 128; larger
//                     matrices recurse, with SYRK/HERK and GEMM doing most of the work)
//   *_solve           T X = B  <=>  X^T T^T = B^T: trsm from the right on the buffers as
//                     they are (X row-major [n, k] is X^T column-major)
//   svd               gesdd('S') of A^T = U' S V'^H: A = conj(V') S U'^T, so U and Vh are
//                     the buffers gesdd writes as VT and U
//   slogdet           getrf of A^T (same determinant)
//   lu_factor         row pivoting of A would be column pivoting of A^T, which LAPACK
//                     lacks: a recursive LU runs on the row-major buffer (GEMM and TRSM
//                     through row-major CBLAS), with getrf for its narrow panels
// qr and lstsq copy A into column-major order (the copy LAPACK needs anyway, transposed),
// and eigh transposes its eigenvectors: blocked, on the device's threads.
//
// Errors use the reference device's wording: an exact zero pivot names U(i,i) (1-based,
// as LAPACK's info), a failed Cholesky names the leading minor's order.
#include <algorithm>
#include <climits>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "devices/cpu/gemm.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"
#include "ir/ops/semantics.hpp"

namespace rlx::cpu {
namespace {

using lint = int;          // Debian's libopenblas.so.0 uses 32-bit LAPACK integers
using flen = std::size_t;  // gfortran's hidden CHARACTER lengths, passed after the arguments
constexpr flen k1 = 1;

template <class T>
constexpr bool is_cplx = std::is_same_v<T, c64>;
template <class T>
using real_t = std::conditional_t<is_cplx<T>, float, T>;

inline float cj(float x) { return x; }
inline double cj(double x) { return x; }
inline c64 cj(c64 x) { return std::conj(x); }
template <class T>
double re(T x) {
  if constexpr (is_cplx<T>)
    return double(x.real());
  else
    return double(x);
}

// ---------------------------------------------------------------- the routines

template <class T>
struct Fns {
  using R = real_t<T>;
  using getrf_f = void (*)(const lint*, const lint*, T*, const lint*, lint*, lint*);
  using potrf_f = void (*)(const char*, const lint*, T*, const lint*, lint*, flen);
  using trsm_f = void (*)(const char*, const char*, const char*, const char*, const lint*, const lint*, const T*,
                          const T*, const lint*, T*, const lint*, flen, flen, flen, flen);
  using geqrf_f = void (*)(const lint*, const lint*, T*, const lint*, T*, T*, const lint*, lint*);
  using orgqr_f = void (*)(const lint*, const lint*, const lint*, T*, const lint*, const T*, T*, const lint*, lint*);
  using gels_f = void (*)(const char*, const lint*, const lint*, const lint*, T*, const lint*, T*, const lint*, T*,
                          const lint*, lint*, flen);
  // Complex gesdd and heevd take real workspaces (rwork) that the real routines lack.
  using gesdd_f = std::conditional_t<
      is_cplx<T>,
      void (*)(const char*, const lint*, const lint*, T*, const lint*, R*, T*, const lint*, T*, const lint*, T*,
               const lint*, R*, lint*, lint*, flen),
      void (*)(const char*, const lint*, const lint*, T*, const lint*, R*, T*, const lint*, T*, const lint*, T*,
               const lint*, lint*, lint*, flen)>;
  using syevd_f = std::conditional_t<
      is_cplx<T>,
      void (*)(const char*, const char*, const lint*, T*, const lint*, R*, T*, const lint*, R*, const lint*, lint*,
               const lint*, lint*, flen, flen),
      void (*)(const char*, const char*, const lint*, T*, const lint*, R*, T*, const lint*, lint*, const lint*, lint*,
               flen, flen)>;

  // Row-major CBLAS level 3 (lu_factor's recursion); complex scalars by pointer.
  using S = std::conditional_t<is_cplx<T>, const void*, T>;
  using cgemm_f = void (*)(int, int, int, int, int, int, S, const T*, int, const T*, int, S, T*, int);
  using ctrsm_f = void (*)(int, int, int, int, int, int, int, S, const T*, int, T*, int);
  using cherk_f = void (*)(int, int, int, int, int, R, const T*, int, R, T*, int);  // syrk / herk

  getrf_f getrf = nullptr;
  cgemm_f cgemm = nullptr;
  ctrsm_f ctrsm = nullptr;
  cherk_f cherk = nullptr;
  potrf_f potrf = nullptr;
  trsm_f trsm = nullptr;
  geqrf_f geqrf = nullptr;
  orgqr_f orgqr = nullptr;
  gels_f gels = nullptr;
  gesdd_f gesdd = nullptr;
  syevd_f syevd = nullptr;
  std::string missing;  // why not usable ("" when every routine was found)
};

template <class T>
Fns<T> load_fns() {
  Fns<T> f;
  if (!blas_info().loaded) {
    f.missing = "LAPACK unavailable: " + blas_info().note;
    return f;
  }
  const std::string p = std::is_same_v<T, float> ? "s" : std::is_same_v<T, double> ? "d" : "c";
  auto get = [&](auto& fn, const std::string& name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(blas_symbol((name + "_").c_str()));
    if (!fn && f.missing.empty()) f.missing = "LAPACK unavailable: " + blas_info().library + " lacks " + name + "_";
  };
  get(f.getrf, p + "getrf");
  auto getc = [&](auto& fn, const std::string& name) {  // CBLAS symbols have no trailing '_'
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(blas_symbol(name.c_str()));
    if (!fn && f.missing.empty()) f.missing = "LAPACK unavailable: " + blas_info().library + " lacks " + name;
  };
  getc(f.cgemm, "cblas_" + p + "gemm");
  getc(f.ctrsm, "cblas_" + p + "trsm");
  getc(f.cherk, "cblas_" + p + (is_cplx<T> ? "herk" : "syrk"));
  get(f.potrf, p + "potrf");
  get(f.trsm, p + "trsm");
  get(f.geqrf, p + "geqrf");
  get(f.orgqr, p + (is_cplx<T> ? "ungqr" : "orgqr"));
  get(f.gels, p + "gels");
  get(f.gesdd, p + "gesdd");
  get(f.syevd, p + (is_cplx<T> ? "heevd" : "syevd"));
  return f;
}

template <class T>
const Fns<T>& fns() {
  static const Fns<T> f = load_fns<T>();
  return f;
}

const std::string& missing_for(DType t) {
  switch (t) {
    case DType::F32: return fns<float>().missing;
    case DType::F64: return fns<double>().missing;
    default: return fns<c64>().missing;
  }
}

// The size a workspace query returned (single precision: rounded up, with room, since
// a float cannot hold every integer).
template <class T>
lint query_size(T w) {
  double v = std::ceil(re(w));
  if constexpr (!std::is_same_v<T, double>) v = v * (1 + 1e-6) + 1;
  return lint(std::min<double>(std::max(v, 1.0), double(INT_MAX)));
}

void check_info(lint info, const char* routine) {
  if (info < 0)
    throw InternalError(std::string("cpu lapack: ") + routine + " rejected argument " + std::to_string(-info));
}


// ---------------------------------------------------------------- copies

// Uninitialized storage for a matrix that a copy fills next (no zeroing pass).
template <class T>
class Scratch {
 public:
  explicit Scratch(size_t n) {
    const size_t bytes = std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64);
    p_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!p_) throw Error("cpu lapack: cannot allocate " + std::to_string(bytes) + " bytes of workspace");
  }
  ~Scratch() { std::free(p_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() const { return p_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
};

// dst(i, j) = src(i, j) (conjugated when asked) for an r x c block, element strides on
// both sides: a plain copy, a gather from a strided view, or a transpose. 32 x 32 tiles,
// tile rows spread over the device's threads.
template <class T>
void copy2d(int64_t r, int64_t c, const T* src, int64_t s0, int64_t s1, T* dst, int64_t d0, int64_t d1,
            bool conj = false) {
  const bool large = r * c >= (int64_t(1) << 18);
  if (s1 == 1 && d1 == 1 && !conj) {  // rows are contiguous on both sides
    auto rows = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) std::memcpy(dst + i * d0, src + i * s0, size_t(c) * sizeof(T));
    };
    if (large)
      parallel_for(r, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(c, 1)), rows);
    else
      rows(0, r);
    return;
  }
  constexpr int64_t B = 32;
  const int64_t tiles = (r + B - 1) / B;
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t ti = t0; ti < t1; ++ti) {
      const int64_t i0 = ti * B, i1 = std::min(r, i0 + B);
      for (int64_t j0 = 0; j0 < c; j0 += B) {
        const int64_t j1 = std::min(c, j0 + B);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) {
            const T v = src[i * s0 + j * s1];
            dst[i * d0 + j * d1] = conj ? cj(v) : v;
          }
      }
    }
  };
  if (large)
    parallel_for(tiles, 1, body);
  else
    body(0, tiles);
}

// The matrix (or vector, as one column) t, any strides, into dst with strides (d0, d1).
template <class T>
void copy_in(const Tensor& t, T* dst, int64_t d0, int64_t d1, bool conj = false) {
  const int64_t r = t.shape()[0], c = t.rank() == 2 ? t.shape()[1] : 1;
  const int64_t s0 = t.strides()[0], s1 = t.rank() == 2 ? t.strides()[1] : 0;
  copy2d(r, c, t.data<T>(), s0, s1, dst, d0, d1, conj);
}

// a = a^T (conjugated when asked) for a square n x n buffer, in place.
template <class T>
void transpose_square(T* a, int64_t n, bool conj) {
  constexpr int64_t B = 32;
  const int64_t tiles = (n + B - 1) / B;
  auto tile_row = [&](int64_t bi) {
    const int64_t i0 = bi * B, i1 = std::min(n, i0 + B);
    for (int64_t bj = bi; bj < tiles; ++bj) {
      const int64_t j0 = bj * B, j1 = std::min(n, j0 + B);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = std::max(j0, i + 1); j < j1; ++j) {
          const T x = a[i * n + j], y = a[j * n + i];
          a[i * n + j] = conj ? cj(y) : y;
          a[j * n + i] = conj ? cj(x) : x;
        }
    }
    if (conj)
      for (int64_t i = i0; i < i1; ++i) a[i * n + i] = cj(a[i * n + i]);
  };
  if (n * n < (int64_t(1) << 15)) {
    for (int64_t bi = 0; bi < tiles; ++bi) tile_row(bi);
    return;
  }
  // Tile row bi holds tiles - bi tiles: deal rows out round-robin to balance the threads.
  ThreadPool::instance().run(num_threads(), [&](int t, int nt) {
    for (int64_t bi = t; bi < tiles; bi += nt) tile_row(bi);
  });
}

// A read-only matrix LAPACK can take as it is (unit column stride), or a contiguous copy.
template <class T>
struct MatrixArg {
  const T* p;
  lint ld;
  Tensor keep;
  explicit MatrixArg(const Tensor& t) {
    const int64_t cols = t.shape()[1];
    if (t.strides()[1] == 1 && t.strides()[0] >= std::max<int64_t>(cols, 1)) {
      p = t.data<T>();
      ld = lint(t.strides()[0]);
    } else {
      keep = t.contiguous();
      p = keep.data<T>();
      ld = lint(std::max<int64_t>(cols, 1));
    }
  }
};

int64_t rhs_cols(const Tensor& b) { return b.rank() == 2 ? b.shape()[1] : 1; }

// Solves X op(M) = X_in in place for the column-major [n, n] matrix M (a row-major
// buffer read as it is); X is row-major [n, k], i.e. X^T column-major with ld k.
template <class T>
void trsm_right(char uplo, char trans, char diag, int64_t n, int64_t k, const T* m, lint ldm, T* x) {
  const lint kk = lint(k), nn = lint(n), ldx = lint(std::max<int64_t>(k, 1));
  const T one(1);
  fns<T>().trsm("R", &uplo, &trans, &diag, &kk, &nn, &one, m, &ldm, x, &ldx, k1, k1, k1, k1);
}

template <class T>
void check_diagonal(const T* m, lint ld, int64_t n, const std::string& op, const char* name) {
  for (int64_t i = 0; i < n; ++i)
    if (m[i * ld + i] == T(0)) ir::throw_singular(op, name, i);
}

// ---------------------------------------------------------------- kernels

// ---- lu_factor: recursive LU with partial pivoting on the row-major buffer itself
//
// LAPACK's getrf pivots rows of a column-major matrix; on rlx's row-major buffer that
// would be column pivoting of A^T, so getrf would need A transposed in and out (two
// passes over the matrix, slow at power-of-two sizes). Instead the recursion runs on
// the row-major buffer (Toledo's recursive LU, as LAPACK's getrf2): factor the left half
// of the columns, swap and solve the top right block (L11^-1 A12), update the bottom
// right block (A22 -= A21 A12: GEMM, most of the work), factor it, swap the bottom left
// block. Panels of at most kLuPanel columns are factored by getrf on a small
// column-major copy, so every pivot is chosen by LAPACK's own rule (i?amax).

constexpr int kRowMajor = 101, kNoTrans = 111, kLowerT = 122, kNonUnitT = 131, kUnitT = 132, kLeft = 141,
              kRight = 142;
template <class T>
constexpr int kAdjoint = is_cplx<T> ? 113 : 112;  // CblasConjTrans : CblasTrans
constexpr lint kLuPanel = 32;   // columns factored by getrf at the leaves
constexpr lint kTrsmLeaf = 64;  // triangular solves below this size call trsm itself

template <class T>
typename Fns<T>::S scalar_arg(const T& v) {
  if constexpr (is_cplx<T>)
    return &v;
  else
    return v;
}

// C -= A op(B), row-major; op(B) = B, or B^H with b_adjoint (B stored [n, k]).
template <class T>
void gemm_sub(lint m, lint n, lint k, const T* a, lint lda, const T* b, lint ldb, T* c, lint ldc,
              bool b_adjoint = false) {
  if (m == 0 || n == 0 || k == 0) return;
  const T minus_one(-1), one(1);
  fns<T>().cgemm(kRowMajor, kNoTrans, b_adjoint ? kAdjoint<T> : kNoTrans, m, n, k, scalar_arg(minus_one), a, lda, b,
                 ldb, scalar_arg(one), c, ldc);
}

// B = L^-1 B for unit lower triangular L [n, n], B [n, k], row-major; halves the
// triangle so that most of the work is GEMM (OpenBLAS's row-major trsm is much slower).
template <class T>
void trsm_unit_lower(lint n, lint k, const T* l, lint ldl, T* b, lint ldb) {
  if (n == 0 || k == 0) return;
  if (n <= kTrsmLeaf) {
    const T one(1);
    fns<T>().ctrsm(kRowMajor, kLeft, kLowerT, kNoTrans, kUnitT, n, k, scalar_arg(one), l, ldl, b, ldb);
    return;
  }
  const lint n1 = n / 2;
  trsm_unit_lower(n1, k, l, ldl, b, ldb);
  gemm_sub(n - n1, k, n1, l + int64_t(n1) * ldl, ldl, b, ldb, b + int64_t(n1) * ldb, ldb);
  trsm_unit_lower(n - n1, k, l + int64_t(n1) * ldl + n1, ldl, b + int64_t(n1) * ldb, ldb);
}

// Factors the row-major [m, n] block a (m >= n) in place: P a = L U with pivots piv[j]
// (0-based, relative to the block). Returns the first column whose pivot is exactly
// zero, or -1.
template <class T>
int64_t lu_recursive(lint m, lint n, T* a, lint lda, lint* piv, std::vector<T>& panel) {
  if (n <= kLuPanel) {
    panel.resize(size_t(m) * size_t(n));
    copy2d<T>(m, n, a, lda, 1, panel.data(), 1, m);  // column-major copy
    lint info = 0;
    fns<T>().getrf(&m, &n, panel.data(), &m, piv, &info);
    check_info(info, "getrf");
    copy2d<T>(m, n, panel.data(), 1, m, a, lda, 1);
    for (lint j = 0; j < n; ++j) piv[j] -= 1;
    return info > 0 ? info - 1 : -1;
  }
  const lint n1 = n / 2, n2 = n - n1;
  T* a12 = a + n1;
  T* a21 = a + int64_t(n1) * lda;
  T* a22 = a21 + n1;
  int64_t zero = lu_recursive(m, n1, a, lda, piv, panel);
  for (lint j = 0; j < n1; ++j)
    if (piv[j] != j) std::swap_ranges(a12 + int64_t(j) * lda, a12 + int64_t(j) * lda + n2, a12 + int64_t(piv[j]) * lda);
  trsm_unit_lower(n1, n2, a, lda, a12, lda);
  gemm_sub(m - n1, n2, n1, a21, lda, a12, lda, a22, lda);
  const int64_t zero2 = lu_recursive(m - n1, n2, a22, lda, piv + n1, panel);
  if (zero < 0 && zero2 >= 0) zero = n1 + zero2;
  for (lint j = n1; j < n; ++j) {
    piv[j] += n1;
    if (piv[j] != j) std::swap_ranges(a + int64_t(j) * lda, a + int64_t(j) * lda + n1, a + int64_t(piv[j]) * lda);
  }
  return zero;
}

template <class T>
void lu_factor(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0];
  if (n == 0) return;
  T* a = out[0].data<T>();
  copy_in<T>(in[0], a, n, 1);
  std::vector<T> panel;
  const int64_t zero = lu_recursive<T>(lint(n), lint(n), a, lint(n), out[1].data<int32_t>(), panel);
  if (zero >= 0) ir::throw_singular("lu_factor", "U", zero);
}

template <class T>
void lu_solve(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0], k = rhs_cols(in[2]);
  T* x = out[0].data<T>();
  copy_in<T>(in[2], x, k, 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = in[1].data<int32_t>()[i * in[1].strides()[0]];
    if (p < 0 || p >= n)
      throw InputError("lu_solve: pivots[" + std::to_string(i) + "] = " + std::to_string(p) + " is outside [0, " +
                       std::to_string(n) + ")");
    if (p != i) std::swap_ranges(x + i * k, x + (i + 1) * k, x + p * k);
  }
  if (n == 0 || k == 0) return;
  MatrixArg<T> lu(in[0]);
  check_diagonal(lu.p, lu.ld, n, "lu_solve", "U");
  trsm_right<T>('U', 'N', 'U', n, k, lu.p, lu.ld, x);  // L (unit lower; upper read column-major)
  trsm_right<T>('L', 'N', 'N', n, k, lu.p, lu.ld, x);  // U
}

// ---- cholesky: recursive, on the row-major buffer
//
// potrf('U') on the buffer read column-major computes L directly (see the top of this
// file), but OpenBLAS's upper variant is slower than its lower one. The recursion keeps
// the large work in GEMM and SYRK/HERK: factor A11, solve A21 L11^H = A21, update
// A22 -= A21 A21^H (lower triangle), factor A22; blocks of at most kCholLeaf rows go to
// potrf('U').

constexpr lint kCholLeaf = 128;

// X L^H = B in place for lower triangular L [n, n] (non-unit), X and B [m, n], row-major.
template <class T>
void trsm_right_lower_adjoint(lint m, lint n, const T* l, lint ldl, T* b, lint ldb) {
  if (m == 0 || n == 0) return;
  if (n <= kTrsmLeaf) {
    const T one(1);
    fns<T>().ctrsm(kRowMajor, kRight, kLowerT, kAdjoint<T>, kNonUnitT, m, n, scalar_arg(one), l, ldl, b, ldb);
    return;
  }
  const lint n1 = n / 2;
  trsm_right_lower_adjoint(m, n1, l, ldl, b, ldb);                                 // X1 = B1 L11^-H
  gemm_sub(m, n - n1, n1, b, ldb, l + int64_t(n1) * ldl, ldl, b + n1, ldb, true);  // B2 -= X1 L21^H
  trsm_right_lower_adjoint(m, n - n1, l + int64_t(n1) * ldl + n1, ldl, b + n1, ldb);
}

// Factors the Hermitian row-major [n, n] block a (lower triangle read and written).
// Returns 0, or the order of the first leading minor that is not positive definite.
template <class T>
int64_t cholesky_recursive(lint n, T* a, lint lda) {
  if (n <= kCholLeaf) {
    lint info = 0;
    fns<T>().potrf("U", &n, a, &lda, &info, k1);
    check_info(info, "potrf");
    return info;
  }
  const lint n1 = n / 2, n2 = n - n1;
  T* a21 = a + int64_t(n1) * lda;
  T* a22 = a21 + n1;
  if (int64_t bad = cholesky_recursive(n1, a, lda)) return bad;
  trsm_right_lower_adjoint(n2, n1, a, lda, a21, lda);
  fns<T>().cherk(kRowMajor, kLowerT, kNoTrans, n2, n1, real_t<T>(-1), a21, lda, real_t<T>(1), a22, lda);
  const int64_t bad = cholesky_recursive(n2, a22, lda);
  return bad ? n1 + bad : 0;
}

template <class T>
void cholesky(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0];
  if (n == 0) return;
  T* a = out[0].data<T>();
  // The lower triangle of A and zeros above it, in one pass.
  const T* src = in[0].data<T>();
  const int64_t s0 = in[0].strides()[0], s1 = in[0].strides()[1];
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T* row = a + i * n;
      if (s1 == 1)
        std::memcpy(row, src + i * s0, size_t(i + 1) * sizeof(T));
      else
        for (int64_t j = 0; j <= i; ++j) row[j] = src[i * s0 + j * s1];
      std::fill(row + i + 1, row + n, T(0));
    }
  };
  if (n * n >= (int64_t(1) << 18))
    parallel_for(n, 64, rows);
  else
    rows(0, n);
  if (const int64_t bad = cholesky_recursive<T>(lint(n), a, lint(n)))
    throw InputError("cholesky: the leading minor of order " + std::to_string(bad) + " is not positive definite");
}

template <class T>
void cholesky_solve(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0], k = rhs_cols(in[1]);
  T* x = out[0].data<T>();
  copy_in<T>(in[1], x, k, 1);
  if (n == 0 || k == 0) return;
  MatrixArg<T> l(in[0]);
  check_diagonal(l.p, l.ld, n, "cholesky_solve", "L");
  trsm_right<T>('U', 'N', 'N', n, k, l.p, l.ld, x);                     // L Y = B
  trsm_right<T>('U', is_cplx<T> ? 'C' : 'T', 'N', n, k, l.p, l.ld, x);  // L^H X = Y
}

template <class T>
void triangular_solve(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0], k = rhs_cols(in[1]);
  const bool lower = node.attrs.get_bool("lower"), unit = node.attrs.get_bool("unit_diagonal");
  T* x = out[0].data<T>();
  copy_in<T>(in[1], x, k, 1);
  if (n == 0 || k == 0) return;
  MatrixArg<T> t(in[0]);
  if (!unit) check_diagonal(t.p, t.ld, n, "triangular_solve", "T");
  trsm_right<T>(lower ? 'U' : 'L', 'N', unit ? 'U' : 'N', n, k, t.p, t.ld, x);
}

// QR and least squares run on a column-major copy of A (made while copying the input,
// which LAPACK would overwrite anyway): the LQ factorization of A^T that needs no copy
// in that layout is much slower in OpenBLAS (gelqf + orglq took 1.6 to 2x geqrf + orgqr).
template <class T>
void qr(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t m = in[0].shape()[0], n = in[0].shape()[1];
  if (n == 0) return;
  Scratch<T> w(static_cast<size_t>(m * n));
  copy_in<T>(in[0], w.data(), 1, m);  // column-major A [m, n]
  const lint ln = lint(n), lm = lint(m);
  std::vector<T> tau(static_cast<size_t>(n));
  lint info = 0, query = -1;
  T wq{};
  fns<T>().geqrf(&lm, &ln, w.data(), &lm, tau.data(), &wq, &query, &info);
  check_info(info, "geqrf");
  lint lwork = query_size(wq);
  fns<T>().orgqr(&lm, &ln, &ln, w.data(), &lm, tau.data(), &wq, &query, &info);
  check_info(info, "orgqr");
  lwork = std::max(lwork, query_size(wq));
  std::vector<T> work(static_cast<size_t>(lwork));
  fns<T>().geqrf(&lm, &ln, w.data(), &lm, tau.data(), work.data(), &lwork, &info);
  check_info(info, "geqrf");
  // R: the upper triangle (below it geqrf keeps its reflectors), by 32-row bands from
  // the diagonal on; zeros to its left.
  T* r = out[1].data<T>();
  for (int64_t i0 = 0; i0 < n; i0 += 32) {
    const int64_t rows = std::min<int64_t>(32, n - i0);
    copy2d<T>(rows, n - i0, w.data() + i0 + i0 * m, 1, m, r + i0 * n + i0, n, 1);
    for (int64_t i = i0; i < i0 + rows; ++i) std::fill(r + i * n, r + i * n + i, T(0));
  }
  fns<T>().orgqr(&lm, &ln, &ln, w.data(), &lm, tau.data(), work.data(), &lwork, &info);
  check_info(info, "orgqr");
  copy2d<T>(m, n, w.data(), 1, m, out[0].data<T>(), n, 1);
}

template <class T>
void lstsq(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t m = in[0].shape()[0], n = in[0].shape()[1], k = rhs_cols(in[1]);
  T* x = out[0].data<T>();
  if (n == 0 || k == 0) return;
  Scratch<T> a(static_cast<size_t>(m * n));
  copy_in<T>(in[0], a.data(), 1, m);  // column-major A [m, n]
  // gels answers 0 for an all-zero A; its first column is zero, so it is rank deficient.
  if (std::all_of(a.data(), a.data() + m * n, [](const T& v) { return v == T(0); })) ir::throw_rank_deficient(1);
  const int64_t ldb = std::max<int64_t>(m, 1);
  std::vector<T> b(static_cast<size_t>(ldb * k));
  copy_in<T>(in[1], b.data(), 1, ldb);  // column-major b [m, k]
  const lint ln = lint(n), lm = lint(m), lk = lint(k), lb = lint(ldb), la = lint(std::max<int64_t>(m, 1));
  lint info = 0, query = -1;
  T wq{};
  fns<T>().gels("N", &lm, &ln, &lk, a.data(), &la, b.data(), &lb, &wq, &query, &info, k1);
  check_info(info, "gels");
  lint lwork = query_size(wq);
  std::vector<T> work(static_cast<size_t>(lwork));
  fns<T>().gels("N", &lm, &ln, &lk, a.data(), &la, b.data(), &lb, work.data(), &lwork, &info, k1);
  check_info(info, "gels");
  if (info > 0) ir::throw_rank_deficient(info);
  copy2d(n, k, b.data(), 1, ldb, x, k, 1);
}

template <class T>
void svd(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  using R = real_t<T>;
  const int64_t m = in[0].shape()[0], n = in[0].shape()[1], k = std::min(m, n);
  if (k == 0) return;
  Scratch<T> a(static_cast<size_t>(m * n));
  copy_in<T>(in[0], a.data(), n, 1);  // column-major A^T [n, m]
  // gesdd of A^T writes U' [n, k] (ld n) into Vh and V'^H [k, m] (ld k) into U.
  T* u = out[0].data<T>();
  R* s = out[1].data<R>();
  T* vh = out[2].data<T>();
  const lint ln = lint(n), lm = lint(m), lk = lint(k);
  std::vector<lint> iwork(static_cast<size_t>(8 * k));
  std::vector<R> rwork;
  if constexpr (is_cplx<T>)
    rwork.resize(size_t(std::max(5 * k * k + 7 * k, 2 * std::max(m, n) * k + 2 * k * k + k)));
  lint info = 0, query = -1;
  auto call = [&](T* work, const lint* lwork) {
    if constexpr (is_cplx<T>)
      fns<T>().gesdd("S", &ln, &lm, a.data(), &ln, s, vh, &ln, u, &lk, work, lwork, rwork.data(), iwork.data(), &info,
                     k1);
    else
      fns<T>().gesdd("S", &ln, &lm, a.data(), &ln, s, vh, &ln, u, &lk, work, lwork, iwork.data(), &info, k1);
  };
  T wq{};
  call(&wq, &query);
  check_info(info, "gesdd");
  lint lwork = query_size(wq);
  std::vector<T> work(static_cast<size_t>(lwork));
  call(work.data(), &lwork);
  check_info(info, "gesdd");
  if (info > 0) throw InputError("svd: LAPACK gesdd did not converge (info " + std::to_string(info) + ")");
}

template <class T>
void eigh(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  using R = real_t<T>;
  const int64_t n = in[0].shape()[0];
  if (n == 0) return;
  T* v = out[1].data<T>();
  copy_in<T>(in[0], v, n, 1);  // column-major A^T = conj(A): its upper triangle is A's lower
  R* w = out[0].data<R>();
  const lint ln = lint(n);
  lint info = 0, query = -1, lrwork = 1, iq = 0;
  T wq{};
  R rq{};
  if constexpr (is_cplx<T>) {
    fns<T>().syevd("V", "U", &ln, v, &ln, w, &wq, &query, &rq, &query, &iq, &query, &info, k1, k1);
    lrwork = query_size(rq);
  } else {
    fns<T>().syevd("V", "U", &ln, v, &ln, w, &wq, &query, &iq, &query, &info, k1, k1);
  }
  check_info(info, "syevd");
  lint lwork = query_size(wq), liwork = std::max<lint>(iq, 1);
  std::vector<T> work(static_cast<size_t>(lwork));
  std::vector<R> rwork(static_cast<size_t>(lrwork));
  std::vector<lint> iwork(static_cast<size_t>(liwork));
  if constexpr (is_cplx<T>)
    fns<T>().syevd("V", "U", &ln, v, &ln, w, work.data(), &lwork, rwork.data(), &lrwork, iwork.data(), &liwork, &info,
                   k1, k1);
  else
    fns<T>().syevd("V", "U", &ln, v, &ln, w, work.data(), &lwork, iwork.data(), &liwork, &info, k1, k1);
  check_info(info, "syevd");
  if (info > 0) throw InputError("eigh: LAPACK syevd/heevd did not converge (info " + std::to_string(info) + ")");
  // conj(A) = V' diag(w) V'^H, so A's eigenvectors are conj(V'), stored row-major.
  transpose_square(v, n, is_cplx<T>);
}

template <class T>
void slogdet(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0];
  T* sign = out[0].data<T>();
  real_t<T>* logabs = out[1].data<real_t<T>>();
  Scratch<T> a(static_cast<size_t>(n * n));
  copy_in<T>(in[0], a.data(), n, 1);  // A^T: the same determinant
  std::vector<lint> piv(static_cast<size_t>(n));
  lint info = 0;
  if (n > 0) {
    const lint nn = lint(n);
    fns<T>().getrf(&nn, &nn, a.data(), &nn, piv.data(), &info);
    check_info(info, "getrf");
  }
  if (info > 0) {  // an exact zero pivot: det = 0
    *sign = T(0);
    *logabs = -std::numeric_limits<real_t<T>>::infinity();
    return;
  }
  // Accumulate in double (complex<double>) and round once.
  std::conditional_t<is_cplx<T>, std::complex<double>, double> sg(1);
  double la = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T u = a[size_t(i * n + i)];
    // |u| in double: a float |u| is off by up to half an ulp, and 160 such phases drifted
    // |sign| of a c64 determinant past 1e-6 (the op suite caught it).
    double mag;
    if constexpr (is_cplx<T>) {
      const std::complex<double> ud(u);
      mag = std::abs(ud);
      sg *= ud / mag;
    } else {
      mag = std::fabs(double(u));
      sg *= u < 0 ? -1.0 : 1.0;
    }
    if (piv[size_t(i)] != i + 1) sg = -sg;
    la += std::log(mag);
  }
  *sign = T(sg);
  *logabs = real_t<T>(la);
}

// ---------------------------------------------------------------- registration

Capability lapack_supports(const ir::Node& n, const ir::Graph& g) {
  const DType t = g.type(n.inputs.at(0)).dtype;
  if (t != DType::F32 && t != DType::F64 && t != DType::C64)
    return Capability::no("no " + std::string(dtype_name(t)) + " " + n.op->name + " kernel on cpu (LAPACK: f32 f64 c64)");
  const std::string& missing = missing_for(t);
  if (!missing.empty()) return Capability::no(missing);
  // 32-bit LAPACK integers: every operand's element count must fit.
  for (const ir::Value& v : n.inputs)
    if (numel(g.type(v).shape) > INT_MAX)
      return Capability::no("matrix too large for 32-bit LAPACK indices (" + g.type(v).str() + ")");
  for (const TensorType& r : n.outputs)
    if (numel(r.shape) > INT_MAX) return Capability::no("result too large for 32-bit LAPACK indices (" + r.str() + ")");
  return Capability::yes();
}

using RunFn = void (*)(const ir::Node&, std::span<const Tensor>, std::span<Tensor>);

}  // namespace

void add_lapack_kernels(KernelTable& t) {
  auto add = [&](const char* op, RunFn f32, RunFn f64, RunFn c64_) {
    t.add(PredicateKernel{op, lapack_supports, [=](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
                   switch (in[0].dtype()) {
                     case DType::F32: return f32(n, in, out);
                     case DType::F64: return f64(n, in, out);
                     case DType::C64: return c64_(n, in, out);
                     default:
                       throw InternalError("cpu lapack: " + n.op->name + " given " + dtype_name(in[0].dtype()));
                   }
                 }});
  };
#define RLX_ADD(name) add(#name, name<float>, name<double>, name<c64>)
  RLX_ADD(lu_factor);
  RLX_ADD(lu_solve);
  RLX_ADD(cholesky);
  RLX_ADD(cholesky_solve);
  RLX_ADD(triangular_solve);
  RLX_ADD(qr);
  RLX_ADD(lstsq);
  RLX_ADD(svd);
  RLX_ADD(eigh);
  RLX_ADD(slogdet);
#undef RLX_ADD
}

}  // namespace rlx::cpu
