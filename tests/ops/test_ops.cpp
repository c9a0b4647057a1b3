// The op suite. L2: every primitive x every dtype it declares x every registered device,
// on fresh random inputs, against the reference device. L1: every semantic op, compiled
// through its lowering on every device, against a direct double-precision computation
// written here. Adding an op means adding one row to l2_cases() or l1_cases().
#define BOOST_TEST_MODULE ops
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "harness.hpp"
#include "ir/op_registry.hpp"
#include "solvers/sparse/tiled.hpp"
#include "tests/splat/oracle.hpp"
#include "tests/support/tensors.hpp"

namespace rlx::test {
namespace {

namespace utf = boost::unit_test;

// ---------------------------------------------------------------- L2 table

using Make = std::function<std::vector<Var>(Build&, DType)>;
struct Variant {
  std::string label;
  Make make;
};
struct OpCase {
  std::string op;
  std::vector<Variant> variants;
};

const Range kPositive{.lo = 0.1, .hi = 4, .ilo = 1, .ihi = 9};
const Range kNonzero{.nonzero = true};
const Range kCoarse{.ilo = -3, .ihi = 3, .quantum = 0.5};             // many ties and equal pairs
const Range kQuarters{.lo = -4, .hi = 4, .quantum = 0.25};            // exact halves for round/floor/ceil
const Range kWide{.lo = -300, .hi = 300, .ilo = -1000, .ihi = 1000};  // saturating and wrapping casts

std::vector<Var> one(Var v) { return {v}; }

// Each family has tiny cases and one larger, odd-sized case, big enough to reach a
// device's vectorized and multi-threaded paths (with their remainders).
std::vector<Variant> unary(const std::string& op, Range r = {}) {
  auto v = [op, r](Shape s) { return [op, r, s](Build& b, DType t) { return one(rlx::op(op, {b.in(t, s, r)})); }; };
  return {{"[2,3,4]", v({2, 3, 4})}, {"[37,259]", v({37, 259})}};
}

std::vector<Variant> binary(const std::string& op, Range ra = {}, Range rb = {}) {
  auto v = [op, ra, rb](Shape sa, Shape sb) {
    return [op, ra, rb, sa, sb](Build& b, DType t) { return one(rlx::op(op, {b.in(t, sa, ra), b.in(t, sb, rb)})); };
  };
  return {{"[3,4]+[3,4]", v({3, 4}, {3, 4})},
          {"[2,3,4]+[4]", v({2, 3, 4}, {4})},
          {"[3,1]+[1,4]", v({3, 1}, {1, 4})},
          {"[]+[3,4]", v({}, {3, 4})},
          {"[45,257]+[257]", v({45, 257}, {257})}};
}

// long_rows: also reduce 531 elements at a time (not for prod, which would under- or
// overflow).
std::vector<Variant> reduction(const std::string& op, Range r = {}, bool long_rows = true) {
  auto v = [op, r](Shape s, std::vector<int64_t> axes, bool keep) {
    return [op, r, s, axes, keep](Build& b, DType t) {
      return one(rlx::op(op, {b.in(t, s, r)}, {{"axes", axes}, {"keepdims", keep}}));
    };
  };
  std::vector<Variant> vs = {{"all", v({2, 3, 4}, {}, false)},
                             {"axes=[1]", v({2, 3, 4}, {1}, false)},
                             {"axes=[0,2],keepdims", v({2, 3, 4}, {0, 2}, true)},
                             {"axes=[-1]", v({2, 3, 4}, {-1}, false)},
                             {"[517,5] axes=[1]", v({517, 5}, {1}, false)},
                             {"[5,517] axes=[0]", v({5, 517}, {0}, false)}};
  if (long_rows) vs.push_back({"[29,531] axes=[1]", v({29, 531}, {1}, false)});
  return vs;
}

// ---- sparse library primitives: fresh random CSR structures every run

// A random rows x cols CSR structure: each row holds 0..max_per_row distinct columns
// (about one row in five is empty), in increasing order or shuffled. With `diagonal`
// the matrix is square and every row also stores its diagonal. A negative max_per_row
// makes a skewed matrix: every 97th row is full, the others hold 0..3 entries (what a
// row partition that balances rows instead of nonzeros gets wrong).
struct RandomCsr {
  Tensor row_ptr, col_idx;
  std::vector<int64_t> row_of;  // per entry
  int64_t nnz() const { return col_idx.numel(); }
};
RandomCsr random_csr(std::mt19937_64& rng, DType index, int64_t rows, int64_t cols, int64_t max_per_row,
                     bool shuffled, bool diagonal = false) {
  std::vector<int64_t> ptr = {0}, col, row_of;
  std::vector<int64_t> pool(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) pool[size_t(j)] = j;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t most = max_per_row < 0 ? (r % 97 == 0 ? cols : 3) : std::min(max_per_row, cols);
    int64_t count = max_per_row < 0 && r % 97 == 0 ? cols
                    : rng() % 5 == 0           ? 0
                                               : int64_t(rng() % uint64_t(most + 1));
    std::vector<int64_t> picked;
    if (diagonal) picked.push_back(r);
    for (int64_t k = 0; k < count; ++k) {  // partial Fisher-Yates: distinct columns
      std::swap(pool[size_t(k)], pool[size_t(k + int64_t(rng() % uint64_t(cols - k)))]);
      if (!diagonal || pool[size_t(k)] != r) picked.push_back(pool[size_t(k)]);
    }
    if (shuffled)
      std::shuffle(picked.begin(), picked.end(), rng);
    else
      std::sort(picked.begin(), picked.end());
    for (int64_t c : picked) col.push_back(c), row_of.push_back(r);
    ptr.push_back(int64_t(col.size()));
  }
  std::vector<cd> p(ptr.begin(), ptr.end()), c(col.begin(), col.end());
  return {make_tensor(index, {rows + 1}, p), make_tensor(index, {int64_t(col.size())}, c), row_of};
}

// spmv_csr: A [rows, cols] x; with y0: alpha*A*x + beta*y0.
Make spmv_case(int64_t rows, int64_t cols, int64_t per_row, DType index, bool shuffled, double alpha,
               std::optional<double> beta) {
  return [=](Build& b, DType t) {
    RandomCsr a = random_csr(b.rng, index, rows, cols, per_row, shuffled);
    std::vector<Var> in = {b.fixed(a.row_ptr), b.fixed(a.col_idx), b.in(t, {a.nnz()}), b.in(t, {cols})};
    ir::Attrs at = {{"cols", cols}, {"alpha", alpha}};
    if (beta) {
      in.push_back(b.in(t, {rows}));
      at.set("beta", *beta);
    }
    return one(rlx::op("spmv_csr", in, at));
  };
}

Make spmm_case(int64_t rows, int64_t cols, int64_t width, int64_t per_row, DType index, bool shuffled) {
  return [=](Build& b, DType t) {
    RandomCsr a = random_csr(b.rng, index, rows, cols, per_row, shuffled);
    return one(rlx::op("spmm_csr", {b.fixed(a.row_ptr), b.fixed(a.col_idx), b.in(t, {a.nnz()}), b.in(t, {cols, width})},
                       {{"cols", cols}}));
  };
}

// sptrsv_csr on a square matrix with entries in both triangles (only one is read). A
// non-unit diagonal dominates its row (|d| in [8, 10], at most 5 off-diagonal entries of
// size <= 1.5); for unit_diagonal the stored diagonal is 0 (it must not be read) and
// the off-diagonal entries are small, so the solution stays bounded.
Make sptrsv_case(int64_t n, int64_t per_row, DType index, bool lower, bool unit) {
  return [=](Build& b, DType t) {
    RandomCsr a = random_csr(b.rng, index, n, n, per_row, true, true);
    std::uniform_real_distribution<double> off(unit ? -0.1 : -1.0, unit ? 0.1 : 1.0), mag(8, 10), phase(0, 6.283);
    std::vector<cd> v(size_t(a.nnz()));
    for (int64_t k = 0; k < a.nnz(); ++k) {
      const bool diag = int_at(a.col_idx, k) == a.row_of[size_t(k)];
      if (diag)
        v[size_t(k)] = unit ? cd(0) : t == DType::C64 ? std::polar(mag(b.rng), phase(b.rng)) : cd(mag(b.rng) * (b.rng() % 2 ? 1 : -1));
      else
        v[size_t(k)] = cd(off(b.rng), t == DType::C64 ? off(b.rng) : 0.0);
    }
    Var vals = b.fixed(make_tensor(t, {a.nnz()}, v));
    return one(rlx::op("sptrsv_csr", {b.fixed(a.row_ptr), b.fixed(a.col_idx), vals, b.in(t, {n})},
                       {{"cols", n}, {"lower", lower}, {"unit_diagonal", unit}}));
  };
}

// spmv_tiled: a random CSR matrix (fixed structure, random values) laid out in tiles of
// rb x panel (src/ir/ops/tiled_layout.hpp) for `warps` shares per tile; with y0:
// alpha*A*x + beta*y0.
Make spmv_tiled_case(int64_t rows, int64_t cols, int64_t per_row, int rb, int panel, int warps, double alpha,
                     std::optional<double> beta) {
  return [=](Build& b, DType t) {
    RandomCsr a = random_csr(b.rng, DType::I64, rows, cols, per_row, true);
    Tensor vals = Tensor::empty(DType::F64, {a.nnz()});
    std::uniform_real_distribution<double> u(-1, 1);
    for (int64_t k = 0; k < a.nnz(); ++k) vals.data<double>()[k] = u(b.rng);
    const sparse::TiledCsr tc = sparse::tile_csr(a.row_ptr, a.col_idx, vals, rows, cols, rb, panel, warps);
    const std::vector<Tensor> arr = sparse::tiled_tensors(tc);
    std::vector<Var> in = {b.fixed(arr[0]), b.fixed(arr[1]), b.fixed(arr[2]), b.in(t, {cols})};
    ir::Attrs at = {{"rows", rows}, {"cols", cols}, {"rb", int64_t(rb)}, {"panel", int64_t(panel)},
                    {"warps", int64_t(warps)}, {"alpha", alpha}};
    if (beta) {
      in.push_back(b.in(t, {rows}));
      at.set("beta", *beta);
    }
    return one(rlx::op("spmv_tiled", in, at));
  };
}

// tile_csr: the layout of a random CSR matrix (fixed structure, random values); every
// device's three arrays against the reference device's.
Make tile_csr_case(int64_t rows, int64_t cols, int64_t per_row, DType index, int rb, int panel, int warps) {
  return [=](Build& b, DType t) {
    RandomCsr a = random_csr(b.rng, index, rows, cols, per_row, true);
    return rlx::op_multi("tile_csr", {b.fixed(a.row_ptr), b.fixed(a.col_idx), b.in(t, {a.nnz()})},
                         {{"cols", cols}, {"rb", int64_t(rb)}, {"panel", int64_t(panel)}, {"warps", int64_t(warps)}});
  };
}

// The larger cases have more work than the cpu device's threading threshold and rows
// longer than one vector step.
std::vector<OpCase> sparse_cases() {
  const DType I32 = DType::I32, I64 = DType::I64;
  std::optional<double> none;
  return {
      {"spmv_csr",
       {{"[7x5] i32", spmv_case(7, 5, 4, I32, false, 1.0, none)},
        {"[6x9] i64 shuffled alpha=-1.5", spmv_case(6, 9, 9, I64, true, -1.5, none)},
        {"[5x5] i32 y0 alpha=2 beta=-0.5", spmv_case(5, 5, 3, I32, false, 2.0, -0.5)},
        {"[4x6] i64 y0 beta=0", spmv_case(4, 6, 6, I64, false, 1.0, 0.0)},
        {"[0x3] i32", spmv_case(0, 3, 2, I32, false, 1.0, none)},
        {"[3001x2003] i32 shuffled", spmv_case(3001, 2003, 37, I32, true, 1.0, none)},
        {"[2999x1501] i64 y0 alpha=0.75 beta=1.25", spmv_case(2999, 1501, 41, I64, false, 0.75, 1.25)},
        {"[4001x1999] i32 skewed: every 97th row full", spmv_case(4001, 1999, -1, I32, false, 1.0, none)}}},
      {"spmv_tiled",
       {{"[7x5] tiles 2x2, 1 warp", spmv_tiled_case(7, 5, 4, 2, 2, 1, 1.0, none)},
        {"[9x13] tiles 4x5, 3 warps, y0 alpha=2 beta=-0.5", spmv_tiled_case(9, 13, 9, 4, 5, 3, 2.0, -0.5)},
        {"[0x3] tiles 2x2", spmv_tiled_case(0, 3, 2, 2, 2, 1, 1.0, none)},
        {"[3001x2003] tiles 512x700 (odd panel), 32 warps", spmv_tiled_case(3001, 2003, 37, 512, 700, 32, 1.0, none)},
        {"[2999x1501] tiles 3000x1501, 8 warps, y0 alpha=0.75 beta=1.25",
         spmv_tiled_case(2999, 1501, 41, 3000, 1501, 8, 0.75, 1.25)},
        {"[4001x1999] skewed, tiles 1024x512, 32 warps", spmv_tiled_case(4001, 1999, -1, 1024, 512, 32, 1.0, none)}}},
      {"tile_csr",
       {{"[7x5] i32 tiles 2x2, 1 warp", tile_csr_case(7, 5, 4, I32, 2, 2, 1)},
        {"[9x13] i64 tiles 4x5, 3 warps", tile_csr_case(9, 13, 9, I64, 4, 5, 3)},
        {"[0x3] i32 tiles 2x2", tile_csr_case(0, 3, 2, I32, 2, 2, 1)},
        {"[3001x2003] i32 tiles 512x700, 32 warps", tile_csr_case(3001, 2003, 37, I32, 512, 700, 32)},
        {"[4001x1999] i64 skewed, tiles 1024x512, 32 warps", tile_csr_case(4001, 1999, -1, I64, 1024, 512, 32)}}},
      {"spmm_csr",
       {{"[7x5]@[5,3] i32", spmm_case(7, 5, 3, 4, I32, false)},
        {"[6x4]@[4,1] i64 shuffled", spmm_case(6, 4, 1, 4, I64, true)},
        {"[2001x1003]@[1003,7] i64 shuffled", spmm_case(2001, 1003, 7, 57, I64, true)},
        {"[1999x999]@[999,33] i32", spmm_case(1999, 999, 33, 45, I32, false)},
        {"[3001x997]@[997,2] i32 skewed", spmm_case(3001, 997, 2, -1, I32, false)}}},
      {"sptrsv_csr",
       {{"[9] lower i32", sptrsv_case(9, 6, I32, true, false)},
        {"[9] upper i64", sptrsv_case(9, 6, I64, false, false)},
        {"[8] lower unit i64", sptrsv_case(8, 6, I64, true, true)},
        {"[8] upper unit i32", sptrsv_case(8, 6, I32, false, true)},
        {"[2503] lower i64", sptrsv_case(2503, 10, I64, true, false)},
        {"[2503] upper unit i32", sptrsv_case(2503, 10, I32, false, true)}}},
  };
}

// ---- dense linear-algebra library primitives. These rows reduce each op to results that
// are unique (Q R rather than Q, U diag(S) Vh rather than U) so that they compare with
// the reference element-wise; tests/ops/test_dense_la.cpp checks the ops in depth
// (invariants, larger sizes, hand-computed and error cases).

// A well-conditioned [r, c] matrix as a fixed input: uniform [-1, 1] (each part for c64)
// plus `shift` on the diagonal. kind "rows-shuffled": the rows permuted, so that LU must
// pivot; "hpd": B B^H + shift I; "hermitian": (B + B^H) / 2.
Var dense_input(Build& b, DType t, int64_t r, int64_t c, double shift, const std::string& kind = "") {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<cd> a(static_cast<size_t>(r * c));
  for (cd& x : a) {
    const double re = u(b.rng);
    x = t == DType::C64 ? cd(re, u(b.rng)) : cd(re);
  }
  auto at = [&](std::vector<cd>& m, int64_t i, int64_t j) -> cd& { return m[size_t(i * c + j)]; };
  std::vector<cd> m = a;
  if (kind == "hpd" || kind == "hermitian")
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) {
        cd s = 0;
        if (kind == "hpd")
          for (int64_t k = 0; k < c; ++k) s += at(a, i, k) * std::conj(at(a, j, k));
        else
          s = 0.5 * (at(a, i, j) + std::conj(at(a, j, i)));
        at(m, i, j) = s;
      }
  for (int64_t i = 0; i < std::min(r, c); ++i) at(m, i, i) = (kind.empty() || kind == "rows-shuffled" ? at(m, i, i) : cd(at(m, i, i).real())) + shift;
  if (kind == "rows-shuffled") {
    std::vector<int64_t> p(static_cast<size_t>(r));
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), b.rng);
    std::vector<cd> sh(m.size());
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) at(sh, i, j) = at(m, p[size_t(i)], j);
    m = sh;
  }
  return b.fixed(make_tensor(t, {r, c}, m));
}

