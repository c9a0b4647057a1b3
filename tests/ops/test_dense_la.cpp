// The op suite's rows for the dense linear-algebra library primitives (lu_factor, …,
// slogdet). Every op x dtype x device runs on fresh random, well-conditioned inputs
// (contiguous and strided) and is checked two ways:
//   - against the reference device where the result is unique (solves, Cholesky, LU with
//     unambiguous pivots, singular values, eigenvalues, slogdet), and
//   - by invariants that hold for any correct answer (P A = L U, Q R = A with Q^H Q = I,
//     U diag(S) Vh = A, V diag(w) V^H = A, residuals of solves), which also checks the
//     reference itself;
// plus small hand-computed cases and the error cases (singular, not positive definite,
// rank deficient) on every device.
//
// Tolerances, per dtype, on normalized errors:
//   compare    max|got - want| / max|want| against the reference:   f64 1e-12, f32/c64 1e-4
//   invariant  residuals relative to the problem scale (n max|A| max|X| for A X = B,
//              n max|A| for factorizations, n for orthogonality):   f64 1e-13, f32/c64 1e-6
// The inputs keep condition numbers below ~20 (diagonal shift n, or a random row
// permutation of such a matrix so that partial pivoting must swap), so the comparisons
// are not at the mercy of conditioning. The worst error/tolerance ratio per dtype is
// printed at the end of the run.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "harness.hpp"
#include "ir/op_registry.hpp"

namespace rlx::test {
namespace {

namespace utf = boost::unit_test;

// ---------------------------------------------------------------- tolerances

double compare_tol(DType t) { return t == DType::F64 ? 1e-12 : 1e-4; }
double invariant_tol(DType t) { return t == DType::F64 ? 1e-13 : 1e-6; }

// Worst error / tolerance seen per dtype (printed at the end: how much margin is left).
std::map<std::string, double>& worst() {
  static std::map<std::string, double> w;
  return w;
}
struct WorstReport {
  ~WorstReport() {
    for (auto& [k, v] : worst())
      std::cout << "test_dense_la: worst error/tolerance " << k << ": " << v << std::endl;
  }
};
BOOST_TEST_GLOBAL_FIXTURE(WorstReport);
void note(DType t, const std::string& kind, double ratio) {
  double& w = worst()[std::string(dtype_name(t)) + " " + kind];
  w = std::max(w, ratio);
}

// ---------------------------------------------------------------- host matrices

struct Mx {
  int64_t r = 0, c = 0;
  std::vector<cd> a;
  Mx() = default;
  Mx(int64_t rows, int64_t cols) : r(rows), c(cols), a(static_cast<size_t>(rows * cols)) {}
  cd& operator()(int64_t i, int64_t j) { return a[size_t(i * c + j)]; }
  cd operator()(int64_t i, int64_t j) const { return a[size_t(i * c + j)]; }
};

// A contiguous tensor as a matrix ([n] is one column, [] is 1 x 1).
Mx mx(const Tensor& t) {
  Mx m(t.rank() >= 1 ? t.shape()[0] : 1, t.rank() == 2 ? t.shape()[1] : 1);
  m.a = complexes(t);
  return m;
}

Mx mul(const Mx& x, const Mx& y) {
  Mx z(x.r, y.c);
  for (int64_t i = 0; i < x.r; ++i)
    for (int64_t k = 0; k < x.c; ++k) {
      const cd v = x(i, k);
      for (int64_t j = 0; j < y.c; ++j) z(i, j) += v * y(k, j);
    }
  return z;
}

Mx adj(const Mx& x) {
  Mx y(x.c, x.r);
  for (int64_t i = 0; i < x.r; ++i)
    for (int64_t j = 0; j < x.c; ++j) y(j, i) = std::conj(x(i, j));
  return y;
}

Mx eye(int64_t n) {
  Mx m(n, n);
  for (int64_t i = 0; i < n; ++i) m(i, i) = 1;
  return m;
}

double maxabs(const Mx& m) {
  double s = 0;
  for (const cd& v : m.a) s = std::max(s, std::abs(v));
  return s;
}

double maxdiff(const Mx& x, const Mx& y) {
  double s = 0;
  for (size_t i = 0; i < x.a.size(); ++i) s = std::max(s, std::abs(x.a[i] - y.a[i]));
  return s;
}

// The Hermitian matrix defined by the lower triangle of a (diagonal: real part).
Mx hermitian_from_lower(const Mx& a) {
  Mx h(a.r, a.c);
  for (int64_t i = 0; i < a.r; ++i) {
    h(i, i) = a(i, i).real();
    for (int64_t j = 0; j < i; ++j) {
      h(i, j) = a(i, j);
      h(j, i) = std::conj(a(i, j));
    }
  }
  return h;
}

// The triangle of t that triangular_solve reads, as a full matrix.
Mx triangle(const Mx& t, bool lower, bool unit) {
  Mx m(t.r, t.c);
  for (int64_t i = 0; i < t.r; ++i)
    for (int64_t j = 0; j < t.c; ++j)
      if (i == j)
        m(i, j) = unit ? cd(1) : t(i, j);
      else if ((i > j) == lower)
        m(i, j) = t(i, j);
  return m;
}

// ---------------------------------------------------------------- inputs

// Uniform in [-1, 1] (each part for c64).
std::vector<cd> uniform(std::mt19937_64& rng, DType t, int64_t count) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<cd> v(static_cast<size_t>(count));
  for (cd& x : v) {
    const double re = u(rng);
    x = t == DType::C64 ? cd(re, u(rng)) : cd(re);
  }
  return v;
}

Mx random_mx(std::mt19937_64& rng, DType t, int64_t r, int64_t c) {
  Mx m(r, c);
  m.a = uniform(rng, t, r * c);
  return m;
}

// random + shift on the leading diagonal.
Mx shifted(std::mt19937_64& rng, DType t, int64_t r, int64_t c, double shift) {
  Mx m = random_mx(rng, t, r, c);
  for (int64_t i = 0; i < std::min(r, c); ++i) m(i, i) += shift;
  return m;
}

// A well-conditioned matrix whose rows are randomly permuted: partial pivoting must
// undo the permutation, and its choice is never close to a tie.
Mx permuted(std::mt19937_64& rng, DType t, int64_t n) {
  Mx a = shifted(rng, t, n, n, double(n));
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  Mx b(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) b(i, j) = a(p[size_t(i)], j);
  return b;
}

// B B^H + n I (Hermitian positive definite); with `garbage_upper` the strictly upper
// triangle holds unrelated values that the op must not read.
Mx spd(std::mt19937_64& rng, DType t, int64_t n, bool garbage_upper) {
  Mx b = random_mx(rng, t, n, n);
  Mx a = mul(b, adj(b));
  for (int64_t i = 0; i < n; ++i) a(i, i) = a(i, i).real() + double(n);
  a = hermitian_from_lower(a);
  if (garbage_upper)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) a(i, j) = 1e3 * uniform(rng, t, 1)[0];
  return a;
}

