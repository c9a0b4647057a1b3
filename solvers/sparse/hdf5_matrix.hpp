// A sparse matrix stored in an HDF5 file as rlx's CSR group (docs/io.md): datasets
// row_ptr [rows+1] and col_idx [nnz] (integers), values [nnz] (f32, f64 or c64), and the
// attributes format = "csr", rows, cols on the group. io::H5Writer::write_csr writes it;
// from Python, h5py writes it from SciPy's arrays (indptr, indices, data).
//
// Read serially (read_hdf5_csr) or by every rank of a communicator at once
// (read_hdf5_csr_distributed): each rank opens the file read-only itself (HDF5 permits any
// number of readers of a file nobody writes) and reads only its own rows: the hyperslab
// row_ptr[first .. first + rows] and then the entries those rows span in col_idx and values.
// No rank ever holds the whole matrix.
//
// The file is untrusted input: the group's attributes, the datasets' element types, ranks
// and lengths are checked before anything is read (and the bytes a rank will hold against
// the host's memory); row_ptr must start at 0, never decrease, stay within nnz and end at
// nnz; every column index must lie in [0, cols). A failure names the file, the dataset and
// the (global) row. In the distributed read any rank's failure is a dist::CollectiveError on
// every rank at the same point ("rank R: file:/row_ptr: ..."), so no rank waits on another.
#pragma once
#include <optional>
#include <string>

#include "dist/communicator.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/dist_csr.hpp"

namespace rlx::sparse {

// Where a matrix lies in an HDF5 file: "FILE.h5" or "FILE.hdf5" (the CSR group is the file's
// root), or "FILE.h5:GROUP". nullopt for a name of another kind (a Matrix Market file).
struct Hdf5MatrixSpec {
  std::string path, group = "/";
};
std::optional<Hdf5MatrixSpec> hdf5_matrix_spec(const std::string& spec);

struct Hdf5ReadInfo {
  int64_t rows = 0, cols = 0, nnz = 0;  // the whole matrix's
  int64_t entries_read = 0;             // by this rank
};

// The whole matrix (any shape), with i64 indices and the file's value type.
CsrMatrix read_hdf5_csr(const std::string& path, const std::string& group = "/");

// Collective. The square matrix split as PETSc does (even_row_starts), each rank reading its
// own rows.
DistCsrMatrix read_hdf5_csr_distributed(const dist::Communicator& comm, const std::string& path,
                                        const std::string& group = "/", Hdf5ReadInfo* info = nullptr);

}  // namespace rlx::sparse
