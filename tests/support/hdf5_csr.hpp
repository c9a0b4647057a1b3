// HDF5 CSR groups for the matrix reader's tests (test_sparse reads them serially, test_dist
// with every rank at once): a valid one, and malformed variants of it, each with what the
// error must say and the row whose reader finds it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "io/hdf5.hpp"

namespace rlx::test {

// What a test writes: any dtype or shape in each dataset, any attribute values; a field
// left empty (an undefined tensor, nullopt) is not written.
struct CsrFields {
  std::optional<io::H5Attr> format = io::H5Attr(std::string("csr")), rows, cols;
  Tensor row_ptr, col_idx, values;
};

inline void write_csr_fields(const std::string& path, const std::string& group, const CsrFields& f) {
  io::H5Writer w(path);
  const std::string prefix = group == "/" ? "" : group + "/";
  if (f.row_ptr.defined()) w.write(prefix + "row_ptr", f.row_ptr);
  if (f.col_idx.defined()) w.write(prefix + "col_idx", f.col_idx);
  if (f.values.defined()) w.write(prefix + "values", f.values);
  const std::string obj = group == "/" ? "/" : group;
  if (f.format) w.attr(obj, "format", *f.format);
  if (f.rows) w.attr(obj, "rows", *f.rows);
  if (f.cols) w.attr(obj, "cols", *f.cols);
  w.commit();
}

template <class T>
Tensor tensor_of(DType t, const std::vector<T>& v, Shape shape = {}) {
  if (shape.empty()) shape = {int64_t(v.size())};
  Tensor r = Tensor::empty(t, shape);
  for (size_t k = 0; k < v.size(); ++k) r.data<T>()[k] = v[k];
  return r;
}

// The first k entries of a 1-D tensor.
inline Tensor first_entries(const Tensor& t, int64_t k) {
  Tensor r = Tensor::empty(t.dtype(), {k});
  std::memcpy(r.raw(), t.raw(), r.nbytes());
  return r;
}

// The n x n tridiagonal matrix with a_ii = 4, a_i,i±1 = -1 - i / n (nnz = 3n - 2), i64
// row_ptr and i32 col_idx (the reader takes either).
inline CsrFields tridiagonal_csr(int64_t n) {
  CsrFields f;
  std::vector<int64_t> rp{0};
  std::vector<int32_t> ci;
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = std::max<int64_t>(0, i - 1); j <= std::min(n - 1, i + 1); ++j)
      ci.push_back(int32_t(j)), v.push_back(i == j ? 4.0 : -1.0 - double(i) / double(n));
    rp.push_back(int64_t(ci.size()));
  }
  f.rows = n, f.cols = n;
  f.row_ptr = tensor_of(DType::I64, rp);
  f.col_idx = tensor_of(DType::I32, ci);
  f.values = tensor_of(DType::F64, v);
  return f;
}

struct BadCsr {
  std::string name;
  CsrFields fields;
  std::vector<std::string> says;
  int64_t row = -1;  // the first row whose reader sees the fault; -1: every reader (the header)
};

// Malformed variants of tridiagonal_csr(n) (n >= 40).
inline std::vector<BadCsr> malformed_csr(int64_t n) {
  const CsrFields good = tridiagonal_csr(n);
  const int64_t nnz = 3 * n - 2;
  std::vector<BadCsr> bad;
  auto add = [&](std::string name, std::vector<std::string> says, int64_t row, auto change) {
    CsrFields f = good;
    f.row_ptr = good.row_ptr.clone(), f.col_idx = good.col_idx.clone(), f.values = good.values.clone();
    change(f);
    bad.push_back({std::move(name), std::move(f), std::move(says), row});
  };
  add("no format attribute", {"not a CSR matrix"}, -1, [](CsrFields& f) { f.format.reset(); });
  add("another format", {"not a CSR matrix"}, -1, [](CsrFields& f) { f.format = io::H5Attr(std::string("coo")); });
  add("rows not an integer", {"@rows: not an integer"}, -1, [](CsrFields& f) { f.rows = io::H5Attr(std::string("40")); });
  add("no cols", {"@cols", "no such attribute"}, -1, [](CsrFields& f) { f.cols.reset(); });
  add("negative rows", {"@rows: -1 is out of range"}, -1, [](CsrFields& f) { f.rows = int64_t(-1); });
  add("no values", {"values: no such dataset"}, -1, [](CsrFields& f) { f.values = Tensor(); });
  add("row_ptr truncated", {"row_ptr: " + std::to_string(n) + " entries for the " + std::to_string(n) + " rows"}, -1,
      [&](CsrFields& f) { f.row_ptr = first_entries(f.row_ptr, n); });
  add("row_ptr two-dimensional", {"row_ptr: must be one-dimensional"}, -1,
      [&](CsrFields& f) { f.row_ptr = f.row_ptr.reshape({n + 1, 1}); });
  add("col_idx of floats", {"col_idx: elements must be 32- or 64-bit integers", "f64"}, -1,
      [&](CsrFields& f) { f.col_idx = f.values; });
  add("values of integers", {"values: elements must be f32, f64 or complex64", "i32"}, -1,
      [&](CsrFields& f) { f.values = f.col_idx; });
  add("values truncated", {"col_idx has " + std::to_string(nnz) + " entries, values " + std::to_string(nnz - 1)}, -1,
      [&](CsrFields& f) { f.values = first_entries(f.values, nnz - 1); });
  add("row_ptr[0] not 0", {"row_ptr[0] = 1, must be 0"}, 0, [](CsrFields& f) { f.row_ptr.data<int64_t>()[0] = 1; });
  add("row_ptr decreasing", {"row 30: row_ptr decreases"}, 30,
      [](CsrFields& f) { f.row_ptr.data<int64_t>()[31] = f.row_ptr.data<int64_t>()[30] - 1; });
  add("row_ptr past nnz", {"row_ptr[20] = " + std::to_string(nnz + 5) + " lies outside [0, " + std::to_string(nnz) + "]"}, 19,
      [&](CsrFields& f) { f.row_ptr.data<int64_t>()[20] = nnz + 5; });
  add("row_ptr ending before nnz", {"row_ptr[" + std::to_string(n) + "] = " + std::to_string(nnz - 1) + ", must be nnz"}, n - 1,
      [&](CsrFields& f) { f.row_ptr.data<int64_t>()[n] = nnz - 1; });
  add("column past cols", {"row " + std::to_string(n - 1) + ": column index " + std::to_string(n) + " (entry " +
                               std::to_string(nnz - 1) + ") out of range [0, " + std::to_string(n) + ")"},
      n - 1, [&](CsrFields& f) { f.col_idx.data<int32_t>()[nnz - 1] = int32_t(n); });
  add("negative column", {"row 5: column index -1"}, 5,
      [&](CsrFields& f) { f.col_idx.data<int32_t>()[f.row_ptr.data<int64_t>()[5]] = -1; });
  return bad;
}

}  // namespace rlx::test
