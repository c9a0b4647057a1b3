// Dense linear algebra: textbook algorithms in double / complex<double>, written for
// clarity, rounded once on store.
//   lu_factor        right-looking LU with partial pivoting (LAPACK's pivot choice: the
//                    first row of largest |re| + |im|, i.e. |x| for reals)
//   lu_solve         row swaps, then forward and back substitution
//   cholesky         the Cholesky–Banachiewicz recurrence on the lower triangle
//   cholesky_solve   L y = b, then L^H x = y
//   triangular_solve forward or back substitution
//   qr               Householder reflections; the reference returns the R whose diagonal
//                    is real and >= 0 (other devices may differ by a unit phase per row)
//   lstsq            x = R^-1 Q^H b through the QR above
//   svd              one-sided (Hestenes) Jacobi; singular values descending
//   eigh             cyclic two-sided Jacobi; eigenvalues ascending
//   slogdet          through lu_factor; a singular matrix gives sign 0, log|det| = -inf
// Exact zero pivots and non-positive Cholesky pivots are InputErrors that name the
// 1-based position (as LAPACK's info does), with the same wording as every device.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "core/error.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

constexpr double kEps = std::numeric_limits<double>::epsilon();

inline double cj(double x) { return x; }
inline cd cj(cd x) { return std::conj(x); }
inline double re(double x) { return x; }
inline double re(cd x) { return x.real(); }
inline double abs2(double x) { return x * x; }
inline double abs2(cd x) { return std::norm(x); }
// The magnitude LAPACK's i?amax compares when choosing a pivot.
inline double pivot_abs(double x) { return std::fabs(x); }
inline double pivot_abs(cd x) { return std::fabs(x.real()) + std::fabs(x.imag()); }

// A dense row-major matrix in the compute domain.
template <class C>
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<C> a;
  Mat() = default;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), a(static_cast<size_t>(r * c), C(0)) {}
  C& operator()(int64_t i, int64_t j) { return a[size_t(i * cols + j)]; }
  const C& operator()(int64_t i, int64_t j) const { return a[size_t(i * cols + j)]; }
  static Mat identity(int64_t r, int64_t c) {
    Mat m(r, c);
    for (int64_t i = 0; i < std::min(r, c); ++i) m(i, i) = C(1);
    return m;
  }
};

// A rank-2 tensor, or a rank-1 right-hand side read as one column. Honors strides.
template <class C>
Mat<C> read(const Tensor& t) {
  const bool vec = t.rank() == 1;
  Mat<C> m(t.shape()[0], vec ? 1 : t.shape()[1]);
  const int64_t s0 = t.strides()[0], s1 = vec ? 0 : t.strides()[1];
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) m(i, j) = load<C>(t, i * s0 + j * s1);
  return m;
}

// Writes m into the contiguous output t (same element count, row-major).
template <class C>
void write(const Tensor& t, const Mat<C>& m) {
  if (t.numel() != int64_t(m.a.size())) throw InternalError("reference dense_la: output size mismatch");
  for (size_t i = 0; i < m.a.size(); ++i) store(t, int64_t(i), m.a[i]);
}

[[noreturn]] void singular(const std::string& op, const char* factor, int64_t k) {
  const std::string i = std::to_string(k + 1);
  throw InputError(op + ": " + factor + "(" + i + "," + i + ") is exactly zero: the matrix is singular");
}

// ---------------------------------------------------------------- LU

template <class C>
struct LU {
  Mat<C> lu;
  std::vector<int64_t> piv;  // 0-based: row k was swapped with row piv[k] at step k
  int64_t first_zero = -1;   // the first exactly zero pivot, or -1
};

template <class C>
LU<C> lu_decompose(Mat<C> a) {
  const int64_t n = a.rows;
  LU<C> r;
  r.piv.resize(size_t(n));
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    for (int64_t i = k + 1; i < n; ++i)
      if (pivot_abs(a(i, k)) > pivot_abs(a(p, k))) p = i;
    r.piv[size_t(k)] = p;
    if (a(p, k) == C(0)) {  // the whole column below is zero: nothing to eliminate
      if (r.first_zero < 0) r.first_zero = k;
      continue;
    }
    if (p != k)
      for (int64_t j = 0; j < n; ++j) std::swap(a(k, j), a(p, j));
    for (int64_t i = k + 1; i < n; ++i) {
      a(i, k) /= a(k, k);
      for (int64_t j = k + 1; j < n; ++j) a(i, j) -= a(i, k) * a(k, j);
    }
  }
  r.lu = std::move(a);
  return r;
}

