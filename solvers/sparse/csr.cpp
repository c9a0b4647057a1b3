#include "solvers/sparse/csr.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "core/error.hpp"

namespace rlx::sparse {

Tensor host_contiguous(const Tensor& t) {
  if (!t.is_host()) return t.to(host_allocator());
  return t.is_contiguous() ? t : t.contiguous();
}

int64_t index_at(const Tensor& t, int64_t k) {
  return t.dtype() == DType::I32 ? int64_t(t.data<int32_t>()[k]) : t.data<int64_t>()[k];
}

namespace {

using cd = std::complex<double>;

bool is_index(DType t) { return t == DType::I32 || t == DType::I64; }
bool is_value(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::C64; }

void set_index(const Tensor& t, int64_t k, int64_t v) {
  if (t.dtype() == DType::I32)
    t.data<int32_t>()[k] = int32_t(v);
  else
    t.data<int64_t>()[k] = v;
}

// Calls f(T{}) with the storage type of a value dtype (float, double, c64).
template <class F>
decltype(auto) visit_value(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::C64: return f(c64{});
    default: break;
  }
  throw InputError(std::string("sparse values must be f32, f64 or c64, got ") + dtype_name(t));
}

// Accumulation type: double for reals, complex<double> for c64.
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, c64>, cd, double>;

template <class T>
T narrow(Acc<T> a) {
  if constexpr (std::is_same_v<T, c64>)
    return c64(float(a.real()), float(a.imag()));
  else
    return T(a);
}

template <class T>
Acc<T> widen(T v) {
  if constexpr (std::is_same_v<T, c64>)
    return cd(v.real(), v.imag());
  else
    return Acc<T>(v);
}

std::string range_str(int64_t n) { return "[0, " + std::to_string(n) + ")"; }

void check_dims(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    throw InputError("sparse matrix dimensions must be >= 0, got " + std::to_string(rows) + " x " + std::to_string(cols));
}

// Row-sorted, column-sorted, duplicate-summed CSR from coordinate arrays.
template <class T>
CsrMatrix assemble(int64_t rows, int64_t cols, const std::vector<int64_t>& ri, const std::vector<int64_t>& cj,
                   const T* v, std::optional<DType> index) {
  const int64_t n = int64_t(ri.size());
  for (int64_t k = 0; k < n; ++k) {
    if (ri[size_t(k)] < 0 || ri[size_t(k)] >= rows)
      throw InputError("COO entry " + std::to_string(k) + ": row index " + std::to_string(ri[size_t(k)]) +
                       " out of range " + range_str(rows));
    if (cj[size_t(k)] < 0 || cj[size_t(k)] >= cols)
      throw InputError("COO entry " + std::to_string(k) + " (row " + std::to_string(ri[size_t(k)]) +
                       "): column index " + std::to_string(cj[size_t(k)]) + " out of range " + range_str(cols));
  }
  // Counting sort by row (stable), then each row's entries by (column, original order).
  std::vector<int64_t> start(size_t(rows) + 1, 0);
  for (int64_t r : ri) ++start[size_t(r) + 1];
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t k = 0; k < n; ++k) order[size_t(fill[size_t(ri[size_t(k)])]++)] = k;
  std::vector<int64_t> out_ptr(size_t(rows) + 1, 0), out_col;
  std::vector<T> out_val;
  out_col.reserve(size_t(n));
  out_val.reserve(size_t(n));
  for (int64_t r = 0; r < rows; ++r) {
    auto b = order.begin() + start[size_t(r)], e = order.begin() + start[size_t(r) + 1];
    std::sort(b, e, [&](int64_t x, int64_t y) { return cj[size_t(x)] != cj[size_t(y)] ? cj[size_t(x)] < cj[size_t(y)] : x < y; });
    for (auto it = b; it != e;) {
      const int64_t c = cj[size_t(*it)];
      Acc<T> s = 0;
      for (; it != e && cj[size_t(*it)] == c; ++it) s += widen(v[*it]);
      out_col.push_back(c);
      out_val.push_back(narrow<T>(s));
    }
    out_ptr[size_t(r) + 1] = int64_t(out_col.size());
  }
  const int64_t nnz = int64_t(out_col.size());
  const DType it = index.value_or(index_type_for(rows, cols, nnz));
  if (!is_index(it)) throw InputError(std::string("index dtype must be i32 or i64, got ") + dtype_name(it));
  if (it == DType::I32 && index_type_for(rows, cols, nnz) == DType::I64)
    throw InputError("i32 indices cannot hold a " + std::to_string(rows) + " x " + std::to_string(cols) +
                     " matrix with " + std::to_string(nnz) + " nonzeros");
  Tensor rp = Tensor::empty(it, {rows + 1}), ci = Tensor::empty(it, {nnz});
  Tensor va = Tensor::empty(dtype_of<T>::value, {nnz});
  for (int64_t r = 0; r <= rows; ++r) set_index(rp, r, out_ptr[size_t(r)]);
  for (int64_t k = 0; k < nnz; ++k) set_index(ci, k, out_col[size_t(k)]);
  if (nnz) std::memcpy(va.raw(), out_val.data(), size_t(nnz) * sizeof(T));
  return CsrMatrix(rows, cols, rp, ci, va);
}

