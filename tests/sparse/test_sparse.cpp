// solvers/sparse: CSR validation and COO assembly, Matrix Market read/write (every
// banner combination round trips; every kind of bad file fails naming its line), the
// Poisson generators against the stencil formula, and the front-end functions
// (spmv/spmm/sptrsv) compiled on every device against dense arithmetic done here.
#define BOOST_TEST_MODULE sparse
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <climits>
#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/support/seed.hpp"
#include "tests/support/tensors.hpp"
#include "tests/support/tiled.hpp"
#include "core/error.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "core/checked.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/matrix_market.hpp"
#include "solvers/sparse/ops.hpp"
#include "solvers/sparse/poisson.hpp"
#include "solvers/sparse/tiled.hpp"

// Printers for BOOST_TEST.
namespace rlx {
std::ostream& operator<<(std::ostream& o, DType t) { return o << dtype_name(t); }
namespace sparse {
std::ostream& operator<<(std::ostream& o, MmFormat f) { return o << mm_name(f); }
std::ostream& operator<<(std::ostream& o, MmField f) { return o << mm_name(f); }
std::ostream& operator<<(std::ostream& o, MmSymmetry s) { return o << mm_name(s); }
}  // namespace sparse
}  // namespace rlx

using namespace rlx;
using namespace rlx::sparse;
namespace fs = std::filesystem;
using cd = std::complex<double>;

namespace {

uint64_t seed() { return test::run_seed("test_sparse"); }

using test::host_tensor;
using test::tiled_case;
using test::tiled_error;
using test::TiledCase;
Tensor f64s(const std::vector<double>& v) { return host_tensor(DType::F64, v); }

int64_t idx(const Tensor& t, int64_t k) {
  return t.dtype() == DType::I32 ? int64_t(t.data<int32_t>()[k]) : t.data<int64_t>()[k];
}

cd at(const Tensor& dense, int64_t k) {
  switch (dense.dtype()) {
    case DType::F32: return double(dense.data<float>()[k]);
    case DType::F64: return dense.data<double>()[k];
    default: return cd(dense.data<c64>()[k].real(), dense.data<c64>()[k].imag());
  }
}

std::vector<cd> dense_of(const CsrMatrix& A) {
  Tensor d = A.to_dense();
  std::vector<cd> r(size_t(d.numel()));
  for (int64_t k = 0; k < d.numel(); ++k) r[size_t(k)] = at(d, k);
  return r;
}

// Expects f() to throw E whose message contains every one of `parts`.
template <class E = InputError, class F>
void expect_error(F&& f, std::vector<std::string> parts) {
  try {
    f();
  } catch (const E& e) {
    std::string m = e.what();
    for (auto& p : parts) BOOST_CHECK_MESSAGE(m.find(p) != std::string::npos, "message '" << m << "' lacks '" << p << "'");
    return;
  } catch (const std::exception& e) {
    BOOST_ERROR("wrong exception type: " << e.what());
    return;
  }
  BOOST_ERROR("no exception; expected one mentioning " << parts.at(0));
}

fs::path scratch() {
  static fs::path p = [] {
    fs::path d = fs::temp_directory_path() / ("rlx_test_sparse_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return p;
}

struct Cleanup {
  ~Cleanup() {
    std::error_code ec;
    fs::remove_all(scratch(), ec);
  }
};
BOOST_TEST_GLOBAL_FIXTURE(Cleanup);

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

// ------------------------------------------------------------------ CSR

BOOST_AUTO_TEST_SUITE(csr)

BOOST_AUTO_TEST_CASE(valid_matrix_and_accessors) {
  for (DType it : {DType::I32, DType::I64}) {
    // [[1 0 2], [0 0 0], [0 3 0]]: an empty middle row.
    CsrMatrix A(3, 3, host_tensor(it, {0, 2, 2, 3}), host_tensor(it, {0, 2, 1}), f64s({1, 2, 3}));
    BOOST_TEST(A.rows() == 3);
    BOOST_TEST(A.cols() == 3);
    BOOST_TEST(A.nnz() == 3);
    BOOST_TEST(A.index_type() == it);
    BOOST_TEST(A.value_type() == DType::F64);
    BOOST_TEST(A.sorted_unique());
    BOOST_TEST(A.is_host());
    std::vector<cd> want = {1, 0, 2, 0, 0, 0, 0, 3, 0};
    BOOST_TEST(dense_of(A) == want, boost::test_tools::per_element());
    CsrMatrix B(2, 3, host_tensor(it, {0, 2, 3}), host_tensor(it, {2, 0, 1}), f64s({1, 2, 3}));
    BOOST_TEST(!B.sorted_unique());
  }
  CsrMatrix empty(0, 0, host_tensor(DType::I32, {0}), host_tensor(DType::I32, {}), f64s({}));
  BOOST_TEST(empty.nnz() == 0);
}

BOOST_AUTO_TEST_CASE(invalid_structure_names_the_row) {
  auto I = [](std::vector<int64_t> v) { return host_tensor(DType::I32, v); };
  expect_error([&] { CsrMatrix(3, 3, I({1, 2, 2, 3}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row_ptr[0]", "0"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 1, 3}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row 1", "decreases"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 2}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row_ptr[3]", "nnz = 3"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 4}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row 2", "exceeds nnz"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 3, 1}), f64s({1, 2, 3})); },
               {"row 0", "column index 3", "[0, 3)"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 2, -1}), f64s({1, 2, 3})); }, {"row 2", "column index -1"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 3}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row_ptr must be [4]"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), host_tensor(DType::I64, {0, 2, 1}), f64s({1, 2, 3})); },
               {"col_idx dtype i64", "row_ptr's i32"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 2, 1}), I({1, 2, 3})); }, {"values must be f32, f64 or c64"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 2, 1}), f64s({1, 2})); }, {"[nnz]"});
  expect_error([&] { CsrMatrix(-1, 3, I({0}), I({}), f64s({})); }, {">= 0"});
}

BOOST_AUTO_TEST_CASE(coo_sums_duplicates_and_sorts_columns) {
  // Unordered entries with (0,1) three times and (2,0) twice.
  std::vector<int64_t> i = {2, 0, 0, 2, 0, 1, 0};
  std::vector<int64_t> j = {0, 1, 3, 0, 1, 2, 1};
  std::vector<double> v = {1.5, 1, 4, 2.5, 2, 7, 0.25};
  for (DType value : {DType::F32, DType::F64, DType::C64}) {
    CsrMatrix A = CsrMatrix::from_coo(3, 4, i, j, v, value);
    BOOST_TEST(A.nnz() == 4);
    BOOST_TEST(A.sorted_unique());
    BOOST_TEST(A.value_type() == value);
    BOOST_TEST(A.index_type() == DType::I32);
    std::vector<int64_t> rp, ci;
    for (int64_t k = 0; k <= 3; ++k) rp.push_back(idx(A.row_ptr(), k));
    for (int64_t k = 0; k < 4; ++k) ci.push_back(idx(A.col_idx(), k));
    BOOST_TEST(rp == (std::vector<int64_t>{0, 2, 3, 4}), boost::test_tools::per_element());
    BOOST_TEST(ci == (std::vector<int64_t>{1, 3, 2, 0}), boost::test_tools::per_element());
    std::vector<cd> want = {0, 3.25, 0, 4, 0, 0, 7, 0, 4, 0, 0, 0};
    BOOST_TEST(dense_of(A) == want, boost::test_tools::per_element());
  }
  // Tensor form, mixed index dtypes, explicit i64 output.
  CsrMatrix B = CsrMatrix::from_coo(3, 4, host_tensor(DType::I64, i), host_tensor(DType::I32, j), f64s(v), DType::I64);
  BOOST_TEST(B.index_type() == DType::I64);
  BOOST_TEST(B.nnz() == 4);
  std::vector<cd> cv = {cd(1, 2), cd(3, -1)};
  std::vector<int64_t> ci2 = {1, 1}, cj2 = {0, 0};
  CsrMatrix C = CsrMatrix::from_coo(2, 1, ci2, cj2, cv);
  BOOST_TEST(C.value_type() == DType::C64);
  BOOST_TEST(C.nnz() == 1);
  BOOST_TEST(at(C.values(), 0) == cd(4, 1));
}

