// Internal to rlx's HDF5 writers (io/hdf5.cpp and the collective writer in
// dist/parallel_hdf5.cpp): owned handles, the memory type of a dtype, attribute and file
// format helpers, so that both write the same layout. Includes <hdf5.h>; only in builds with
// HDF5 (RLX_HAVE_HDF5).
#pragma once
#ifndef RLX_HAVE_HDF5
#error "io/hdf5_handles.hpp needs an rlx built with HDF5"
#endif
#include <hdf5.h>

#include <string>

#include "core/dtype.hpp"
#include "io/hdf5.hpp"

namespace rlx::io::h5 {

// An owned HDF5 handle.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// The memory type for a dtype (bool as h5py's 8-bit enum, c64 as the compound {r, i}).
Handle mem_type(DType t, const std::string& where);
// A scalar attribute `name` on an open object; throws Error naming `where` on failure.
void write_attribute(hid_t object, const std::string& name, const H5Attr& v, const std::string& where);
// File-access properties pinning the 1.10 file format (metadata with checksums).
Handle file_access(const std::string& path);

}  // namespace rlx::io::h5
