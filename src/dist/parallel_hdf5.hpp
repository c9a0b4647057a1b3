// One HDF5 file written by every rank of a communicator together (MPI-IO through the MPI
// build of HDF5), in the layout of io::H5Writer (docs/io.md). Only in builds configured with
// -DRLX_HDF5_PARALLEL=ON (RLX_HAVE_HDF5_PARALLEL), which link the MPI build of HDF5 in place
// of the serial one.
//
//   dist::ParallelH5Writer w(comm, "x.h5");                 // collective
//   w.write_rows("x", x_local, n, A.user_rows());           // each rank its rows of x
//   w.write_whole("residual_history", h);                   // the same on every rank
//   w.attr("ranks", int64_t(comm.size()));
//   w.commit();                                             // collective
//
// Every call is collective, in the same order on every rank. The file is written under a
// temporary name that rank 0 picks (io::AtomicFile) and renamed by rank 0 after every rank
// has closed it (a barrier): the target only ever holds a complete file. Errors on any rank
// are raised on all (CollectiveError); the temporary is then removed.
#pragma once
#ifndef RLX_HAVE_HDF5_PARALLEL
#error "dist/parallel_hdf5.hpp needs an rlx built with -DRLX_HDF5_PARALLEL=ON"
#endif
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "dist/communicator.hpp"
#include "io/hdf5.hpp"

namespace rlx::dist {

class ParallelH5Writer {
 public:
  ParallelH5Writer(const Communicator& comm, const std::string& path);
  ~ParallelH5Writer();  // removes the temporary unless committed (not collective)
  ParallelH5Writer(const ParallelH5Writer&) = delete;
  ParallelH5Writer& operator=(const ParallelH5Writer&) = delete;

  // A dataset [global_rows] (or [global_rows, k]) of local's dtype; this rank writes the rows
  // of `local` at the file rows `rows` (one per leading-axis row of local, any order, no row
  // written twice by any two ranks). The dtype and trailing shape must agree on all ranks.
  void write_rows(const std::string& name, const Tensor& local, int64_t global_rows, const std::vector<int64_t>& rows);
  // A dataset that every rank holds the same copy of (rank 0's is written).
  void write_whole(const std::string& name, const Tensor& t);
  // A root attribute; the value must be the same on every rank.
  void attr(const std::string& name, const io::H5Attr& v);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx::dist
