// Test matrices the benchmarks share (rlx-bench cuda's SpMV structures, rlx-bench layout):
// f64 values in [-1, 1), i32 indices, built on the host, deterministic from their seeds.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "solvers/sparse/csr.hpp"

namespace rlx::bench {

// rows x cols with row r's columns from row_cols(r, cols) (sorted, duplicates dropped) and
// values drawn from `seed`.
inline sparse::CsrMatrix make_csr(int64_t rows, int64_t cols,
                                  const std::function<void(int64_t, std::vector<int32_t>&)>& row_cols, uint64_t seed) {
  std::vector<int32_t> rp{0}, ci;
  std::vector<int32_t> cols_of_row;
  for (int64_t r = 0; r < rows; ++r) {
    cols_of_row.clear();
    row_cols(r, cols_of_row);
    std::sort(cols_of_row.begin(), cols_of_row.end());
    cols_of_row.erase(std::unique(cols_of_row.begin(), cols_of_row.end()), cols_of_row.end());
    ci.insert(ci.end(), cols_of_row.begin(), cols_of_row.end());
    rp.push_back(int32_t(ci.size()));
  }
  const int64_t nnz = int64_t(ci.size());
  Tensor trp = Tensor::empty(DType::I32, {rows + 1}), tci = Tensor::empty(DType::I32, {nnz}),
         tv = Tensor::empty(DType::F64, {nnz});
  std::memcpy(trp.raw(), rp.data(), rp.size() * 4);
  std::memcpy(tci.raw(), ci.data(), ci.size() * 4);
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t k = 0; k < nnz; ++k) tv.data<double>()[k] = u(g);
  return sparse::CsrMatrix(rows, cols, trp, tci, tv);
}

// m x m with row lengths log-uniform in [1, 1000] and random columns ("power-law").
inline sparse::CsrMatrix power_law_csr(int64_t m) {
  std::mt19937_64 g(12);
  std::uniform_real_distribution<double> u(0, 1);
  return make_csr(m, m, [&](int64_t, std::vector<int32_t>& c) {
    const int64_t len = int64_t(std::exp(u(g) * std::log(1000.0)));
    for (int64_t k = 0; k < len; ++k) c.push_back(int32_t(g() % uint64_t(m)));
  }, 13);
}

}  // namespace rlx::bench