// x * diag(d) for a real d (the singular values or eigenvalues) over x's columns.
Var scale_columns(const Var& x, const Var& d) { return rlx::mul(x, rlx::cast(d, x.dtype())); }
// x^H (x^T for real dtypes).
Var adjoint_of(const Var& x) { return rlx::permute(x.dtype() == DType::C64 ? rlx::conj(x) : x, {1, 0}); }

std::vector<OpCase> dense_la_cases() {
  using B = Build&;
  auto lu = [](int64_t n) {
    return [n](B b, DType t) { return rlx::op_multi("lu_factor", {dense_input(b, t, n, n, double(n), "rows-shuffled")}); };
  };
  auto lu_solve = [](int64_t n, Shape rhs) {
    return [n, rhs](B b, DType t) {
      auto f = rlx::op_multi("lu_factor", {dense_input(b, t, n, n, double(n), "rows-shuffled")});
      return one(rlx::op("lu_solve", {f[0], f[1], b.in(t, rhs, {.lo = -1, .hi = 1})}));
    };
  };
  auto chol = [](int64_t n) { return [n](B b, DType t) { return one(rlx::op("cholesky", {dense_input(b, t, n, n, double(n), "hpd")})); }; };
  auto chol_solve = [](int64_t n, Shape rhs) {
    return [n, rhs](B b, DType t) {
      Var l = rlx::op("cholesky", {dense_input(b, t, n, n, double(n), "hpd")});
      return one(rlx::op("cholesky_solve", {l, b.in(t, rhs, {.lo = -1, .hi = 1})}));
    };
  };
  // Unit diagonal: kept small, since a unit triangular matrix with O(1) entries grows
  // ill-conditioned with n.
  auto tri = [](int64_t n, Shape rhs, bool lower, bool unit) {
    return [=](B b, DType t) {
      return one(rlx::op("triangular_solve", {dense_input(b, t, n, n, unit ? 0.0 : double(n)), b.in(t, rhs, {.lo = -1, .hi = 1})},
                         {{"lower", lower}, {"unit_diagonal", unit}}));
    };
  };
  auto qr = [](int64_t m, int64_t n) {
    return [m, n](B b, DType t) {
      auto f = rlx::op_multi("qr", {dense_input(b, t, m, n, double(n))});
      return std::vector<Var>{rlx::matmul(f[0], f[1]), rlx::abs(f[1])};  // |R|: unique up to phases
    };
  };
  auto lstsq = [](int64_t m, int64_t n, Shape rhs) {
    return [=](B b, DType t) { return one(rlx::op("lstsq", {dense_input(b, t, m, n, std::sqrt(double(m))), b.in(t, rhs, {.lo = -1, .hi = 1})})); };
  };
  auto svd = [](int64_t m, int64_t n) {
    return [m, n](B b, DType t) {
      auto f = rlx::op_multi("svd", {dense_input(b, t, m, n, 0.0)});
      return std::vector<Var>{f[1], rlx::matmul(scale_columns(f[0], f[1]), f[2])};
    };
  };
  auto eigh = [](int64_t n) {
    return [n](B b, DType t) {
      auto f = rlx::op_multi("eigh", {dense_input(b, t, n, n, 0.0, "hermitian")});
      return std::vector<Var>{f[0], rlx::matmul(scale_columns(f[1], f[0]), adjoint_of(f[1]))};
    };
  };
  auto slogdet = [](int64_t n) {
    return [n](B b, DType t) { return rlx::op_multi("slogdet", {dense_input(b, t, n, n, double(n), "rows-shuffled")}); };
  };
  return {
      {"lu_factor", {{"[4,4] rows shuffled", lu(4)}, {"[67,67] rows shuffled", lu(67)}}},
      {"lu_solve", {{"[5,5] b[5]", lu_solve(5, {5})}, {"[67,67] B[67,3]", lu_solve(67, {67, 3})}}},
      {"cholesky", {{"[5,5]", chol(5)}, {"[67,67]", chol(67)}}},
      {"cholesky_solve", {{"[5,5] b[5]", chol_solve(5, {5})}, {"[67,67] B[67,3]", chol_solve(67, {67, 3})}}},
      {"triangular_solve",
       {{"lower [67,67] B[67,3]", tri(67, {67, 3}, true, false)},
        {"upper [67,67] b[67]", tri(67, {67}, false, false)},
        {"lower unit [6,6] B[6,2]", tri(6, {6, 2}, true, true)},
        {"upper unit [6,6] b[6]", tri(6, {6}, false, true)}}},
      {"qr", {{"[7,4] -> Q R, |R|", qr(7, 4)}, {"[30,30] -> Q R, |R|", qr(30, 30)}}},
      {"lstsq", {{"[9,4] b[9]", lstsq(9, 4, {9})}, {"[67,30] B[67,3]", lstsq(67, 30, {67, 3})}}},
      {"svd", {{"[7,4] -> S, U S Vh", svd(7, 4)}, {"[4,7] -> S, U S Vh", svd(4, 7)}, {"[30,30] -> S, U S Vh", svd(30, 30)}}},
      {"eigh", {{"[5,5] -> w, V w V^H", eigh(5)}, {"[30,30] -> w, V w V^H", eigh(30)}}},
      {"slogdet", {{"[4,4]", slogdet(4)}, {"[67,67]", slogdet(67)}}},
  };
}