template <class C>
void lu_factor(std::span<const Tensor> in, std::span<Tensor> out) {
  LU<C> f = lu_decompose(read<C>(in[0]));
  if (f.first_zero >= 0) singular("lu_factor", "U", f.first_zero);
  write(out[0], f.lu);
  for (size_t i = 0; i < f.piv.size(); ++i) store_int(out[1], int64_t(i), f.piv[i]);
}

// Solves op(T) X = B in place for triangular T (only its `lower` or upper triangle is
// read; with `unit` the diagonal is taken as 1 and not read); op(T) = T, or T^H when
// `conj_transpose` (then op(T) is upper when T is lower).
template <class C>
void tri_solve(const Mat<C>& t, Mat<C>& b, bool lower, bool unit, bool conj_transpose, const std::string& op,
               const char* name) {
  const int64_t n = t.rows, k = b.cols;
  if (!unit)
    for (int64_t i = 0; i < n; ++i)
      if (t(i, i) == C(0)) singular(op, name, i);
  auto at = [&](int64_t i, int64_t j) { return conj_transpose ? cj(t(j, i)) : t(i, j); };
  const bool forward = lower != conj_transpose;  // op(T) is lower triangular
  for (int64_t s = 0; s < n; ++s) {
    const int64_t i = forward ? s : n - 1 - s;
    for (int64_t c = 0; c < k; ++c) {
      C acc = b(i, c);
      if (forward)
        for (int64_t j = 0; j < i; ++j) acc -= at(i, j) * b(j, c);
      else
        for (int64_t j = i + 1; j < n; ++j) acc -= at(i, j) * b(j, c);
      b(i, c) = unit ? acc : acc / at(i, i);
    }
  }
}

template <class C>
void lu_solve(std::span<const Tensor> in, std::span<Tensor> out) {
  Mat<C> lu = read<C>(in[0]), b = read<C>(in[2]);
  const int64_t n = lu.rows;
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = load_int(in[1], k * in[1].strides()[0]);
    if (p < 0 || p >= n)
      throw InputError("lu_solve: pivots[" + std::to_string(k) + "] = " + std::to_string(p) + " is outside [0, " +
                       std::to_string(n) + ")");
    if (p != k)
      for (int64_t c = 0; c < b.cols; ++c) std::swap(b(k, c), b(p, c));
  }
  tri_solve(lu, b, true, true, false, "lu_solve", "L");
  tri_solve(lu, b, false, false, false, "lu_solve", "U");
  write(out[0], b);
}

// ---------------------------------------------------------------- Cholesky

template <class C>
void cholesky(std::span<const Tensor> in, std::span<Tensor> out) {
  const Mat<C> a = read<C>(in[0]);
  const int64_t n = a.rows;
  Mat<C> l(n, n);
  for (int64_t j = 0; j < n; ++j) {
    double d = re(a(j, j));  // the diagonal of a Hermitian matrix is real
    for (int64_t k = 0; k < j; ++k) d -= abs2(l(j, k));
    if (!(d > 0))
      throw InputError("cholesky: the leading minor of order " + std::to_string(j + 1) +
                       " is not positive definite");
    l(j, j) = C(std::sqrt(d));
    for (int64_t i = j + 1; i < n; ++i) {
      C acc = a(i, j);
      for (int64_t k = 0; k < j; ++k) acc -= l(i, k) * cj(l(j, k));
      l(i, j) = acc / l(j, j);
    }
  }
  write(out[0], l);
}

template <class C>
void cholesky_solve(std::span<const Tensor> in, std::span<Tensor> out) {
  Mat<C> l = read<C>(in[0]), b = read<C>(in[1]);
  tri_solve(l, b, true, false, false, "cholesky_solve", "L");  // L Y = B
  tri_solve(l, b, true, false, true, "cholesky_solve", "L");   // L^H X = Y
  write(out[0], b);
}

template <class C>
void triangular_solve(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  Mat<C> t = read<C>(in[0]), b = read<C>(in[1]);
  tri_solve(t, b, n.attrs.get_bool("lower"), n.attrs.get_bool("unit_diagonal"), false, "triangular_solve", "T");
  write(out[0], b);
}

// ---------------------------------------------------------------- QR