std::vector<int64_t> index_vector(const Tensor& t, const char* what) {
  if (!is_index(t.dtype()))
    throw InputError(std::string("COO ") + what + " indices must be i32 or i64, got " + dtype_name(t.dtype()));
  if (t.rank() != 1) throw InputError(std::string("COO ") + what + " indices must be a vector, got " + shape_str(t.shape()));
  return sparse::index_vector(t);
}

}  // namespace

std::vector<int64_t> index_vector(const Tensor& t) {
  const Tensor h = host_contiguous(t);
  const int64_t n = h.numel();
  if (h.dtype() == DType::I64) {
    const int64_t* p = h.data<int64_t>();
    return std::vector<int64_t>(p, p + n);
  }
  if (h.dtype() == DType::I32) {
    const int32_t* p = h.data<int32_t>();
    return std::vector<int64_t>(p, p + n);
  }
  std::vector<int64_t> r(static_cast<size_t>(n));  // (other integer dtypes: element by element)
  for (int64_t k = 0; k < n; ++k) r[size_t(k)] = index_at(h, k);
  return r;
}

DType index_type_for(int64_t rows, int64_t cols, int64_t nnz) {
  return std::max({rows, cols, nnz}) <= INT32_MAX ? DType::I32 : DType::I64;
}

CsrMatrix::CsrMatrix(int64_t rows, int64_t cols, Tensor row_ptr, Tensor col_idx, Tensor values)
    : rows_(rows), cols_(cols) {
  check_dims(rows, cols);
  if (!is_index(row_ptr.dtype()))
    throw InputError(std::string("CSR row_ptr must be i32 or i64, got ") + dtype_name(row_ptr.dtype()));
  if (col_idx.dtype() != row_ptr.dtype())
    throw InputError(std::string("CSR col_idx dtype ") + dtype_name(col_idx.dtype()) + " differs from row_ptr's " +
                     dtype_name(row_ptr.dtype()));
  if (!is_value(values.dtype()))
    throw InputError(std::string("CSR values must be f32, f64 or c64, got ") + dtype_name(values.dtype()));
  if (row_ptr.shape() != Shape{rows + 1})
    throw InputError("CSR row_ptr must be [" + std::to_string(rows + 1) + "] for " + std::to_string(rows) +
                     " rows, got " + shape_str(row_ptr.shape()));
  if (col_idx.rank() != 1 || values.shape() != col_idx.shape())
    throw InputError("CSR col_idx and values must both be [nnz], got " + shape_str(col_idx.shape()) + " and " +
                     shape_str(values.shape()));
  row_ptr_ = host_contiguous(row_ptr);
  col_idx_ = host_contiguous(col_idx);
  values_ = host_contiguous(values);
  const int64_t nnz = values_.numel();
  if (row_ptr_.dtype() == DType::I32 && index_type_for(rows, cols, nnz) == DType::I64)
    throw InputError("CSR with i32 indices cannot describe " + std::to_string(cols) + " columns and " +
                     std::to_string(nnz) + " nonzeros");
  if (index_at(row_ptr_, 0) != 0)
    throw InputError("CSR row_ptr[0] must be 0, got " + std::to_string(index_at(row_ptr_, 0)));
  sorted_unique_ = true;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = index_at(row_ptr_, r), e = index_at(row_ptr_, r + 1);
    if (e < b)
      throw InputError("CSR row " + std::to_string(r) + ": row_ptr decreases from " + std::to_string(b) + " to " +
                       std::to_string(e));
    if (e > nnz)
      throw InputError("CSR row " + std::to_string(r) + ": row_ptr[" + std::to_string(r + 1) + "] = " +
                       std::to_string(e) + " exceeds nnz = " + std::to_string(nnz));
    int64_t prev = -1;
    for (int64_t k = b; k < e; ++k) {
      const int64_t c = index_at(col_idx_, k);
      if (c < 0 || c >= cols)
        throw InputError("CSR row " + std::to_string(r) + ": column index " + std::to_string(c) + " (entry " +
                         std::to_string(k) + ") out of range " + range_str(cols));
      if (c <= prev) sorted_unique_ = false;
      prev = c;
    }
  }
  if (index_at(row_ptr_, rows) != nnz)
    throw InputError("CSR row_ptr[" + std::to_string(rows) + "] = " + std::to_string(index_at(row_ptr_, rows)) +
                     " must equal nnz = " + std::to_string(nnz) + " (the length of col_idx and values)");
}