const std::vector<OpCase>& l2_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    for (const char* op : {"neg", "abs", "sin", "cos", "tanh", "erf", "logical_not", "real", "imag", "conj"})
      c.push_back({op, unary(op)});
    c.push_back({"exp", unary("exp", {.lo = -3, .hi = 3})});
    for (const char* op : {"log", "sqrt", "rsqrt"}) c.push_back({op, unary(op, kPositive)});
    c.push_back({"recip", unary("recip", kNonzero)});
    for (const char* op : {"floor", "ceil", "round", "sign"}) c.push_back({op, unary(op, kQuarters)});

    for (const char* op : {"add", "sub", "mul", "logical_and", "logical_or", "make_complex"})
      c.push_back({op, binary(op)});
    c.push_back({"div", binary("div", {}, kNonzero)});
    c.push_back({"pow", binary("pow", {.lo = 0.1, .hi = 3}, {})});
    for (const char* op : {"maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"})
      c.push_back({op, binary(op, kCoarse, kCoarse)});
    c.push_back({"where",
                 {{"[3,1],[3,4],[4]",
                   [](Build& b, DType t) {
                     return one(where(b.in(DType::Bool, {3, 1}), b.in(t, {3, 4}), b.in(t, {4})));
                   }},
                  {"[2,3],[2,3],[]",
                   [](Build& b, DType t) {
                     return one(where(b.in(DType::Bool, {2, 3}), b.in(t, {2, 3}), b.in(t, {})));
                   }},
                  {"[61,1],[61,257],[257]", [](Build& b, DType t) {
                     return one(where(b.in(DType::Bool, {61, 1}), b.in(t, {61, 257}), b.in(t, {257})));
                   }}}});
    std::vector<Variant> casts;
    for (DType to : kAllDTypes)
      casts.push_back({std::string("to ") + dtype_name(to), [to](Build& b, DType t) {
                         return one(cast(b.in(t, {3, 5}, kWide), to));
                       }});
    for (DType to : {DType::F32, DType::I8})
      casts.push_back({std::string("[61,257] to ") + dtype_name(to), [to](Build& b, DType t) {
                         return one(cast(b.in(t, {61, 257}, kWide), to));
                       }});
    c.push_back({"cast", casts});

    c.push_back({"sum", reduction("sum")});
    c.push_back({"prod", reduction("prod", {.lo = 0.5, .hi = 1.5, .ilo = -2, .ihi = 2}, false)});
    c.push_back({"max", reduction("max")});
    c.push_back({"min", reduction("min")});
    auto arg = [](Shape s, int64_t axis, bool keep) {
      return [s, axis, keep](Build& b, DType t) { return one(argmax(b.in(t, s, kCoarse), axis, keep)); };
    };
    c.push_back({"argmax",
                 {{"axis=0", arg({3, 4, 5}, 0, false)},
                  {"axis=1", arg({3, 4, 5}, 1, false)},
                  {"axis=-1,keepdims", arg({3, 4, 5}, -1, true)},
                  {"[37,601] axis=1", arg({37, 601}, 1, false)},
                  {"[601,37] axis=0", arg({601, 37}, 0, false)}}});
    auto scan = [](Shape s, int64_t axis, bool excl, bool rev) {
      return [s, axis, excl, rev](Build& b, DType t) { return one(cumsum(b.in(t, s), axis, excl, rev)); };
    };
    c.push_back({"cumsum",
                 {{"axis=1", scan({3, 4, 2}, 1, false, false)},
                  {"axis=0,exclusive", scan({3, 4, 2}, 0, true, false)},
                  {"axis=-1,reverse", scan({3, 4, 2}, -1, false, true)},
                  {"axis=1,exclusive,reverse", scan({3, 4, 2}, 1, true, true)},
                  {"[7,2053] axis=1", scan({7, 2053}, 1, false, false)},
                  {"[2053,7] axis=0,exclusive", scan({2053, 7}, 0, true, false)}}});
    // sort: floats drawn from a small set with NaN, +-0 and +-inf among them (many ties,
    // so stability shows in the indices); ints from a narrow range.
    auto sorting = [](Shape s, int64_t axis, bool descending) {
      return [s, axis, descending](Build& b, DType t) {
        if (!is_float(t)) {
          Sorted r = sort(b.in(t, s, kCoarse), axis, descending);
          return std::vector<Var>{r.values, r.indices};
        }
        const double specials[] = {std::nan(""), -std::numeric_limits<double>::infinity(),
                                   std::numeric_limits<double>::infinity(), -0.0, 0.0};
        std::vector<cd> v(size_t(numel(s)));
        for (cd& e : v) e = b.rng() % 4 == 0 ? specials[b.rng() % 5] : double(int64_t(b.rng() % 13) - 6) * 0.5;
        Sorted r = sort(b.fixed(make_tensor(t, s, v)), axis, descending);
        return std::vector<Var>{r.values, r.indices};
      };
    };
    c.push_back({"sort",
                 {{"[5,7] axis=-1", sorting({5, 7}, -1, false)},
                  {"[4,6,3] axis=1 descending", sorting({4, 6, 3}, 1, true)},
                  {"[9,4] axis=0", sorting({9, 4}, 0, false)},
                  {"[6] axis=0 descending", sorting({6}, 0, true)},
                  {"[3,1] axis=1 (rows of one)", sorting({3, 1}, 1, false)},
                  {"[0,4] axis=1 (empty)", sorting({0, 4}, 1, false)},
                  {"[3,0] axis=1 (empty rows)", sorting({3, 0}, 1, true)},
                  {"[37,601] axis=1", sorting({37, 601}, 1, false)},
                  {"[601,37] axis=0 descending", sorting({601, 37}, 0, true)},
                  {"[3,5000] axis=1 (long rows)", sorting({3, 5000}, 1, false)},
                  {"[4099,2] axis=0 descending (long rows)", sorting({4099, 2}, 0, true)},
                  {"[70001] axis=0 (one row sorted by every thread)", sorting({70001}, 0, false)}}});

    auto mm = [](Shape sa, Shape sb, bool ta, bool tb) {
      return [sa, sb, ta, tb](Build& b, DType t) { return one(matmul(b.in(t, sa), b.in(t, sb), ta, tb)); };
    };
    c.push_back({"matmul",
                 {{"[3,4]@[4,5]", mm({3, 4}, {4, 5}, false, false)},
                  {"[4,3]^T@[4,5]", mm({4, 3}, {4, 5}, true, false)},
                  {"[3,4]@[5,4]^T", mm({3, 4}, {5, 4}, false, true)},
                  {"[4,3]^T@[5,4]^T", mm({4, 3}, {5, 4}, true, true)},
                  {"[2,3,4]@[4,5]", mm({2, 3, 4}, {4, 5}, false, false)},
                  {"[2,1,3,4]@[3,4,2]", mm({2, 1, 3, 4}, {3, 4, 2}, false, false)},
                  {"[1,6]@[6,1]", mm({1, 6}, {6, 1}, false, false)},
                  {"[67,129]@[129,71]", mm({67, 129}, {129, 71}, false, false)},
                  {"[129,67]^T@[71,129]^T", mm({129, 67}, {71, 129}, true, true)},
                  {"[3,37,45]@[45,33]", mm({3, 37, 45}, {45, 33}, false, false)}}});

    using B = Build&;
    c.push_back({"reshape",
                 {{"[2,3,4]->[4,6]", [](B b, DType t) { return one(reshape(b.in(t, {2, 3, 4}), {4, 6})); }},
                  {"[2,3]->[6]", [](B b, DType t) { return one(reshape(b.in(t, {2, 3}), {6})); }}}});
    c.push_back({"permute",
                 {{"[2,3,4] perm=[2,0,1]", [](B b, DType t) { return one(permute(b.in(t, {2, 3, 4}), {2, 0, 1})); }},
                  {"[3,4] perm=[1,0]", [](B b, DType t) { return one(permute(b.in(t, {3, 4}), {1, 0})); }},
                  {"[67,131] perm=[1,0]", [](B b, DType t) { return one(permute(b.in(t, {67, 131}), {1, 0})); }},
                  // (a head split: whole rows of 8 move, in 8- or 16-byte chunks where a device widens)
                  {"[2,5,3,8] perm=[0,2,1,3]",
                   [](B b, DType t) { return one(permute(b.in(t, {2, 5, 3, 8}), {0, 2, 1, 3})); }}}});
    c.push_back({"broadcast_to",
                 {{"[3,1]->[2,3,4]", [](B b, DType t) { return one(broadcast_to(b.in(t, {3, 1}), {2, 3, 4})); }},
                  {"[]->[2,2]", [](B b, DType t) { return one(broadcast_to(b.in(t, {}), {2, 2})); }},
                  {"[67,1]->[67,131]", [](B b, DType t) { return one(broadcast_to(b.in(t, {67, 1}), {67, 131})); }}}});
    c.push_back(
        {"slice",
         {{"[5,6][1:5:2,0:6:3]", [](B b, DType t) { return one(slice(b.in(t, {5, 6}), {1, 0}, {5, 6}, {2, 3})); }},
          {"[4,5][:,1:4]", [](B b, DType t) { return one(slice(b.in(t, {4, 5}), {0, 1}, {4, 4})); }},
          {"[131,67][3::2,1:]",
           [](B b, DType t) { return one(slice(b.in(t, {131, 67}), {3, 1}, {131, 67}, {2, 1})); }},
          {"[6,16][1:5,4:12]", [](B b, DType t) { return one(slice(b.in(t, {6, 16}), {1, 4}, {5, 12})); }},
          // (a step near 2^63, as an ONNX Slice or a text program may carry, given to the op
          // as it is: one element, no overflow in its count or in a stride times the step)
          {"[5,6][1:5:2^63-1,:]",
           [](B b, DType t) {
             return one(op("slice", {b.in(t, {5, 6})},
                           {{"starts", std::vector<int64_t>{1, 0}}, {"stops", std::vector<int64_t>{5, 6}},
                            {"steps", std::vector<int64_t>{INT64_MAX, 1}}}));
           }},
          {"[5,6][2:2,:]", [](B b, DType t) { return one(slice(b.in(t, {5, 6}), {2, 0}, {2, 6}, {1, 1})); }}}});
    c.push_back({"concat",
                 {{"axis=1",
                   [](B b, DType t) {
                     return one(concat({b.in(t, {2, 1, 3}), b.in(t, {2, 2, 3}), b.in(t, {2, 3, 3})}, 1));
                   }},
                  {"axis=0", [](B b, DType t) { return one(concat({b.in(t, {1, 4}), b.in(t, {2, 4})}, 0)); }},
                  {"[67,61]+[67,70] axis=1",
                   [](B b, DType t) { return one(concat({b.in(t, {67, 61}), b.in(t, {67, 70})}, 1)); }}}});
    c.push_back({"pad",
                 {{"[2,3] value=1.5", [](B b, DType t) { return one(pad(b.in(t, {2, 3}), {1, 0}, {2, 1}, 1.5)); }},
                  {"[3] value=-2", [](B b, DType t) { return one(pad(b.in(t, {3}), {0}, {2}, -2.0)); }},
                  {"[67,129] value=0", [](B b, DType t) { return one(pad(b.in(t, {67, 129}), {2, 3}, {1, 5})); }},
                  {"[3,4,8] axis 1", [](B b, DType t) { return one(pad(b.in(t, {3, 4, 8}), {0, 1, 0}, {0, 2, 0})); }}}});
    c.push_back(
        {"gather",
         {{"axis=0 idx=i32[3]",
           [](B b, DType t) { return one(gather(b.in(t, {4, 5}), b.index(DType::I32, {3}, 4), 0)); }},
          {"axis=1 idx=i64[2,2]",
           [](B b, DType t) { return one(gather(b.in(t, {4, 5}), b.index(DType::I64, {2, 2}, 5), 1)); }},
          {"axis=0 idx=i32[]", [](B b, DType t) { return one(gather(b.in(t, {6}), b.index(DType::I32, {}, 6), 0)); }},
          {"[300,41] axis=0 idx=i64[2003]",
           [](B b, DType t) { return one(gather(b.in(t, {300, 41}), b.index(DType::I64, {2003}, 300), 0)); }}}});
    c.push_back({"scatter_add",
                 {{"axis=0 idx=i64[5]",
                   [](B b, DType t) {
                     return one(scatter_add(b.in(t, {4, 3}), b.index(DType::I64, {5}, 4), b.in(t, {5, 3}), 0));
                   }},
                  {"axis=1 idx=i32[2,2]",
                   [](B b, DType t) {
                     return one(scatter_add(b.in(t, {3, 4}), b.index(DType::I32, {2, 2}, 4), b.in(t, {3, 2, 2}), 1));
                   }},
                  {"[50,31] axis=0 idx=i32[1001]", [](B b, DType t) {
                     Var x = b.in(t, {50, 31}), idx = b.index(DType::I32, {1001}, 50);
                     return one(scatter_add(x, idx, b.in(t, {1001, 31}), 0));
                   }}}});
    c.push_back({"update_slice",
                 {{"[4,8] axis=1 block [4,3] start=i64[]",
                   [](B b, DType t) {
                     return one(update_slice(b.in(t, {4, 8}), b.in(t, {4, 3}), b.index(DType::I64, {}, 6), 1));
                   }},
                  {"[2,3,37,16] axis=2 block [2,3,1,16] start=i32[]",
                   [](B b, DType t) {
                     return one(update_slice(b.in(t, {2, 3, 37, 16}), b.in(t, {2, 3, 1, 16}), b.index(DType::I32, {}, 37), 2));
                   }},
                  {"[5,7] axis=0 block [5,7] (whole)", [](B b, DType t) {
                     return one(update_slice(b.in(t, {5, 7}), b.in(t, {5, 7}), b.index(DType::I64, {}, 1), 0));
                   }}}});

    c.push_back({"iota",
                 {{"[3,4] axis=1", [](B b, DType t) { return one(iota(b.g, {3, 4}, 1, t)); }},
                  {"[3,4] axis=0", [](B b, DType t) { return one(iota(b.g, {3, 4}, 0, t)); }},
                  {"[150,151] axis=1", [](B b, DType t) { return one(iota(b.g, {150, 151}, 1, t)); }}}});
    c.push_back({"rng_uniform",
                 {{"[64] low=-1 high=3",
                   [](B b, DType t) { return one(rng_uniform(b.g, {64}, t, b.rng(), -1.0, 3.0)); }},
                  {"[20011]", [](B b, DType t) { return one(rng_uniform(b.g, {20011}, t, b.rng())); }}}});
    c.push_back({"rng_normal",
                 {{"[64] mean=0.5 stddev=2",
                   [](B b, DType t) { return one(rng_normal(b.g, {64}, t, b.rng(), 0.5, 2.0)); }},
                  {"[20011]", [](B b, DType t) { return one(rng_normal(b.g, {20011}, t, b.rng())); }}}});
    // The runtime owns these; every device still runs them through compile() and run().
    c.push_back({"param", {{"identity", [](Build& b, DType t) { return one(b.in(t, {3, 4})); }}}});
    c.push_back({"constant", {{"[3,4]", [](Build& b, DType t) {
                                 return one(constant(b.g, random_tensor(b.rng, t, {3, 4}, {})));
                               }}}});
    c.push_back(
        {"while", {{"swap x,y 3 times", [](Build& b, DType t) {
                      Var n = b.fixed(make_tensor(DType::I64, {}, {0.0}));
                      return while_loop(
                          {n, b.in(t, {3, 4}), b.in(t, {3, 4})},
                          [](const std::vector<Var>& v) { return one(lt(v[0], scalar(*v[0].graph(), 3, DType::I64))); },
                          [](const std::vector<Var>& v) {
                            return std::vector<Var>{v[0] + scalar(*v[0].graph(), 1, DType::I64), v[2], v[1]};
                          });
                    }}}});
    auto branch = [](bool pred) {
      return [pred](Build& b, DType t) {
        Var p = b.fixed(make_tensor(DType::Bool, {}, {double(pred)}));
        return if_then_else(
            p, {b.in(t, {3, 4}), b.in(t, {3, 4})}, [](const std::vector<Var>& v) { return one(v[0]); },
            [](const std::vector<Var>& v) { return one(v[1]); });
      };
    };
    c.push_back({"if", {{"then", branch(true)}, {"else", branch(false)}}});
    for (OpCase& s : sparse_cases()) c.push_back(std::move(s));
    for (OpCase& s : dense_la_cases()) c.push_back(std::move(s));
    return c;
  }();
  return cases;
}