// (B + B^H) / 2: Hermitian with eigenvalues of both signs.
Mx hermitian(std::mt19937_64& rng, DType t, int64_t n, bool garbage_upper) {
  Mx b = random_mx(rng, t, n, n);
  Mx a(n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) a(i, j) = 0.5 * (b(i, j) + std::conj(b(j, i)));
  a = hermitian_from_lower(a);
  if (garbage_upper)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) a(i, j) = 1e3 * uniform(rng, t, 1)[0];
  return a;
}

// A triangular system matrix: the named triangle random (scaled by 1/n when the diagonal
// is unit, to stay well-conditioned), diagonal n + random (or garbage when unit), the
// other triangle garbage.
Mx triangular(std::mt19937_64& rng, DType t, int64_t n, bool lower, bool unit) {
  Mx m = random_mx(rng, t, n, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (i == j)
        m(i, j) = unit ? 1e3 * m(i, j) : m(i, j) + double(n);
      else if ((i > j) == lower)
        m(i, j) = unit ? m(i, j) / double(n) : m(i, j);
      else
        m(i, j) = 1e3 * m(i, j);
    }
  return m;
}

Tensor tensor_of(DType t, const Mx& m, bool vector = false) {
  return make_tensor(t, vector ? Shape{m.r} : Shape{m.r, m.c}, m.a);
}

// ---------------------------------------------------------------- checks

// "" or what is wrong; `got` and `want` are one device's and the reference's results,
// `in` the host inputs.
using Check = std::function<std::string(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                                        const std::vector<Tensor>& in, DType t)>;
using Make = std::function<std::vector<Var>(Build&, DType)>;

struct Variant {
  std::string label;
  Make make;
  Check check;
};
struct DenseOp {
  std::string op;
  std::vector<Variant> variants;
};

// Appends "what: detail" to msg when err > tol; records the margin.
void expect_le(std::string& msg, DType t, const std::string& kind, const std::string& what, double err, double tol) {
  note(t, kind, err / tol);
  if (!(err <= tol)) {
    std::ostringstream o;
    o << what << " = " << err << " > " << tol << "; ";
    msg += o.str();
  }
}

// Result r against the reference's, normalized by max|want|.
void expect_same(std::string& msg, const std::vector<Tensor>& got, const std::vector<Tensor>& want, size_t r,
                 DType t, const std::string& what) {
  std::string m = mismatch(got[r], want[r], compare_tol(t));
  Mx g = mx(got[r]), w = mx(want[r]);
  if (got[r].type() == want[r].type()) note(t, "compare", maxdiff(g, w) / std::max(maxabs(w), 1e-300) / compare_tol(t));
  if (!m.empty()) msg += what + " differs from the reference: " + m + "; ";
}

// Result r against literal values.
void expect_values(std::string& msg, const Tensor& got, const std::vector<cd>& want, DType t, const std::string& what) {
  std::string m = mismatch(got, want, compare_tol(t));
  if (!m.empty()) msg += what + ": " + m + "; ";
}

// ||A X - B|| / (n max|A| max|X|).
void expect_residual(std::string& msg, const Mx& a, const Mx& x, const Mx& b, DType t, const std::string& what) {
  const double scale = double(a.c) * maxabs(a) * maxabs(x);
  expect_le(msg, t, "invariant", what + " residual", maxdiff(mul(a, x), b) / std::max(scale, 1e-300),
            invariant_tol(t));
}

// ||Q^H Q - I|| / rows.
void expect_orthonormal_columns(std::string& msg, const Mx& q, DType t, const std::string& what) {
  expect_le(msg, t, "invariant", what + "^H " + what + " - I", maxdiff(mul(adj(q), q), eye(q.c)) / double(std::max<int64_t>(q.r, 1)),
            invariant_tol(t));
}

