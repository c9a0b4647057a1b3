// Dense linear algebra on the cpu device through LAPACK: the Fortran routines of the
// OpenBLAS that gemm.cpp loads at run time (s/d/c variants; never linked).
//
// Layout. rlx matrices are row-major; LAPACK's are column-major, so a row-major buffer
// read by LAPACK is the transpose. Most ops are arranged to need no transposes at all:
//   cholesky          potrf('U') on the buffer: A^T = conj(A) = U^H U, so L = U^T, which
//                     is exactly U's storage read row-major
//   *_solve           T X = B  <=>  X^T T^T = B^T: trsm from the right on the buffers as
//                     they are (X row-major [n, k] is X^T column-major)
//   qr                A^T = L Q' (gelqf + orglq/unglq) gives A = Q'^T L^T: Q and R are Q'
//                     and L's storage read row-major
//   lstsq             gels('T' / 'C') on A^T (c64: on conj(b), conjugating the answer)
//   svd               gesdd('S') of A^T = U' S V'^H: A = conj(V') S U'^T, so U and Vh are
//                     the buffers gesdd writes as VT and U
//   slogdet           getrf of A^T (same determinant)
// lu_factor (row pivoting of A is column pivoting of A^T, which LAPACK lacks) and eigh's
// eigenvectors need a transpose: blocked, on the device's threads.
//
// Errors use the reference device's wording: an exact zero pivot names U(i,i) (1-based,
// as LAPACK's info), a failed Cholesky names the leading minor's order.
#include <algorithm>
#include <climits>
#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "devices/cpu/gemm.hpp"
#include "devices/cpu/library.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"

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
  using gelqf_f = void (*)(const lint*, const lint*, T*, const lint*, T*, T*, const lint*, lint*);
  using orglq_f = void (*)(const lint*, const lint*, const lint*, T*, const lint*, const T*, T*, const lint*, lint*);
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

  getrf_f getrf = nullptr;
  potrf_f potrf = nullptr;
  trsm_f trsm = nullptr;
  gelqf_f gelqf = nullptr;
  orglq_f orglq = nullptr;
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
  get(f.potrf, p + "potrf");
  get(f.trsm, p + "trsm");
  get(f.gelqf, p + "gelqf");
  get(f.orglq, p + (is_cplx<T> ? "unglq" : "orglq"));
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

[[noreturn]] void singular(const std::string& op, const char* factor, int64_t k) {
  const std::string i = std::to_string(k + 1);
  throw InputError(op + ": " + factor + "(" + i + "," + i + ") is exactly zero: the matrix is singular");
}

[[noreturn]] void rank_deficient(int64_t i) {
  throw InputError("lstsq: R(" + std::to_string(i) + "," + std::to_string(i) +
                   ") of A's QR factorization is exactly zero: A does not have full column rank");
}

// ---------------------------------------------------------------- copies

// dst(i, j) = src(i, j) (conjugated when asked) for an r x c block, element strides on
// both sides: a plain copy, a gather from a strided view, or a transpose. 32 x 32 tiles,
// tile rows spread over the device's threads.
template <class T>
void copy2d(int64_t r, int64_t c, const T* src, int64_t s0, int64_t s1, T* dst, int64_t d0, int64_t d1,
            bool conj = false) {
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
  if (r * c < (int64_t(1) << 15))
    body(0, tiles);
  else
    parallel_for(tiles, 1, body);
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
    if (m[i * ld + i] == T(0)) singular(op, name, i);
}

// ---------------------------------------------------------------- kernels

template <class T>
void lu_factor(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0];
  if (n == 0) return;
  T* a = out[0].data<T>();
  int32_t* piv = out[1].data<int32_t>();
  copy_in<T>(in[0], a, 1, n);  // column-major A
  const lint nn = lint(n);
  lint info = 0;
  fns<T>().getrf(&nn, &nn, a, &nn, piv, &info);
  check_info(info, "getrf");
  if (info > 0) singular("lu_factor", "U", info - 1);
  transpose_square(a, n, false);
  for (int64_t i = 0; i < n; ++i) piv[i] -= 1;  // 1-based -> 0-based
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

