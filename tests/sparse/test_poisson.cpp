// solvers/sparse's Poisson generators against the stencil formula.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <vector>

#include "tests/sparse/test_sparse.hpp"
#include "solvers/sparse/poisson.hpp"

// ------------------------------------------------------------------ Poisson

BOOST_AUTO_TEST_SUITE(poisson)

// The stencil, written from the definition: grid point p = x + n*y (+ n^2*z).
double stencil(int64_t n, int dim, int64_t p, int64_t q) {
  std::vector<int64_t> a(static_cast<size_t>(dim)), b(static_cast<size_t>(dim));
  for (int d = 0; d < dim; ++d) {
    a[size_t(d)] = p % n, b[size_t(d)] = q % n;
    p /= n, q /= n;
  }
  int64_t manhattan = 0;
  for (int d = 0; d < dim; ++d) manhattan += std::llabs(a[size_t(d)] - b[size_t(d)]);
  return manhattan == 0 ? 2.0 * dim : manhattan == 1 ? -1.0 : 0.0;
}

BOOST_AUTO_TEST_CASE(matches_the_stencil_formula) {
  for (int dim : {2, 3})
    for (int64_t n : {1, 2, 5}) {
      CsrMatrix A = dim == 2 ? poisson2d(n) : poisson3d(n);
      const int64_t N = dim == 2 ? n * n : n * n * n;
      BOOST_TEST(A.rows() == N);
      BOOST_TEST(A.cols() == N);
      BOOST_TEST(A.sorted_unique());
      int64_t face = dim == 2 ? n : n * n;
      BOOST_TEST(A.nnz() == N + 2 * dim * (n - 1) * face);
      std::vector<cd> d = dense_of(A);
      int bad = 0;
      for (int64_t p = 0; p < N; ++p)
        for (int64_t q = 0; q < N; ++q)
          if (d[size_t(p * N + q)] != stencil(n, dim, p, q) && bad++ < 5)
            BOOST_ERROR(dim << "D n=" << n << " entry (" << p << ", " << q << ") = " << d[size_t(p * N + q)].real()
                            << ", formula " << stencil(n, dim, p, q));
    }
}

BOOST_AUTO_TEST_CASE(dtypes_and_widths) {
  CsrMatrix A = poisson3d(4, DType::C64, DType::I64);
  BOOST_TEST(A.value_type() == DType::C64);
  BOOST_TEST(A.index_type() == DType::I64);
  BOOST_TEST(dense_of(A) == dense_of(poisson3d(4)), boost::test_tools::per_element());
  BOOST_TEST(poisson2d(3, DType::F32).value_type() == DType::F32);
  expect_error([] { poisson2d(0); }, {"n must be >= 1"});
  expect_error([] { poisson2d(3, DType::I32); }, {"f32, f64 or c64"});
  // 2000^3 rows need i64 indices.
  expect_error([] { poisson3d(2000, DType::F64, DType::I32); }, {"i64"});
}

BOOST_AUTO_TEST_SUITE_END()