std::string lu_check(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const Mx& a, DType t,
                     bool pivots_must_match) {
  std::string msg;
  const Mx lu = mx(got[0]);
  const int64_t n = a.r;
  std::vector<int64_t> piv(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) piv[size_t(i)] = int_at(got[1], i), ref[size_t(i)] = int_at(want[1], i);
  Mx pa = a, l = eye(n), u(n, n);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t p = piv[size_t(k)];
    if (p < k || p >= n) return "pivots[" + std::to_string(k) + "] = " + std::to_string(p) + " is outside [k, n)";
    for (int64_t j = 0; j < n; ++j) std::swap(pa(k, j), pa(p, j));
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) (i > j ? l : u)(i, j) = lu(i, j);
  // Partial pivoting bounds the multipliers: |l| <= 1, or <= sqrt(2) for c64, whose
  // pivots are chosen by |re| + |im| as LAPACK's icamax does.
  const double bound = (t == DType::C64 ? std::sqrt(2.0) : 1.0) * (1 + 1e-6);
  double worst_l = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) worst_l = std::max(worst_l, std::abs(l(i, j)));
  if (worst_l > bound) msg += "a multiplier exceeds the bound (" + std::to_string(worst_l) + "): not partial pivoting; ";
  expect_le(msg, t, "invariant", "|P A - L U| / (n max|A|)", maxdiff(pa, mul(l, u)) / (double(n) * maxabs(a)),
            invariant_tol(t));
  if (piv == ref)
    expect_same(msg, got, want, 0, t, "lu");
  else if (pivots_must_match)
    msg += "pivots differ from the reference; ";
  return msg;
}

// ---------------------------------------------------------------- the rows

// Builds fixed inputs from host matrices and one node of `op` over them.
std::vector<Var> node(Build& b, const std::string& op, const std::vector<Tensor>& inputs, ir::Attrs attrs = {}) {
  std::vector<Var> vs;
  for (const Tensor& t : inputs) vs.push_back(b.fixed(t));
  return op_multi(op, vs, std::move(attrs));
}

Variant lu_factor_case(const std::string& label, int64_t n, bool permute) {
  return {label,
          [n, permute](Build& b, DType t) {
            Mx a = permute ? permuted(b.rng, t, n) : random_mx(b.rng, t, n, n);
            return node(b, "lu_factor", {tensor_of(t, a)});
          },
          // Random matrices can have near-ties between pivot candidates, which single
          // precision may break either way; in f64 a tie closer than rounding is too rare.
          [permute](auto& got, auto& want, auto& in, DType t) {
            return lu_check(got, want, mx(in[0]), t, permute || t == DType::F64);
          }};
}

// lu_factor then lu_solve (and the same for Cholesky): the solve's result against the
// reference and the residual of the original system.
Variant factor_solve_case(const std::string& label, bool cholesky, int64_t n, int64_t k) {
  return {label,
          [=](Build& b, DType t) {
            Mx a = cholesky ? spd(b.rng, t, n, false) : permuted(b.rng, t, n);
            Var av = b.fixed(tensor_of(t, a));
            Var bv = b.fixed(tensor_of(t, random_mx(b.rng, t, n, std::max<int64_t>(k, 1)), k == 0));
            if (cholesky) return std::vector<Var>{op("cholesky_solve", {op("cholesky", {av}), bv})};
            std::vector<Var> f = op_multi("lu_factor", {av});
            return std::vector<Var>{op("lu_solve", {f[0], f[1], bv})};
          },
          [](auto& got, auto& want, auto& in, DType t) {
            std::string msg;
            expect_same(msg, got, want, 0, t, "X");
            expect_residual(msg, mx(in[0]), mx(got[0]), mx(in[1]), t, "A X - B");
            return msg;
          }};
}

Variant cholesky_case(const std::string& label, int64_t n, bool garbage_upper) {
  return {label, [=](Build& b, DType t) { return node(b, "cholesky", {tensor_of(t, spd(b.rng, t, n, garbage_upper))}); },
          [](auto& got, auto& want, auto& in, DType t) {
            std::string msg;
            expect_same(msg, got, want, 0, t, "L");
            const Mx l = mx(got[0]), a = hermitian_from_lower(mx(in[0]));
            for (int64_t i = 0; i < l.r; ++i) {
              if (!(l(i, i).real() > 0) || l(i, i).imag() != 0) msg += "L's diagonal is not real positive; ";
              for (int64_t j = i + 1; j < l.c; ++j)
                if (l(i, j) != cd(0)) return msg + "L's upper triangle is not zero";
            }
            expect_le(msg, t, "invariant", "|L L^H - A| / (n max|A|)",
                      maxdiff(mul(l, adj(l)), a) / (double(a.r) * maxabs(a)), invariant_tol(t));
            return msg;
          }};
}

Variant triangular_case(const std::string& label, int64_t n, int64_t k, bool lower, bool unit) {
  return {label,
          [=](Build& b, DType t) {
            Mx tm = triangular(b.rng, t, n, lower, unit);
            Mx bm = random_mx(b.rng, t, n, std::max<int64_t>(k, 1));
            return node(b, "triangular_solve", {tensor_of(t, tm), tensor_of(t, bm, k == 0)},
                        {{"lower", lower}, {"unit_diagonal", unit}});
          },
          [=](auto& got, auto& want, auto& in, DType t) {
            std::string msg;
            expect_same(msg, got, want, 0, t, "X");
            expect_residual(msg, triangle(mx(in[0]), lower, unit), mx(got[0]), mx(in[1]), t, "T X - B");
            return msg;
          }};
}