template <class T>
void cholesky(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0];
  if (n == 0) return;
  T* a = out[0].data<T>();
  copy_in<T>(in[0], a, n, 1);
  const lint nn = lint(n);
  lint info = 0;
  fns<T>().potrf("U", &nn, a, &nn, &info, k1);
  check_info(info, "potrf");
  if (info > 0)
    throw InputError("cholesky: the leading minor of order " + std::to_string(info) + " is not positive definite");
  parallel_for(n, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::fill(a + i * n + i + 1, a + (i + 1) * n, T(0));
  });
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

template <class T>
void qr(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t m = in[0].shape()[0], n = in[0].shape()[1];
  if (n == 0) return;
  T* q = out[0].data<T>();  // first A^T = L Q' (column-major [n, m], ld n), then Q'
  T* r = out[1].data<T>();
  copy_in<T>(in[0], q, n, 1);
  const lint ln = lint(n), lm = lint(m);
  std::vector<T> tau(static_cast<size_t>(n));
  lint info = 0, query = -1;
  T wq{};
  fns<T>().gelqf(&ln, &lm, q, &ln, tau.data(), &wq, &query, &info);
  check_info(info, "gelqf");
  lint lwork = query_size(wq);
  fns<T>().orglq(&ln, &lm, &ln, q, &ln, tau.data(), &wq, &query, &info);
  check_info(info, "orglq");
  lwork = std::max(lwork, query_size(wq));
  std::vector<T> work(static_cast<size_t>(lwork));
  fns<T>().gelqf(&ln, &lm, q, &ln, tau.data(), work.data(), &lwork, &info);
  check_info(info, "gelqf");
  // R's row-major storage is L's column-major storage: the lower triangle of the first
  // n columns (above it gelqf keeps its reflectors).
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < n; ++i) r[j * n + i] = i >= j ? q[j * n + i] : T(0);
  fns<T>().orglq(&ln, &lm, &ln, q, &ln, tau.data(), work.data(), &lwork, &info);
  check_info(info, "orglq");
}

template <class T>
void lstsq(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t m = in[0].shape()[0], n = in[0].shape()[1], k = rhs_cols(in[1]);
  T* x = out[0].data<T>();
  if (n == 0 || k == 0) return;
  std::vector<T> a(static_cast<size_t>(m * n));
  copy_in<T>(in[0], a.data(), n, 1);  // column-major A^T [n, m]
  // gels answers 0 for an all-zero A; its first column is zero, so it is rank deficient.
  if (std::all_of(a.begin(), a.end(), [](const T& v) { return v == T(0); })) rank_deficient(1);
  const int64_t ldb = std::max<int64_t>(m, 1);
  std::vector<T> b(static_cast<size_t>(ldb * k));
  copy_in<T>(in[1], b.data(), 1, ldb, is_cplx<T>);  // column-major b [m, k] (c64: conj(b))
  const char trans = is_cplx<T> ? 'C' : 'T';
  const lint ln = lint(n), lm = lint(m), lk = lint(k), lb = lint(ldb);
  lint info = 0, query = -1;
  T wq{};
  fns<T>().gels(&trans, &ln, &lm, &lk, a.data(), &ln, b.data(), &lb, &wq, &query, &info, k1);
  check_info(info, "gels");
  lint lwork = query_size(wq);
  std::vector<T> work(static_cast<size_t>(lwork));
  fns<T>().gels(&trans, &ln, &lm, &lk, a.data(), &ln, b.data(), &lb, work.data(), &lwork, &info, k1);
  check_info(info, "gels");
  if (info > 0) rank_deficient(info);
  copy2d(n, k, b.data(), 1, ldb, x, k, 1, is_cplx<T>);
}

template <class T>
void svd(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  using R = real_t<T>;
  const int64_t m = in[0].shape()[0], n = in[0].shape()[1], k = std::min(m, n);
  if (k == 0) return;
  std::vector<T> a(static_cast<size_t>(m * n));
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
  transpose_square(v, n, false);
}

template <class T>
void slogdet(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t n = in[0].shape()[0];
  T* sign = out[0].data<T>();
  real_t<T>* logabs = out[1].data<real_t<T>>();
  std::vector<T> a(static_cast<size_t>(n * n));
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
    const double mag = std::abs(u);
    if constexpr (is_cplx<T>)
      sg *= std::complex<double>(u) / mag;
    else
      sg *= u < 0 ? -1.0 : 1.0;
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

void add_lapack_kernels(std::vector<LibraryKernel>& t) {
  auto add = [&](const char* op, RunFn f32, RunFn f64, RunFn c64_) {
    t.push_back({op, lapack_supports, [=](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
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