// Runs every variant of one L2 op for every declared dtype on every device.
// The f32 tolerance is one per dtype, except for results that are long f32 sums by nature:
// splat_render_backward's gradients add a term per covered pixel, each through the product of
// the transmittances in front of it, so its f32 rounding grows with the pixels a Gaussian
// covers (1.2e-5 seen on the example at seed 1796195552198992249). tests/splat checks it more
// closely, against finite differences and each device against the reference. The staged
// pipeline's compositing backward (splat_composite_backward) sums the same way.
double op_tolerance(const std::string& example_name, DType t) {
  if (t == DType::F32 && (example_name.rfind("splat_render_backward", 0) == 0 ||
                          example_name.rfind("splat_composite_backward", 0) == 0))
    return 1e-4;
  return tolerance(t);
}

// A sum of products can cancel to far below its terms (a [1,6]@[6,1] product of -1.6e-3 from
// terms near 1 was seen), and then any summation order other than the reference's differs from
// it by more than the dtype's tolerance times max|result|. For ops whose results are sums of
// products of their inputs, the error is measured against the same op on the inputs' absolute
// values (max over sum |a||b|), which bounds every summation order's rounding: the returned
// factor scales the tolerance by that magnitude over max|result| (1 when nothing cancels).
double cancellation_scale(const ir::Graph& g, const std::string& op, const std::vector<Tensor>& inputs,
                          const Tensor& want, size_t result) {
  if (op != "matmul" && op != "scatter_add") return 1;
  if (!is_inexact(want.dtype())) return 1;
  std::vector<Tensor> abs_inputs;
  for (const Tensor& x : inputs) {
    if (!is_inexact(x.dtype())) {
      abs_inputs.push_back(x);
      continue;
    }
    std::vector<cd> v = complexes(x);
    for (cd& e : v) e = std::abs(e);
    abs_inputs.push_back(make_tensor(x.dtype(), x.shape(), v));
  }
  std::string why;
  auto magnitude = compile_and_run(DeviceRegistry::get().at("reference"), g, abs_inputs, &why);
  if (!magnitude) throw InternalError("the reference refuses its own graph on absolute values: " + why);
  double big = 0, top = 0;
  for (cd e : complexes((*magnitude)[result])) big = std::max(big, std::abs(e));
  for (cd e : complexes(want)) top = std::max(top, std::abs(e));
  return top > 0 ? std::max(1.0, big / top) : 1;
}

void check_l2(const OpCase& c) {
  const ir::OpDef& def = ir::OpRegistry::get().at(c.op);
  Device& ref = DeviceRegistry::get().at("reference");
  for (DType t : def.dtypes)
    for (const Variant& v : c.variants) {
      const std::string name = c.op + " dtype=" + dtype_name(t) + " variant=" + v.label;
      Build b(case_seed(name));
      std::optional<std::vector<Tensor>> want;
      try {
        rlx::output(b.g, v.make(b, t));
        std::string why;
        want = compile_and_run(ref, b.g, b.inputs, &why);
        if (!want) {
          BOOST_ERROR(name << ": the reference device refuses a declared dtype: " << why << "; " << seed_note());
          continue;
        }
      } catch (const std::exception& e) {
        BOOST_ERROR(name << " on reference: " << e.what() << "; " << seed_note());
        continue;
      }
      for (Device* d : DeviceRegistry::get().runnable())
        for (bool strided : {false, true}) {
          if (d == &ref && !strided) continue;  // that run is `want`
          const std::string ctx = name + " device=" + d->name() + (strided ? " (strided inputs)" : "");
          try {
            std::string why;
            auto got = compile_and_run(*d, b.g, b.inputs, &why, strided);
            if (!got) {
              BOOST_TEST_MESSAGE("skip " << ctx << ": " << why);
              if (!strided) count(*d, true);
              break;
            }
            if (!strided || d == &ref) count(*d, false);
            BOOST_REQUIRE_EQUAL(got->size(), want->size());
            for (size_t r = 0; r < want->size(); ++r) {
              const double tol = op_tolerance(name, (*want)[r].dtype()) *
                                 cancellation_scale(b.g, c.op, b.inputs, (*want)[r], r);
              std::string m = mismatch((*got)[r], (*want)[r], tol);
              BOOST_CHECK_MESSAGE(m.empty(), ctx << " result " << r << ": " << m << "; " << seed_note());
            }
          } catch (const std::exception& e) {
            BOOST_ERROR(ctx << ": " << e.what() << "; " << seed_note());
          }
        }
    }
}

// ---------------------------------------------------------------- L1 table

// An L1 test graph and its expected result, computed directly from the input values (and,
// for ops with several results, the further results and theirs).
struct L1Built {
  Var out;
  std::vector<cd> want;
  std::vector<Var> more_out = {};
  std::vector<std::vector<cd>> more_want = {};
  double tol = 0;  // where above l1_tolerance: what the op's own rounding allows (said at the case)
};
using L1Make = std::function<L1Built(Build&, DType)>;
struct L1Case {
  std::string op;
  std::vector<std::pair<std::string, L1Make>> variants;
};

// L1 results pass through several ops that each round to the dtype. On the reference
// over several random seeds the worst normalized errors were bf16 6.1e-3, f16 7.4e-4,
// f32 1.2e-7, f64 3.3e-16; these bounds leave about 5x for half precision and room
// for a device's own f32 math functions.
double l1_tolerance(DType t) {
  switch (t) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
    case DType::C64:
      return 1e-5;
    case DType::F16:
      return 4e-3;
    case DType::BF16:
      return 3e-2;
    default:
      return 0;
  }
}

std::vector<cd> as_complex(const std::vector<double>& v) { return {v.begin(), v.end()}; }
double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Softmax (or log-softmax) of a row-major [rows, cols] matrix along axis 0 or 1.
std::vector<double> softmax_of(const std::vector<double>& x, int64_t rows, int64_t cols, int axis, bool log) {
  std::vector<double> y(x.size());
  int64_t lines = axis == 1 ? rows : cols, len = axis == 1 ? cols : rows;
  for (int64_t l = 0; l < lines; ++l) {
    auto at = [&](int64_t k) { return size_t(axis == 1 ? l * cols + k : k * cols + l); };
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < len; ++k) m = std::max(m, x[at(k)]);
    for (int64_t k = 0; k < len; ++k) s += std::exp(x[at(k)] - m);
    for (int64_t k = 0; k < len; ++k) y[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
  }
  return y;
}