Variant qr_case(const std::string& label, int64_t m, int64_t n) {
  return {label,
          [=](Build& b, DType t) {
            Mx a = m == n ? shifted(b.rng, t, m, n, double(n)) : random_mx(b.rng, t, m, n);
            return node(b, "qr", {tensor_of(t, a)});
          },
          [](auto& got, auto& want, auto& in, DType t) {
            std::string msg;
            const Mx a = mx(in[0]), q = mx(got[0]), r = mx(got[1]);
            for (int64_t i = 0; i < r.r; ++i)
              for (int64_t j = 0; j < i; ++j)
                if (r(i, j) != cd(0)) return std::string("R is not upper triangular");
            expect_le(msg, t, "invariant", "|Q R - A| / (n max|A|)", maxdiff(mul(q, r), a) / (double(a.c) * maxabs(a)),
                      invariant_tol(t));
            expect_orthonormal_columns(msg, q, t, "Q");
            // Unique up to a unit phase per column of Q (row of R): align with the
            // reference (whose diag(R) is real >= 0), then compare.
            Mx qa = q, ra = r;
            for (int64_t i = 0; i < r.r; ++i) {
              const cd d = std::abs(r(i, i)) > 0 ? r(i, i) / std::abs(r(i, i)) : cd(1);
              for (int64_t j = 0; j < r.c; ++j) ra(i, j) *= std::conj(d);
              for (int64_t row = 0; row < q.r; ++row) qa(row, i) *= d;
            }
            std::vector<Tensor> aligned = {tensor_of(t, qa), tensor_of(t, ra)};
            expect_same(msg, aligned, want, 0, t, "Q (phase-aligned)");
            expect_same(msg, aligned, want, 1, t, "R (phase-aligned)");
            return msg;
          }};
}

Variant lstsq_case(const std::string& label, int64_t m, int64_t n, int64_t k) {
  return {label,
          [=](Build& b, DType t) {
            Mx a = shifted(b.rng, t, m, n, std::sqrt(double(m)));
            Mx bm = random_mx(b.rng, t, m, std::max<int64_t>(k, 1));
            return node(b, "lstsq", {tensor_of(t, a), tensor_of(t, bm, k == 0)});
          },
          [](auto& got, auto& want, auto& in, DType t) {
            std::string msg;
            expect_same(msg, got, want, 0, t, "x");
            // The normal equations: A^H (A x - b) = 0.
            const Mx a = mx(in[0]), x = mx(got[0]), bm = mx(in[1]);
            Mx res = mul(a, x);
            for (size_t i = 0; i < res.a.size(); ++i) res.a[i] -= bm.a[i];
            const double scale = double(a.r) * maxabs(a) * (double(a.c) * maxabs(a) * maxabs(x) + maxabs(bm));
            expect_le(msg, t, "invariant", "|A^H (A x - b)| / scale", maxabs(mul(adj(a), res)) / scale,
                      invariant_tol(t));
            return msg;
          }};
}

std::string svd_invariants(const std::vector<Tensor>& got, const Mx& a, DType t) {
  std::string msg;
  const Mx u = mx(got[0]), vh = mx(got[2]);
  const std::vector<double> s = reals(got[1]);
  for (size_t i = 0; i < s.size(); ++i) {
    if (!(s[i] >= 0)) msg += "a singular value is negative; ";
    if (i > 0 && s[i] > s[i - 1]) msg += "singular values are not descending; ";
  }
  Mx us = u;
  for (int64_t i = 0; i < us.r; ++i)
    for (int64_t j = 0; j < us.c; ++j) us(i, j) *= s[size_t(j)];
  const int64_t k = std::min(a.r, a.c);
  expect_le(msg, t, "invariant", "|U S Vh - A| / (k max|A|)", maxdiff(mul(us, vh), a) / (double(k) * maxabs(a)),
            invariant_tol(t));
  expect_orthonormal_columns(msg, u, t, "U");
  expect_orthonormal_columns(msg, adj(vh), t, "Vh^H");
  return msg;
}

Variant svd_case(const std::string& label, int64_t m, int64_t n) {
  return {label, [=](Build& b, DType t) { return node(b, "svd", {tensor_of(t, random_mx(b.rng, t, m, n))}); },
          [](auto& got, auto& want, auto& in, DType t) {
            std::string msg = svd_invariants(got, mx(in[0]), t);
            expect_same(msg, got, want, 1, t, "S");
            return msg;
          }};
}

std::string eigh_invariants(const std::vector<Tensor>& got, const Mx& a, DType t) {
  std::string msg;
  const std::vector<double> w = reals(got[0]);
  const Mx v = mx(got[1]);
  for (size_t i = 1; i < w.size(); ++i)
    if (w[i] < w[i - 1]) msg += "eigenvalues are not ascending; ";
  Mx vw = v;
  for (int64_t i = 0; i < vw.r; ++i)
    for (int64_t j = 0; j < vw.c; ++j) vw(i, j) *= w[size_t(j)];
  expect_le(msg, t, "invariant", "|V diag(w) V^H - A| / (n max|A|)",
            maxdiff(mul(vw, adj(v)), a) / (double(a.r) * maxabs(a)), invariant_tol(t));
  expect_orthonormal_columns(msg, v, t, "V");
  return msg;
}

