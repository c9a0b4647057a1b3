// Sparse direct solvers (UMFPACK, KLU, CHOLMOD through solvers/sparse/direct.hpp), checked
// against a dense LU with partial pivoting computed here in complex<long double>, on fresh
// random matrices (the seed is printed).
//
// Tolerances, as the normalized error ||x - x_ref||_F / ||x_ref||_F:
//   f64 results: 1e-10 (the matrices here have condition numbers below ~1e3, so a backward
//                stable double-precision solve is ~1e-13 off);
//   f32 / c64 results: 2e-6 (the solve runs in double; rounding the answer to single
//                precision alone costs up to 6e-8 per entry).
#define BOOST_TEST_MODULE direct
#include <sys/wait.h>
#include <unistd.h>
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <complex>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <ostream>
#include <string>
#include <vector>

#include "tests/support/cli.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/hdf5.hpp"
#include "solvers/sparse/direct.hpp"
#include "solvers/sparse/matrix_market.hpp"
#include "solvers/sparse/poisson.hpp"

namespace rlx {
inline std::ostream& operator<<(std::ostream& o, DType t) { return o << dtype_name(t); }
}  // namespace rlx

using namespace rlx;
using namespace rlx::sparse;
using cd = std::complex<double>;
using cl = std::complex<long double>;

namespace {

constexpr double kTol64 = 1e-10, kTol32 = 2e-6;

uint64_t seed() {
  static uint64_t s = [] {
    uint64_t v = uint64_t(std::time(nullptr));
    BOOST_TEST_MESSAGE("direct seed " << v);
    return v;
  }();
  return s;
}

// A stream of uniform numbers in [-1, 1) for one purpose (tag) of the test run.
struct Rng {
  uint64_t s, i = 0;
  explicit Rng(uint64_t tag) : s(seed() * 1000003 + tag) {}
  double operator()() { return rng_unit(s, i++) * 2 - 1; }
  int64_t below(int64_t n) { return std::min(n - 1, int64_t((rng_unit(s, i++)) * double(n))); }
};

bool have() { return have_suitesparse(); }
struct NeedSuiteSparse {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(have());
    if (!have()) r.message() << "rlx was built without SuiteSparse";
    return r;
  }
};

// Triplets; values complex (the imaginary parts are dropped for real dtypes).
struct Triplets {
  int64_t n = 0;
  std::vector<int64_t> i, j;
  std::vector<cd> v;
  void add(int64_t r, int64_t c, cd x) {
    i.push_back(r);
    j.push_back(c);
    v.push_back(x);
  }
};

Tensor values_tensor(const std::vector<cd>& v, DType t) {
  Tensor x = Tensor::empty(t, {int64_t(v.size())});
  for (size_t k = 0; k < v.size(); ++k) {
    if (t == DType::F32) x.data<float>()[k] = float(v[k].real());
    else if (t == DType::F64) x.data<double>()[k] = v[k].real();
    else x.data<c64>()[k] = c64(float(v[k].real()), float(v[k].imag()));
  }
  return x;
}

CsrMatrix build(const Triplets& t, DType value, DType index) {
  return CsrMatrix::from_coo(t.n, t.n, t.i, t.j, values_tensor(t.v, value), index);
}

cd rnd(Rng& r, bool complex) { return complex ? cd(r(), r()) : cd(r(), 0); }

// Nonsymmetric: a signed diagonal of size 3..4 and about 4 random entries per row.
Triplets random_general(int64_t n, bool complex, uint64_t tag) {
  Rng r(tag);
  Triplets t;
  t.n = n;
  for (int64_t row = 0; row < n; ++row) {
    double d = 3.0 + 0.5 * (r() + 1);
    t.add(row, row, cd(r() < 0 ? -d : d, complex ? r() : 0));
    for (int q = 0; q < 4; ++q) t.add(row, r.below(n), rnd(r, complex));
  }
  return t;
}

// SPD (HPD when complex): 2D Poisson on an m x m grid plus random symmetric (Hermitian)
// pairs a(i,j) = z, a(j,i) = conj(z), each adding |z| to both diagonal entries.
Triplets random_spd(int64_t m, bool complex, uint64_t tag) {
  Rng r(tag);
  CsrMatrix P = poisson2d(m);
  Coo c = P.to_coo();
  Triplets t;
  t.n = P.rows();
  for (int64_t k = 0; k < c.nnz(); ++k)
    t.add(c.row.data<int32_t>()[k], c.col.data<int32_t>()[k], c.values.data<double>()[k]);
  for (int64_t q = 0; q < 2 * t.n; ++q) {
    int64_t a = r.below(t.n), b = r.below(t.n);
    if (a == b) continue;
    cd z = rnd(r, complex);
    t.add(a, b, z);
    t.add(b, a, std::conj(z));
    t.add(a, a, std::abs(z));
    t.add(b, b, std::abs(z));
  }
  return t;
}

