// Built only with -DRLX_HDF5_PARALLEL=ON; empty otherwise.
#ifdef RLX_HAVE_HDF5_PARALLEL
#include "dist/parallel_hdf5.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "dist/mpi.hpp"
#include "io/atomic_file.hpp"
#include "io/hdf5_handles.hpp"

namespace rlx::dist {

using io::h5::Handle;

struct ParallelH5Writer::Impl {
  Impl(const Communicator& c, const std::string& p) : comm(c), path(p) {}
  Communicator comm;
  std::string path;
  std::unique_ptr<io::AtomicFile> out;  // rank 0's
  Handle file, collective;
  bool committed = false;

  // Runs f() on this rank and raises what any rank's f() threw on every rank.
  template <class F>
  void together(const std::string& where, F&& f) {
    std::string why;
    try {
      f();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty() && why.rfind(path, 0) != 0) why = where + ": " + why;
    raise_collectively(comm, why);
  }
};

ParallelH5Writer::ParallelH5Writer(const Communicator& comm, const std::string& path)
    : impl_(std::make_unique<Impl>(comm, path)) {
  Impl& m = *impl_;
  std::string temp;
  m.together(path, [&] {
    if (comm.rank() == 0) {
      m.out = std::make_unique<io::AtomicFile>(path);
      temp = m.out->temp();
    }
  });
  temp = broadcast_string(comm, temp, 0);
  m.together(path, [&] {
    // A process without MPI initialised (a plain run: the one-process group) writes through
    // HDF5's default driver; MPI-IO would need MPI.
    const bool mpio = mpi_initialized();
    Handle fapl = io::h5::file_access(path);
    if (mpio && H5Pset_fapl_mpio(fapl.get(), mpi_comm(comm), MPI_INFO_NULL) < 0)
      throw Error(path + ": cannot set up MPI-IO for HDF5");
    m.file = Handle(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!m.file.ok()) throw InputError(path + ": cannot create HDF5 file (is the folder writable on every rank?)");
    m.collective = Handle(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
    if (!m.collective.ok() || (mpio && H5Pset_dxpl_mpio(m.collective.get(), H5FD_MPIO_COLLECTIVE) < 0))
      throw Error(path + ": cannot set collective transfers");
  });
}

ParallelH5Writer::~ParallelH5Writer() {
  if (impl_) impl_->file.reset();  // closed before rank 0's AtomicFile removes an uncommitted temporary
}

void ParallelH5Writer::write_rows(const std::string& name, const Tensor& local_in, int64_t global_rows,
                                  const std::vector<int64_t>& rows) {
  Impl& m = *impl_;
  const std::string where = m.path + ":" + name;
  Tensor local = local_in.is_host() ? local_in.contiguous() : local_in.to(host_allocator());
  std::string why;
  if (local.rank() != 1 || local.numel() != int64_t(rows.size()))
    why = where + ": this rank's part must be [" + std::to_string(rows.size()) + "], got " + local.type().str();
  for (int64_t r : rows)
    if (why.empty() && (r < 0 || r >= global_rows))
      why = where + ": row " + std::to_string(r) + " is outside 0.." + std::to_string(global_rows - 1);
  raise_collectively(m.comm, why);
  const int64_t t = int64_t(local.dtype());
  if (m.comm.all_reduce(t, ReduceOp::Min) != m.comm.all_reduce(t, ReduceOp::Max))
    throw CollectiveError(where + ": the ranks' parts differ in dtype");
  // Ascending file rows, the local entries reordered to match.
  std::vector<size_t> by_row(rows.size());
  std::iota(by_row.begin(), by_row.end(), size_t(0));
  std::sort(by_row.begin(), by_row.end(), [&](size_t a, size_t b) { return rows[a] < rows[b]; });
  const size_t es = dtype_storage_bytes(local.dtype(), 1);
  std::vector<char> data(rows.size() * es);
  std::vector<hsize_t> coords(rows.size());
  for (size_t k = 0; k < by_row.size(); ++k) {
    std::memcpy(data.data() + k * es, static_cast<const char*>(local.raw()) + by_row[k] * es, es);
    coords[k] = hsize_t(rows[by_row[k]]);
  }
  const bool contiguous = coords.empty() || coords.back() - coords.front() + 1 == coords.size();
  m.together(where, [&] {
    Handle mt = io::h5::mem_type(local.dtype(), where);
    const hsize_t n = hsize_t(global_rows), mine = hsize_t(rows.size());
    Handle fspace(H5Screate_simple(1, &n, nullptr), H5Sclose);
    Handle ds(H5Dcreate2(m.file.get(), name.c_str(), mt.get(), fspace.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!ds.ok()) throw Error(where + ": cannot create dataset (does it exist already?)");
    Handle mspace(H5Screate_simple(1, &mine, nullptr), H5Sclose);
    herr_t sel = 0;
    if (mine == 0) {
      sel = H5Sselect_none(fspace.get());
      if (sel >= 0) sel = H5Sselect_none(mspace.get());
    } else if (contiguous) {
      const hsize_t start = coords.front();
      sel = H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &mine, nullptr);
    } else {
      sel = H5Sselect_elements(fspace.get(), H5S_SELECT_SET, mine, coords.data());
    }
    if (sel < 0) throw Error(where + ": cannot select this rank's rows");
    if (H5Dwrite(ds.get(), mt.get(), mspace.get(), fspace.get(), m.collective.get(), data.data()) < 0)
      throw Error(where + ": collective write failed");
  });
}

void ParallelH5Writer::write_whole(const std::string& name, const Tensor& t_in) {
  Impl& m = *impl_;
  const std::string where = m.path + ":" + name;
  Tensor t = t_in.is_host() ? t_in.contiguous() : t_in.to(host_allocator());
  m.together(where, [&] {
    Handle mt = io::h5::mem_type(t.dtype(), where);
    std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
    Handle space(t.rank() ? H5Screate_simple(t.rank(), dims.data(), nullptr) : H5Screate(H5S_SCALAR), H5Sclose);
    Handle ds(H5Dcreate2(m.file.get(), name.c_str(), mt.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!ds.ok()) throw Error(where + ": cannot create dataset (does it exist already?)");
    if (t.numel() == 0) return;
    // Rank 0 writes; the others take part in the collective call with nothing selected.
    Handle mspace(H5Scopy(space.get()), H5Sclose), fspace(H5Scopy(space.get()), H5Sclose);
    if (m.comm.rank() != 0 && (H5Sselect_none(mspace.get()) < 0 || H5Sselect_none(fspace.get()) < 0))
      throw Error(where + ": cannot select nothing");
    if (H5Dwrite(ds.get(), mt.get(), mspace.get(), fspace.get(), m.collective.get(), t.raw()) < 0)
      throw Error(where + ": collective write failed");
  });
}

void ParallelH5Writer::attr(const std::string& name, const io::H5Attr& v) {
  Impl& m = *impl_;
  const std::string where = m.path + ":/@" + name;
  m.together(where, [&] {
    Handle root(H5Oopen(m.file.get(), "/", H5P_DEFAULT), H5Oclose);
    if (!root.ok()) throw Error(where + ": cannot open the root group");
    io::h5::write_attribute(root.get(), name, v, where);
  });
}

void ParallelH5Writer::commit() {
  Impl& m = *impl_;
  // Every rank closes the file (collective) before rank 0 renames it.
  m.together(m.path, [&] {
    m.file.reset();
    m.collective.reset();
  });
  m.together(m.path, [&] {
    if (m.comm.rank() == 0) m.out->commit();
  });
  m.committed = true;
}

}  // namespace rlx::dist
#endif  // RLX_HAVE_HDF5_PARALLEL
