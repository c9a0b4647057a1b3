// HDF5 files: tensors as datasets, scalar attributes, and CSR matrices as groups.
//
// Layout (docs/io.md): a dataset per tensor (row-major, its dtype: f32, f64, i8, u8, i32,
// i64, bool as h5py's 8-bit enum, c64 as the compound {r: f32, i: f32} that h5py and NumPy read as
// complex64). A CSR matrix is a group with datasets row_ptr, col_idx, values and the
// attributes format="csr", rows, cols.
//
// Writes go to a temporary file in the same folder, renamed over the target on commit():
// a crash or an error never leaves a half-written file under the final name.
// Built only when HDF5 is found (RLX_HAVE_HDF5); otherwise every call throws an Error
// saying rlx was built without HDF5.
#pragma once
#include <memory>
#include <string>
#include <variant>

#include "core/tensor.hpp"

namespace rlx::io {

bool hdf5_available();

using H5Attr = std::variant<int64_t, double, std::string>;

// What a dataset holds, from its header (nothing read): the dtype it reads as and its shape.
struct H5DatasetInfo {
  DType dtype = DType::F64;
  Shape shape;
};

struct CsrArrays {
  Tensor row_ptr, col_idx, values;
  int64_t rows = 0, cols = 0;
};

class H5Writer {
 public:
  explicit H5Writer(const std::string& path);
  ~H5Writer();  // removes the temporary file unless committed
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;
  // `name` may contain '/': intermediate groups are created.
  void write(const std::string& name, const Tensor& t);
  void attr(const std::string& object, const std::string& name, const H5Attr& v);  // object "/" for the file
  void write_csr(const std::string& group, const CsrArrays& a);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class H5Reader {
 public:
  explicit H5Reader(const std::string& path);
  ~H5Reader();
  bool has(const std::string& name) const;
  Tensor read(const std::string& name) const;
  // The dtype and shape of a dataset, after the checks read() makes before reading.
  H5DatasetInfo info(const std::string& name) const;
  // Entries [first, first + count) along the first axis of a dataset of rank >= 1 (a
  // hyperslab: only those bytes are read); the range must lie inside the dataset.
  Tensor read_rows(const std::string& name, int64_t first, int64_t count) const;
  // Integer, float, or string (fixed-length, or variable-length as h5py writes str).
  H5Attr attr(const std::string& object, const std::string& name) const;
  // A CSR group's arrays and sizes as stored (write_csr's layout), with no check that they
  // form a matrix: what reads a file into a matrix is sparse::read_hdf5_csr
  // (solvers/sparse/hdf5_matrix.hpp), which checks every index before using it.
  CsrArrays read_csr(const std::string& group) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx::io