CsrMatrix::CsrMatrix(Trusted, int64_t rows, int64_t cols, Tensor row_ptr, Tensor col_idx, Tensor values, bool sorted)
    : rows_(rows),
      cols_(cols),
      row_ptr_(std::move(row_ptr)),
      col_idx_(std::move(col_idx)),
      values_(std::move(values)),
      sorted_unique_(sorted) {}

CsrMatrix CsrMatrix::from_coo(int64_t rows, int64_t cols, const Tensor& i, const Tensor& j, const Tensor& v,
                              std::optional<DType> index) {
  check_dims(rows, cols);
  std::vector<int64_t> ri = index_vector(i, "row"), cj = index_vector(j, "column");
  if (v.rank() != 1 || ri.size() != cj.size() || int64_t(ri.size()) != v.numel())
    throw InputError("COO arrays must have one length: rows " + std::to_string(ri.size()) + ", columns " +
                     std::to_string(cj.size()) + ", values " + shape_str(v.shape()));
  Tensor hv = host_contiguous(v);
  return visit_value(v.dtype(), [&](auto z) { return assemble(rows, cols, ri, cj, hv.data<decltype(z)>(), index); });
}

CsrMatrix CsrMatrix::from_coo(int64_t rows, int64_t cols, std::vector<int64_t> i, std::vector<int64_t> j,
                              const Tensor& v, std::optional<DType> index) {
  check_dims(rows, cols);
  if (v.rank() != 1 || i.size() != j.size() || int64_t(i.size()) != v.numel())
    throw InputError("COO arrays must have one length: rows " + std::to_string(i.size()) + ", columns " +
                     std::to_string(j.size()) + ", values " + shape_str(v.shape()));
  Tensor hv = host_contiguous(v);
  return visit_value(v.dtype(), [&](auto z) { return assemble(rows, cols, i, j, hv.data<decltype(z)>(), index); });
}

CsrMatrix CsrMatrix::from_coo(int64_t rows, int64_t cols, const std::vector<int64_t>& i, const std::vector<int64_t>& j,
                              const std::vector<double>& v, DType value, std::optional<DType> index) {
  check_dims(rows, cols);
  if (i.size() != j.size() || i.size() != v.size())
    throw InputError("COO arrays must have one length: rows " + std::to_string(i.size()) + ", columns " +
                     std::to_string(j.size()) + ", values " + std::to_string(v.size()));
  if (value == DType::F64) return assemble(rows, cols, i, j, v.data(), index);
  if (value == DType::F32) {
    std::vector<float> f(v.begin(), v.end());
    return assemble(rows, cols, i, j, f.data(), index);
  }
  if (value == DType::C64) {
    std::vector<c64> c(v.size());
    for (size_t k = 0; k < v.size(); ++k) c[k] = c64(float(v[k]), 0.f);
    return assemble(rows, cols, i, j, c.data(), index);
  }
  throw InputError(std::string("sparse values must be f32, f64 or c64, got ") + dtype_name(value));
}

CsrMatrix CsrMatrix::from_coo(int64_t rows, int64_t cols, const std::vector<int64_t>& i, const std::vector<int64_t>& j,
                              const std::vector<cd>& v, std::optional<DType> index) {
  check_dims(rows, cols);
  if (i.size() != j.size() || i.size() != v.size())
    throw InputError("COO arrays must have one length: rows " + std::to_string(i.size()) + ", columns " +
                     std::to_string(j.size()) + ", values " + std::to_string(v.size()));
  std::vector<c64> c(v.size());
  for (size_t k = 0; k < v.size(); ++k) c[k] = c64(float(v[k].real()), float(v[k].imag()));
  return assemble(rows, cols, i, j, c.data(), index);
}

CsrMatrix CsrMatrix::from_dense(const Tensor& dense, std::optional<DType> index) {
  if (dense.rank() != 2) throw InputError("from_dense needs a matrix, got " + shape_str(dense.shape()));
  Tensor h = host_contiguous(dense);
  const int64_t rows = h.shape()[0], cols = h.shape()[1];
  std::vector<int64_t> ri, cj;
  return visit_value(h.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* p = h.data<T>();
    std::vector<T> v;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (p[r * cols + c] != T(0)) {
          ri.push_back(r);
          cj.push_back(c);
          v.push_back(p[r * cols + c]);
        }
    return assemble(rows, cols, ri, cj, v.data(), index);
  });
}