BOOST_AUTO_TEST_CASE(coo_rejects_bad_entries) {
  std::vector<int64_t> i = {0, 3}, j = {0, 0};
  std::vector<double> v = {1, 2};
  expect_error([&] { CsrMatrix::from_coo(3, 3, i, j, v); }, {"COO entry 1", "row index 3", "[0, 3)"});
  std::vector<int64_t> i2 = {0, 1}, j2 = {0, -2};
  expect_error([&] { CsrMatrix::from_coo(3, 3, i2, j2, v); }, {"COO entry 1", "column index -2"});
  std::vector<double> v1 = {1};
  expect_error([&] { CsrMatrix::from_coo(3, 3, i2, j2, v1); }, {"one length"});
  // i32 cannot address 3e9 columns.
  std::vector<int64_t> e;
  std::vector<double> ev;
  expect_error([&] { CsrMatrix::from_coo(1, 3000000000LL, e, e, ev, DType::F64, DType::I32); }, {"i32"});
  BOOST_TEST((CsrMatrix::from_coo(1, 3000000000LL, e, e, ev).index_type() == DType::I64));
}

BOOST_AUTO_TEST_CASE(to_coo_conversions_and_copies) {
  std::mt19937_64 rng(seed());
  std::uniform_int_distribution<int64_t> pos(0, 9);
  std::uniform_real_distribution<double> val(-2, 2);
  std::vector<int64_t> i, j;
  std::vector<double> v;
  for (int k = 0; k < 40; ++k) i.push_back(pos(rng)), j.push_back(pos(rng) % 7), v.push_back(val(rng));
  CsrMatrix A = CsrMatrix::from_coo(10, 7, i, j, v);
  Coo c = A.to_coo();
  BOOST_TEST(c.nnz() == A.nnz());
  CsrMatrix B = CsrMatrix::from_coo(c.rows, c.cols, c.row, c.col, c.values);
  BOOST_TEST(dense_of(A) == dense_of(B), boost::test_tools::per_element());
  CsrMatrix W = A.with_index_type(DType::I64);
  BOOST_TEST(W.index_type() == DType::I64);
  BOOST_TEST(dense_of(W) == dense_of(A), boost::test_tools::per_element());
  BOOST_TEST(dense_of(W.with_index_type(DType::I32)) == dense_of(A), boost::test_tools::per_element());
  CsrMatrix Z = A.with_value_type(DType::C64);
  BOOST_TEST(Z.value_type() == DType::C64);
  expect_error([&] { Z.with_value_type(DType::F64); }, {"imaginary"});
  CsrMatrix D = CsrMatrix::from_dense(A.to_dense());
  BOOST_TEST(dense_of(D) == dense_of(A), boost::test_tools::per_element());
  CsrMatrix H = A.to(host_allocator());
  BOOST_TEST(H.values().raw() != A.values().raw());
  BOOST_TEST(dense_of(H) == dense_of(A), boost::test_tools::per_element());
  // Strided input arrays are made contiguous.
  Tensor wide = Tensor::zeros(DType::F64, {A.nnz() * 2});
  for (int64_t k = 0; k < A.nnz(); ++k) wide.data<double>()[2 * k] = A.values().data<double>()[k];
  Tensor strided = wide.with_strides({A.nnz()}, {2}, 0);
  CsrMatrix S(A.rows(), A.cols(), A.row_ptr(), A.col_idx(), strided);
  BOOST_TEST(dense_of(S) == dense_of(A), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

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

// ------------------------------------------------------------------ Matrix Market

BOOST_AUTO_TEST_SUITE(matrix_market)

struct Combo {
  MmFormat format;
  MmField field;
  MmSymmetry sym;
};

bool valid(const Combo& c) {
  if (c.format == MmFormat::Array && c.field == MmField::Pattern) return false;
  if (c.sym == MmSymmetry::Hermitian && c.field != MmField::Complex) return false;
  if (c.sym == MmSymmetry::SkewSymmetric && c.field == MmField::Pattern) return false;
  return true;
}

// A random n x n (or 5 x 7 for general) matrix with the combination's symmetry and
// field: integral values for integer, complex for complex, ones for pattern.
CsrMatrix random_matrix(std::mt19937_64& rng, const Combo& c) {
  const bool general = c.sym == MmSymmetry::General;
  const int64_t rows = general ? 5 : 6, cols = general ? 7 : 6;
  std::uniform_real_distribution<double> u(-3, 3);
  std::bernoulli_distribution keep(0.4);
  auto draw = [&]() -> cd {
    switch (c.field) {
      case MmField::Pattern: return 1.0;
      case MmField::Integer: return std::round(u(rng) * 10) + 0.0;
      case MmField::Real: return u(rng);
      case MmField::Complex: return cd(float(u(rng)), float(u(rng)));
    }
    return 0;
  };
  std::vector<int64_t> ri, cj;
  std::vector<cd> v;
  auto add = [&](int64_t i, int64_t j, cd x) {
    if (x == 0.0) return;
    ri.push_back(i), cj.push_back(j), v.push_back(x);
  };
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      if (!general && j > i) continue;
      if (!keep(rng) && !(i == 3 && j == 1)) continue;  // always one off-diagonal entry
      cd x = draw();
      if (i == j) {
        if (c.sym == MmSymmetry::SkewSymmetric) continue;
        if (c.sym == MmSymmetry::Hermitian) x = x.real();
        add(i, j, x);
      } else {
        add(i, j, x);
        if (c.sym == MmSymmetry::Symmetric) add(j, i, x);
        if (c.sym == MmSymmetry::SkewSymmetric) add(j, i, -x);
        if (c.sym == MmSymmetry::Hermitian) add(j, i, std::conj(x));
      }
    }
  if (c.field == MmField::Complex) return CsrMatrix::from_coo(rows, cols, ri, cj, v);
  std::vector<double> re;
  for (cd x : v) re.push_back(x.real());
  return CsrMatrix::from_coo(rows, cols, ri, cj, re, DType::F64);
}

BOOST_AUTO_TEST_CASE(every_banner_combination_round_trips) {
  std::mt19937_64 rng(seed() ^ 0x5eed);
  int tried = 0;
  for (MmFormat f : {MmFormat::Coordinate, MmFormat::Array})
    for (MmField fi : {MmField::Real, MmField::Complex, MmField::Integer, MmField::Pattern})
      for (MmSymmetry s : {MmSymmetry::General, MmSymmetry::Symmetric, MmSymmetry::SkewSymmetric, MmSymmetry::Hermitian}) {
        Combo c{f, fi, s};
        const std::string name = std::string(mm_name(f)) + " " + mm_name(fi) + " " + mm_name(s);
        fs::path p = scratch() / "combo.mtx";
        CsrMatrix A = random_matrix(rng, {f, valid(c) ? fi : MmField::Complex, s});
        WriteOptions w{.format = f, .field = fi, .symmetry = s, .comment = "combo " + name + "\nsecond line"};
        if (!valid(c)) {
          BOOST_CHECK_THROW(write_matrix_market(p.string(), A, w), InputError);
          continue;
        }
        ++tried;
        BOOST_TEST_CONTEXT(name) {
          write_matrix_market(p.string(), A, w);
          std::string text = read_file(p);
          BOOST_TEST(text.rfind("%%MatrixMarket matrix " + name + "\n%combo " + name + "\n%second line\n", 0) == 0);
          MatrixMarketFile m = read_matrix_market(p.string());
          BOOST_TEST(m.header.format == f);
          BOOST_TEST(m.header.field == fi);
          BOOST_TEST(m.header.symmetry == s);
          BOOST_TEST(m.header.rows == A.rows());
          BOOST_TEST(m.header.cols == A.cols());
          BOOST_TEST(m.matrix.value_type() == (fi == MmField::Complex ? DType::C64 : DType::F64));
          BOOST_TEST(dense_of(m.matrix) == dense_of(A), boost::test_tools::per_element());
          BOOST_TEST(m.matrix.nnz() == A.nnz());
          // The symmetric kinds store one triangle: fewer entries than the full matrix.
          if (f == MmFormat::Coordinate && s != MmSymmetry::General) BOOST_TEST(m.header.entries < A.nnz());
          // Reading and writing again gives the same text.
          BOOST_TEST(format_matrix_market(m.matrix, w) == text);
        }
      }
  BOOST_TEST(tried == 22);  // coordinate: 3 real + 4 complex + 3 integer + 2 pattern; array: 3 + 4 + 3
}

BOOST_AUTO_TEST_CASE(values_round_trip_bit_exactly) {
  std::mt19937_64 rng(seed() ^ 0xb175);
  std::uniform_real_distribution<double> u(-1e3, 1e3);
  std::vector<int64_t> i = {0, 1, 2, 2}, j = {0, 2, 1, 2};
  std::vector<double> v;
  for (int k = 0; k < 4; ++k) v.push_back(u(rng) * std::pow(10.0, double(k * 20 - 33)));  // within f32's normal range
  for (DType t : {DType::F32, DType::F64}) {
    CsrMatrix A = CsrMatrix::from_coo(3, 3, i, j, v, t);
    fs::path p = scratch() / "exact.mtx";
    write_matrix_market(p.string(), A);
    CsrMatrix B = read_matrix_market(p.string(), {.value_type = t}).matrix;
    BOOST_TEST(std::memcmp(A.values().raw(), B.values().raw(), A.values().nbytes()) == 0);
  }
}

MatrixMarketFile parse(const std::string& text, ReadOptions o = {}) { return parse_matrix_market(text, "t.mtx", o); }

BOOST_AUTO_TEST_CASE(symmetric_files_expand_without_doubling_the_diagonal) {
  auto A = parse(
      "%%MatrixMarket matrix coordinate real symmetric\n% comment\n\n3 3 4\n1 1 2.0\n2 1 -1\n3 3 5\n3 2 0.5\n");
  std::vector<cd> want = {2, -1, 0, -1, 0, 0.5, 0, 0.5, 5};
  BOOST_TEST(dense_of(A.matrix) == want, boost::test_tools::per_element());
  BOOST_TEST(A.matrix.nnz() == 6);
  auto S = parse("%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 2\n2 1 4\n3 1 -7\n");
  std::vector<cd> skew = {0, -4, 7, 4, 0, 0, -7, 0, 0};
  BOOST_TEST(dense_of(S.matrix) == skew, boost::test_tools::per_element());
  auto H = parse("%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 3 0\n2 1 1.5 -2\n");
  std::vector<cd> herm = {3, cd(1.5, 2), cd(1.5, -2), 0};
  BOOST_TEST(dense_of(H.matrix) == herm, boost::test_tools::per_element());
  auto P = parse("%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n1 1\n3 1\n3 1\n");
  std::vector<cd> pat = {1, 0, 1, 0, 0, 0, 1, 0, 0};  // the repeated (3, 1) stays 1
  BOOST_TEST(dense_of(P.matrix) == pat, boost::test_tools::per_element());
  auto Arr = parse("%%MatrixMarket matrix array real symmetric\n3 3\n1\n2\n0\n4\n5\n6\n");
  std::vector<cd> arr = {1, 2, 0, 2, 4, 5, 0, 5, 6};
  BOOST_TEST(dense_of(Arr.matrix) == arr, boost::test_tools::per_element());
  BOOST_TEST(Arr.matrix.nnz() == 7);  // the array's zero is dropped
  auto Sk = parse("%%MatrixMarket matrix array real skew-symmetric\n3 3\n1\n2\n3\n");
  std::vector<cd> ska = {0, -1, -2, 1, 0, -3, 2, 3, 0};
  BOOST_TEST(dense_of(Sk.matrix) == ska, boost::test_tools::per_element());
  auto G = parse("%%MatrixMarket matrix array complex general\n2 1\n1 2\n-3 0.5\n");
  std::vector<cd> gen = {cd(1, 2), cd(-3, 0.5)};
  BOOST_TEST(dense_of(G.matrix) == gen, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(duplicates_are_summed_or_refused) {
  const std::string text = "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 2 1.5\n2 2 1\n1 2 2\n";
  auto A = parse(text);
  BOOST_TEST(A.matrix.nnz() == 2);
  BOOST_TEST(dense_of(A.matrix)[1] == cd(3.5));
  try {
    parse(text, {.duplicates = Duplicates::Error});
    BOOST_ERROR("duplicates accepted");
  } catch (const ParseError& e) {
    BOOST_TEST(e.line() == 5);
    BOOST_TEST(std::string(e.what()).find("first stored on line 3") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(options_and_tolerated_layout) {
  // Upper-case banner words, CRLF line ends, tabs, a leading '+', comments and blank lines between entries.
  auto A = parse("%%MatrixMarket MATRIX Coordinate REAL General\r\n%c\r\n2 3 2\r\n\r\n1\t3  +2.5\r\n% mid\r\n2 1 -1e-3\r\n",
                 {.value_type = DType::F32, .index_type = DType::I64});
  BOOST_TEST(A.matrix.value_type() == DType::F32);
  BOOST_TEST(A.matrix.index_type() == DType::I64);
  std::vector<cd> want = {0, 0, 2.5, double(-1e-3f), 0, 0};
  BOOST_TEST(dense_of(A.matrix) == want, boost::test_tools::per_element());
  BOOST_CHECK_THROW(parse("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 1\n", {.value_type = DType::F64}),
                    InputError);
  auto R = parse("%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 4\n", {.value_type = DType::C64});
  BOOST_TEST(R.matrix.value_type() == DType::C64);
  // A header-only read.
  fs::path p = scratch() / "header.mtx";
  write_file(p, "%%MatrixMarket matrix coordinate pattern general\n% x\n4 5 2\n1 1\n");
  MmHeader h = read_matrix_market_header(p.string());
  BOOST_TEST(h.rows == 4);
  BOOST_TEST(h.cols == 5);
  BOOST_TEST(h.entries == 2);
  BOOST_TEST(h.field == MmField::Pattern);
}

// Each bad file: the ParseError's line and a phrase of its message.
struct Bad {
  std::string what, text;
  int line;
  std::string phrase;
};

BOOST_AUTO_TEST_CASE(bad_files_name_the_line) {
  const std::string C = "%%MatrixMarket matrix coordinate real general\n";
  const std::vector<Bad> cases = {
      {"empty file", "", 1, "empty file"},
      {"no banner", "3 3 1\n1 1 1\n", 1, "expected the banner"},
      {"short banner", "%%MatrixMarket matrix coordinate real\n", 1, "4 words"},
      {"unknown object", "%%MatrixMarket vector coordinate real general\n", 1, "unknown object 'vector'"},
      {"unknown format", "%%MatrixMarket matrix sparse real general\n", 1, "unknown format 'sparse'"},
      {"unknown field", "%%MatrixMarket matrix coordinate quaternion general\n", 1, "unknown field 'quaternion'"},
      {"unknown symmetry", "%%MatrixMarket matrix coordinate real diagonal\n", 1, "unknown symmetry 'diagonal'"},
      {"extra banner word", "%%MatrixMarket matrix coordinate real general extra\n", 1, "unexpected word 'extra'"},
      {"real hermitian", "%%MatrixMarket matrix coordinate real hermitian\n", 1, "hermitian needs complex"},
      {"array pattern", "%%MatrixMarket matrix array pattern general\n", 1, "array pattern"},
      {"pattern skew", "%%MatrixMarket matrix coordinate pattern skew-symmetric\n", 1, "pattern skew-symmetric"},
      {"no size line", C + "% only comments\n", 3, "before the size line"},
      {"bad size line", C + "3 x 1\n", 2, "not an integer"},
      {"short size line", C + "3 3\n", 2, "the entry count"},
      {"negative size", C + "3 -3 1\n", 2, ">= 0"},
      {"size line trailing text", C + "3 3 1 9\n1 1 1\n", 2, "unexpected text '9'"},
      {"truncated", C + "3 3 3\n1 1 1\n2 2 2\n", 5, "ends after 2 of the 3 entries"},
      {"truncated mid-line", C + "3 3 2\n1 1 1\n2 2", 4, "expected the value"},
      {"extra entries", C + "3 3 1\n1 1 1\n2 2 2\n", 4, "unexpected data after the 1 entries"},
      {"row out of range", C + "3 3 2\n1 1 1\n4 1 1\n", 4, "row index 4 out of range [1, 3]"},
      {"column zero", C + "3 3 2\n1 1 1\n1 0 1\n", 4, "column index 0 out of range"},
      {"NaN", C + "3 3 2\n1 1 1\n2 2 nan\n", 4, "not finite"},
      {"Inf", C + "3 3 2\n1 1 inf\n2 2 1\n", 3, "not finite"},
      {"overflow", C + "3 3 1\n1 1 1e400\n", 3, "overflows f64"},
      {"not a number", C + "3 3 1\n1 1 one\n", 3, "'one' is not a number"},
      {"entry trailing text", C + "3 3 1\n1 1 1 2\n", 3, "unexpected text '2'"},
      {"integer field with a fraction", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n", 3,
       "not an integer"},
      {"integer beyond 2^53", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 9007199254740993\n", 3,
       "2^53"},
      {"complex missing imaginary part", "%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 1 1.5\n", 3,
       "the imaginary part"},
      {"symmetric with an upper entry", "%%MatrixMarket matrix coordinate real symmetric\n3 3 2\n1 1 1\n1 3 2\n", 4,
       "above the diagonal"},
      {"skew-symmetric with a diagonal entry",
       "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1\n2 2 2\n", 4, "on the diagonal"},
      {"hermitian with a complex diagonal",
       "%%MatrixMarket matrix coordinate complex hermitian\n2 2 1\n1 1 1 0.5\n", 3, "nonzero imaginary part"},
      {"symmetric but not square", "%%MatrixMarket matrix coordinate real symmetric\n3 4 1\n1 1 1\n", 2,
       "not square"},
      {"pattern count beyond the matrix", "%%MatrixMarket matrix coordinate pattern general\n2 2 5\n", 2,
       "more than a 2 x 2"},
      {"binary junk", C + "3 3 1\n1 1 1\n" + std::string("\x00\x01\xff\xfe", 4), 4, "binary data (byte 0x00"},
      {"binary junk in the header", std::string("%%MatrixMarket matrix coordinate real general\x00\n", 47), 1,
       "binary data"},
      {"array truncated", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n", 6, "ends after 3 of the 4 values"},
      {"array extra value", "%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n4\n", 6, "unexpected data"},
      {"array two values on a line", "%%MatrixMarket matrix array real general\n2 1\n1 2\n", 3, "unexpected text"},
      {"array hermitian complex diagonal", "%%MatrixMarket matrix array complex hermitian\n1 1\n1 1\n", 3,
       "nonzero imaginary part"},
  };
  for (const Bad& b : cases) {
    BOOST_TEST_CONTEXT(b.what) {
      try {
        parse(b.text);
        BOOST_ERROR("accepted a bad file");
      } catch (const ParseError& e) {
        BOOST_TEST(e.file() == "t.mtx");
        BOOST_TEST(e.line() == b.line, e.what());
        BOOST_TEST(std::string(e.what()).find(b.phrase) != std::string::npos, e.what());
        BOOST_TEST(std::string(e.what()).rfind("t.mtx:" + std::to_string(b.line) + ": ", 0) == 0, e.what());
      } catch (const std::exception& e) {
        BOOST_ERROR("not a ParseError: " << e.what());
      }
    }
  }
}

// Every prefix of a valid file and every one-byte change of it either parses into a valid
// matrix or fails with an InputError (ParseError): never another exception, never a crash
// (tests/sanitize.sh runs this under ASan/UBSan). Four files: coordinate general real,
// symmetric integer, complex hermitian, and array.
BOOST_AUTO_TEST_CASE(truncations_and_mutations) {
  const std::vector<std::string> files = {
      "%%MatrixMarket matrix coordinate real general\n% a comment\n3 4 4\n1 1 1.5\n2 3 -2e-3\n3 4 7\n3 1 "
      "-0.25\n",
      "%%MatrixMarket matrix coordinate integer symmetric\n3 3 4\n1 1 2\n2 1 -1\n3 2 -1\n3 3 2\n",
      "%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 1.0 0.0\n2 1 0.5 -1.5\n",
      "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n"};
  int parsed = 0, refused = 0;
  auto attempt = [&](const std::string& t, const std::string& what) {
    try {
      MatrixMarketFile f = parse(t);
      BOOST_CHECK_MESSAGE(f.matrix.rows() >= 0 && f.matrix.nnz() <= f.matrix.rows() * f.matrix.cols(), what);
      ++parsed;
    } catch (const InputError&) {
      ++refused;
    } catch (const std::exception& e) {
      BOOST_ERROR(what << ": not an InputError: " << e.what());
    }
  };
  for (const std::string& text : files) {
    for (size_t len = 0; len < text.size(); ++len) attempt(text.substr(0, len), "prefix " + std::to_string(len));
    for (size_t i = 0; i < text.size(); ++i)
      for (char ch : {'\0', '\n', ' ', '%', '-', '+', '.', 'e', '0', '9', 'x', '\xff'}) {
        std::string t = text;
        t[i] = ch;
        attempt(t, "byte " + std::to_string(i) + " -> " + std::to_string(int(static_cast<unsigned char>(ch))));
      }
  }
  BOOST_TEST_MESSAGE(parsed << " variants parsed, " << refused << " refused");
  BOOST_TEST(refused > 0);
  BOOST_TEST(parsed > 0);
}

// Every size a size line implies (rows * cols of an array, n (n + 1) / 2 of a symmetric
// one, the doubled count of a symmetric expansion, rows + 1 row pointers) is checked
// arithmetic (core/checked.hpp) or checked against the machine before anything is
// allocated; a count beyond what the file can hold reserves nothing beyond the file. Each
// failure is a ParseError at a real line (the size line after comments is line 3 here),
// never line 0, never an allocation failure.
BOOST_AUTO_TEST_CASE(impossible_sizes_are_errors_not_crashes) {
  const std::string C = "%%MatrixMarket matrix coordinate real general\n% c\n";
  const std::vector<Bad> cases = {
      // 2^50 rows need a row_ptr no machine holds.
      {"rows beyond memory", C + "1125899906842624 1 0\n", 3, "do not fit in memory"},
      {"rows beyond 2^62", C + "9223372036854775807 1 0\n", 3, "larger than rlx accepts"},
      {"array rows * cols beyond 2^62", "%%MatrixMarket matrix array real general\n% c\n4294967296 4294967296\n1\n", 3,
       "rows * columns"},
      {"symmetric array n (n + 1) / 2 beyond 2^62", "%%MatrixMarket matrix array real symmetric\n% c\n3037000500 3037000500\n", 3,
       "n * (n + 1) / 2"},
      {"symmetric expansion beyond 2^62", "%%MatrixMarket matrix coordinate real symmetric\n% c\n9 9 4611686018427387903\n", 3,
       "symmetric expansion"},
      // 10^12 entries claimed by a tiny file: read as far as the file goes, reserving no more.
      {"entry count beyond the file", C + "9 9 1000000000000\n1 1 1\n", 5, "ends after 1 of the 1000000000000 entries"},
      {"array beyond the file", "%%MatrixMarket matrix array real general\n1000000 1000000\n1\n", 4, "ends after 1 of the"},
  };
  for (const Bad& b : cases) {
    BOOST_TEST_CONTEXT(b.what) {
      try {
        parse(b.text);
        BOOST_ERROR("accepted");
      } catch (const ParseError& e) {
        BOOST_TEST(e.line() == b.line, e.what());
        BOOST_TEST(std::string(e.what()).find(b.phrase) != std::string::npos, e.what());
      } catch (const std::exception& e) {
        BOOST_ERROR("not a ParseError: " << e.what());
      }
    }
  }
}

// Poisson problems too large for the index type, for 2^62 or for this machine's memory are
// refused before allocating, saying what they would need.
BOOST_AUTO_TEST_CASE(poisson_sizes_are_checked_before_allocating) {
  expect_error<SizeError>([] { poisson3d(3000); }, {"poisson3d: n = 3000 is too large", "27000000000 rows", "memory"});
  expect_error<SizeError>([] { poisson2d(int64_t(1) << 40); }, {"poisson2d", "larger than rlx accepts"});
  expect_error<SizeError>([] { poisson3d(int64_t(1) << 21); }, {"poisson3d", "larger than rlx accepts"});
}

BOOST_AUTO_TEST_CASE(file_errors_name_the_file) {
  fs::path p = scratch() / "bad.mtx";
  write_file(p, "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1\n");
  expect_error<ParseError>([&] { read_matrix_market(p.string()); }, {p.string() + ":3:", "row index 3"});
  expect_error<ParseError>([&] { read_matrix_market((scratch() / "missing.mtx").string()); }, {"missing.mtx:0:", "cannot open"});
  expect_error<ParseError>([&] { read_matrix_market(scratch().string()); }, {"directory"});
}

BOOST_AUTO_TEST_CASE(writes_are_atomic_and_checked) {
  fs::path p = scratch() / "atomic.mtx";
  CsrMatrix sym = poisson2d(3);
  write_matrix_market(p.string(), sym, {.symmetry = MmSymmetry::Symmetric});
  const std::string before = read_file(p);
  BOOST_TEST(before.find("symmetric") != std::string::npos);
  // A matrix that is not symmetric: refused, and the old file stays whole.
  std::vector<int64_t> i = {0, 1}, j = {1, 0};
  std::vector<double> v = {1, 2};
  CsrMatrix A = CsrMatrix::from_coo(2, 2, i, j, v);
  expect_error([&] { write_matrix_market(p.string(), A, {.symmetry = MmSymmetry::Symmetric}); },
               {"not symmetric", "A(1, 2) = 1", "A(2, 1) = 2"});
  expect_error([&] { write_matrix_market(p.string(), A, {.symmetry = MmSymmetry::SkewSymmetric}); },
               {"not skew-symmetric"});
  expect_error([&] { write_matrix_market(p.string(), A.with_value_type(DType::C64), {.symmetry = MmSymmetry::Hermitian}); },
               {"not hermitian"});
  std::vector<double> frac = {1.5, 2};
  expect_error([&] { write_matrix_market(p.string(), CsrMatrix::from_coo(2, 2, i, j, frac), {.field = MmField::Integer}); },
               {"integer field"});
  std::vector<double> bad = {std::nan(""), 1};
  expect_error([&] { write_matrix_market(p.string(), CsrMatrix::from_coo(2, 2, i, j, bad)); }, {"non-finite"});
  std::vector<cd> cplx = {cd(1, 1), cd(2, 0)};
  expect_error([&] { write_matrix_market(p.string(), CsrMatrix::from_coo(2, 2, i, j, cplx), {.field = MmField::Real}); },
               {"complex values"});
  expect_error([&] { write_matrix_market(p.string(), poisson2d(2).with_value_type(DType::F64), {.format = MmFormat::Array, .field = MmField::Pattern}); },
               {"pattern"});
  BOOST_TEST(read_file(p) == before);
  // No temporary files are left behind, and an unwritable place is an error.
  for (auto& e : fs::directory_iterator(scratch()))
    BOOST_TEST(e.path().filename().string().find(".tmp.") == std::string::npos, e.path());
  // (names the path whatever the reason: cannot open, or the folder does not exist)
  expect_error([&] { write_matrix_market((scratch() / "no_such_dir" / "x.mtx").string(), sym); }, {"no_such_dir"});
  // A successful write replaces the file.
  write_matrix_market(p.string(), A);
  BOOST_TEST(read_file(p) != before);
  BOOST_TEST(dense_of(read_matrix_market(p.string()).matrix) == dense_of(A), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(large_poisson_round_trip) {
  CsrMatrix A = poisson3d(12);
  fs::path p = scratch() / "p3.mtx";
  write_matrix_market(p.string(), A, {.symmetry = MmSymmetry::Symmetric});
  MatrixMarketFile m = read_matrix_market(p.string());
  BOOST_TEST(m.header.entries == (A.nnz() + A.rows()) / 2);
  BOOST_TEST(m.matrix.nnz() == A.nnz());
  BOOST_TEST(std::memcmp(m.matrix.col_idx().raw(), A.col_idx().raw(), A.col_idx().nbytes()) == 0);
  BOOST_TEST(std::memcmp(m.matrix.values().raw(), A.values().raw(), A.values().nbytes()) == 0);
}

BOOST_AUTO_TEST_SUITE_END()

// ------------------------------------------------------------------ front end on every device

BOOST_AUTO_TEST_SUITE(front_end)

double worst(const Tensor& got, const std::vector<cd>& want) {
  double scale = 0, err = 0;
  for (auto& w : want) scale = std::max(scale, std::abs(w));
  for (size_t k = 0; k < want.size(); ++k) err = std::max(err, std::abs(at(got, int64_t(k)) - want[k]));
  return err / std::max(scale, 1e-300);
}

Tensor random_vector(std::mt19937_64& rng, DType t, int64_t n) {
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor r = Tensor::empty(t, {n});
  for (int64_t k = 0; k < n; ++k) {
    if (t == DType::F64) r.data<double>()[k] = u(rng);
    else if (t == DType::F32) r.data<float>()[k] = float(u(rng));
    else r.data<c64>()[k] = c64(float(u(rng)), float(u(rng)));
  }
  return r;
}

std::vector<cd> vec(const Tensor& t) {
  std::vector<cd> r;
  for (int64_t k = 0; k < t.numel(); ++k) r.push_back(at(t, k));
  return r;
}

BOOST_AUTO_TEST_CASE(spmv_spmm_sptrsv_on_every_device) {
  std::mt19937_64 rng(seed() ^ 0xf00d);
  for (DType t : {DType::F32, DType::F64, DType::C64})
    for (DType it : {DType::I32, DType::I64})
      for (bool as_constants : {false, true}) {
        // A shifted 2D Poisson matrix with random values on its pattern (diagonal dominant).
        CsrMatrix P = poisson2d(23, DType::F64, it);
        Coo c = P.to_coo();
        Tensor vals = random_vector(rng, t, P.nnz());
        for (int64_t k = 0; k < P.nnz(); ++k)
          if (idx(c.row, k) == idx(c.col, k)) {
            if (t == DType::F64) vals.data<double>()[k] = 6;
            else if (t == DType::F32) vals.data<float>()[k] = 6;
            else vals.data<c64>()[k] = c64(6, 1);
          }
        CsrMatrix A(P.rows(), P.cols(), P.row_ptr(), P.col_idx(), vals);
        const int64_t n = A.rows();
        Tensor x = random_vector(rng, t, n), y0 = random_vector(rng, t, n), B = Tensor::empty(t, {n, 3});
        Tensor b3 = random_vector(rng, t, n * 3);
        std::memcpy(B.raw(), b3.raw(), b3.nbytes());
        ir::Graph g;
        CsrVars V = as_constants ? A.ir_constants(g) : A.ir_inputs(g, "A");
        Var xv = rlx::input(g, "x", t, {n}), y0v = rlx::input(g, "y0", t, {n}), Bv = rlx::input(g, "B", t, {n, 3});
        rlx::output(g, {spmv(V, xv), spmv(V, xv, -0.5, 2.0, y0v), spmm(V, Bv), sptrsv(V, xv), sptrsv(V, xv, false, true)});
        std::vector<Tensor> inputs = as_constants ? std::vector<Tensor>{} : A.arrays();
        inputs.insert(inputs.end(), {x, y0, B});
        // Dense expectations.
        std::vector<cd> D = dense_of(A), X = vec(x), Y0 = vec(y0), BB = vec(B);
        const size_t un = static_cast<size_t>(n);
        std::vector<cd> ax(un), axpy(un), ab(3 * un), lx(un), ux(un);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            ax[size_t(i)] += D[size_t(i * n + j)] * X[size_t(j)];
            for (int64_t q = 0; q < 3; ++q) ab[size_t(i * 3 + q)] += D[size_t(i * n + j)] * BB[size_t(j * 3 + q)];
          }
          axpy[size_t(i)] = -0.5 * ax[size_t(i)] + 2.0 * Y0[size_t(i)];
        }
        for (int64_t i = 0; i < n; ++i) {
          cd s = X[size_t(i)];
          for (int64_t j = 0; j < i; ++j) s -= D[size_t(i * n + j)] * lx[size_t(j)];
          lx[size_t(i)] = s / D[size_t(i * n + i)];
        }
        for (int64_t i = n; i-- > 0;) {
          cd s = X[size_t(i)];
          for (int64_t j = i + 1; j < n; ++j) s -= D[size_t(i * n + j)] * ux[size_t(j)];
          ux[size_t(i)] = s;  // unit diagonal
        }
        const double tol = t == DType::F64 ? 1e-12 : 1e-5;
        for (Device* d : DeviceRegistry::get().runnable()) {
          BOOST_TEST_CONTEXT(dtype_name(t) << " " << dtype_name(it) << (as_constants ? " constants" : " inputs")
                                           << " on " << d->name()) {
            Program p = compile(g, *d);
            std::vector<Tensor> r = run(p, *d, inputs);
            BOOST_TEST(worst(r[0], ax) <= tol);
            BOOST_TEST(worst(r[1], axpy) <= tol);
            BOOST_TEST(worst(r[2], ab) <= tol);
            BOOST_TEST(worst(r[3], lx) <= tol);
            BOOST_TEST(worst(r[4], ux) <= tol);
          }
        }
      }
}

// Checks a layout of c: counts, shares ascending and never inside a row, rows in order
// within each tile, and its host product against a long-double CSR product.
void check_layout(const TiledCase& c, const sparse::TiledCsr& t, const std::string& what) {
  BOOST_TEST(t.nnz == int64_t(c.val.size()), what);
  BOOST_TEST(t.share.size() == size_t(t.row_blocks * t.panels * t.warps + 1), what);
  BOOST_TEST(t.share.front() == 0, what);
  BOOST_TEST(t.share.back() == t.nnz, what);
  int64_t bad = 0;
  const size_t w = size_t(t.warps);
  for (size_t i = 0; i + 1 < t.share.size(); ++i) {
    if (t.share[i + 1] < t.share[i]) ++bad;
    const int64_t k = t.share[i], tile_start = t.share[i / w * w], tile_end = t.share[(i / w + 1) * w];
    if (k > tile_start && k < tile_end && (t.rc[size_t(k)] >> 16) == (t.rc[size_t(k) - 1] >> 16)) ++bad;
    if (i % w == 0)
      for (int64_t q = tile_start + 1; q < tile_end; ++q)
        if ((t.rc[size_t(q)] >> 16) < (t.rc[size_t(q) - 1] >> 16)) ++bad;
  }
  BOOST_TEST(bad == 0, what << ": shares out of order or inside a row, or rows out of order");
  std::vector<double> y(size_t(c.rows));
  sparse::tiled_product_host(t, c.x.data(), y.data());
  const double err = tiled_error(c, y);
  BOOST_TEST(err <= 1e-14, what << " worst relative error " << err);
}

BOOST_AUTO_TEST_CASE(tiled_layout_matches_csr) {
  const TiledCase c = tiled_case(seed() + 11, 1003, 5000);
  struct Shape {
    int rb, panel, warps;
  };
  for (DType it : {DType::I32, DType::I64})
    for (Shape sh : {Shape{64, 512, 32}, Shape{1, 5000, 1}, Shape{1003, 4999, 7}, Shape{100, 65536, 32},
                     Shape{7, 333, 4}, Shape{65536, 1024, 32}})
      check_layout(c,
                   sparse::tile_csr(host_tensor(it, c.rp), host_tensor(it, c.ci), host_tensor(DType::F64, c.val),
                                    c.rows, c.cols, sh.rb, sh.panel, sh.warps),
                   std::string(dtype_name(it)) + " rb " + std::to_string(sh.rb) + " panel " +
                       std::to_string(sh.panel) + " warps " + std::to_string(sh.warps));
  // Over 2^20 nonzeros the two passes run row blocks on several threads; the same checks,
  // and a bad input names its first offending row whichever thread meets it.
  const TiledCase big = tiled_case(seed() + 14, 12007, 40000);
  BOOST_REQUIRE(big.val.size() > (size_t(1) << 20));
  check_layout(big,
               sparse::tile_csr(host_tensor(DType::I64, big.rp), host_tensor(DType::I64, big.ci),
                                host_tensor(DType::F64, big.val), big.rows, big.cols, 256, 8192, 32),
               "threaded build");
  std::vector<int64_t> cols = big.ci;
  cols[size_t(big.rp[11016])] = -7;  // (rows 11016 and 3009 hold 2000 entries each: r % 17 == 0, r % 5 != 0)
  cols[size_t(big.rp[3009])] = 40000;
  try {
    sparse::tile_csr(host_tensor(DType::I64, big.rp), host_tensor(DType::I64, cols), host_tensor(DType::F64, big.val),
                     big.rows, big.cols, 256, 8192, 32);
    BOOST_ERROR("tile_csr accepted columns outside the matrix");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("column 40000 of row 3009") != std::string::npos, e.what());
  }
  // Refused, with the reason: bad tile shapes, dtypes, columns, row pointers, and layouts
  // whose shares would outweigh the matrix.
  const Tensor rp = host_tensor(DType::I32, c.rp), ci = host_tensor(DType::I32, c.ci);
  const Tensor v = host_tensor(DType::F64, c.val);
  auto refused = [&](const Tensor& r, const Tensor& cc, int64_t rows, int64_t cols, int rb, int panel, int warps,
                     const std::string& why) {
    try {
      sparse::tile_csr(r, cc, v, rows, cols, rb, panel, warps);
      BOOST_ERROR("tile_csr accepted a layout that should be refused for: " << why);
    } catch (const InputError& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what() << " (expected: " << why << ")");
    }
  };
  refused(rp, ci, c.rows, c.cols, 0, 512, 32, "must lie in [1, 65536], got 0 and 512");
  refused(rp, ci, c.rows, c.cols, 65537, 512, 32, "got 65537 and 512");
  refused(rp, ci, c.rows, c.cols, 64, 65537, 32, "got 64 and 65537");
  refused(rp, ci, c.rows, c.cols, 64, 512, 33, "warps must lie in [1, 32], got 33");
  refused(rp, ci, c.rows, c.cols, 1, 1, 32, "outnumber 4 per nonzero");  // 5000 panels x 1003 rows x 32
  refused(rp, host_tensor(DType::I64, c.ci), c.rows, c.cols, 64, 512, 32, "differs from row_ptr's i32");
  refused(rp, ci, c.rows, 100, 64, 512, 32, "outside [0, 100)");
  refused(rp, ci, c.rows + 1, c.cols, 64, 512, 32, "entries for 1004 rows");
  std::vector<int64_t> shifted = c.rp;
  for (int64_t& k : shifted) k += 1;
  refused(host_tensor(DType::I32, shifted), ci, c.rows, c.cols, 64, 512, 32, "row_ptr starts at 1");
}


// The tile_csr op on every device (the cuda device's is its own sort-based build) gives
// the reference device's arrays bit for bit, and names bad structure as the cpu does.
BOOST_AUTO_TEST_CASE(tile_csr_on_every_device) {
  Device& ref = DeviceRegistry::get().at("reference");
  struct Case {
    TiledCase c;
    int rb, panel, warps;
    DType it;
  };
  std::vector<Case> cases = {{tiled_case(seed() + 21, 1003, 5000), 64, 512, 32, DType::I32},
                             {tiled_case(seed() + 22, 1003, 5000), 1003, 4999, 7, DType::I64},
                             {tiled_case(seed() + 23, 777, 3001), 7, 333, 4, DType::I32},
                             {tiled_case(seed() + 24, 4001, 20000), 256, 8192, 32, DType::I64},
                             // over 2^20 nonzeros: the cpu device's two passes run on several threads
                             {tiled_case(seed() + 25, 12007, 40000), 256, 8192, 32, DType::I64}};
  auto host = [](const Tensor& t) { return t.is_host() ? t : t.to(host_allocator()); };
  for (const Case& k : cases) {
    const Tensor rp = host_tensor(k.it, k.c.rp), ci = host_tensor(k.it, k.c.ci), v = host_tensor(DType::F64, k.c.val);
    const sparse::TiledCsr want = sparse::tile_csr(rp, ci, v, k.c.rows, k.c.cols, k.rb, k.panel, k.warps, &ref);
    check_layout(k.c, want, "reference");
    for (Device* d : DeviceRegistry::get().runnable()) {
      BOOST_TEST_CONTEXT(d->name() << " rb " << k.rb << " panel " << k.panel << " warps " << k.warps) {
        const sparse::TiledCsr got = sparse::tile_csr(rp, ci, v, k.c.rows, k.c.cols, k.rb, k.panel, k.warps, d);
        const std::vector<Tensor> a = sparse::tiled_tensors(want), b = sparse::tiled_tensors(got);
        for (size_t i = 0; i < 3; ++i) {
          const Tensor hb = host(b[i]);
          BOOST_REQUIRE(hb.numel() == a[i].numel());
          BOOST_TEST(std::memcmp(hb.raw(), a[i].raw(), size_t(a[i].numel()) * dtype_size(a[i].dtype())) == 0,
                     "array " << i << " differs from the reference device's");
        }
      }
    }
  }
  // Bad structure: the lowest offending row is named, on every device (on the cpu device by
  // whichever thread meets it).
  const TiledCase& c = cases[4].c;
  BOOST_REQUIRE(c.val.size() > (size_t(1) << 20));
  std::vector<int64_t> cols = c.ci, ptr = c.rp;
  cols[size_t(c.rp[3009])] = -7;  // (rows 2006 and 3009 hold 2000 entries each)
  cols[size_t(c.rp[2006] + 1)] = 40000;
  ptr[2500] = ptr[2501] + 1;  // row 2500 (empty) ends before it starts
  std::vector<int64_t> late = c.rp;
  late[3900] = late[3899] - 1;  // row 3899 goes backwards
  const Tensor v = host_tensor(DType::F64, c.val);
  struct Bad {
    std::vector<int64_t> rp, ci;
    std::string why;
  };
  const std::vector<Bad> bad = {{c.rp, cols, "column 40000 of row 2006 outside [0, 40000)"},
                                {ptr, cols, "column 40000 of row 2006"},
                                {ptr, c.ci, "not ascending (or past nnz) at row 2500"},
                                {late, c.ci, "not ascending (or past nnz) at row 3899"}};
  for (Device* d : DeviceRegistry::get().runnable())
    for (const Bad& b : bad) {
      try {
        sparse::tile_csr(host_tensor(DType::I64, b.rp), host_tensor(DType::I64, b.ci), v, c.rows, c.cols, 256, 8192,
                         32, d);
        BOOST_ERROR(d->name() << " built a layout of a matrix with bad structure (" << b.why << ")");
      } catch (const InputError& e) {
        BOOST_TEST(std::string(e.what()).find(b.why) != std::string::npos,
                   d->name() << ": " << e.what() << " (expected: " << b.why << ")");
      }
    }
}


// --spmv auto: tiled only for f64 values on a GPU with rows of kTiledRowLength or more.
BOOST_AUTO_TEST_CASE(choose_spmv_picks_tiled_for_long_rows_on_a_gpu) {
  const Device::Geometry gpu{132, 232448}, host{};
  auto rows_of = [](int64_t rows, int64_t per_row, DType t) {
    std::vector<int64_t> i, j;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < per_row; ++k) i.push_back(r), j.push_back((r + k * 7) % 1000);
    return sparse::CsrMatrix::from_coo(rows, 1000, i, j, std::vector<double>(i.size(), 1.0), t);
  };
  const int64_t at = int64_t(sparse::kTiledRowLength);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F64), gpu).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F64), gpu).why.find("tiled: 96.0 nonzeros per row") == 0);
  BOOST_TEST(!sparse::choose_spmv(rows_of(50, at - 1, DType::F64), gpu).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at - 1, DType::F64), gpu).why.find("csr: 95.0 nonzeros per row") == 0);
  BOOST_TEST(!sparse::choose_spmv(rows_of(50, at, DType::F64), host).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F64), host).why.find("not a GPU") != std::string::npos);
  BOOST_TEST(!sparse::choose_spmv(rows_of(50, at, DType::F32), gpu).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F32), gpu).why.find("f32 values") != std::string::npos);
  BOOST_TEST(!sparse::choose_spmv(rows_of(0, at, DType::F64), gpu).tiled);
}


