// What the files of test_sparse share: a printer for BOOST_TEST, the run seed, host
// tensors, dense views of a CSR matrix, and expect_error.
#pragma once
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <complex>
#include <filesystem>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tests/support/errors.hpp"
#include "tests/support/seed.hpp"
#include "tests/support/tensors.hpp"
#include "core/error.hpp"
#include "solvers/sparse/csr.hpp"

// Printer for BOOST_TEST.
namespace rlx {
inline std::ostream& operator<<(std::ostream& o, DType t) { return o << dtype_name(t); }
}  // namespace rlx

using namespace rlx;
using namespace rlx::sparse;
using cd = std::complex<double>;

inline uint64_t seed() { return test::run_seed("test_sparse"); }

// One scratch folder for the files test_sparse writes, removed at exit by ScratchCleanup
// (a global fixture, declared once in test_matrix_market.cpp).
inline std::filesystem::path scratch() {
  static std::filesystem::path p = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("rlx_test_sparse_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return p;
}

struct ScratchCleanup {
  ~ScratchCleanup() {
    std::error_code ec;
    std::filesystem::remove_all(scratch(), ec);
  }
};

using test::host_tensor;
inline Tensor f64s(const std::vector<double>& v) { return host_tensor(DType::F64, v); }

inline int64_t idx(const Tensor& t, int64_t k) {
  return t.dtype() == DType::I32 ? int64_t(t.data<int32_t>()[k]) : t.data<int64_t>()[k];
}

inline cd at(const Tensor& dense, int64_t k) {
  switch (dense.dtype()) {
    case DType::F32: return double(dense.data<float>()[k]);
    case DType::F64: return dense.data<double>()[k];
    default: return cd(dense.data<c64>()[k].real(), dense.data<c64>()[k].imag());
  }
}

inline std::vector<cd> dense_of(const CsrMatrix& A) {
  Tensor d = A.to_dense();
  std::vector<cd> r(size_t(d.numel()));
  for (int64_t k = 0; k < d.numel(); ++k) r[size_t(k)] = at(d, k);
  return r;
}

using test::expect_error;  // tests/support/errors.hpp
