// Compressed sparse row matrices.
//
// A CsrMatrix holds three tensors: row_ptr [rows+1] and col_idx [nnz] (both i32 or both
// i64) and values [nnz] (f32, f64 or c64). Building one validates the structure once
// (row_ptr starts at 0, never decreases and ends at nnz; every column index lies in
// [0, cols)), so kernels can trust it. Columns within a row need not be sorted or unique;
// from_coo() produces sorted, duplicate-free rows, and sorted_unique() says whether a
// matrix has them.
//
// A matrix is host-resident when built; to(allocator) copies the arrays to a device (the
// copy keeps the validated structure). ir_inputs()/ir_constants() put the three arrays
// into a graph, and solvers/sparse/ops.hpp has the front-end functions (spmv, spmm,
// sptrsv) that take the result.
#pragma once
#include <complex>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ir/frontend.hpp"

namespace rlx::sparse {

// For code reading CSR arrays on the host: a contiguous host tensor with t's contents (t
// itself when it already is one), and entry k of a contiguous i32 or i64 index tensor.
Tensor host_contiguous(const Tensor& t);
int64_t index_at(const Tensor& t, int64_t k);

// A matrix in a graph: its three arrays as values, plus its dimensions.
struct CsrVars {
  Var row_ptr, col_idx, values;
  int64_t rows = 0, cols = 0;
  DType value_type() const { return values.dtype(); }
};

// Coordinate form: entry k is (row[k], col[k], values[k]); row and col share one index dtype.
struct Coo {
  int64_t rows = 0, cols = 0;
  Tensor row, col, values;
  int64_t nnz() const { return values.numel(); }
};

class CsrMatrix {
 public:
  CsrMatrix() = default;
  // Validates and keeps the arrays (strided or non-host tensors are copied to contiguous
  // host tensors first). Throws InputError naming the offending row.
  CsrMatrix(int64_t rows, int64_t cols, Tensor row_ptr, Tensor col_idx, Tensor values);

  // Assembles from coordinate triples: i and j are i32 or i64 tensors (any mix) or
  // vectors, v holds the values (f32, f64 or c64; its dtype is the matrix's). Entries
  // at the same position are summed; each row's columns come out sorted. `index` picks
  // the index dtype; by default i32 when rows, cols and nnz fit, else i64.
  static CsrMatrix from_coo(int64_t rows, int64_t cols, const Tensor& i, const Tensor& j, const Tensor& v,
                            std::optional<DType> index = std::nullopt);
  static CsrMatrix from_coo(int64_t rows, int64_t cols, const std::vector<int64_t>& i, const std::vector<int64_t>& j,
                            const std::vector<double>& v, DType value = DType::F64,
                            std::optional<DType> index = std::nullopt);
  static CsrMatrix from_coo(int64_t rows, int64_t cols, const std::vector<int64_t>& i, const std::vector<int64_t>& j,
                            const std::vector<std::complex<double>>& v, std::optional<DType> index = std::nullopt);
  // As above with 0-based index vectors (taken over, not copied) and a values tensor.
  static CsrMatrix from_coo(int64_t rows, int64_t cols, std::vector<int64_t> i, std::vector<int64_t> j,
                            const Tensor& v, std::optional<DType> index = std::nullopt);
  // Every nonzero of a dense host matrix [rows, cols] (exact zeros are dropped).
  static CsrMatrix from_dense(const Tensor& dense, std::optional<DType> index = std::nullopt);

  // The entries in row order (and stored order within a row); indices keep the matrix's dtype.
  Coo to_coo() const;
  // A dense host copy [rows, cols] (duplicates summed).
  Tensor to_dense() const;
  // The same matrix with other index dtype (i32 or i64); throws InputError when i32
  // cannot hold rows, cols or nnz.
  CsrMatrix with_index_type(DType index) const;
  // The same matrix with other value dtype (f32, f64, c64); c64 -> real is refused.
  CsrMatrix with_value_type(DType value) const;
  // A copy of the three arrays on another allocator (a device's); no revalidation.
  CsrMatrix to(Allocator* a) const;
  bool is_host() const;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t nnz() const { return values_.numel(); }
  DType index_type() const { return row_ptr_.dtype(); }
  DType value_type() const { return values_.dtype(); }
  bool sorted_unique() const { return sorted_unique_; }  // each row's columns strictly increasing
  const Tensor& row_ptr() const { return row_ptr_; }
  const Tensor& col_idx() const { return col_idx_; }
  const Tensor& values() const { return values_; }
  // The arrays in the order ir_inputs() declares them: {row_ptr, col_idx, values}.
  std::vector<Tensor> arrays() const { return {row_ptr_, col_idx_, values_}; }

  // Graph inputs named "<name>.row_ptr", "<name>.col_idx", "<name>.values" (feed arrays()).
  CsrVars ir_inputs(ir::Graph& g, const std::string& name = "A", SrcLoc loc = SrcLoc::current()) const;
  // The arrays baked into the graph as constants (host copies when the matrix lives elsewhere).
  CsrVars ir_constants(ir::Graph& g, SrcLoc loc = SrcLoc::current()) const;

 private:
  struct Trusted {};
  CsrMatrix(Trusted, int64_t rows, int64_t cols, Tensor row_ptr, Tensor col_idx, Tensor values, bool sorted);

  int64_t rows_ = 0, cols_ = 0;
  Tensor row_ptr_, col_idx_, values_;
  bool sorted_unique_ = true;
};

// The smallest index dtype (i32 or i64) that holds rows, cols and nnz.
DType index_type_for(int64_t rows, int64_t cols, int64_t nnz);
// An index tensor's values (i32 or i64, any device) as int64, in element order.
std::vector<int64_t> index_vector(const Tensor& t);

}  // namespace rlx::sparse