L1Make pointwise(Var (*f)(const Var&, SrcLoc), double (*ref)(double), Shape s = {3, 5}) {
  return [f, ref, s](Build& b, DType t) {
    Var x = b.in(t, s, {.lo = -4, .hi = 4});
    std::vector<double> v = reals(b.inputs.back());
    for (double& e : v) e = ref(e);
    return L1Built{f(x, SrcLoc::current()), as_complex(v)};
  };
}

L1Make linear_case(Shape xs, int64_t out, bool bias) {
  return [xs, out, bias](Build& b, DType t) {
    const int64_t in = xs.back(), rows = numel(xs) / in;
    Var x = b.in(t, xs), w = b.in(t, {out, in});
    std::optional<Var> bv;
    if (bias) bv = b.in(t, {out});
    auto X = complexes(b.inputs[0]), W = complexes(b.inputs[1]);
    auto Bias = bias ? complexes(b.inputs[2]) : std::vector<cd>(size_t(out), 0.0);
    std::vector<cd> y(size_t(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        cd s = Bias[size_t(o)];
        for (int64_t i = 0; i < in; ++i) s += X[size_t(r * in + i)] * W[size_t(o * in + i)];
        y[size_t(r * out + o)] = s;
      }
    return L1Built{linear(x, w, bv), y};
  };
}

L1Make softmax_case(int64_t rows, int64_t cols, int64_t axis, bool log) {
  return [=](Build& b, DType t) {
    Var x = b.in(t, {rows, cols}, {.lo = -3, .hi = 3});
    auto y = softmax_of(reals(b.inputs.back()), rows, cols, int(axis < 0 ? axis + 2 : axis), log);
    return L1Built{log ? log_softmax(x, axis) : softmax(x, axis), as_complex(y)};
  };
}

// logsumexp of a [rows, cols] matrix along axis 1, in long double, with -inf rows and a
// +inf entry when `infinities`.
L1Make logsumexp_case(int64_t rows, int64_t cols, bool infinities) {
  return [=](Build& b, DType t) {
    Tensor v = random_tensor(b.rng, t, {rows, cols}, {.lo = -30, .hi = 30});
    if (infinities) {
      for (int64_t j = 0; j < cols; ++j) put(v, j, cd(-INFINITY, 0));  // row 0: all -inf
      put(v, cols + 1, cd(INFINITY, 0));                               // row 1 holds +inf
    }
    Var x = b.fixed(v);
    std::vector<double> X = reals(v), y;
    for (int64_t r = 0; r < rows; ++r) {
      long double m = -INFINITY, s = 0;
      for (int64_t c = 0; c < cols; ++c) m = std::max<long double>(m, X[size_t(r * cols + c)]);
      if (std::isinf(m)) {
        y.push_back(double(m));
        continue;
      }
      for (int64_t c = 0; c < cols; ++c) s += std::exp((long double)X[size_t(r * cols + c)] - m);
      y.push_back(double(m + std::log(s)));
    }
    return L1Built{logsumexp(x, 1), as_complex(y)};
  };
}

L1Make norm_case(bool layer, int64_t rows, int64_t d) {
  return [layer, rows, d](Build& b, DType t) {
    const double eps = layer ? 1e-5 : 1e-6;
    Var x = b.in(t, {rows, d}), g = b.in(t, {d}, {.lo = 0.5, .hi = 1.5});
    std::optional<Var> beta;
    if (layer) beta = b.in(t, {d});
    auto X = reals(b.inputs[0]), G = reals(b.inputs[1]);
    auto Beta = layer ? reals(b.inputs[2]) : std::vector<double>(size_t(d), 0.0);
    std::vector<double> y(X.size());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, sq = 0;
      for (int64_t k = 0; k < d; ++k) mean += X[size_t(r * d + k)] / double(d);
      double c = layer ? mean : 0;
      for (int64_t k = 0; k < d; ++k) sq += (X[size_t(r * d + k)] - c) * (X[size_t(r * d + k)] - c) / double(d);
      for (int64_t k = 0; k < d; ++k) {
        size_t i = size_t(r * d + k);
        y[i] = (X[i] - c) / std::sqrt(sq + eps) * G[size_t(k)] + Beta[size_t(k)];
      }
    }
    return L1Built{layer ? layer_norm(x, g, *beta, eps) : rms_norm(x, g, eps), as_complex(y)};
  };
}

// With smoothing eps the target is (1 - eps) on the label plus eps / C on every class.
L1Make cross_entropy_case(DType label_type, double eps = 0.0, int64_t n = 4, int64_t c = 5) {
  return [=](Build& b, DType t) {
    Var logits = b.in(t, {n, c}, {.lo = -3, .hi = 3});
    Var labels = b.index(label_type, {n}, c);
    auto L = reals(b.inputs[0]), Y = reals(b.inputs[1]);
    auto ls = softmax_of(L, n, c, 1, true);
    double loss = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < c; ++k) {
        const double q = (k == int64_t(Y[size_t(i)]) ? 1.0 - eps : 0.0) + eps / double(c);
        loss -= q * ls[size_t(i * c + k)] / double(n);
      }
    return L1Built{cross_entropy(logits, labels, eps), {loss}};
  };
}

// mean(log(1 + exp(x)) - x y), in long double; logits up to +-40 (where the naive form overflows in f32).
L1Make bce_case(Shape s, double range) {
  return [=](Build& b, DType t) {
    Var x = b.in(t, s, {.lo = -range, .hi = range}), y = b.in(t, s, {.lo = 0, .hi = 1});
    auto X = reals(b.inputs[0]), Y = reals(b.inputs[1]);
    long double l = 0;
    for (size_t i = 0; i < X.size(); ++i) {
      const long double xi = X[i];
      l += (xi > 0 ? xi + std::log1p(std::exp(-xi)) : std::log1p(std::exp(xi))) - xi * Y[i];
    }
    return L1Built{bce_with_logits(x, y), {double(l / (long double)X.size())}};
  };
}

// The counter RNG's draw for (seed, key) decides; kept values are x / (1 - p).
L1Make dropout_case(Shape s, double p, uint64_t seed, int64_t key) {
  return [=](Build& b, DType t) {
    Var x = b.in(t, s);
    Tensor k = Tensor::empty(DType::I64, {});
    k.data<int64_t>()[0] = key;
    Var kv = b.fixed(k);
    auto X = reals(b.inputs[0]);
    const uint64_t keyed = rng_keyed_seed(seed, key);
    std::vector<double> y(X.size());
    for (size_t i = 0; i < X.size(); ++i) {
      // (the draw is f32 for every dtype but f64: compare as the op does)
      const double u = rng_unit(keyed, i), ur = t == DType::F64 ? u : double(float(u));
      y[i] = ur >= p ? X[i] / (1.0 - p) : 0.0;
    }
    return L1Built{dropout(x, kv, p, seed), as_complex(y)};
  };
}

// The optimizer updates, written out per element as PyTorch's torch.optim documents them;
// the op's results (p' and the state) flattened and concatenated.
Var flat_concat(const std::vector<Var>& vs) {
  std::vector<Var> f;
  for (const Var& v : vs) f.push_back(reshape(v, {numel(v.shape())}));
  return concat(f, 0);
}

L1Make sgd_case(double momentum, double dampening, double wd, bool nesterov, int64_t n = 37) {
  return [=](Build& b, DType t) {
    Var p = b.in(t, {n}), g = b.in(t, {n}), buf = b.in(t, {n}), lr = b.in(t, {}, {.lo = 0.01, .hi = 0.5});
    auto P = reals(b.inputs[0]), G = reals(b.inputs[1]), B = reals(b.inputs[2]);
    const double r = reals(b.inputs[3])[0];
    std::vector<double> np(P.size()), nb(P.size());
    for (size_t i = 0; i < P.size(); ++i) {
      double gi = G[i] + wd * P[i];
      if (momentum == 0) {
        np[i] = P[i] - r * gi;
        nb[i] = B[i];
        continue;
      }
      nb[i] = momentum * B[i] + (1 - dampening) * gi;
      np[i] = P[i] - r * (nesterov ? gi + momentum * nb[i] : nb[i]);
    }
    np.insert(np.end(), nb.begin(), nb.end());
    auto out = op_multi("sgd_update", {p, g, buf, lr},
                        {{"momentum", momentum}, {"dampening", dampening}, {"weight_decay", wd}, {"nesterov", nesterov}});
    return L1Built{flat_concat(out), as_complex(np)};
  };
}

L1Make adam_case(double wd, bool decoupled, int64_t n = 37) {
  return [=](Build& b, DType t) {
    Var p = b.in(t, {n}), g = b.in(t, {n}), m = b.in(t, {n}), v = b.in(t, {n}, {.lo = 0.01, .hi = 2});
    Var lr = b.in(t, {}, {.lo = 1e-3, .hi = 0.1}), step = b.in(t, {}, {.lo = 1, .hi = 20, .quantum = 1});
    auto P = reals(b.inputs[0]), G = reals(b.inputs[1]), M = reals(b.inputs[2]), V = reals(b.inputs[3]);
    const double r = reals(b.inputs[4])[0], k = reals(b.inputs[5])[0], b1 = 0.9, b2 = 0.999, eps = 1e-8;
    std::vector<double> np(P.size()), nm(P.size()), nv(P.size());
    for (size_t i = 0; i < P.size(); ++i) {
      double gi = decoupled ? G[i] : G[i] + wd * P[i];
      nm[i] = b1 * M[i] + (1 - b1) * gi;
      nv[i] = b2 * V[i] + (1 - b2) * gi * gi;
      double mh = nm[i] / (1 - std::pow(b1, k)), vh = nv[i] / (1 - std::pow(b2, k));
      double base = decoupled ? P[i] * (1 - r * wd) : P[i];
      np[i] = base - r * mh / (std::sqrt(vh) + eps);
    }
    np.insert(np.end(), nm.begin(), nm.end());
    np.insert(np.end(), nv.begin(), nv.end());
    auto out = op_multi("adam_update", {p, g, m, v, lr, step}, {{"weight_decay", wd}, {"decoupled", decoupled}});
    return L1Built{flat_concat(out), as_complex(np)};
  };
}

// q [B, L, D], k [B, L, D], v [B, L, Dv]: softmax(q k^T / sqrt(D) + bias, causal: key j <= query i) v.
L1Make attention_case(const std::string& mask, bool bias, int64_t B = 2, int64_t L = 3, int64_t D = 4,
                      int64_t Dv = 5) {
  return [=](Build& b, DType t) {
    Var q = b.in(t, {B, L, D}), k = b.in(t, {B, L, D}), v = b.in(t, {B, L, Dv});
    std::optional<Var> bv;
    if (bias) bv = b.in(t, {B, L, L});
    auto Q = reals(b.inputs[0]), K = reals(b.inputs[1]), V = reals(b.inputs[2]);
    auto Bias = bias ? reals(b.inputs[3]) : std::vector<double>(size_t(B * L * L), 0.0);
    std::vector<double> y(size_t(B * L * Dv));
    for (int64_t n = 0; n < B; ++n)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(size_t(L), -INFINITY);
        for (int64_t j = 0; j < L; ++j) {
          if (mask == "causal" && j > i) continue;
          double dot = 0;
          for (int64_t e = 0; e < D; ++e) dot += Q[size_t((n * L + i) * D + e)] * K[size_t((n * L + j) * D + e)];
          s[size_t(j)] = dot / std::sqrt(double(D)) + Bias[size_t((n * L + i) * L + j)];
        }
        auto p = softmax_of(s, 1, L, 1, false);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < L; ++j) acc += p[size_t(j)] * V[size_t((n * L + j) * Dv + e)];
          y[size_t((n * L + i) * Dv + e)] = acc;
        }
      }
    return L1Built{attention(q, k, v, mask, bv), as_complex(y)};
  };
}

