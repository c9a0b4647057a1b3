// The VJP of a sparse solve against central finite differences, on a nonsymmetric matrix
// (so the adjoint really needs A^T) with random b, cotangent and perturbed entries.
#define BOOST_TEST_MODULE adjoint
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <ctime>

#include "core/rng.hpp"
#include "solvers/sparse/adjoint.hpp"

using namespace rlx;
using namespace rlx::sparse;

namespace {

CsrMatrix nonsymmetric(int64_t n, uint64_t seed) {
  std::vector<int64_t> I, J;
  std::vector<double> V;
  for (int64_t i = 0; i < n; ++i) {
    I.push_back(i), J.push_back(i), V.push_back(4.0 + rng_unit(seed, uint64_t(i)));
    if (i + 1 < n) I.push_back(i), J.push_back(i + 1), V.push_back(-1.0 - rng_unit(seed, uint64_t(n + i)));
    if (i > 0) I.push_back(i), J.push_back(i - 1), V.push_back(-0.5);
    if (i + 5 < n) I.push_back(i), J.push_back(i + 5), V.push_back(0.3 * rng_unit(seed, uint64_t(3 * n + i)));
  }
  return CsrMatrix::from_coo(n, n, I, J, V);
}

Tensor vec(int64_t n, uint64_t seed) {
  Tensor t = Tensor::empty(DType::F64, {n});
  for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = rng_unit(seed, uint64_t(i)) * 2 - 1;
  return t;
}

KrylovOptions tight() {
  KrylovOptions o;
  o.method = "gmres";
  o.restart = 60;
  o.rtol = 1e-14;
  o.device = "reference";
  return o;
}

Tensor solve(const CsrMatrix& A, const Tensor& b) {
  CsrOperator op(A);
  auto M = make_preconditioner("none", op);
  return krylov_solve(op, b, *M, tight()).x;
}

double loss(const CsrMatrix& A, const Tensor& b, const Tensor& w) {
  Tensor x = solve(A, b);
  double l = 0;
  for (int64_t i = 0; i < x.numel(); ++i) l += w.data<double>()[i] * x.data<double>()[i];
  return l;
}

}  // namespace

BOOST_AUTO_TEST_CASE(vjp_matches_finite_differences) {
  uint64_t seed = uint64_t(std::time(nullptr));
  BOOST_TEST_MESSAGE("adjoint seed " << seed);
  const int64_t n = 40;
  CsrMatrix A = nonsymmetric(n, seed);
  Tensor b = vec(n, seed + 1), w = vec(n, seed + 2);
  Tensor x = solve(A, b);
  SolveVjp g = solve_vjp(A, x, w, tight());
  BOOST_TEST(converged(g.adjoint.reason));
  const double h = 1e-6;
  for (int64_t i : {int64_t(0), n / 3, n - 1}) {
    Tensor bp = b.clone(), bm = b.clone();
    bp.data<double>()[i] += h;
    bm.data<double>()[i] -= h;
    double fd = (loss(A, bp, w) - loss(A, bm, w)) / (2 * h);
    // Central differences carry ~eps*|L|/h = 1e-10 of rounding: an absolute floor of 1e-8
    // keeps small entries from failing on that noise while any real error (>= 1e-6) fails.
    BOOST_TEST(std::abs(g.grad_b.data<double>()[i] - fd) <= 1e-8 + 1e-6 * std::abs(fd), "b[" << i << "]: " << g.grad_b.data<double>()[i] << " vs " << fd);
  }
  for (int64_t k : {int64_t(0), A.nnz() / 2, A.nnz() - 1, int64_t(7)}) {
    auto perturbed = [&](double d) {
      Tensor v = A.values().clone();
      v.data<double>()[k] += d;
      return CsrMatrix(A.rows(), A.cols(), A.row_ptr(), A.col_idx(), v);
    };
    double fd = (loss(perturbed(h), b, w) - loss(perturbed(-h), b, w)) / (2 * h);
    BOOST_TEST(std::abs(g.grad_values.data<double>()[k] - fd) <= 1e-8 + 1e-6 * std::abs(fd),
               "values[" << k << "]: " << g.grad_values.data<double>()[k] << " vs " << fd);
  }
}

BOOST_AUTO_TEST_CASE(conj_transpose_is_an_involution) {
  CsrMatrix A = nonsymmetric(12, 5);
  CsrMatrix T = conj_transpose(conj_transpose(A));
  Tensor a = A.to_dense(), t = T.to_dense();
  for (int64_t i = 0; i < a.numel(); ++i) BOOST_TEST(a.data<double>()[i] == t.data<double>()[i]);
  Tensor at = conj_transpose(A).to_dense();
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t j = 0; j < 12; ++j) BOOST_TEST(at.data<double>()[i * 12 + j] == a.data<double>()[j * 12 + i]);
}
