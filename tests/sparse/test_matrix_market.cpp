// solvers/sparse's Matrix Market read/write: every banner combination round trips; every
// kind of bad file fails naming its line; sizes are checked before allocating; writes are
// atomic.
#include <chrono>
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

#include "tests/sparse/test_sparse.hpp"
#include "core/checked.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/matrix_market.hpp"
#include "solvers/sparse/poisson.hpp"

// Printers for BOOST_TEST.
namespace rlx {
namespace sparse {
std::ostream& operator<<(std::ostream& o, MmFormat f) { return o << mm_name(f); }
std::ostream& operator<<(std::ostream& o, MmField f) { return o << mm_name(f); }
std::ostream& operator<<(std::ostream& o, MmSymmetry s) { return o << mm_name(s); }
}  // namespace sparse
}  // namespace rlx

namespace fs = std::filesystem;

namespace {

// (test_sparse's scratch folder, removed at exit: test_sparse.hpp)
BOOST_TEST_GLOBAL_FIXTURE(ScratchCleanup);

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

// An array with no values reads as an empty matrix at once, however many columns it
// declares: the reader is bounded by the values the array holds, not by its column count
// (a 0 x 7.7e15 complex array once spun through its empty columns for hours).
BOOST_AUTO_TEST_CASE(empty_arrays_with_huge_extents_read_at_once) {
  for (const char* sym : {"general", "symmetric", "skew-symmetric"}) {
    BOOST_TEST_CONTEXT(sym) {
      const bool square = std::string(sym) != "general";
      const std::string text = std::string("%%MatrixMarket matrix array complex ") + sym + "\n" +
                               (square ? "0 0\n" : "0 7693134862000000\n");
      const auto start = std::chrono::steady_clock::now();
      MatrixMarketFile f = parse(text);
      BOOST_TEST(f.matrix.rows() == 0);
      BOOST_TEST(f.matrix.cols() == (square ? 0 : 7693134862000000));
      BOOST_TEST(f.matrix.nnz() == 0);
      BOOST_TEST((std::chrono::steady_clock::now() - start < std::chrono::seconds(1)));
    }
  }
}

// ReadOptions::max_bytes caps what the size line may make the reader allocate: 340 million
// empty rows (2.7 GB of row pointers from a 67-byte file) are refused under a 256 MiB cap and
// read without one on a machine that has the memory.
BOOST_AUTO_TEST_CASE(max_bytes_caps_the_row_pointers) {
  const std::string text = "%%MatrixMarket matrix coordinate real general\n% c\n340747535 1 0\n";
  try {
    parse(text, ReadOptions{.max_bytes = int64_t(256) << 20});
    BOOST_ERROR("accepted");
  } catch (const ParseError& e) {
    BOOST_TEST(e.line() == 3);
    BOOST_TEST(std::string(e.what()).find("ReadOptions::max_bytes") != std::string::npos, e.what());
  }
  MatrixMarketFile small = parse("%%MatrixMarket matrix coordinate real general\n1000 1 0\n", ReadOptions{.max_bytes = 1 << 20});
  BOOST_TEST(small.matrix.rows() == 1000);
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