// x [B, T, H, D] at positions [T] drawn from [0, 2048): pair (i, i + D/2) turned by the f32
// angle float(position) * inv_i (the op's stated rounding, computed here in f32 too), its
// cosine and sine then taken in double. Every route takes the cosine and sine in f32, so f64
// results carry f32's rounding of them: 1e-6 for f64 (about 8 f32 ulps; the f32 bound is
// l1_tolerance's).
L1Make rotary_case(int64_t B, int64_t T, int64_t H, int64_t D, DType pos_type = DType::I64) {
  return [=](Build& b, DType t) {
    Var x = b.in(t, {B, T, H, D});
    Var pos = b.index(pos_type, {T}, 2048);
    const double theta = 10000.0;
    auto X = reals(b.inputs[0]);
    const int64_t half = D / 2;
    std::vector<double> y(X.size());
    for (int64_t r = 0; r < B * T * H; ++r) {
      const int64_t p = int_at(b.inputs[1], (r / H) % T);
      for (int64_t i = 0; i < half; ++i) {
        const float inv = 1.0f / float(std::pow(theta, double(float(2 * i) / float(D))));
        const float angle = float(p) * inv;
        const double c = std::cos(double(angle)), sn = std::sin(double(angle));
        const double x1 = X[size_t(r * D + i)], x2 = X[size_t(r * D + i + half)];
        y[size_t(r * D + i)] = x1 * c - x2 * sn;
        y[size_t(r * D + i + half)] = x2 * c + x1 * sn;
      }
    }
    L1Built r{op("rotary_embedding", {x, pos}, {{"theta", theta}}), as_complex(y)};
    if (t == DType::F64) r.tol = 1e-6;
    return r;
  };
}

// q [B, H, T, D], k [B, KV, S, D], v [B, KV, S, Dv]; query head h reads key/value head
// h / (H / KV): softmax(q k^T / sqrt(D) + bias [causal: key j <= t + S - T]) v in double.
// bias: "" none, "full" random [B, KV, H / KV, T, S], "mask" [1, 1, 1, 1, S] of 0 up to key
// `keep` and -inf after it (decoding's cache mask).
L1Make gqa_case(int64_t B, int64_t H, int64_t KV, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                const std::string& bias, int64_t keep = 0) {
  return [=](Build& b, DType t) {
    const int64_t G = H / KV;
    Var q = b.in(t, {B, H, T, D}), k = b.in(t, {B, KV, S, D}), v = b.in(t, {B, KV, S, Dv});
    std::vector<Var> in{q, k, v};
    Shape bs;
    if (bias == "full") {
      bs = {B, KV, G, T, S};
      in.push_back(b.in(t, bs));
    } else if (bias == "mask") {
      bs = {1, 1, 1, 1, S};
      std::vector<cd> m(static_cast<size_t>(S));
      for (int64_t j = 0; j < S; ++j) m[size_t(j)] = j <= keep ? 0.0 : -INFINITY;
      in.push_back(b.fixed(make_tensor(t, bs, m)));
    }
    auto Q = reals(b.inputs[0]), K = reals(b.inputs[1]), V = reals(b.inputs[2]);
    std::vector<double> Bias = bias.empty() ? std::vector<double>{} : reals(b.inputs[3]);
    auto bias_at = [&](int64_t n, int64_t kv, int64_t g, int64_t i, int64_t j) {
      if (bias.empty()) return 0.0;
      const int64_t idx[5] = {n, kv, g, i, j};
      int64_t at = 0;
      for (int d = 0; d < 5; ++d) at = at * bs[size_t(d)] + (bs[size_t(d)] == 1 ? 0 : idx[d]);
      return Bias[size_t(at)];
    };
    std::vector<double> y(size_t(B * H * T * Dv));
    for (int64_t n = 0; n < B; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
          const int64_t kv = h / G;
          std::vector<double> sc(size_t(S), -INFINITY);
          for (int64_t j = 0; j < S; ++j) {
            if (causal && j > i + S - T) continue;
            double dot = 0;
            for (int64_t e = 0; e < D; ++e)
              dot += Q[size_t(((n * H + h) * T + i) * D + e)] * K[size_t(((n * KV + kv) * S + j) * D + e)];
            sc[size_t(j)] = dot / std::sqrt(double(D)) + bias_at(n, kv, h % G, i, j);
          }
          auto p = softmax_of(sc, 1, S, 1, false);
          for (int64_t e = 0; e < Dv; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < S; ++j) acc += p[size_t(j)] * V[size_t(((n * KV + kv) * S + j) * Dv + e)];
            y[size_t(((n * H + h) * T + i) * Dv + e)] = acc;
          }
        }
    return L1Built{op("grouped_query_attention", in, {{"mask", std::string(causal ? "causal" : "none")}}),
                   as_complex(y)};
  };
}

// PyTorch's conv2d by its definition, one output element at a time in double: out-of-range
// taps are the zero padding.
struct ConvSpec {
  Shape x;
  int64_t out, kh, kw;
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};
L1Make conv2d_case(ConvSpec c) {
  return [c](Build& b, DType t) {
    const int64_t n = c.x[0], ch = c.x[1], h = c.x[2], w = c.x[3], cg = ch / c.groups, og = c.out / c.groups;
    Var x = b.in(t, c.x), wt = b.in(t, {c.out, cg, c.kh, c.kw});
    std::optional<Var> bias;
    if (c.bias) bias = b.in(t, {c.out});
    auto X = reals(b.inputs[0]), W = reals(b.inputs[1]);
    auto B = c.bias ? reals(b.inputs[2]) : std::vector<double>(size_t(c.out), 0.0);
    const int64_t ho = (h + 2 * c.padding[0] - c.dilation[0] * (c.kh - 1) - 1) / c.stride[0] + 1;
    const int64_t wo = (w + 2 * c.padding[1] - c.dilation[1] * (c.kw - 1) - 1) / c.stride[1] + 1;
    std::vector<double> y;
    for (int64_t in = 0; in < n; ++in)
      for (int64_t o = 0; o < c.out; ++o)
        for (int64_t oh = 0; oh < ho; ++oh)
          for (int64_t ow = 0; ow < wo; ++ow) {
            double acc = B[size_t(o)];
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t i = 0; i < c.kh; ++i)
                for (int64_t j = 0; j < c.kw; ++j) {
                  const int64_t ih = oh * c.stride[0] - c.padding[0] + i * c.dilation[0];
                  const int64_t iw = ow * c.stride[1] - c.padding[1] + j * c.dilation[1];
                  if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                  const int64_t cin = o / og * cg + ci;
                  acc += X[size_t(((in * ch + cin) * h + ih) * w + iw)] * W[size_t(((o * cg + ci) * c.kh + i) * c.kw + j)];
                }
            y.push_back(acc);
          }
    Conv2dOptions opt{.stride = c.stride, .padding = c.padding, .dilation = c.dilation, .groups = c.groups};
    return L1Built{conv2d(x, wt, bias, opt), as_complex(y)};
  };
}

// Max or mean over each window of the padded input: max over the elements inside the input
// (a -inf pad never wins); the mean divides by kh*kw, the padding counted.
L1Make pool_case(bool is_max, Shape xs, std::array<int64_t, 2> k, std::array<int64_t, 2> s = {0, 0},
                 std::array<int64_t, 2> p = {0, 0}, Range r = {}) {
  return [=](Build& b, DType t) {
    const std::array<int64_t, 2> st = s[0] == 0 ? k : s;
    const int64_t h = xs[2], w = xs[3];
    Var x = b.in(t, xs, r);
    auto X = reals(b.inputs[0]);
    const int64_t ho = (h + 2 * p[0] - k[0]) / st[0] + 1, wo = (w + 2 * p[1] - k[1]) / st[1] + 1;
    std::vector<double> y;
    for (int64_t plane = 0; plane < xs[0] * xs[1]; ++plane)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          double acc = is_max ? -INFINITY : 0;
          for (int64_t i = 0; i < k[0]; ++i)
            for (int64_t j = 0; j < k[1]; ++j) {
              const int64_t ih = oh * st[0] - p[0] + i, iw = ow * st[1] - p[1] + j;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              const double v = X[size_t((plane * h + ih) * w + iw)];
              acc = is_max ? std::max(acc, v) : acc + v;
            }
          y.push_back(is_max ? acc : acc / double(k[0] * k[1]));
        }
    return L1Built{is_max ? max_pool2d(x, k, s, p) : avg_pool2d(x, k, s, p), as_complex(y)};
  };
}

// Per channel (axis 1) over the other axes: training normalizes by the batch's mean and biased
// variance and moves the running statistics by momentum (variance unbiased); inference
// normalizes by the running statistics and returns them.
L1Make batch_norm_case(Shape xs, bool training, double momentum = 0.1, double eps = 1e-5) {
  return [=](Build& b, DType t) {
    const int64_t c = xs[1];
    int64_t inner = 1;
    for (size_t d = 2; d < xs.size(); ++d) inner *= xs[d];
    Var x = b.in(t, xs), gamma = b.in(t, {c}), beta = b.in(t, {c});
    Var rm = b.in(t, {c}), rv = b.in(t, {c}, {.lo = 0.5, .hi = 2});
    auto X = reals(b.inputs[0]), G = reals(b.inputs[1]), Bt = reals(b.inputs[2]), RM = reals(b.inputs[3]),
         RV = reals(b.inputs[4]);
    auto channel = [&](size_t i) { return size_t((int64_t(i) / inner) % c); };
    const double count = double(numel(xs) / c);
    std::vector<double> mean(size_t(c), 0), var(size_t(c), 0);
    for (size_t i = 0; i < X.size(); ++i) mean[channel(i)] += X[i] / count;
    for (size_t i = 0; i < X.size(); ++i) var[channel(i)] += (X[i] - mean[channel(i)]) * (X[i] - mean[channel(i)]) / count;
    std::vector<double> y(X.size()), rm2(RM), rv2(RV);
    for (size_t i = 0; i < X.size(); ++i) {
      const size_t k = channel(i);
      const double mu = training ? mean[k] : RM[k], s2 = training ? var[k] : RV[k];
      y[i] = (X[i] - mu) / std::sqrt(s2 + eps) * G[k] + Bt[k];
    }
    if (training)
      for (size_t k = 0; k < size_t(c); ++k) {
        rm2[k] = (1 - momentum) * RM[k] + momentum * mean[k];
        rv2[k] = (1 - momentum) * RV[k] + momentum * var[k] * count / (count - 1);
      }
    BatchNormResult r = batch_norm(x, gamma, beta, rm, rv, training, momentum, eps);
    return L1Built{r.y, as_complex(y), {r.running_mean, r.running_var}, {as_complex(rm2), as_complex(rv2)}};
  };
}