// Reduced Householder QR of a [m, n], m >= n: Q [m, n] with orthonormal columns and R
// [n, n] upper triangular with a real, non-negative diagonal.
template <class C>
std::pair<Mat<C>, Mat<C>> householder_qr(Mat<C> a) {
  const int64_t m = a.rows, n = a.cols;
  std::vector<std::vector<C>> vs(static_cast<size_t>(n));  // unit Householder vectors (empty: H = I)
  for (int64_t k = 0; k < n; ++k) {
    double xnorm2 = 0;
    for (int64_t i = k; i < m; ++i) xnorm2 += abs2(a(i, k));
    const double xnorm = std::sqrt(xnorm2);
    if (xnorm == 0) continue;
    // H x = alpha e1 with alpha = -phase(x0) |x|: no cancellation in v = x - alpha e1.
    const C x0 = a(k, k);
    const C phase = std::abs(x0) == 0 ? C(1) : x0 / C(std::abs(x0));
    const C alpha = -phase * C(xnorm);
    std::vector<C> v(static_cast<size_t>(m - k));
    for (int64_t i = k; i < m; ++i) v[size_t(i - k)] = a(i, k);
    v[0] -= alpha;
    double vnorm2 = 0;
    for (const C& e : v) vnorm2 += abs2(e);
    const double vnorm = std::sqrt(vnorm2);
    for (C& e : v) e /= C(vnorm);
    // a[k:, k:] -= 2 v (v^H a[k:, k:])
    for (int64_t j = k; j < n; ++j) {
      C dot(0);
      for (int64_t i = k; i < m; ++i) dot += cj(v[size_t(i - k)]) * a(i, j);
      for (int64_t i = k; i < m; ++i) a(i, j) -= C(2) * v[size_t(i - k)] * dot;
    }
    vs[size_t(k)] = std::move(v);
  }
  // Q = H_0 H_1 ... H_{n-1} applied to the first n columns of the identity.
  Mat<C> q = Mat<C>::identity(m, n);
  for (int64_t k = n; k-- > 0;) {
    const std::vector<C>& v = vs[size_t(k)];
    if (v.empty()) continue;
    for (int64_t j = 0; j < n; ++j) {
      C dot(0);
      for (int64_t i = k; i < m; ++i) dot += cj(v[size_t(i - k)]) * q(i, j);
      for (int64_t i = k; i < m; ++i) q(i, j) -= C(2) * v[size_t(i - k)] * dot;
    }
  }
  Mat<C> r(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j) r(i, j) = a(i, j);
  // Make diag(R) real and >= 0: R <- D^H R, Q <- Q D for the unit phases D of diag(R).
  for (int64_t i = 0; i < n; ++i) {
    const double mag = std::abs(r(i, i));
    if (mag == 0) continue;
    const C d = r(i, i) / C(mag);
    for (int64_t j = i; j < n; ++j) r(i, j) *= cj(d);
    r(i, i) = C(mag);
    for (int64_t row = 0; row < m; ++row) q(row, i) *= d;
  }
  return {std::move(q), std::move(r)};
}

template <class C>
void qr(std::span<const Tensor> in, std::span<Tensor> out) {
  auto [q, r] = householder_qr(read<C>(in[0]));
  write(out[0], q);
  write(out[1], r);
}

template <class C>
void lstsq(std::span<const Tensor> in, std::span<Tensor> out) {
  auto [q, r] = householder_qr(read<C>(in[0]));
  const Mat<C> b = read<C>(in[1]);
  for (int64_t i = 0; i < r.rows; ++i)
    if (r(i, i) == C(0))
      throw InputError("lstsq: R(" + std::to_string(i + 1) + "," + std::to_string(i + 1) +
                       ") of A's QR factorization is exactly zero: A does not have full column rank");
  Mat<C> x(q.cols, b.cols);  // Q^H b
  for (int64_t i = 0; i < q.cols; ++i)
    for (int64_t c = 0; c < b.cols; ++c) {
      C acc(0);
      for (int64_t k = 0; k < q.rows; ++k) acc += cj(q(k, i)) * b(k, c);
      x(i, c) = acc;
    }
  tri_solve(r, x, false, false, false, "lstsq", "R");
  write(out[0], x);
}

// ---------------------------------------------------------------- SVD

template <class C>
Mat<C> conj_transpose(const Mat<C>& x) {
  Mat<C> y(x.cols, x.rows);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) y(j, i) = cj(x(i, j));
  return y;
}