// operator_for: the operator a solve multiplies by, on every runnable device. A matrix of
// 100 nonzeros per row: auto picks tiled exactly on the devices that report a GPU geometry
// (cuda), built there; csr never, tiled always; other modes refused.
BOOST_AUTO_TEST_CASE(operator_for_follows_the_mode_and_the_device) {
  const int64_t n = 2000;
  std::vector<int64_t> i, j;
  std::vector<double> v;
  std::mt19937_64 g(seed() + 31);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < 100; ++k) i.push_back(r), j.push_back((r * 37 + k * 19) % n), v.push_back(u(g));
  const sparse::CsrOperator A(sparse::CsrMatrix::from_coo(n, n, i, j, v));
  for (Device* d : DeviceRegistry::get().runnable()) {
    BOOST_TEST_CONTEXT(d->name()) {
      const bool gpu = d->geometry().multiprocessors > 0;
      const sparse::OperatorChoice a = sparse::operator_for(A, *d, "auto");
      BOOST_TEST(bool(a.op) == gpu, a.why);
      BOOST_TEST(a.why.find(gpu ? "tiled: 100.0 nonzeros per row" : "not a GPU") != std::string::npos, a.why);
      BOOST_TEST(!sparse::operator_for(A, *d, "csr").op);
      const sparse::OperatorChoice t = sparse::operator_for(A, *d, "tiled");
      BOOST_REQUIRE(t.op);
      BOOST_TEST(t.layout.find("laid out on " + d->name()) == 0, t.layout);
      BOOST_TEST(t.layout.find(gpu ? "this GPU's" : "an H200's") != std::string::npos, t.layout);
      BOOST_TEST(t.op->rows() == n);
      BOOST_CHECK_THROW(sparse::operator_for(A, *d, "coo"), InputError);
      // Long rows spread over 2^31 columns: more tiles than the layout allows. Forced, an
      // error; auto on a GPU falls back to CSR and says why.
      std::vector<int64_t> wi, wj;
      for (int64_t r = 0; r < 100; ++r)
        for (int64_t k = 0; k < 100; ++k) wi.push_back(r), wj.push_back(k * 21474836 + r);
      const sparse::CsrOperator wide(
          sparse::CsrMatrix::from_coo(100, int64_t(1) << 31, wi, wj, std::vector<double>(wi.size(), 1.0)));
      BOOST_CHECK_THROW(sparse::operator_for(wide, *d, "tiled"), InputError);
      const sparse::OperatorChoice w = sparse::operator_for(wide, *d, "auto");
      BOOST_TEST(!w.op);
      if (gpu)
        BOOST_TEST(w.why.find("csr: the tiled layout was chosen but cannot be built on " + d->name()) == 0, w.why);
    }
  }
}