// cg_csr on a random Hermitian positive definite n x n matrix: a symmetric pattern of about
// per_row entries a row (each part in [-1, 1], entry (j, i) the conjugate of (i, j), rows in
// shuffled order) and a real diagonal 1 more than the row's sum of magnitudes (eigenvalues in
// [1, 2 max row sum + 1]: well conditioned). Against x = A^-1 b by Gaussian elimination in
// double; rtol well below the dtype's rounding, so x is as accurate as the dtype allows.
L1Make cg_case(int64_t n, int64_t per_row, DType index, bool with_x0) {
  return [=](Build& b, DType t) {
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<std::vector<std::pair<int64_t, cd>>> rows(static_cast<size_t>(n));
    std::vector<cd> dense(static_cast<size_t>(n * n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < per_row / 2 && i > 0; ++k) {
        const auto j = int64_t(b.rng() % uint64_t(i));
        if (dense[size_t(i * n + j)] != cd(0)) continue;
        const cd v(u(b.rng), t == DType::C64 ? u(b.rng) : 0.0);
        dense[size_t(i * n + j)] = v, dense[size_t(j * n + i)] = std::conj(v);
        rows[size_t(i)].push_back({j, v}), rows[size_t(j)].push_back({i, std::conj(v)});
      }
    for (int64_t i = 0; i < n; ++i) {
      double s = 1;
      for (auto& [j, v] : rows[size_t(i)]) s += std::abs(v);
      dense[size_t(i * n + i)] = s;
      rows[size_t(i)].push_back({i, cd(s)});
      std::shuffle(rows[size_t(i)].begin(), rows[size_t(i)].end(), b.rng);
    }
    std::vector<cd> ptr{0}, col, val;
    for (auto& row : rows) {
      for (auto& [j, v] : row) col.push_back(double(j)), val.push_back(v);
      ptr.push_back(double(col.size()));
    }
    const auto nnz = int64_t(col.size());
    std::vector<Var> in{b.fixed(make_tensor(index, {n + 1}, ptr)), b.fixed(make_tensor(index, {nnz}, col)),
                        b.fixed(make_tensor(t, {nnz}, val)), b.in(t, {n}, {.lo = -1, .hi = 1})};
    const std::vector<cd> x = test::solve_without_pivoting(dense, complexes(b.inputs.back()));
    if (with_x0) in.push_back(b.in(t, {n}));
    const double rtol = t == DType::F64 ? 1e-15 : 1e-8;
    return L1Built{rlx::op_multi("cg_csr", in, {{"cols", n}, {"rtol", rtol}, {"max_it", int64_t(1000)}})[0], x};
  };
}

// splat_render against the plain oracle (tests/splat/oracle.hpp) on a random scene whose
// values are rounded to the dtype first.
L1Make splat_case(int64_t n, int64_t k, int64_t w, int64_t h) {
  return [=](Build& b, DType t) {
    splat_oracle::Scene s = splat_oracle::random_scene(b.rng, n, k, w, h);
    auto rounded = [&](std::vector<double> v) {
      if (t == DType::F32)
        for (double& e : v) e = double(float(e));
      return v;
    };
    s.means = rounded(s.means), s.log_scales = rounded(s.log_scales), s.quats = rounded(s.quats);
    s.opacity_logits = rounded(s.opacity_logits), s.sh = rounded(s.sh);
    for (double& e : s.view) e = rounded({e})[0];
    for (double& e : s.background) e = rounded({e})[0];
    std::vector<Var> in{b.fixed(make_tensor(t, {n, 3}, as_complex(s.means))),
                        b.fixed(make_tensor(t, {n, 3}, as_complex(s.log_scales))),
                        b.fixed(make_tensor(t, {n, 4}, as_complex(s.quats))),
                        b.fixed(make_tensor(t, {n}, as_complex(s.opacity_logits))),
                        b.fixed(make_tensor(t, {n, k, 3}, as_complex(s.sh))),
                        b.fixed(make_tensor(t, {4, 4}, as_complex({s.view.begin(), s.view.end()}))),
                        b.fixed(make_tensor(t, {3}, as_complex({s.background.begin(), s.background.end()})))};
    std::vector<Var> y = rlx::op_multi("splat_render", in,
                                       {{"width", w}, {"height", h}, {"fx", s.fx}, {"fy", s.fy}, {"cx", s.cx}, {"cy", s.cy}});
    const splat_oracle::Image want = splat_oracle::render(s);
    return L1Built{y[0], as_complex(want.rgb), {y[1], y[2]}, {as_complex(want.alpha), as_complex(want.depth)}};
  };
}

// project_out(V [k, n], w [n, m], h [k, m]) -> (w - V^T h, conj(V) u) against the formula in
// complex double. Ranges: signed by default; `positive` keeps V, h >= 0 and w above V^T h, so
// that u > 0 and c sums n positive terms (a long f32 sum of signed terms cancels below the
// tolerance's reach; the small signed case covers the signs).
L1Make project_out_case(int64_t k, int64_t n, int64_t m, bool positive) {
  return [=](Build& b, DType t) {
    const Range rv = positive ? Range{.lo = 0, .hi = 1} : Range{}, rh = positive ? Range{.lo = 0, .hi = 0.1} : Range{};
    const Range rw = positive ? Range{.lo = double(k) * 0.1 + 1, .hi = double(k) * 0.1 + 2} : Range{};
    Var V = b.in(t, {k, n}, rv), w = b.in(t, {n, m}, rw), h = b.in(t, {k, m}, rh);
    const std::vector<cd> Vv = complexes(b.inputs[0]), wv = complexes(b.inputs[1]), hv = complexes(b.inputs[2]);
    // The op is its lowering: V^T h and u are values of the dtype, each rounded once, and c
    // projects the u the op returns (in bf16 a cancelling c differs from the unrounded
    // steps' by more than its tolerance).
    std::vector<cd> Vh(size_t(n * m)), u(size_t(n * m)), c(size_t(k * m));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        cd acc = 0;
        for (int64_t r = 0; r < k; ++r) acc += Vv[size_t(r * n + i)] * hv[size_t(r * m + j)];
        Vh[size_t(i * m + j)] = acc;
      }
    Vh = complexes(make_tensor(t, {n * m}, Vh));
    for (size_t i = 0; i < u.size(); ++i) u[i] = wv[i] - Vh[i];
    const std::vector<cd> u_t = complexes(make_tensor(t, {n * m}, u));
    for (int64_t r = 0; r < k; ++r)
      for (int64_t j = 0; j < m; ++j) {
        cd acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += std::conj(Vv[size_t(r * n + i)]) * u_t[size_t(i * m + j)];
        c[size_t(r * m + j)] = acc;
      }
    Projected p = project_out(V, w, h);
    return L1Built{p.u, u, {p.c}, {c}};
  };
}

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

