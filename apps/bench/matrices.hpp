// Test matrices the benchmarks share (rlx-bench cuda's SpMV structures, rlx-bench layout):
// f64 values in [-1, 1), i32 indices, built on the host, deterministic from their seeds; and
// the SpMV program rlx-bench spmv and cuda time.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "ir/frontend.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/ops.hpp"

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

// An SPD matrix with long rows: B + B^T for B = power_law_csr(m) (values summed where both
// hold an entry), its diagonal set to 1 + the row's sum of |off-diagonal|, so that CG
// converges. Rows of ~290 nonzeros on average for m = 250000 (B's log-uniform lengths plus
// B's column counts).
inline sparse::CsrMatrix power_law_spd(int64_t m) {
  const sparse::CsrMatrix B = power_law_csr(m);
  const int32_t* rp = B.row_ptr().data<int32_t>();
  const int32_t* ci = B.col_idx().data<int32_t>();
  const double* v = B.values().data<double>();
  const int64_t nnz = B.nnz();
  // B^T by a counting sort on the columns (its rows come out sorted).
  std::vector<int64_t> tp(size_t(m) + 1, 0);
  for (int64_t k = 0; k < nnz; ++k) ++tp[size_t(ci[k]) + 1];
  for (int64_t r = 0; r < m; ++r) tp[size_t(r) + 1] += tp[size_t(r)];
  std::vector<int32_t> tc(static_cast<size_t>(nnz));
  std::vector<double> tv(static_cast<size_t>(nnz));
  std::vector<int64_t> at(tp.begin(), tp.end() - 1);
  for (int64_t r = 0; r < m; ++r)
    for (int32_t k = rp[r]; k < rp[r + 1]; ++k) {
      const int64_t q = at[size_t(ci[k])]++;
      tc[size_t(q)] = int32_t(r), tv[size_t(q)] = v[k];
    }
  // Row by row: merge B's row and B^T's (both sorted, B's without duplicates), the diagonal in its place.
  std::vector<int32_t> arp{0}, aci;
  std::vector<double> av;
  aci.reserve(size_t(2 * nnz + m)), av.reserve(size_t(2 * nnz + m));
  for (int64_t r = 0; r < m; ++r) {
    int64_t a = rp[r], b = tp[size_t(r)];
    const int64_t ae = rp[r + 1], be = tp[size_t(r) + 1];
    double off = 0;
    int64_t diag = -1;
    auto place_diagonal = [&] { diag = int64_t(aci.size()), aci.push_back(int32_t(r)), av.push_back(0.0); };
    while (a < ae || b < be) {
      const int32_t c = b >= be || (a < ae && ci[a] <= tc[size_t(b)]) ? ci[a] : tc[size_t(b)];
      if (diag < 0 && c > r) place_diagonal();
      double x = 0;
      while (a < ae && ci[a] == c) x += v[a++];
      while (b < be && tc[size_t(b)] == c) x += tv[size_t(b++)];
      if (c == r) {
        diag = int64_t(aci.size());
      } else {
        off += std::fabs(x);
      }
      aci.push_back(c), av.push_back(x);
    }
    if (diag < 0) place_diagonal();
    av[size_t(diag)] = 1.0 + off;
    arp.push_back(int32_t(aci.size()));
  }
  Tensor trp = Tensor::empty(DType::I32, {m + 1}), tci = Tensor::empty(DType::I32, {int64_t(aci.size())}),
         tva = Tensor::empty(DType::F64, {int64_t(av.size())});
  std::memcpy(trp.raw(), arp.data(), arp.size() * 4);
  std::memcpy(tci.raw(), aci.data(), aci.size() * 4);
  std::memcpy(tva.raw(), av.data(), av.size() * 8);
  return sparse::CsrMatrix(m, m, trp, tci, tva);
}

// y = A x (f64 x) compiled for d; its inputs are A's arrays (A.arrays()), then x.
inline Program spmv_program(const sparse::CsrMatrix& A, Device& d) {
  ir::Graph g;
  sparse::CsrVars V = A.ir_inputs(g, "A");
  Var x = input(g, "x", DType::F64, {A.cols()});
  output(g, {sparse::spmv(V, x)});
  return compile(g, d);
}

}  // namespace rlx::bench