// One-sided Jacobi on the columns of a [m, n], m >= n: a V = U S. Returns U [m, n],
// S [n] descending and V [n, n].
template <class C>
void jacobi_svd_tall(Mat<C> u, Mat<C>& u_out, std::vector<double>& s, Mat<C>& v_out) {
  const int64_t m = u.rows, n = u.cols;
  Mat<C> v = Mat<C>::identity(n, n);
  bool rotated = true;
  for (int sweep = 0; rotated; ++sweep) {
    if (sweep == 100) throw InternalError("reference svd: Jacobi did not converge in 100 sweeps");
    rotated = false;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double alpha = 0, beta = 0;
        C gamma(0);  // u_p^H u_q
        for (int64_t i = 0; i < m; ++i) {
          alpha += abs2(u(i, p));
          beta += abs2(u(i, q));
          gamma += cj(u(i, p)) * u(i, q);
        }
        const double g = std::abs(gamma);
        if (g == 0 || g <= kEps * std::sqrt(alpha * beta)) continue;
        rotated = true;
        // Rotate [u_p, e u_q] (e = conj(phase of gamma) makes their product real) by the
        // real Jacobi rotation that diagonalizes [[alpha, g], [g, beta]].
        const C e = cj(gamma) / C(g);
        const double zeta = (beta - alpha) / (2 * g);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), sn = c * t;
        auto rotate = [&](Mat<C>& x) {
          for (int64_t i = 0; i < x.rows; ++i) {
            const C xp = x(i, p), xq = e * x(i, q);
            x(i, p) = c * xp - sn * xq;
            x(i, q) = sn * xp + c * xq;
          }
        };
        rotate(u);
        rotate(v);
      }
  }
  std::vector<double> norms(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    double nn = 0;
    for (int64_t i = 0; i < m; ++i) nn += abs2(u(i, j));
    norms[size_t(j)] = std::sqrt(nn);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return norms[size_t(x)] > norms[size_t(y)]; });
  u_out = Mat<C>(m, n);
  v_out = Mat<C>(n, n);
  s.assign(static_cast<size_t>(n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t o = order[size_t(j)];
    const double sj = norms[size_t(o)];
    s[size_t(j)] = sj;
    for (int64_t i = 0; i < n; ++i) v_out(i, j) = v(i, o);
    for (int64_t i = 0; i < m; ++i) u_out(i, j) = sj > 0 ? u(i, o) / C(sj) : C(0);
  }
  // Columns for zero singular values: complete U's columns to an orthonormal set
  // (Gram-Schmidt of unit vectors against the columns already there).
  for (int64_t j = 0; j < n; ++j) {
    if (s[size_t(j)] > 0) continue;
    for (int64_t e = 0; e < m; ++e) {
      std::vector<C> w(static_cast<size_t>(m), C(0));
      w[size_t(e)] = C(1);
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t k = 0; k < n; ++k) {
          if (k == j || (k > j && s[size_t(k)] == 0)) continue;
          C dot(0);
          for (int64_t i = 0; i < m; ++i) dot += cj(u_out(i, k)) * w[size_t(i)];
          for (int64_t i = 0; i < m; ++i) w[size_t(i)] -= dot * u_out(i, k);
        }
      double nn = 0;
      for (const C& x : w) nn += abs2(x);
      if (nn > 0.25) {
        for (int64_t i = 0; i < m; ++i) u_out(i, j) = w[size_t(i)] / C(std::sqrt(nn));
        break;
      }
    }
  }
}

template <class C>
void svd(std::span<const Tensor> in, std::span<Tensor> out) {
  const Mat<C> a = read<C>(in[0]);
  Mat<C> u, v;
  std::vector<double> s;
  if (a.rows >= a.cols)
    jacobi_svd_tall(a, u, s, v);  // A = U S V^H
  else
    jacobi_svd_tall(conj_transpose(a), v, s, u);  // A^H = V S U^H
  write(out[0], u);
  for (size_t i = 0; i < s.size(); ++i) store_real(out[1], int64_t(i), s[i]);
  write(out[2], conj_transpose(v));
}

// ---------------------------------------------------------------- eigh