cl at(const Tensor& t, int64_t k) {
  if (t.dtype() == DType::F32) return cl(t.data<float>()[k]);
  if (t.dtype() == DType::F64) return cl(t.data<double>()[k]);
  return cl(t.data<c64>()[k].real(), t.data<c64>()[k].imag());
}

Tensor random_rhs(DType t, int64_t n, int64_t k, uint64_t tag) {
  Rng r(tag);
  Tensor b = k == 0 ? Tensor::empty(t, {n}) : Tensor::empty(t, {n, k});
  for (int64_t e = 0; e < b.numel(); ++e) {
    double re = r(), im = r();
    if (t == DType::F32) b.data<float>()[e] = float(re);
    else if (t == DType::F64) b.data<double>()[e] = re;
    else b.data<c64>()[e] = c64(float(re), float(im));
  }
  return b;
}

// Dense Gaussian elimination with partial pivoting in complex<long double>; b is [n] or [n, k].
std::vector<cl> dense_solve(const CsrMatrix& A, const Tensor& b) {
  const int64_t n = A.rows(), k = b.rank() == 2 ? b.shape()[1] : 1;
  Tensor d = A.to_dense();
  std::vector<cl> m(size_t(n * n)), x(size_t(n * k));
  for (int64_t e = 0; e < n * n; ++e) m[size_t(e)] = at(d, e);
  for (int64_t e = 0; e < n * k; ++e) x[size_t(e)] = at(b, e);
  auto M = [&](int64_t r, int64_t c) -> cl& { return m[size_t(r * n + c)]; };
  auto X = [&](int64_t r, int64_t c) -> cl& { return x[size_t(r * k + c)]; };
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::abs(M(r, c)) > std::abs(M(p, c))) p = r;
    BOOST_REQUIRE_MESSAGE(std::abs(M(p, c)) > 0, "the reference matrix is singular");
    for (int64_t q = 0; q < n; ++q) std::swap(M(c, q), M(p, q));
    for (int64_t q = 0; q < k; ++q) std::swap(X(c, q), X(p, q));
    for (int64_t r = c + 1; r < n; ++r) {
      cl f = M(r, c) / M(c, c);
      if (f == cl(0)) continue;
      for (int64_t q = c; q < n; ++q) M(r, q) -= f * M(c, q);
      for (int64_t q = 0; q < k; ++q) X(r, q) -= f * X(c, q);
    }
  }
  for (int64_t r = n - 1; r >= 0; --r)
    for (int64_t q = 0; q < k; ++q) {
      for (int64_t c = r + 1; c < n; ++c) X(r, q) -= M(r, c) * X(c, q);
      X(r, q) /= M(r, r);
    }
  return x;
}

double rel_error(const Tensor& x, const std::vector<cl>& ref) {
  long double num = 0, den = 0;
  BOOST_REQUIRE_EQUAL(size_t(x.numel()), ref.size());
  for (int64_t e = 0; e < x.numel(); ++e) {
    num += std::norm(at(x, e) - ref[size_t(e)]);
    den += std::norm(ref[size_t(e)]);
  }
  return double(std::sqrt(num / den));
}

double tol_for(DType result) { return result == DType::F64 ? kTol64 : kTol32; }

// Solves with each solver kind the matrix suits and checks against the dense reference.
enum class Which { Umfpack, Klu, Cholmod };
const char* which_name(Which w) { return w == Which::Umfpack ? "umfpack" : w == Which::Klu ? "klu" : "cholmod"; }

Tensor direct(Which w, const CsrMatrix& A, const Tensor& b) {
  if (w == Which::Cholmod) {
    SparseCholesky c(A);
    c.factorize(A);
    BOOST_TEST(c.factorized());
    BOOST_TEST(c.rcond() > 0);
    BOOST_TEST(c.factor_nnz() >= A.rows());
    return c.solve(b);
  }
  SparseLu lu(A, w == Which::Klu ? LuBackend::Klu : LuBackend::Umfpack);
  BOOST_TEST(!lu.factorized());
  lu.factorize(A);
  BOOST_TEST(lu.factorized());
  BOOST_TEST(lu.rcond() > 0);
  BOOST_TEST(lu.factor_nnz() >= A.rows());
  return lu.solve(b);
}

void check(Which w, const CsrMatrix& A, const Tensor& b, DType expect) {
  Tensor x = direct(w, A, b);
  BOOST_TEST(x.dtype() == expect, "result dtype " << dtype_name(x.dtype()) << ", expected " << dtype_name(expect));
  BOOST_TEST(x.shape() == b.shape());
  double err = rel_error(x, dense_solve(A, b));
  BOOST_TEST(err < tol_for(expect), which_name(w) << ": normalized error " << err << " (tolerance " << tol_for(expect) << ")");
  BOOST_TEST(relative_residual(A, x, b) < (expect == DType::F64 ? 1e-12 : 1e-5));
}

const DType kIndex[] = {DType::I32, DType::I64};

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