Variant eigh_case(const std::string& label, int64_t n, bool garbage_upper) {
  return {label,
          [=](Build& b, DType t) { return node(b, "eigh", {tensor_of(t, hermitian(b.rng, t, n, garbage_upper))}); },
          [](auto& got, auto& want, auto& in, DType t) {
            std::string msg = eigh_invariants(got, hermitian_from_lower(mx(in[0])), t);
            expect_same(msg, got, want, 0, t, "w");
            return msg;
          }};
}

Variant slogdet_case(const std::string& label, int64_t n) {
  return {label, [=](Build& b, DType t) { return node(b, "slogdet", {tensor_of(t, permuted(b.rng, t, n))}); },
          [](auto& got, auto& want, auto&, DType t) {
            std::string msg;
            expect_same(msg, got, want, 0, t, "sign");
            expect_same(msg, got, want, 1, t, "logabsdet");
            if (std::fabs(std::abs(value_at(got[0], 0)) - 1) > 1e-6) msg += "|sign| != 1; ";
            return msg;
          }};
}

// ---- hand-computed cases (real values, so every dtype can hold them)

Tensor literal(DType t, Shape s, std::vector<cd> v) { return make_tensor(t, std::move(s), v); }

Variant hand(const std::string& label, const std::string& op_name, std::function<std::vector<Tensor>(DType)> inputs,
             std::function<std::string(const std::vector<Tensor>&, DType)> check, ir::Attrs attrs = {}) {
  return {"hand: " + label,
          [=](Build& b, DType t) { return node(b, op_name, inputs(t), attrs); },
          [=](auto& got, auto&, auto&, DType t) { return check(got, t); }};
}