// spmv_tiled through a compiled graph on every device (the cuda device too where there is a
// GPU): y = alpha A x + beta y0 on the layout of a random matrix, against a long-double
// CSR product; then a layout with a share out of order, which the reference device names.
BOOST_AUTO_TEST_CASE(spmv_tiled_on_every_device) {
  const TiledCase c = tiled_case(seed() + 13, 2003, 9001);
  const sparse::TiledCsr t = sparse::tile_csr(host_tensor(DType::I64, c.rp), host_tensor(DType::I64, c.ci),
                                              host_tensor(DType::F64, c.val), c.rows, c.cols, 512, 2048, 32);
  const std::vector<Tensor> arrays = sparse::tiled_tensors(t);
  std::vector<double> y0v(size_t(c.rows));
  for (size_t i = 0; i < y0v.size(); ++i) y0v[i] = std::cos(double(i));
  ir::Graph g;
  std::vector<Var> a = {rlx::input(g, "share", DType::I64, arrays[0].shape()),
                        rlx::input(g, "rc", DType::I32, arrays[1].shape()),
                        rlx::input(g, "values", DType::F64, arrays[2].shape())};
  Var x = rlx::input(g, "x", DType::F64, {c.cols}), y0 = rlx::input(g, "y0", DType::F64, {c.rows});
  Var plain = sparse::spmv_tiled(a, t, x);
  Var axpy = rlx::op("spmv_tiled", {a[0], a[1], a[2], x, y0},
                     {{"rows", c.rows}, {"cols", c.cols}, {"rb", int64_t(512)}, {"panel", int64_t(2048)},
                      {"warps", int64_t(32)}, {"alpha", 2.0}, {"beta", -0.5}});
  rlx::output(g, {plain, axpy});
  const std::vector<Tensor> inputs = {arrays[0], arrays[1], arrays[2], host_tensor(DType::F64, c.x),
                                      host_tensor(DType::F64, y0v)};
  int ran = 0;
  for (Device* d : DeviceRegistry::get().runnable()) {
    BOOST_TEST_CONTEXT("on " << d->name()) {
      Program p = compile(g, *d);
      std::vector<Tensor> r = run(p, *d, inputs);
      const std::vector<double> y(r[0].data<double>(), r[0].data<double>() + c.rows),
          axpy_y(r[1].data<double>(), r[1].data<double>() + c.rows);
      BOOST_TEST(tiled_error(c, y) <= 1e-13);
      BOOST_TEST(tiled_error(c, axpy_y, 2.0, -0.5, y0v) <= 1e-13);
      ++ran;
    }
  }
  BOOST_TEST(ran >= 2);  // the reference and cpu devices at least
  // Broken layouts: the oracle refuses, naming what is wrong — a share out of order, a
  // share starting inside a row, rows out of order within a tile.
  Device& ref = DeviceRegistry::get().at("reference");
  Program p = compile(g, ref);
  auto copy = [](const Tensor& t) {
    Tensor c = Tensor::empty(t.dtype(), t.shape());
    std::memcpy(c.raw(), t.raw(), t.nbytes());
    return c;
  };
  auto refused = [&](const std::vector<Tensor>& bad, const std::string& why) {
    try {
      run(p, ref, bad);
      BOOST_ERROR("the reference device ran spmv_tiled with " << why);
    } catch (const InputError& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what() << " (expected: " << why << ")");
    }
  };
  std::vector<Tensor> bad = {copy(arrays[0]), arrays[1], arrays[2], inputs[3], inputs[4]};
  bad[0].data<int64_t>()[5] = bad[0].data<int64_t>()[7] + 1;
  refused(bad, "share 6 is");
  // The first tile's second share moved to a position inside a row (its shares hold
  // hundreds of entries, rows tens per panel).
  const int64_t* sh = arrays[0].data<int64_t>();
  const uint32_t* rcw = reinterpret_cast<const uint32_t*>(arrays[1].data<int32_t>());
  int64_t inside = -1;
  for (int64_t k = 1; k < sh[2] && inside < 0; ++k)  // (shares stay ascending)
    if ((rcw[k] >> 16) == (rcw[k - 1] >> 16)) inside = k;
  BOOST_REQUIRE(inside > 0);
  bad = {copy(arrays[0]), arrays[1], arrays[2], inputs[3], inputs[4]};
  bad[0].data<int64_t>()[1] = inside;
  refused(bad, "starts inside row");
  // Two entries of the first tile from different rows swapped.
  int64_t step = -1;
  for (int64_t k = 1; k < sh[32] && step < 0; ++k)
    if ((rcw[k] >> 16) > (rcw[k - 1] >> 16)) step = k;
  BOOST_REQUIRE(step > 0);
  bad = {arrays[0], copy(arrays[1]), arrays[2], inputs[3], inputs[4]};
  std::swap(bad[1].data<int32_t>()[step], bad[1].data<int32_t>()[step - 1]);
  refused(bad, "rows out of order");
}

BOOST_AUTO_TEST_CASE(front_end_errors) {
  CsrMatrix A = poisson2d(3);
  ir::Graph g;
  CsrVars V = A.ir_inputs(g, "A");
  BOOST_TEST(g.param_name(0) == "A.row_ptr");
  BOOST_TEST(g.param_name(2) == "A.values");
  Var wrong = rlx::input(g, "x", DType::F64, {4});
  BOOST_CHECK_THROW(spmv(V, wrong), InputError);
  Var xf = rlx::input(g, "xf", DType::F32, {9});
  BOOST_CHECK_THROW(spmv(V, xf), InputError);
  CsrVars empty;
  Var x = rlx::input(g, "x9", DType::F64, {9});
  BOOST_CHECK_THROW(spmv(empty, x), InputError);
  CsrMatrix R = CsrMatrix::from_coo(2, 3, std::vector<int64_t>{0}, std::vector<int64_t>{2}, std::vector<double>{1.0});
  CsrVars RV = R.ir_inputs(g, "R");
  Var b2 = rlx::input(g, "b2", DType::F64, {2});
  BOOST_CHECK_THROW(sptrsv(RV, b2), InputError);  // not square
}

BOOST_AUTO_TEST_SUITE_END()
