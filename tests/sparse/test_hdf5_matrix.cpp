// solvers/sparse/hdf5_matrix: rlx's HDF5 CSR group read back as the matrix written (index
// and value types, at the root and in a group), every malformed variant refused naming the
// file, dataset and row, and every one-byte change or truncation of a file either read as a
// valid matrix or refused with an InputError. (HDF5 files have no libFuzzer target: libhdf5
// parses the bytes and rlx's checks sit on what it returns, so the sweeps here, like the HDF5
// sweeps of test_io, are what reaches those checks; docs/io.md says more.)
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/sparse/test_sparse.hpp"
#include "tests/support/hdf5_csr.hpp"
#include "tests/support/outcomes.hpp"
#include "tests/support/preconditions.hpp"
#include "io/hdf5.hpp"
#include "solvers/sparse/hdf5_matrix.hpp"

namespace fs = std::filesystem;

namespace {

// Entry (i, j) of a CSR matrix's dense form, as double.
double dense_at(const CsrMatrix& A, int64_t i, int64_t j) {
  const Tensor d = A.to_dense();
  return at(d, i * A.cols() + j).real();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hdf5_matrix, *boost::unit_test::precondition(test::Hdf5Present()))

BOOST_AUTO_TEST_CASE(names_of_hdf5_matrices) {
  auto spec = [](const std::string& s) { return hdf5_matrix_spec(s); };
  BOOST_TEST((spec("a.h5") && spec("a.h5")->path == "a.h5" && spec("a.h5")->group == "/"));
  BOOST_TEST((spec("d/a.hdf5:/g/A") && spec("d/a.hdf5:/g/A")->path == "d/a.hdf5" && spec("d/a.hdf5:/g/A")->group == "/g/A"));
  BOOST_TEST(!spec("a.mtx"));
  BOOST_TEST(!spec("poisson3d:10"));
  BOOST_TEST(!spec("a.h5:"));
}

BOOST_AUTO_TEST_CASE(a_csr_group_reads_back_as_the_matrix_written) {
  std::mt19937_64 rng(seed() + 41);
  std::uniform_real_distribution<double> u(-1, 1);
  // A random rectangular matrix with empty rows, in each index and value type, at the root
  // and in a group.
  const int64_t rows = 23, cols = 17;
  std::vector<int64_t> I, J;
  std::vector<double> V;
  for (int64_t i = 0; i < rows; ++i)
    if (i % 5 != 3)
      for (int k = 0; k < 4; ++k) I.push_back(i), J.push_back(int64_t(rng() % cols)), V.push_back(u(rng));
  for (DType index : {DType::I32, DType::I64})
    for (DType value : {DType::F32, DType::F64, DType::C64})
      for (std::string group : {"/", "mats/A"}) {
        BOOST_TEST_CONTEXT(dtype_name(index) << " " << dtype_name(value) << " at " << group) {
          const CsrMatrix A = CsrMatrix::from_coo(rows, cols, I, J, V, value, index);
          const std::string path = (scratch() / "A.h5").string();
          io::H5Writer w(path);
          w.write_csr(group == "/" ? "" : group, io::CsrArrays{A.row_ptr(), A.col_idx(), A.values(), rows, cols});
          w.commit();
          const CsrMatrix B = read_hdf5_csr(path, group);
          BOOST_TEST(B.rows() == rows);
          BOOST_TEST(B.cols() == cols);
          BOOST_TEST(B.value_type() == value);
          BOOST_TEST(B.nnz() == A.nnz());
          const Tensor da = A.to_dense(), db = B.to_dense();
          for (int64_t k = 0; k < rows * cols; ++k) BOOST_TEST(at(da, k) == at(db, k));
        }
      }
}

BOOST_AUTO_TEST_CASE(malformed_csr_groups_are_refused_naming_dataset_and_row) {
  const int64_t n = 40;
  const std::string path = (scratch() / "bad.h5").string();
  // The valid one reads.
  test::write_csr_fields(path, "/", test::tridiagonal_csr(n));
  const CsrMatrix A = read_hdf5_csr(path);
  BOOST_TEST(A.nnz() == 3 * n - 2);
  BOOST_TEST(dense_at(A, 39, 38) == -1.0 - 39.0 / 40.0);
  for (const test::BadCsr& bad : test::malformed_csr(n)) {
    BOOST_TEST_CONTEXT(bad.name) {
      test::write_csr_fields(path, "/", bad.fields);
      std::vector<std::string> says = bad.says;
      says.insert(says.begin(), path);
      test::expect_error([&] { read_hdf5_csr(path); }, says);
    }
  }
  test::expect_error([&] { read_hdf5_csr((scratch() / "none.h5").string()); }, {"none.h5: no such file"});
  test::expect_error([&] { read_hdf5_csr(path, "/nope"); }, {"bad.h5:/nope: not a CSR matrix"});
}

// Every one-byte change (three ways) and every truncation of a small CSR file reads as a
// matrix that passed CsrMatrix's checks, or is an InputError; never another exception or a
// crash.
BOOST_AUTO_TEST_CASE(changed_and_truncated_csr_files_are_errors_not_crashes) {
  const fs::path good = scratch() / "good.h5";
  test::write_csr_fields(good.string(), "/", test::tridiagonal_csr(4));
  std::string bytes;
  {
    std::ifstream f(good, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    bytes = s.str();
  }
  BOOST_TEST(read_hdf5_csr(good.string()).nnz() == 10);
  const fs::path p = scratch() / "changed.h5";
  test::Outcomes o;
  auto attempt = [&](const std::string& what, const std::string& content) {
    fs::remove(p);  // a new file each time (HDF5 must not find an earlier one still open)
    std::ofstream(p, std::ios::binary) << content;
    o.attempt(what, [&] {
      const CsrMatrix M = read_hdf5_csr(p.string());
      BOOST_TEST(M.rows() <= 4);
    });
  };
  for (size_t i = 0; i < bytes.size(); ++i)
    for (char ch : {'\0', '\xff', '\x01'}) {
      if (bytes[i] == ch) continue;
      std::string m = bytes;
      m[i] = ch;
      attempt("byte " + std::to_string(i) + " -> " + std::to_string(int(static_cast<unsigned char>(ch))), m);
    }
  for (size_t len = 0; len < bytes.size(); len += 7) attempt("the first " + std::to_string(len) + " bytes", bytes.substr(0, len));
  BOOST_TEST_MESSAGE(o.read << " variants read, " << o.refused << " refused");
  BOOST_TEST(o.refused > 0);
  BOOST_TEST(o.read > 0);
}

BOOST_AUTO_TEST_SUITE_END()