const std::vector<DenseOp>& dense_cases() {
  static const std::vector<DenseOp> cases = [] {
    std::vector<DenseOp> c;
    using V = std::vector<cd>;
    const double s2 = std::sqrt(2.0);

    c.push_back({"lu_factor",
                 {lu_factor_case("[3,3] permuted", 3, true), lu_factor_case("[67,67] permuted", 67, true),
                  lu_factor_case("[160,160] permuted", 160, true), lu_factor_case("[67,67] random", 67, false),
                  hand("[[1,2],[3,4]]", "lu_factor", [](DType t) { return std::vector{literal(t, {2, 2}, {1, 2, 3, 4})}; },
                       [](auto& got, DType t) {
                         std::string msg;
                         expect_values(msg, got[0], V{3, 4, 1.0 / 3, 2.0 / 3}, t, "lu");
                         if (int_at(got[1], 0) != 1 || int_at(got[1], 1) != 1) msg += "pivots are not [1, 1]; ";
                         return msg;
                       })}});
    c.push_back({"lu_solve",
                 {factor_solve_case("[3,3] b[3]", false, 3, 0), factor_solve_case("[67,67] B[67,5]", false, 67, 5),
                  factor_solve_case("[160,160] B[160,3]", false, 160, 3),
                  // A given factorization with pivots, not from lu_factor: the solve alone.
                  {"given lu [5,5], pivots [2,2,4,3,4], B[5,2]",
                   [](Build& b, DType t) {
                     Mx lu = shifted(b.rng, t, 5, 5, 5.0);
                     Tensor piv = literal(DType::I32, {5}, {2, 2, 4, 3, 4});
                     return node(b, "lu_solve", {tensor_of(t, lu), piv, tensor_of(t, random_mx(b.rng, t, 5, 2))});
                   },
                   [](auto& got, auto& want, auto& in, DType t) {
                     std::string msg;
                     expect_same(msg, got, want, 0, t, "X");
                     // A = P^T L U with P the swap sequence: check L U X = P B.
                     const Mx lu = mx(in[0]);
                     Mx pb = mx(in[2]);
                     for (int64_t k = 0; k < 5; ++k)
                       for (int64_t j = 0; j < pb.c; ++j) std::swap(pb(k, j), pb(int_at(in[1], k), j));
                     Mx l = triangle(lu, true, true), u = triangle(lu, false, false);
                     expect_residual(msg, mul(l, u), mx(got[0]), pb, t, "L U X - P B");
                     return msg;
                   }},
                  hand("A=[[1,2],[3,4]] b=[5,11]", "lu_solve",
                       [](DType t) {
                         return std::vector{literal(t, {2, 2}, {3, 4, 1.0 / 3, 2.0 / 3}), literal(DType::I32, {2}, {1, 1}),
                                            literal(t, {2}, {5, 11})};
                       },
                       [](auto& got, DType t) {
                         std::string msg;
                         expect_values(msg, got[0], V{1, 2}, t, "x");
                         return msg;
                       })}});
    c.push_back(
        {"cholesky",
         {cholesky_case("[3,3]", 3, false), cholesky_case("[67,67]", 67, false),
          cholesky_case("[160,160] garbage above the diagonal", 160, true),
          hand("[[4,2],[2,3]]", "cholesky", [](DType t) { return std::vector{literal(t, {2, 2}, {4, 2, 2, 3})}; },
               [s2](auto& got, DType t) {
                 std::string msg;
                 expect_values(msg, got[0], V{2, 0, 1, s2}, t, "L");
                 return msg;
               })}});
    c.push_back({"cholesky_solve",
                 {factor_solve_case("[3,3] b[3]", true, 3, 0), factor_solve_case("[67,67] B[67,5]", true, 67, 5),
                  factor_solve_case("[160,160] B[160,3]", true, 160, 3),
                  hand("L=[[2,0],[1,sqrt2]] b=[6,5]", "cholesky_solve",
                       [s2](DType t) { return std::vector{literal(t, {2, 2}, {2, 0, 1, s2}), literal(t, {2}, {6, 5})}; },
                       [](auto& got, DType t) {
                         std::string msg;
                         expect_values(msg, got[0], V{1, 1}, t, "x");
                         return msg;
                       })}});
    c.push_back({"triangular_solve",
                 {triangular_case("lower [3,3] b[3]", 3, 0, true, false),
                  triangular_case("upper [67,67] B[67,4]", 67, 4, false, false),
                  triangular_case("lower unit [67,67] B[67,4]", 67, 4, true, true),
                  triangular_case("upper unit [130,130] b[130]", 130, 0, false, true),
                  triangular_case("lower [130,130] B[130,7]", 130, 7, true, false),
                  hand("lower [[2,9],[1,1]] b=[2,3]", "triangular_solve",
                       [](DType t) { return std::vector{literal(t, {2, 2}, {2, 9, 1, 1}), literal(t, {2}, {2, 3})}; },
                       [](auto& got, DType t) {
                         std::string msg;
                         expect_values(msg, got[0], V{1, 2}, t, "x");
                         return msg;
                       },
                       {{"lower", true}})}});
    c.push_back({"qr",
                 {qr_case("[3,3]", 3, 3), qr_case("[7,4]", 7, 4), qr_case("[67,67]", 67, 67),
                  qr_case("[150,67]", 150, 67), qr_case("[5,1]", 5, 1),
                  hand("[[3],[4]]", "qr", [](DType t) { return std::vector{literal(t, {2, 1}, {3, 4})}; },
                       [](auto& got, DType t) {
                         // Q R = A with |R| = 5 (R's sign is the device's choice).
                         std::string msg;
                         const cd r = value_at(got[1], 0);
                         if (std::fabs(std::abs(r) - 5) > 1e-5) msg += "|R| != 5; ";
                         expect_values(msg, got[0], V{3.0 / r, 4.0 / r}, t, "Q");
                         return msg;
                       })}});
    c.push_back({"lstsq",
                 {lstsq_case("[3,3] b[3]", 3, 3, 0), lstsq_case("[9,4] b[9]", 9, 4, 0),
                  lstsq_case("[150,67] B[150,3]", 150, 67, 3),
                  hand("[[1,0],[0,1],[1,1]] b=[1,1,0]", "lstsq",
                       [](DType t) {
                         return std::vector{literal(t, {3, 2}, {1, 0, 0, 1, 1, 1}), literal(t, {3}, {1, 1, 0})};
                       },
                       [](auto& got, DType t) {
                         std::string msg;
                         expect_values(msg, got[0], V{1.0 / 3, 1.0 / 3}, t, "x");
                         return msg;
                       })}});
    c.push_back({"svd",
                 {svd_case("[3,3]", 3, 3), svd_case("[7,4]", 7, 4), svd_case("[4,7]", 4, 7), svd_case("[67,67]", 67, 67),
                  svd_case("[150,67]", 150, 67), svd_case("[40,130]", 40, 130),
                  hand("[[3,0],[0,-4]]", "svd", [](DType t) { return std::vector{literal(t, {2, 2}, {3, 0, 0, -4})}; },
                       [](auto& got, DType t) {
                         std::string msg = svd_invariants(got, mx(literal(DType::F64, {2, 2}, {3, 0, 0, -4})), t);
                         expect_values(msg, got[1], V{4, 3}, t, "S");
                         return msg;
                       })}});
    c.push_back({"eigh",
                 {eigh_case("[3,3]", 3, false), eigh_case("[67,67]", 67, false),
                  eigh_case("[130,130] garbage above the diagonal", 130, true),
                  hand("[[2,7],[1,2]] (lower read)", "eigh",
                       [](DType t) { return std::vector{literal(t, {2, 2}, {2, 7, 1, 2})}; },
                       [](auto& got, DType t) {
                         std::string msg = eigh_invariants(got, mx(literal(DType::F64, {2, 2}, {2, 1, 1, 2})), t);
                         expect_values(msg, got[0], V{1, 3}, t, "w");
                         return msg;
                       })}});
    c.push_back({"slogdet",
                 {slogdet_case("[3,3]", 3), slogdet_case("[67,67]", 67), slogdet_case("[160,160]", 160),
                  hand("[[1,2],[3,4]]", "slogdet", [](DType t) { return std::vector{literal(t, {2, 2}, {1, 2, 3, 4})}; },
                       [](auto& got, DType t) {
                         std::string msg;
                         // (one element: V{cd(...)}, else clang takes vector's size constructor)
                         expect_values(msg, got[0], V{cd(-1)}, t, "sign");
                         expect_values(msg, got[1], V{cd(std::log(2.0))}, t, "logabsdet");
                         return msg;
                       }),
                  hand("singular [[1,2],[2,4]]", "slogdet",
                       [](DType t) { return std::vector{literal(t, {2, 2}, {1, 2, 2, 4})}; },
                       [](auto& got, DType) {
                         const cd s = value_at(got[0], 0), l = value_at(got[1], 0);
                         return s == cd(0) && std::isinf(l.real()) && l.real() < 0
                                    ? std::string()
                                    : "want sign 0 and logabsdet -inf for a singular matrix";
                       })}});
    return c;
  }();
  return cases;
}