const std::vector<L1Case>& l1_cases() {
  using Fn = Var (*)(const Var&, SrcLoc);
  const Fn gelu_none = [](const Var& x, SrcLoc l) { return gelu(x, "none", l); };
  const Fn gelu_approx = [](const Var& x, SrcLoc l) { return gelu(x, "tanh", l); };
  static const std::vector<L1Case> cases = {
      {"linear",
       {{"x[3,4] w[5,4] b[5]", linear_case({3, 4}, 5, true)},
        {"x[2,3,4] w[5,4]", linear_case({2, 3, 4}, 5, false)},
        {"x[67,129] w[71,129] b[71]", linear_case({67, 129}, 71, true)}}},
      {"relu",
       {{"[3,5]", pointwise(&relu, [](double x) { return std::max(x, 0.0); })},
        {"[37,259]", pointwise(&relu, [](double x) { return std::max(x, 0.0); }, {37, 259})}}},
      {"gelu",
       {{"approximate=none", pointwise(gelu_none, gelu_erf)},
        {"approximate=tanh", pointwise(gelu_approx, gelu_tanh)},
        {"[37,259] approximate=none", pointwise(gelu_none, gelu_erf, {37, 259})},
        {"[37,259] approximate=tanh", pointwise(gelu_approx, gelu_tanh, {37, 259})}}},
      {"silu",
       {{"[3,5]", pointwise(&silu, [](double x) { return x * sigmoid_of(x); })},
        {"[37,259]", pointwise(&silu, [](double x) { return x * sigmoid_of(x); }, {37, 259})}}},
      {"sigmoid",
       {{"[3,5]", pointwise(&sigmoid, sigmoid_of)}, {"[37,259]", pointwise(&sigmoid, sigmoid_of, {37, 259})}}},
      {"softmax",
       {{"[3,5] axis=-1", softmax_case(3, 5, -1, false)},
        {"[4,3] axis=0", softmax_case(4, 3, 0, false)},
        {"[37,300] axis=-1", softmax_case(37, 300, -1, false)}}},
      {"log_softmax",
       {{"[3,5] axis=-1", softmax_case(3, 5, -1, true)},
        {"[4,3] axis=0", softmax_case(4, 3, 0, true)},
        {"[37,300] axis=-1", softmax_case(37, 300, -1, true)}}},
      {"logsumexp",
       {{"[3,5]", logsumexp_case(3, 5, false)},
        {"[4,6] with infinite rows", logsumexp_case(4, 6, true)},
        {"[37,300]", logsumexp_case(37, 300, false)}}},
      {"splat_render", {{"12 Gaussians, degree 1, 20x12", splat_case(12, 4, 20, 12)}}},
      {"layer_norm", {{"[3,8]", norm_case(true, 3, 8)}, {"[37,300]", norm_case(true, 37, 300)}}},
      {"rms_norm", {{"[3,8]", norm_case(false, 3, 8)}, {"[37,300]", norm_case(false, 37, 300)}}},
      {"project_out",
       {{"V[3,10] w[10,1]", project_out_case(3, 10, 1, false)},
        {"V[1,7] w[7,1]", project_out_case(1, 7, 1, false)},
        {"V[5,20001] w[20001,1] (three column blocks and a tail)", project_out_case(5, 20001, 1, true)},
        {"V[4,9] w[9,3] (columns: the lowering on cpu)", project_out_case(4, 9, 3, false)}}},
      {"mse",
       {{"[3,4]",
         [](Build& b, DType t) {
           Var p = b.in(t, {3, 4}), q = b.in(t, {3, 4});
           auto P = reals(b.inputs[0]), Q = reals(b.inputs[1]);
           double s = 0;
           for (size_t i = 0; i < P.size(); ++i) s += (P[i] - Q[i]) * (P[i] - Q[i]) / double(P.size());
           return L1Built{mse(p, q), {s}};
         }}}},
      {"cross_entropy",
       {{"labels=i32", cross_entropy_case(DType::I32)},
        {"labels=i64", cross_entropy_case(DType::I64)},
        {"label_smoothing=0.1", cross_entropy_case(DType::I64, 0.1)},
        {"label_smoothing=1 [33,10]", cross_entropy_case(DType::I32, 1.0, 33, 10)}}},
      {"bce_with_logits", {{"[3,4]", bce_case({3, 4}, 3)}, {"[17,9] logits up to 40", bce_case({17, 9}, 40)}}},
      {"dropout",
       {{"[4,8] p=0.25", dropout_case({4, 8}, 0.25, 7, 3)},
        {"[37,300] p=0.5 key=-1", dropout_case({37, 300}, 0.5, 11, -1)},
        {"p=0", dropout_case({5, 6}, 0.0, 1, 0)}}},
      {"conv2d",
       {{"x[2,3,9,7] w[4,3,3,3] b", conv2d_case({.x = {2, 3, 9, 7}, .out = 4, .kh = 3, .kw = 3})},
        {"stride=2 padding=1 no bias",
         conv2d_case({.x = {3, 2, 11, 8}, .out = 5, .kh = 3, .kw = 2, .stride = {2, 2}, .padding = {1, 1}, .bias = false})},
        {"stride=[3,1] padding=[2,0] dilation=[2,3]",
         conv2d_case({.x = {2, 3, 13, 10}, .out = 2, .kh = 3, .kw = 2, .stride = {3, 1}, .padding = {2, 0},
                      .dilation = {2, 3}})},
        {"groups=3", conv2d_case({.x = {2, 6, 7, 9}, .out = 9, .kh = 2, .kw = 3, .padding = {1, 1}, .groups = 3})},
        {"depthwise groups=4 stride=2",
         conv2d_case({.x = {1, 4, 9, 9}, .out = 8, .kh = 3, .kw = 3, .stride = {2, 2}, .padding = {1, 1}, .groups = 4})},
        {"1x1", conv2d_case({.x = {3, 5, 4, 3}, .out = 7, .kh = 1, .kw = 1})},
        {"1x1 stride=2", conv2d_case({.x = {2, 3, 5, 6}, .out = 4, .kh = 1, .kw = 1, .stride = {2, 2}})},
        {"kernel the size of the input", conv2d_case({.x = {2, 3, 5, 4}, .out = 3, .kh = 5, .kw = 4})},
        {"x[5,16,29,31] w[24,16,5,5] stride=2 padding=2",
         conv2d_case({.x = {5, 16, 29, 31}, .out = 24, .kh = 5, .kw = 5, .stride = {2, 2}, .padding = {2, 2}})}}},
      {"max_pool2d",
       {{"[2,3,8,6] kernel=2", pool_case(true, {2, 3, 8, 6}, {2, 2})},
        {"[2,3,9,7] kernel=3 stride=2 padding=1", pool_case(true, {2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1})},
        {"negative inputs: the -inf padding never wins",
         pool_case(true, {1, 2, 5, 5}, {2, 3}, {1, 2}, {1, 1}, {.lo = -4, .hi = -1})},
        {"ties", pool_case(true, {2, 2, 7, 7}, {3, 3}, {2, 2}, {0, 0}, {.lo = -1, .hi = 1, .quantum = 0.5})},
        {"[4,16,33,29] kernel=[3,2] stride=[2,3]", pool_case(true, {4, 16, 33, 29}, {3, 2}, {2, 3})}}},
      {"avg_pool2d",
       {{"[2,3,8,6] kernel=2", pool_case(false, {2, 3, 8, 6}, {2, 2})},
        {"[2,3,9,7] kernel=3 stride=2 padding=1 (padding counted)", pool_case(false, {2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1})},
        {"kernel=[2,3] stride=[1,2] padding=[1,1]", pool_case(false, {1, 2, 5, 5}, {2, 3}, {1, 2}, {1, 1})},
        {"[4,16,33,29] kernel=[3,2] stride=[2,3]", pool_case(false, {4, 16, 33, 29}, {3, 2}, {2, 3})}}},
      {"batch_norm",
       {{"training [4,3,5,7]", batch_norm_case({4, 3, 5, 7}, true)},
        {"training [6,5] (BatchNorm1d)", batch_norm_case({6, 5}, true)},
        {"training [3,4,9] momentum=0.3 eps=1e-3", batch_norm_case({3, 4, 9}, true, 0.3, 1e-3)},
        {"inference [4,3,5,7]", batch_norm_case({4, 3, 5, 7}, false)},
        {"inference [6,5]", batch_norm_case({6, 5}, false, 0.1, 1e-3)},
        {"training [16,24,13,11]", batch_norm_case({16, 24, 13, 11}, true)}}},
      {"sgd_update",
       {{"plain", sgd_case(0, 0, 0, false)},
        {"momentum dampening weight_decay", sgd_case(0.9, 0.1, 1e-2, false)},
        {"nesterov", sgd_case(0.9, 0, 1e-2, true)},
        {"[1031] momentum", sgd_case(0.9, 0, 0, false, 1031)}}},
      {"adam_update",
       {{"adam", adam_case(0, false)},
        {"adam weight_decay", adam_case(1e-2, false)},
        {"adamw", adam_case(1e-2, true)},
        {"[1031] adamw", adam_case(0.1, true, 1031)}}},
      {"attention",
       {{"mask=none", attention_case("none", false)},
        {"mask=causal", attention_case("causal", false)},
        {"mask=none bias", attention_case("none", true)},
        {"mask=causal bias", attention_case("causal", true)},
        {"[2,67,32] mask=causal", attention_case("causal", false, 2, 67, 32, 16)}}},
      {"rotary_embedding",
       {{"[2,3,2,8]", rotary_case(2, 3, 2, 8)},
        {"[1,5,3,64] i32 positions", rotary_case(1, 5, 3, 64, DType::I32)},
        {"[1,1,16,128] (decoding)", rotary_case(1, 1, 16, 128)},
        {"[2,37,4,128]", rotary_case(2, 37, 4, 128)}}},
      {"grouped_query_attention",
       {{"H=4 KV=2 T=3 S=5", gqa_case(2, 4, 2, 3, 5, 4, 6, false, "")},
        {"H=4 KV=2 T=3 S=5 causal", gqa_case(2, 4, 2, 3, 5, 4, 6, true, "")},
        {"H=6 KV=3 T=2 S=37 D=64 causal bias", gqa_case(1, 6, 3, 2, 37, 64, 64, true, "full")},
        {"H=16 KV=8 T=1 S=130 D=128 cache mask (decoding)", gqa_case(1, 16, 8, 1, 130, 128, 128, false, "mask", 97)},
        {"H=8 KV=2 T=1 S=200 D=64 cache mask (chunks wholly masked)", gqa_case(1, 8, 2, 1, 200, 64, 64, false, "mask", 10)},
        {"H=4 KV=1 T=3 S=300 D=128 Dv=96 causal bias", gqa_case(1, 4, 1, 3, 300, 128, 96, true, "full")},
        {"H=4 KV=4 T=20 S=24 D=32 causal (a prompt)", gqa_case(2, 4, 4, 20, 24, 32, 16, true, "")}}},
      {"cg_csr",
       {{"[9] i32", cg_case(9, 4, DType::I32, false)},
        {"[9] i64 x0", cg_case(9, 4, DType::I64, true)},
        {"[1] i32", cg_case(1, 0, DType::I32, false)},
        {"[0] i64", cg_case(0, 0, DType::I64, false)},
        {"[613] i32 x0", cg_case(613, 9, DType::I32, true)}}},
  };
  return cases;
}

void check_l1(const L1Case& c) {
  const ir::OpDef& def = ir::OpRegistry::get().at(c.op);
  for (DType t : def.dtypes)
    for (const auto& [label, make] : c.variants) {
      const std::string name = c.op + " dtype=" + dtype_name(t) + " variant=" + label;
      Build b(case_seed(name));
      L1Built built;
      try {
        built = make(b, t);
        std::vector<Var> outs{built.out};
        outs.insert(outs.end(), built.more_out.begin(), built.more_out.end());
        rlx::output(b.g, outs);
      } catch (const std::exception& e) {
        BOOST_ERROR(name << ": building the graph failed: " << e.what());
        continue;
      }
      on_every_device(
          name, b,
          [&](const std::string& ctx, const std::vector<Tensor>& got) {
            BOOST_REQUIRE_EQUAL(got.size(), 1 + built.more_out.size());
            for (size_t r = 0; r < got.size(); ++r) {
              std::string m = mismatch(got[r], r ? built.more_want[r - 1] : built.want,
                                       std::max(built.tol, l1_tolerance(t)));
              BOOST_CHECK_MESSAGE(m.empty(), ctx << (r ? " result " + std::to_string(r) : "") << ": " << m << "; "
                                                 << seed_note());
            }
          },
          /*tally=*/true);
    }
}

// Every op's example (ir::example_of: the graph `rlx ops` probes the devices with), run on
// every device against the reference device for every dtype the op declares.
const std::vector<OpCase>& example_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
      ir::ExampleFn example = ir::example_of(*def);
      if (def->name == "param" || !example) continue;  // (tests/dispatch fails on an op without one)
      c.push_back({def->name, {{"example", [example](Build& b, DType t) { return example(b, t); }}}});
    }
    return c;
  }();
  return cases;
}

// One named test case per op: l2/<op> and l1/<op>. (The examples come from the registry,
// which must not be built during static initialization: they run in one case below.)
struct RegisterCases {
  RegisterCases() {
    utf::test_suite* l2 = BOOST_TEST_SUITE("l2");
    for (const OpCase& c : l2_cases()) l2->add(utf::make_test_case([&c] { check_l2(c); }, c.op, __FILE__, __LINE__));
    utf::framework::master_test_suite().add(l2);
    utf::test_suite* l1 = BOOST_TEST_SUITE("l1");
    for (const L1Case& c : l1_cases()) l1->add(utf::make_test_case([&c] { check_l1(c); }, c.op, __FILE__, __LINE__));
    utf::framework::master_test_suite().add(l1);
  }
} register_cases;

}  // namespace

BOOST_AUTO_TEST_CASE(every_op_example_on_every_device) {
  for (const OpCase& c : example_cases()) BOOST_TEST_CONTEXT("example of " << c.op) { check_l2(c); }
}

// Every op in the registry has a row above, so a new op cannot go untested.
BOOST_AUTO_TEST_CASE(every_op_has_a_table_row) {
  for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
    if (def->level == ir::Level::L2) {
      bool found = false;
      for (const OpCase& c : l2_cases()) found |= c.op == def->name;
      BOOST_CHECK_MESSAGE(found, "L2 op " << def->name << " has no row in l2_cases()");
    } else if (def->level == ir::Level::L1) {
      bool found = false;
      for (const L1Case& c : l1_cases()) found |= c.op == def->name;
      BOOST_CHECK_MESSAGE(found, "L1 op " << def->name << " has no row in l1_cases()");
    }
  }
}

// The sparse library primitives (src/ir/ops/sparse.cpp) have rows in l2_cases() too, and
// its L1 op (cg_csr) in l1_cases() (the dense ones are checked the same way in
// test_dense_la.cpp).
BOOST_AUTO_TEST_CASE(every_sparse_op_has_a_table_row) {
  ir::OpRegistry family;
  ir::register_sparse_ops(family);
  BOOST_CHECK(!family.all().empty());
  for (const ir::OpDef* def : family.all()) {
    bool found = false;
    for (const OpCase& c : l2_cases()) found |= c.op == def->name;
    if (def->level == ir::Level::L1)
      for (const L1Case& c : l1_cases()) found |= c.op == def->name;
    BOOST_CHECK_MESSAGE(found, "sparse op " << def->name << " has no row in l2_cases() (l1_cases() for L1)");
    BOOST_CHECK_MESSAGE(ir::OpRegistry::get().find(def->name), def->name << " is not in the global registry");
  }
}

}  // namespace rlx::test
