// Dense solve through lu_factor/lu_solve, and its VJP against central finite differences,
// on every device, for a vector and a matrix right-hand side.
#define BOOST_TEST_MODULE dense_solve
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <ctime>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "runtime/device.hpp"
#include "solvers/dense/solve.hpp"

using namespace rlx;

namespace {

Tensor random(Shape s, uint64_t seed, double diag = 0) {
  Tensor t = Tensor::empty(DType::F64, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng_unit(seed, uint64_t(i)) * 2 - 1;
  if (diag != 0)
    for (int64_t i = 0; i < s[0]; ++i) t.data<double>()[i * s[0] + i] += diag;
  return t;
}

// L = sum(W * X(A, B)): dL/dX = W.
double loss(const Tensor& A, const Tensor& B, const Tensor& W, const std::string& dev) {
  Tensor X = dense::solve(A, B, dev);
  double l = 0;
  for (int64_t i = 0; i < X.numel(); ++i) l += W.data<double>()[i] * X.data<double>()[i];
  return l;
}

}  // namespace

BOOST_AUTO_TEST_CASE(solve_and_vjp_match_finite_differences) {
  uint64_t seed = uint64_t(std::time(nullptr));
  BOOST_TEST_MESSAGE("dense solve seed " << seed);
  const int64_t n = 9;
  for (Device* d : DeviceRegistry::get().runnable())
    for (Shape bs : {Shape{n}, Shape{n, 3}}) {
      const std::string dev = d->name();
      Tensor A = random({n, n}, seed, 4.0), B = random(bs, seed + 1), W = random(bs, seed + 2);
      Tensor X = dense::solve(A, B, dev);
      // A X = B
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < (bs.size() == 2 ? bs[1] : 1); ++c) {
          int64_t k = bs.size() == 2 ? bs[1] : 1;
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += A.data<double>()[i * n + j] * X.data<double>()[j * k + c];
          BOOST_TEST(acc == B.data<double>()[i * k + c], boost::test_tools::tolerance(1e-10));
        }
      auto g = dense::solve_vjp(A, X, W, dev);
      const double h = 1e-6;
      for (int64_t e : {int64_t(0), n + 2, n * n - 1}) {
        Tensor Ap = A.clone(), Am = A.clone();
        Ap.data<double>()[e] += h;
        Am.data<double>()[e] -= h;
        double fd = (loss(Ap, B, W, dev) - loss(Am, B, W, dev)) / (2 * h);
        BOOST_TEST(std::abs(g.grad_A.data<double>()[e] - fd) <= 1e-8 + 1e-6 * std::abs(fd), "A[" << e << "] on " << dev);
      }
      for (int64_t e : {int64_t(0), B.numel() - 1}) {
        Tensor Bp = B.clone(), Bm = B.clone();
        Bp.data<double>()[e] += h;
        Bm.data<double>()[e] -= h;
        double fd = (loss(A, Bp, W, dev) - loss(A, Bm, W, dev)) / (2 * h);
        BOOST_TEST(std::abs(g.grad_B.data<double>()[e] - fd) <= 1e-8 + 1e-6 * std::abs(fd), "B[" << e << "] on " << dev);
      }
    }
}

BOOST_AUTO_TEST_CASE(bad_shapes_are_named) {
  BOOST_CHECK_THROW(dense::solve(random({3, 4}, 1), random({3}, 2)), InputError);
  BOOST_CHECK_THROW(dense::solve(random({3, 3}, 1), random({4}, 2)), InputError);
}