BOOST_AUTO_TEST_CASE(built_without_suitesparse_says_so) {
  if (have()) {
    BOOST_TEST(!suitesparse_version().empty());
    BOOST_TEST_MESSAGE("SuiteSparse " << suitesparse_version());
    return;
  }
  CsrMatrix A = poisson2d(3);
  std::string m = message_of<Error>([&] { SparseLu lu(A); });
  BOOST_TEST(m.find("without SuiteSparse") != std::string::npos, m);
  m = message_of<Error>([&] { SparseCholesky c(A); });
  BOOST_TEST(m.find("without SuiteSparse") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(spd_f64_every_solver_both_index_types, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets t = random_spd(9, false, 1);
  for (DType ix : kIndex) {
    CsrMatrix A = build(t, DType::F64, ix);
    BOOST_REQUIRE(A.index_type() == ix);
    Tensor b = random_rhs(DType::F64, A.rows(), 0, 2);
    for (Which w : {Which::Umfpack, Which::Klu, Which::Cholmod})
      BOOST_TEST_CONTEXT(which_name(w) << " index " << dtype_name(ix)) { check(w, A, b, DType::F64); }
  }
}

BOOST_AUTO_TEST_CASE(nonsymmetric_f64_lu_both_index_types, *boost::unit_test::precondition(NeedSuiteSparse())) {
  // Solving with A^T instead of A would be off by O(1) here.
  Triplets t = random_general(90, false, 3);
  for (DType ix : kIndex) {
    CsrMatrix A = build(t, DType::F64, ix);
    Tensor b = random_rhs(DType::F64, A.rows(), 0, 4);
    for (Which w : {Which::Umfpack, Which::Klu})
      BOOST_TEST_CONTEXT(which_name(w) << " index " << dtype_name(ix)) { check(w, A, b, DType::F64); }
  }
}

BOOST_AUTO_TEST_CASE(complex_general_lu, *boost::unit_test::precondition(NeedSuiteSparse())) {
  // A complex solve through the conjugate transpose (or a conjugated matrix) would be off by O(1).
  Triplets t = random_general(70, true, 5);
  for (DType ix : kIndex) {
    CsrMatrix A = build(t, DType::C64, ix);
    Tensor b = random_rhs(DType::C64, A.rows(), 0, 6);
    for (Which w : {Which::Umfpack, Which::Klu})
      BOOST_TEST_CONTEXT(which_name(w) << " index " << dtype_name(ix)) {
        check(w, A, b, DType::C64);
        SparseLu lu(A, w == Which::Klu ? LuBackend::Klu : LuBackend::Umfpack);
        BOOST_TEST(lu.is_complex());
      }
  }
}

BOOST_AUTO_TEST_CASE(hermitian_pd_cholmod, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets t = random_spd(8, true, 7);
  for (DType ix : kIndex) {
    CsrMatrix A = build(t, DType::C64, ix);
    Tensor b = random_rhs(DType::C64, A.rows(), 3, 8);
    BOOST_TEST_CONTEXT("index " << dtype_name(ix)) {
      check(Which::Cholmod, A, b, DType::C64);
      check(Which::Umfpack, A, b, DType::C64);  // LU agrees on the same Hermitian matrix
    }
  }
}

BOOST_AUTO_TEST_CASE(f32_values_solved_in_double_then_rounded, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets g = random_general(60, false, 9), s = random_spd(7, false, 10);
  CsrMatrix G = build(g, DType::F32, DType::I32), S = build(s, DType::F32, DType::I32);
  Tensor bg = random_rhs(DType::F32, G.rows(), 0, 11), bs = random_rhs(DType::F32, S.rows(), 0, 12);
  check(Which::Umfpack, G, bg, DType::F32);
  check(Which::Klu, G, bg, DType::F32);
  check(Which::Cholmod, S, bs, DType::F32);
  // An f64 right-hand side gets an f64 answer: the solve ran in double, nothing is rounded.
  Tensor b64 = random_rhs(DType::F64, G.rows(), 0, 13);
  check(Which::Umfpack, G, b64, DType::F64);
}

BOOST_AUTO_TEST_CASE(multiple_right_hand_sides, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets g = random_general(80, false, 14), s = random_spd(8, false, 15);
  for (DType ix : kIndex) {
    CsrMatrix G = build(g, DType::F64, ix), S = build(s, DType::F64, ix);
    for (int64_t k : {1, 5, 9}) {  // KLU works in blocks of 4 columns: 9 exercises the remainder
      BOOST_TEST_CONTEXT("k " << k << " index " << dtype_name(ix)) {
        check(Which::Umfpack, G, random_rhs(DType::F64, G.rows(), k, 16), DType::F64);
        check(Which::Klu, G, random_rhs(DType::F64, G.rows(), k, 17), DType::F64);
        check(Which::Cholmod, S, random_rhs(DType::F64, S.rows(), k, 18), DType::F64);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(complex_rhs_against_real_matrix, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets g = random_general(50, false, 19), s = random_spd(6, false, 20);
  CsrMatrix G = build(g, DType::F64, DType::I32), S = build(s, DType::F64, DType::I64);
  check(Which::Umfpack, G, random_rhs(DType::C64, G.rows(), 2, 21), DType::C64);
  check(Which::Klu, G, random_rhs(DType::C64, G.rows(), 0, 22), DType::C64);
  check(Which::Cholmod, S, random_rhs(DType::C64, S.rows(), 3, 23), DType::C64);
}

BOOST_AUTO_TEST_CASE(refactorize_same_pattern_gives_the_new_solution, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets g1 = random_general(75, false, 24), s1 = random_spd(8, true, 25);
  for (DType ix : kIndex) {
    BOOST_TEST_CONTEXT("index " << dtype_name(ix)) {
      CsrMatrix G1 = build(g1, DType::F64, ix);
      // New values at the same positions: another random matrix of the same pattern.
      Rng r(26);
      std::vector<cd> gv2(G1.values().numel());
      for (size_t k = 0; k < gv2.size(); ++k) gv2[k] = G1.values().data<double>()[k] * (1.0 + 0.5 * r()) + 0.3 * r();
      Tensor v2 = values_tensor(gv2, DType::F64);
      CsrMatrix G2(G1.rows(), G1.cols(), G1.row_ptr(), G1.col_idx(), v2);
      Tensor b = random_rhs(DType::F64, G1.rows(), 2, 27);
      auto ref1 = dense_solve(G1, b), ref2 = dense_solve(G2, b);
      long double gap = 0, size = 0;
      for (size_t k = 0; k < ref1.size(); ++k) gap += std::norm(ref1[k] - ref2[k]), size += std::norm(ref2[k]);
      BOOST_REQUIRE(std::sqrt(gap / size) > 0.05);  // the new values give a clearly different answer
      for (LuBackend be : {LuBackend::Umfpack, LuBackend::Klu}) {
        SparseLu lu(G1, be);
        lu.factorize(G1);
        BOOST_TEST(rel_error(lu.solve(b), ref1) < kTol64, lu_backend_name(be));
        lu.refactorize(v2);
        BOOST_TEST(rel_error(lu.solve(b), ref2) < kTol64, lu_backend_name(be) << " after refactorize");
        lu.factorize(G1);  // back again, through factorize() with a matrix
        BOOST_TEST(rel_error(lu.solve(b), ref1) < kTol64, lu_backend_name(be) << " after factorize");
        lu.factorize(G2);
        BOOST_TEST(rel_error(lu.solve(b), ref2) < kTol64, lu_backend_name(be) << " after factorize(G2)");
      }
      // Hermitian PD: scale the off-diagonal part (stays Hermitian and diagonally dominant).
      CsrMatrix S1 = build(s1, DType::C64, ix);
      std::vector<cd> sv2(S1.values().numel());
      const Coo c = S1.to_coo();
      for (int64_t k = 0; k < c.nnz(); ++k) {
        int64_t i = ix == DType::I32 ? c.row.data<int32_t>()[k] : c.row.data<int64_t>()[k];
        int64_t j = ix == DType::I32 ? c.col.data<int32_t>()[k] : c.col.data<int64_t>()[k];
        cd v(S1.values().data<c64>()[k].real(), S1.values().data<c64>()[k].imag());
        sv2[size_t(k)] = i == j ? v + 1.5 : 0.6 * v;
      }
      Tensor sv2t = values_tensor(sv2, DType::C64);
      CsrMatrix S2(S1.rows(), S1.cols(), S1.row_ptr(), S1.col_idx(), sv2t);
      Tensor bs = random_rhs(DType::C64, S1.rows(), 0, 28);
      SparseCholesky ch(S1);
      ch.factorize(S1);
      BOOST_TEST(rel_error(ch.solve(bs), dense_solve(S1, bs)) < kTol32);
      ch.refactorize(sv2t);
      BOOST_TEST(rel_error(ch.solve(bs), dense_solve(S2, bs)) < kTol32, "cholmod after refactorize");
    }
  }
}

BOOST_AUTO_TEST_CASE(klu_refactorize_repivots_when_the_old_pivots_fail, *boost::unit_test::precondition(NeedSuiteSparse())) {
  // Strong diagonal first (KLU pivots on it), then a zero diagonal: the old pivot order
  // meets a zero pivot, so refactorize() must pivot afresh and still solve correctly.
  Triplets t = random_general(40, false, 29);
  for (int64_t r = 0; r < t.n; ++r)  // make the pattern hold both (r, r+1) and (r+1, r)
    if (r + 1 < t.n) t.add(r, r + 1, 1.0), t.add(r + 1, r, 1.0);
  CsrMatrix A = build(t, DType::F64, DType::I32);
  Tensor rp = A.row_ptr(), ci = A.col_idx();
  std::vector<cd> v2(A.values().numel());
  Rng r(30);
  for (int64_t row = 0; row < A.rows(); ++row)
    for (int32_t e = rp.data<int32_t>()[row]; e < rp.data<int32_t>()[row + 1]; ++e)
      v2[size_t(e)] = ci.data<int32_t>()[e] == row ? 0.0 : 2.0 * r() + (std::abs(ci.data<int32_t>()[e] - row) == 1 ? 3.0 : 0.0);
  Tensor v2t = values_tensor(v2, DType::F64);
  CsrMatrix A2(A.rows(), A.cols(), rp, ci, v2t);
  Tensor b = random_rhs(DType::F64, A.rows(), 0, 31);
  SparseLu lu(A, LuBackend::Klu);
  lu.factorize(A);
  lu.refactorize(v2t);
  BOOST_TEST(rel_error(lu.solve(b), dense_solve(A2, b)) < 1e-8);
}

BOOST_AUTO_TEST_CASE(unsorted_rows_and_duplicates, *boost::unit_test::precondition(NeedSuiteSparse())) {
  // CSR straight from arrays: rows reversed (unsorted) and every diagonal split into two
  // entries (duplicates, summed). refactorize() takes values in this same entry order.
  Triplets t = random_spd(6, false, 32);
  CsrMatrix S = build(t, DType::F64, DType::I32);
  const int64_t n = S.rows();
  std::vector<int32_t> rp(1, 0), ci;
  std::vector<double> va;
  for (int64_t row = 0; row < n; ++row) {
    for (int32_t e = S.row_ptr().data<int32_t>()[row + 1] - 1; e >= S.row_ptr().data<int32_t>()[row]; --e) {
      int32_t c = S.col_idx().data<int32_t>()[e];
      double v = S.values().data<double>()[e];
      if (c == row) {
        ci.push_back(c), va.push_back(0.25 * v);
        ci.push_back(c), va.push_back(0.75 * v);
      } else {
        ci.push_back(c), va.push_back(v);
      }
    }
    rp.push_back(int32_t(ci.size()));
  }
  auto tensor_of = [](auto& v, DType t) {
    Tensor x = Tensor::empty(t, {int64_t(v.size())});
    std::copy(v.begin(), v.end(), static_cast<std::remove_reference_t<decltype(v[0])>*>(x.raw()));
    return x;
  };
  Tensor rpt = tensor_of(rp, DType::I32), cit = tensor_of(ci, DType::I32), vat = tensor_of(va, DType::F64);
  CsrMatrix U(n, n, rpt, cit, vat);
  BOOST_REQUIRE(!U.sorted_unique());
  Tensor b = random_rhs(DType::F64, n, 0, 33);
  for (Which w : {Which::Umfpack, Which::Klu, Which::Cholmod})
    BOOST_TEST_CONTEXT(which_name(w)) { check(w, U, b, DType::F64); }
  // New values in the caller's (unsorted, duplicated) order: 2x the matrix, so x halves.
  std::vector<double> va2(va.size());
  for (size_t k = 0; k < va.size(); ++k) va2[k] = 2 * va[k];
  Tensor va2t = tensor_of(va2, DType::F64);
  auto ref = dense_solve(U, b);
  for (auto& x : ref) x /= 2;
  SparseLu lu(U);
  lu.factorize(U);
  lu.refactorize(va2t);
  BOOST_TEST(rel_error(lu.solve(b), ref) < kTol64);
  SparseCholesky ch(U);
  ch.factorize(U);
  ch.refactorize(va2t);
  BOOST_TEST(rel_error(ch.solve(b), ref) < kTol64);
  // The same pattern in sorted form is a different entry order: factorize() refuses it.
  std::string m = message_of<InputError>([&] { lu.factorize(S); });
  BOOST_TEST(m.find("pattern") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(cholmod_reads_one_triangle, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets t = random_spd(7, true, 34);
  CsrMatrix full = build(t, DType::C64, DType::I32);
  Tensor b = random_rhs(DType::C64, full.rows(), 0, 35);
  auto ref = dense_solve(full, b);
  for (int keep : {-1, +1}) {  // -1: lower triangle only, +1: upper triangle only
    Triplets h;
    h.n = t.n;
    for (size_t k = 0; k < t.v.size(); ++k)
      if ((keep < 0 && t.j[k] <= t.i[k]) || (keep > 0 && t.j[k] >= t.i[k])) h.add(t.i[k], t.j[k], t.v[k]);
    CsrMatrix half = build(h, DType::C64, DType::I32);
    SparseCholesky ch(half);
    ch.factorize(half);
    BOOST_TEST(rel_error(ch.solve(b), ref) < kTol32, (keep < 0 ? "lower" : "upper") << " triangle");
  }
  // The strictly upper part of a full matrix is not read: garbage there changes nothing.
  Triplets g = t;
  for (size_t k = 0; k < g.v.size(); ++k)
    if (g.j[k] > g.i[k]) g.v[k] = cd(1e3, -7);
  CsrMatrix junk = build(g, DType::C64, DType::I32);
  SparseCholesky ch(junk);
  ch.factorize(junk);
  BOOST_TEST(rel_error(ch.solve(b), ref) < kTol32);
}

BOOST_AUTO_TEST_CASE(pattern_mismatch_is_an_input_error, *boost::unit_test::precondition(NeedSuiteSparse())) {
  Triplets t = random_spd(5, false, 36);
  CsrMatrix A = build(t, DType::F64, DType::I32);
  Triplets extra = t;
  {  // two more entries, at a symmetric pair of positions the pattern lacks
    Tensor d = A.to_dense();
    int64_t a = -1, b = -1;
    for (int64_t e = 0; e < t.n * t.n && a < 0; ++e)
      if (e / t.n != e % t.n && d.data<double>()[e] == 0) a = e / t.n, b = e % t.n;
    BOOST_REQUIRE(a >= 0);
    extra.add(a, b, 0.5), extra.add(b, a, 0.5);
  }
  CsrMatrix B = build(extra, DType::F64, DType::I32);
  BOOST_REQUIRE(B.nnz() != A.nnz());
  // Same count of entries, one column moved: the last entry of the first row that does not
  // end in the last column moves one column to the right.
  std::vector<int32_t> ci(A.col_idx().data<int32_t>(), A.col_idx().data<int32_t>() + A.nnz());
  int64_t moved_row = -1;
  for (int64_t r = 0; r < A.rows() && moved_row < 0; ++r) {
    const int32_t last = A.row_ptr().data<int32_t>()[r + 1] - 1;
    if (ci[size_t(last)] + 1 < int32_t(t.n)) ci[size_t(last)] += 1, moved_row = r;
  }
  BOOST_REQUIRE(moved_row >= 0);
  Tensor cit = Tensor::empty(DType::I32, {A.nnz()});
  std::copy(ci.begin(), ci.end(), cit.data<int32_t>());
  CsrMatrix C(A.rows(), A.cols(), A.row_ptr(), cit, A.values());
  for (Which w : {Which::Umfpack, Which::Klu, Which::Cholmod}) {
    BOOST_TEST_CONTEXT(which_name(w)) {
      auto go = [&](const CsrMatrix& M) {
        if (w == Which::Cholmod) {
          SparseCholesky ch(A);
          ch.factorize(M);
        } else {
          SparseLu lu(A, w == Which::Klu ? LuBackend::Klu : LuBackend::Umfpack);
          lu.factorize(M);
        }
      };
      std::string m1 = message_of<InputError>([&] { go(B); });
      std::string m2 = message_of<InputError>([&] { go(C); });
      BOOST_TEST(m1.find("pattern") != std::string::npos, m1);
      BOOST_TEST(m2.find("row " + std::to_string(moved_row) + " ") != std::string::npos, m2);
      // The same pattern with i64 indices is accepted.
      go(A.with_index_type(DType::I64));
    }
  }
  // Wrong value count for refactorize, complex values into a real factorization.
  SparseLu lu(A);
  BOOST_CHECK_THROW(lu.refactorize(Tensor::zeros(DType::F64, {A.nnz() + 1})), InputError);
  BOOST_CHECK_THROW(lu.refactorize(Tensor::zeros(DType::C64, {A.nnz()})), InputError);
}

BOOST_AUTO_TEST_CASE(singular_is_an_input_error_naming_the_pivot, *boost::unit_test::precondition(NeedSuiteSparse())) {
  for (DType ix : kIndex) {
    BOOST_TEST_CONTEXT("index " << dtype_name(ix)) {
      // Row 17 stored but all zero.
      Triplets t = random_general(50, false, 37);
      for (size_t k = 0; k < t.v.size(); ++k)
        if (t.i[k] == 17) t.v[k] = 0;
      CsrMatrix A = build(t, DType::F64, ix);
      for (LuBackend be : {LuBackend::Umfpack, LuBackend::Klu}) {
        SparseLu lu(A, be);
        std::string m = message_of<InputError>([&] { lu.factorize(A); });
        BOOST_TEST_MESSAGE(lu_backend_name(be) << ": " << m);
        BOOST_TEST(m.find("singular") != std::string::npos, m);
        BOOST_TEST(m.find("row 17") != std::string::npos, m);
        BOOST_TEST(!lu.factorized());
        BOOST_CHECK_THROW(lu.solve(random_rhs(DType::F64, A.rows(), 0, 38)), InputError);
      }
      // Structurally singular: rows 5 and 11 hold their only entry in the same column.
      Triplets d = random_general(30, true, 39);
      Triplets e;
      e.n = d.n;
      for (size_t k = 0; k < d.v.size(); ++k)
        if (d.i[k] != 5 && d.i[k] != 11) e.add(d.i[k], d.j[k], d.v[k]);
      e.add(5, 9, cd(1, 2));
      e.add(11, 9, cd(-3, 1));
      CsrMatrix D = build(e, DType::C64, ix);
      for (LuBackend be : {LuBackend::Umfpack, LuBackend::Klu}) {
        SparseLu lu(D, be);
        std::string m = message_of<InputError>([&] { lu.factorize(D); });
        BOOST_TEST(m.find("singular") != std::string::npos, lu_backend_name(be) << ": " << m);
      }
      // Two equal rows: singular in exact arithmetic, but rounding may leave a tiny
      // nonzero pivot instead of an exact zero; then the condition estimate says so.
      Triplets q;
      q.n = d.n;
      for (size_t k = 0; k < d.v.size(); ++k)
        if (d.i[k] != 5) q.add(d.i[k], d.j[k], d.v[k]);
      for (size_t k = 0; k < d.v.size(); ++k)
        if (d.i[k] == 11) q.add(5, d.j[k], d.v[k]);
      CsrMatrix Q = build(q, DType::C64, ix);
      for (LuBackend be : {LuBackend::Umfpack, LuBackend::Klu}) {
        SparseLu lu(Q, be);
        try {
          lu.factorize(Q);
          BOOST_TEST(lu.rcond() < 1e-10, lu_backend_name(be) << ": rcond " << lu.rcond());
        } catch (const InputError& x) {
          BOOST_TEST(std::string(x.what()).find("singular") != std::string::npos, x.what());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_matrix_without_entries_is_singular, *boost::unit_test::precondition(NeedSuiteSparse())) {
  CsrMatrix Z = CsrMatrix::from_coo(4, 4, std::vector<int64_t>{}, std::vector<int64_t>{}, std::vector<double>{});
  for (LuBackend be : {LuBackend::Umfpack, LuBackend::Klu}) {
    SparseLu lu(Z, be);
    std::string m = message_of<InputError>([&] { lu.factorize(Z); });
    BOOST_TEST(m.find("singular") != std::string::npos, lu_backend_name(be) << ": " << m);
  }
  SparseCholesky ch(Z);
  std::string m = message_of<InputError>([&] { ch.factorize(Z); });
  BOOST_TEST(m.find("not positive definite") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(not_positive_definite_names_the_column, *boost::unit_test::precondition(NeedSuiteSparse())) {
  for (DType ix : kIndex) {
    BOOST_TEST_CONTEXT("index " << dtype_name(ix)) {
      // Diagonal, positive except column 13.
      Triplets t;
      t.n = 40;
      for (int64_t r = 0; r < t.n; ++r) t.add(r, r, r == 13 ? -2.0 : 1.0 + double(r));
      CsrMatrix D = build(t, DType::F64, ix);
      SparseCholesky ch(D);
      std::string m = message_of<InputError>([&] { ch.factorize(D); });
      BOOST_TEST_MESSAGE("cholmod: " << m);
      BOOST_TEST(m.find("not positive definite") != std::string::npos, m);
      BOOST_TEST(m.find("column 13 of the matrix") != std::string::npos, m);
      BOOST_TEST(!ch.factorized());
      // Fixed values, same pattern: the analysis is reused and the factorization succeeds.
      Tensor v = Tensor::empty(DType::F64, {D.nnz()});
      for (int64_t k = 0; k < D.nnz(); ++k) v.data<double>()[k] = 2.0 + double(k);
      ch.refactorize(v);
      Tensor b = random_rhs(DType::F64, D.rows(), 0, 40);
      Tensor x = ch.solve(b);
      for (int64_t k = 0; k < D.nnz(); ++k)
        BOOST_TEST(std::abs(x.data<double>()[k] - b.data<double>()[k] / (2.0 + double(k))) < 1e-15);
      // Symmetric indefinite (shifted Poisson, supernodal-sized): also refused.
      Triplets s = random_spd(12, false, 41);
      for (int64_t r = 0; r < s.n; ++r) s.add(r, r, -6.0);
      CsrMatrix S = build(s, DType::F64, ix);
      SparseCholesky cs(S);
      std::string ms = message_of<InputError>([&] { cs.factorize(S); });
      BOOST_TEST(ms.find("not positive definite") != std::string::npos, ms);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_right_hand_sides, *boost::unit_test::precondition(NeedSuiteSparse())) {
  CsrMatrix A = build(random_spd(4, false, 42), DType::F64, DType::I32);
  SparseLu lu(A);
  BOOST_CHECK_THROW(lu.solve(random_rhs(DType::F64, A.rows(), 0, 43)), InputError);  // not factorized yet
  lu.factorize(A);
  BOOST_CHECK_THROW(lu.solve(random_rhs(DType::F64, A.rows() + 1, 0, 44)), InputError);
  BOOST_CHECK_THROW(lu.solve(Tensor::zeros(DType::F64, {A.rows(), 2, 2})), InputError);
  BOOST_CHECK_THROW(lu.solve(Tensor::zeros(DType::I32, {A.rows()})), InputError);
  // Not square.
  CsrMatrix R = CsrMatrix::from_coo(3, 4, std::vector<int64_t>{0, 1, 2}, std::vector<int64_t>{0, 1, 3}, std::vector<double>{1, 2, 3});
  BOOST_CHECK_THROW(SparseLu{R}, InputError);
  BOOST_CHECK_THROW(SparseCholesky{R}, InputError);
  // A moved-from handle says so instead of crashing.
  SparseLu moved = std::move(lu);
  BOOST_TEST(moved.factorized());
  BOOST_CHECK_THROW(lu.solve(random_rhs(DType::F64, A.rows(), 0, 45)), InputError);
  // Zero columns and an empty system.
  BOOST_TEST(moved.solve(Tensor::zeros(DType::F64, {A.rows(), 0})).numel() == 0);
  CsrMatrix E = CsrMatrix::from_coo(0, 0, std::vector<int64_t>{}, std::vector<int64_t>{}, std::vector<double>{});
  SparseLu le(E);
  le.factorize(E);
  BOOST_TEST(le.solve(Tensor::zeros(DType::F64, {0})).numel() == 0);
}

BOOST_AUTO_TEST_CASE(larger_poisson_residuals, *boost::unit_test::precondition(NeedSuiteSparse())) {
  // Too large for the dense reference: the residual in long double is the check.
  for (const CsrMatrix& A : {poisson2d(120), poisson3d(18)}) {
    Tensor b = random_rhs(DType::F64, A.rows(), 0, 46);
    for (Which w : {Which::Umfpack, Which::Klu, Which::Cholmod}) {
      Tensor x = direct(w, A, b);
      double r = relative_residual(A, x, b);
      BOOST_TEST(r < 1e-12, which_name(w) << " n=" << A.rows() << ": relative residual " << r);
    }
  }
}

// ---------------------------------------------------------------- rlx solve --method lu|klu|cholesky

namespace {

namespace fs = std::filesystem;

using rlx::test::CliResult;
using rlx::test::has;
using rlx::test::slurp;

fs::path scratch() {
  static fs::path dir = rlx::test::scratch_dir("rlx_direct_test_");
  return dir;
}

rlx::test::CliResult rlx_cli(const std::string& args) { return rlx::test::run_cli(RLX_CLI, args, scratch()); }

}  // namespace

BOOST_AUTO_TEST_CASE(cli_direct_methods, *boost::unit_test::precondition(NeedSuiteSparse())) {
  // A nonsymmetric matrix in a file: lu and klu must solve A x = b, not A^T x = b.
  CsrMatrix G = build(random_general(40, false, 47), DType::F64, DType::I32);
  const std::string g = (scratch() / "general.mtx").string();
  write_matrix_market(g, G);
  for (const char* m : {"lu", "klu"}) {
    const std::string x = (scratch() / (std::string("x_") + m + ".h5")).string();
    CliResult r = rlx_cli("solve " + g + " --method " + m + " --rhs random --out " + x);
    BOOST_TEST_CONTEXT(m << "\n" << r.out << r.err) {
#ifdef RLX_HAVE_HDF5
      BOOST_TEST(r.code == 0);
      BOOST_TEST(has(r.out, "reason: direct"));
      BOOST_TEST(has(r.out, "analyze"));
      io::H5Reader h(x);
      BOOST_TEST(std::get<int64_t>(h.attr("/", "converged")) == 1);
      BOOST_TEST(std::get<std::string>(h.attr("/", "reason")) == "direct");
      Tensor xs = h.read("x"), b = h.read("b");
      BOOST_TEST(rel_error(xs, dense_solve(G, b)) < kTol64);
      BOOST_TEST(std::get<double>(h.attr("/", "residual")) < 1e-12);
#else
      BOOST_TEST(r.code != 0);  // --out needs HDF5
#endif
    }
  }
  CliResult r = rlx_cli("solve poisson3d:6 --method cholesky");
  BOOST_TEST(r.code == 0, r.out << r.err);
  BOOST_TEST(has(r.out, "method: cholesky (cholmod"), r.out);
  // Singular (an all-zero row) and indefinite: exit 2 with SuiteSparse's finding.
  Triplets t = random_general(20, false, 48);
  for (size_t k = 0; k < t.v.size(); ++k)
    if (t.i[k] == 7) t.v[k] = 0;
  const std::string s = (scratch() / "singular.mtx").string();
  write_matrix_market(s, build(t, DType::F64, DType::I32));
  for (const char* m : {"lu", "klu"}) {
    r = rlx_cli("solve " + s + " --method " + m);
    BOOST_TEST(r.code == 2, m);
    BOOST_TEST(has(r.err, "singular matrix"), r.err);
    BOOST_TEST(has(r.err, "row 7 "), r.err);
    BOOST_TEST(has(r.err, s + ": "), r.err);  // the message names the file it came from
  }
  Triplets d;
  d.n = 5;
  for (int64_t i = 0; i < 5; ++i) d.add(i, i, i == 3 ? -1.0 : 2.0);
  const std::string ind = (scratch() / "indefinite.mtx").string();
  write_matrix_market(ind, build(d, DType::F64, DType::I32));
  r = rlx_cli("solve " + ind + " --method cholesky");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "not positive definite"), r.err);
  BOOST_TEST(has(r.err, "column 3 of the matrix"), r.err);
  BOOST_TEST(has(r.err, ind + ": "), r.err);
  fs::remove_all(scratch());
}