// Complex-only hand cases (Hermitian inputs with non-real entries).
std::vector<Variant> complex_cases(const std::string& op_name) {
  using V = std::vector<cd>;
  const cd i(0, 1);
  if (op_name == "lu_factor")  // |3+3i| < 5 but |re| + |im| = 6 > 5: LAPACK's icamax picks row 1
    return {hand("[[5,1],[3+3i,2]]", "lu_factor",
                 [i](DType t) { return std::vector{literal(t, {2, 2}, {5, 1, 3.0 + 3.0 * i, 2})}; },
                 [i](auto& got, DType t) {
                   std::string msg;
                   const cd l = 5.0 / (3.0 + 3.0 * i);
                   expect_values(msg, got[0], V{3.0 + 3.0 * i, 2, l, 1.0 - 2.0 * l}, t, "lu");
                   if (int_at(got[1], 0) != 1 || int_at(got[1], 1) != 1) msg += "pivots are not [1, 1]; ";
                   return msg;
                 })};
  if (op_name == "cholesky")
    return {hand("[[4,-2i],[2i,2]]", "cholesky",
                 [i](DType t) { return std::vector{literal(t, {2, 2}, {4, -2.0 * i, 2.0 * i, 2})}; },
                 [i](auto& got, DType t) {
                   std::string msg;
                   expect_values(msg, got[0], V{2, 0, i, 1}, t, "L");
                   return msg;
                 })};
  if (op_name == "eigh")
    return {hand("[[2,-i],[i,2]]", "eigh", [i](DType t) { return std::vector{literal(t, {2, 2}, {2, -i, i, 2})}; },
                 [i](auto& got, DType t) {
                   std::string msg = eigh_invariants(got, mx(literal(DType::C64, {2, 2}, {2, -i, i, 2})), t);
                   expect_values(msg, got[0], V{1, 3}, t, "w");
                   return msg;
                 })};
  return {};
}

// ---------------------------------------------------------------- runners

void check_dense(const DenseOp& c) {
  const ir::OpDef& def = ir::OpRegistry::get().at(c.op);
  Device& ref = DeviceRegistry::get().at("reference");
  for (DType t : def.dtypes) {
    std::vector<Variant> variants = c.variants;
    if (t == DType::C64)
      for (Variant& v : complex_cases(c.op)) variants.push_back(std::move(v));
    for (const Variant& v : variants) {
      const std::string name = c.op + " dtype=" + dtype_name(t) + " variant=" + v.label;
      Build b(case_seed(name));
      std::vector<Tensor> want;
      try {
        rlx::output(b.g, v.make(b, t));
        std::string why;
        auto w = compile_and_run(ref, b.g, b.inputs, &why);
        if (!w) {
          BOOST_ERROR(name << ": the reference device refuses a declared dtype: " << why << "; " << seed_note());
          continue;
        }
        want = std::move(*w);
      } catch (const std::exception& e) {
        BOOST_ERROR(name << " on reference: " << e.what() << "; " << seed_note());
        continue;
      }
      for (Device* d : DeviceRegistry::get().runnable())
        for (bool strided : {false, true}) {
          const std::string ctx = name + " device=" + d->name() + (strided ? " (strided inputs)" : "");
          try {
            std::vector<Tensor> got;
            if (d == &ref && !strided) {
              got = want;  // the reference's own run: its invariants still get checked
            } else {
              std::string why;
              auto r = compile_and_run(*d, b.g, b.inputs, &why, strided);
              if (!r) {
                BOOST_TEST_MESSAGE("skip " << ctx << ": " << why);
                if (!strided) count(*d, true);
                break;
              }
              got = std::move(*r);
            }
            if (!strided) count(*d, false);
            BOOST_REQUIRE_EQUAL(got.size(), want.size());
            bool types_ok = true;
            for (size_t r = 0; r < want.size(); ++r)
              if (got[r].type() != want[r].type()) {
                BOOST_ERROR(ctx << " result " << r << ": got " << got[r].type().str() << ", want "
                                << want[r].type().str());
                types_ok = false;
              }
            if (!types_ok) continue;
            std::string m = v.check(got, want, b.inputs, t);
            BOOST_CHECK_MESSAGE(m.empty(), ctx << ": " << m << seed_note());
          } catch (const std::exception& e) {
            BOOST_ERROR(ctx << ": " << e.what() << "; " << seed_note());
          }
        }
    }
  }
}

// Inputs that must be refused at run time with an InputError naming the problem.
struct ErrorCase {
  std::string label;
  std::string op;
  std::function<std::vector<Tensor>(DType)> inputs;
  std::string expect;  // a substring of the message
  ir::Attrs attrs = {};
};