template <class C>
void eigh(std::span<const Tensor> in, std::span<Tensor> out) {
  const Mat<C> lower = read<C>(in[0]);
  const int64_t n = lower.rows;
  Mat<C> a(n, n);  // the Hermitian matrix the lower triangle defines
  for (int64_t i = 0; i < n; ++i) {
    a(i, i) = C(re(lower(i, i)));
    for (int64_t j = 0; j < i; ++j) {
      a(i, j) = lower(i, j);
      a(j, i) = cj(lower(i, j));
    }
  }
  double fro2 = 0;
  for (const C& x : a.a) fro2 += abs2(x);
  const double floor = kEps * kEps * std::sqrt(fro2);  // below this an entry moves no eigenvalue
  Mat<C> v = Mat<C>::identity(n, n);
  bool rotated = true;
  for (int sweep = 0; rotated; ++sweep) {
    if (sweep == 100) throw InternalError("reference eigh: Jacobi did not converge in 100 sweeps");
    rotated = false;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        const double g = std::abs(a(p, q));
        const double app = re(a(p, p)), aqq = re(a(q, q));
        if (g <= floor || g <= kEps * 1e-2 * std::sqrt(std::fabs(app * aqq))) continue;
        rotated = true;
        // G = diag(1, e) J with e = conj(phase of a_pq) and J the real rotation that
        // diagonalizes [[app, g], [g, aqq]]; A <- G^H A G, V <- V G.
        const C e = cj(a(p, q)) / C(g);
        const double tau = (aqq - app) / (2 * g);
        const double t = (tau >= 0 ? 1.0 : -1.0) / (std::fabs(tau) + std::sqrt(1 + tau * tau));
        const double c = 1 / std::sqrt(1 + t * t), sn = c * t;
        for (int64_t k = 0; k < n; ++k) {  // columns: A G
          const C xp = a(k, p), xq = e * a(k, q);
          a(k, p) = c * xp - sn * xq;
          a(k, q) = sn * xp + c * xq;
        }
        for (int64_t k = 0; k < n; ++k) {  // rows: G^H (A G)
          const C xp = a(p, k), xq = cj(e) * a(q, k);
          a(p, k) = c * xp - sn * xq;
          a(q, k) = sn * xp + c * xq;
        }
        a(p, q) = a(q, p) = C(0);
        a(p, p) = C(re(a(p, p)));
        a(q, q) = C(re(a(q, q)));
        for (int64_t k = 0; k < n; ++k) {
          const C xp = v(k, p), xq = e * v(k, q);
          v(k, p) = c * xp - sn * xq;
          v(k, q) = sn * xp + c * xq;
        }
      }
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return re(a(x, x)) < re(a(y, y)); });
  Mat<C> vs(n, n);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t o = order[size_t(j)];
    store_real(out[0], j, re(a(o, o)));
    for (int64_t i = 0; i < n; ++i) vs(i, j) = v(i, o);
  }
  write(out[1], vs);
}

// ---------------------------------------------------------------- slogdet

template <class C>
void slogdet(std::span<const Tensor> in, std::span<Tensor> out) {
  LU<C> f = lu_decompose(read<C>(in[0]));
  if (f.first_zero >= 0) {
    store(out[0], 0, C(0));
    store_real(out[1], 0, -std::numeric_limits<double>::infinity());
    return;
  }
  C sign(1);
  double logabs = 0;
  for (int64_t k = 0; k < f.lu.rows; ++k) {
    const C u = f.lu(k, k);
    const double mag = std::abs(u);
    sign *= u / C(mag);
    if (f.piv[size_t(k)] != k) sign = -sign;
    logabs += std::log(mag);
  }
  store(out[0], 0, sign);
  store_real(out[1], 0, logabs);
}

// ---------------------------------------------------------------- table

// Runs the double or complex<double> instance of a kernel by the first input's domain.
template <class F>
Kernel dispatch(F f) {
  return [f](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    if (domain_of(in[0].dtype()) == Domain::Complex)
      f(cd{}, n, in, out);
    else
      f(double{}, n, in, out);
  };
}

}  // namespace

void add_dense_la_kernels(KernelTable& t) {
  const DTypeSet lapack = bit(DType::F32) | bit(DType::F64) | bit(DType::C64);
  auto entry = [&](const char* op, auto fn) { t.add({op, lapack, 0, dispatch(fn), {}}); };
  using In = std::span<const Tensor>;
  using Out = std::span<Tensor>;
  entry("lu_factor", [](auto z, const ir::Node&, In in, Out out) { lu_factor<decltype(z)>(in, out); });
  entry("lu_solve", [](auto z, const ir::Node&, In in, Out out) { lu_solve<decltype(z)>(in, out); });
  entry("cholesky", [](auto z, const ir::Node&, In in, Out out) { cholesky<decltype(z)>(in, out); });
  entry("cholesky_solve", [](auto z, const ir::Node&, In in, Out out) { cholesky_solve<decltype(z)>(in, out); });
  entry("triangular_solve",
        [](auto z, const ir::Node& n, In in, Out out) { triangular_solve<decltype(z)>(n, in, out); });
  entry("qr", [](auto z, const ir::Node&, In in, Out out) { qr<decltype(z)>(in, out); });
  entry("lstsq", [](auto z, const ir::Node&, In in, Out out) { lstsq<decltype(z)>(in, out); });
  entry("svd", [](auto z, const ir::Node&, In in, Out out) { svd<decltype(z)>(in, out); });
  entry("eigh", [](auto z, const ir::Node&, In in, Out out) { eigh<decltype(z)>(in, out); });
  entry("slogdet", [](auto z, const ir::Node&, In in, Out out) { slogdet<decltype(z)>(in, out); });
}

}  // namespace rlx::reference