Coo CsrMatrix::to_coo() const {
  Coo c;
  c.rows = rows_;
  c.cols = cols_;
  Tensor rp = host_contiguous(row_ptr_);
  c.row = Tensor::empty(index_type(), {nnz()});
  for (int64_t r = 0; r < rows_; ++r)
    for (int64_t k = index_at(rp, r); k < index_at(rp, r + 1); ++k) set_index(c.row, k, r);
  c.col = host_contiguous(col_idx_).clone();
  c.values = host_contiguous(values_).clone();
  return c;
}

Tensor CsrMatrix::to_dense() const {
  Tensor d = Tensor::zeros(value_type(), {rows_, cols_});
  Tensor rp = host_contiguous(row_ptr_), ci = host_contiguous(col_idx_), va = host_contiguous(values_);
  visit_value(value_type(), [&](auto z) {
    using T = decltype(z);
    T* out = d.data<T>();
    const T* v = va.data<T>();
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t k = index_at(rp, r); k < index_at(rp, r + 1); ++k) out[r * cols_ + index_at(ci, k)] += v[k];
  });
  return d;
}

CsrMatrix CsrMatrix::with_index_type(DType index) const {
  if (!is_index(index)) throw InputError(std::string("index dtype must be i32 or i64, got ") + dtype_name(index));
  if (index == index_type()) return *this;
  if (index == DType::I32 && index_type_for(rows_, cols_, nnz()) == DType::I64)
    throw InputError("i32 indices cannot hold a " + std::to_string(rows_) + " x " + std::to_string(cols_) +
                     " matrix with " + std::to_string(nnz()) + " nonzeros");
  Tensor rp = host_contiguous(row_ptr_), ci = host_contiguous(col_idx_);
  Tensor nrp = Tensor::empty(index, rp.shape()), nci = Tensor::empty(index, ci.shape());
  for (int64_t k = 0; k < rp.numel(); ++k) set_index(nrp, k, index_at(rp, k));
  for (int64_t k = 0; k < ci.numel(); ++k) set_index(nci, k, index_at(ci, k));
  return CsrMatrix(Trusted{}, rows_, cols_, nrp, nci, host_contiguous(values_), sorted_unique_);
}

CsrMatrix CsrMatrix::with_value_type(DType value) const {
  if (!is_value(value)) throw InputError(std::string("sparse values must be f32, f64 or c64, got ") + dtype_name(value));
  if (value == value_type()) return *this;
  if (value_type() == DType::C64)
    throw InputError(std::string("cannot convert c64 sparse values to ") + dtype_name(value) +
                     " (the imaginary parts would be lost)");
  Tensor src = host_contiguous(values_);
  Tensor dst = Tensor::empty(value, src.shape());
  const int64_t n = src.numel();
  auto get = [&](int64_t k) { return value_type() == DType::F32 ? double(src.data<float>()[k]) : src.data<double>()[k]; };
  for (int64_t k = 0; k < n; ++k) {
    if (value == DType::F32) dst.data<float>()[k] = float(get(k));
    else if (value == DType::F64) dst.data<double>()[k] = get(k);
    else dst.data<c64>()[k] = c64(float(get(k)), 0.f);
  }
  return CsrMatrix(Trusted{}, rows_, cols_, host_contiguous(row_ptr_), host_contiguous(col_idx_), dst, sorted_unique_);
}

CsrMatrix CsrMatrix::to(Allocator* a) const {
  return CsrMatrix(Trusted{}, rows_, cols_, row_ptr_.to(a), col_idx_.to(a), values_.to(a), sorted_unique_);
}

bool CsrMatrix::is_host() const { return !row_ptr_.defined() || (row_ptr_.is_host() && col_idx_.is_host() && values_.is_host()); }

CsrVars CsrMatrix::ir_inputs(ir::Graph& g, const std::string& name, SrcLoc loc) const {
  CsrVars v;
  v.rows = rows_;
  v.cols = cols_;
  v.row_ptr = rlx::input(g, name + ".row_ptr", index_type(), {rows_ + 1}, loc);
  v.col_idx = rlx::input(g, name + ".col_idx", index_type(), {nnz()}, loc);
  v.values = rlx::input(g, name + ".values", value_type(), {nnz()}, loc);
  return v;
}

CsrVars CsrMatrix::ir_constants(ir::Graph& g, SrcLoc loc) const {
  CsrVars v;
  v.rows = rows_;
  v.cols = cols_;
  v.row_ptr = rlx::constant(g, host_contiguous(row_ptr_), loc);
  v.col_idx = rlx::constant(g, host_contiguous(col_idx_), loc);
  v.values = rlx::constant(g, host_contiguous(values_), loc);
  return v;
}

}  // namespace rlx::sparse