std::vector<ErrorCase> error_cases() {
  auto dense = [](std::vector<cd> v, Shape s) { return [v, s](DType t) { return std::vector{literal(t, s, v)}; }; };
  // Elimination on this matrix is exact in every dtype: column 2's pivot is exactly 0.
  const std::vector<cd> singular4 = {4, 0, 0, 0, 0, 2, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1};
  return {
      {"singular 4x4", "lu_factor", dense(singular4, {4, 4}), "U(3,3) is exactly zero: the matrix is singular"},
      {"singular [[1,2],[2,4]]", "lu_factor", dense({1, 2, 2, 4}, {2, 2}), "U(2,2) is exactly zero"},
      {"zero matrix", "lu_factor", dense({0, 0, 0, 0}, {2, 2}), "U(1,1) is exactly zero"},
      // Large enough that a device's blocked or recursive LU meets the zero in a later block.
      {"[100,100] identity with a zero at (72,72)", "lu_factor",
       [](DType t) {
         std::vector<cd> v(100 * 100, 0.0);
         for (int i = 0; i < 100; ++i) v[size_t(i * 100 + i)] = i == 71 ? 0.0 : 1.0;
         return std::vector{literal(t, {100, 100}, v)};
       },
       "U(72,72) is exactly zero"},
      {"zero on U's diagonal", "lu_solve",
       [](DType t) {
         return std::vector{literal(t, {2, 2}, {1, 0, 0, 0}), literal(DType::I32, {2}, {0, 1}), literal(t, {2}, {1, 1})};
       },
       "U(2,2) is exactly zero"},
      {"pivot out of range", "lu_solve",
       [](DType t) {
         return std::vector{literal(t, {2, 2}, {1, 0, 0, 1}), literal(DType::I32, {2}, {0, 5}), literal(t, {2}, {1, 1})};
       },
       "pivots[1] = 5 is outside [0, 2)"},
      {"indefinite diag(1,2,-1,3)", "cholesky",
       dense({1, 0, 0, 0, 0, 2, 0, 0, 0, 0, -1, 0, 0, 0, 0, 3}, {4, 4}),
       "the leading minor of order 3 is not positive definite"},
      {"[200,200] identity with -1 at (151,151)", "cholesky",
       [](DType t) {
         std::vector<cd> v(200 * 200, 0.0);
         for (int i = 0; i < 200; ++i) v[size_t(i * 200 + i)] = i == 150 ? -1.0 : 1.0;
         return std::vector{literal(t, {200, 200}, v)};
       },
       "the leading minor of order 151 is not positive definite"},
      {"semidefinite [[4,2],[2,1]]", "cholesky", dense({4, 2, 2, 1}, {2, 2}),
       "the leading minor of order 2 is not positive definite"},
      {"zero on L's diagonal", "cholesky_solve",
       [](DType t) { return std::vector{literal(t, {2, 2}, {0, 0, 1, 1}), literal(t, {2}, {1, 1})}; },
       "L(1,1) is exactly zero"},
      {"zero on T's diagonal", "triangular_solve",
       [](DType t) { return std::vector{literal(t, {2, 2}, {1, 0, 1, 0}), literal(t, {2, 1}, {1, 1})}; },
       "T(2,2) is exactly zero", {{"lower", true}}},
      {"zero column", "lstsq",
       [](DType t) { return std::vector{literal(t, {3, 2}, {1, 0, 2, 0, 3, 0}), literal(t, {3}, {1, 1, 1})}; },
       "R(2,2) of A's QR factorization is exactly zero: A does not have full column rank"},
  };
}

void check_errors(const ErrorCase& e) {
  const ir::OpDef& def = ir::OpRegistry::get().at(e.op);
  for (DType t : def.dtypes)
    for (Device* d : DeviceRegistry::get().runnable()) {
      const std::string ctx = e.op + " dtype=" + dtype_name(t) + " case=" + e.label + " device=" + d->name();
      Build b(case_seed(ctx));
      rlx::output(b.g, node(b, e.op, e.inputs(t), e.attrs));
      std::optional<std::vector<Tensor>> got;
      try {
        std::string why;
        got = compile_and_run(*d, b.g, b.inputs, &why);
        if (!got) {
          BOOST_TEST_MESSAGE("skip " << ctx << ": " << why);
          continue;
        }
        BOOST_ERROR(ctx << ": ran without an error; want one containing \"" << e.expect << "\"");
      } catch (const InputError& err) {
        BOOST_CHECK_MESSAGE(std::string(err.what()).find(e.expect) != std::string::npos,
                            ctx << ": the message \"" << err.what() << "\" lacks \"" << e.expect << "\"");
      } catch (const std::exception& err) {
        BOOST_ERROR(ctx << ": want an InputError, got: " << err.what());
      }
    }
}

struct RegisterDenseCases {
  RegisterDenseCases() {
    utf::test_suite* s = BOOST_TEST_SUITE("dense_la");
    for (const DenseOp& c : dense_cases()) s->add(utf::make_test_case([&c] { check_dense(c); }, c.op, __FILE__, __LINE__));
    utf::test_suite* errs = BOOST_TEST_SUITE("errors");
    static const std::vector<ErrorCase> ecs = error_cases();
    for (const ErrorCase& e : ecs) {
      std::string name = e.op + ": " + e.label;
      std::replace_if(name.begin(), name.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
      errs->add(utf::make_test_case([&e] { check_errors(e); }, name, __FILE__, __LINE__));
    }
    s->add(errs);
    utf::framework::master_test_suite().add(s);
  }
} register_dense_cases;

}  // namespace

// Every op the dense linear-algebra family registers has a row above.
BOOST_AUTO_TEST_CASE(every_dense_la_op_has_a_row) {
  ir::OpRegistry family;
  ir::register_dense_la_ops(family);
  BOOST_CHECK(!family.all().empty());
  for (const ir::OpDef* def : family.all()) {
    bool found = false;
    for (const DenseOp& c : dense_cases()) found |= c.op == def->name;
    BOOST_CHECK_MESSAGE(found, "dense op " << def->name << " has no row in dense_cases()");
    BOOST_CHECK_MESSAGE(ir::OpRegistry::get().find(def->name), def->name << " is not in the global registry");
  }
}

}  // namespace rlx::test
