// Writing a file so that its name only ever holds a complete file, and the file survives
// a crash once written:
//
//   io::AtomicFile out(path);          // checks the target, picks <path>.tmp.<pid>
//   write everything to out.temp();    // with any writer (ofstream, HDF5, ...)
//   out.commit();                      // fsync the file, rename it over path, fsync the folder
//
// Without commit() the destructor removes the temporary. A process killed while writing
// leaves its temporary behind; the next AtomicFile for the same target removes the
// temporaries of processes that no longer exist.
#pragma once
#include <string>

namespace rlx::io {

class AtomicFile {
 public:
  // Throws InputError naming path when it is a directory or its folder does not exist.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp() const { return temp_; }
  const std::string& path() const { return path_; }
  // Call after every handle on temp() is closed. Throws InputError naming path on failure
  // (the temporary is removed; the target is unchanged).
  void commit();

 private:
  std::string path_, temp_;
  bool committed_ = false;
};

// Removes <path>.tmp.<pid> files left by processes that no longer run; returns how many.
int remove_stale_temporaries(const std::string& path);

}  // namespace rlx::io
