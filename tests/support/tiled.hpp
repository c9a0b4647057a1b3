// A random CSR matrix for the tiled layout's tests (tests/sparse, tests/cuda): empty rows,
// long rows and columns out of order (and repeated) in each row; and the error of a
// product against a long-double CSR product.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace rlx::test {

struct TiledCase {
  int64_t rows, cols;
  std::vector<int64_t> rp, ci;
  std::vector<double> val, x;
};

inline TiledCase tiled_case(uint64_t s, int64_t rows, int64_t cols) {
  std::mt19937_64 rng(s);
  std::uniform_int_distribution<int64_t> len(0, 300), col(0, cols - 1);
  std::uniform_real_distribution<double> u(-1, 1);
  TiledCase c{rows, cols, {0}, {}, {}, {}};
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r % 5 == 0 ? 0 : r % 17 == 0 ? 2000 : len(rng);  // (repeated columns allowed)
    for (int64_t k = 0; k < n; ++k) c.ci.push_back(col(rng)), c.val.push_back(u(rng));
    c.rp.push_back(int64_t(c.ci.size()));
  }
  for (int64_t j = 0; j < cols; ++j) c.x.push_back(u(rng));
  return c;
}

// Largest |got - want| / (sum |terms|) over the rows, want = alpha A x + beta y0 (y0 empty:
// none) computed in long double, the terms being those of alpha A x and beta y0; infinite
// where got is NaN.
inline double tiled_error(const TiledCase& c, const std::vector<double>& got, double alpha = 1, double beta = 0,
                          const std::vector<double>& y0 = {}) {
  double worst = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    long double want = 0, mag = 0;
    for (int64_t k = c.rp[size_t(r)]; k < c.rp[size_t(r) + 1]; ++k) {
      const long double p = (long double)c.val[size_t(k)] * c.x[size_t(c.ci[size_t(k)])];
      want += p;
      mag += std::fabs(double(p));
    }
    want *= alpha, mag *= std::fabs(alpha);
    if (!y0.empty()) want += (long double)beta * y0[size_t(r)], mag += std::fabs(beta * y0[size_t(r)]);
    const double e = std::fabs(got[size_t(r)] - double(want)) / double(mag + 1e-300L);
    if (std::isnan(e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace rlx::test
