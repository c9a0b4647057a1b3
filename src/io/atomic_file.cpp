#include "io/atomic_file.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

#include "core/error.hpp"

namespace rlx::io {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

// fsync through a fresh descriptor: it flushes the file (or folder) whatever wrote it.
bool sync_path(const std::string& p, int flags) {
  int fd = ::open(p.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0 || errno == EINVAL;  // EINVAL: the file system cannot sync this (e.g. some pseudo fs)
  ::close(fd);
  return ok;
}

std::string folder_of(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

int remove_stale_temporaries(const std::string& path) {
  const std::string prefix = fs::path(path).filename().string() + ".tmp.";
  std::error_code ec;
  int removed = 0;
  for (fs::directory_iterator it(folder_of(path), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw InputError("an output path is empty");
  std::error_code ec;
  if (fs::is_directory(path_, ec)) throw InputError(path_ + ": is a directory (expected a file name to write)");
  const std::string folder = folder_of(path_);
  if (!fs::is_directory(folder, ec))
    throw InputError(path_ + ": cannot write here: folder '" + folder + "' does not exist");
  remove_stale_temporaries(path_);
  temp_ = path_ + ".tmp." + std::to_string(::getpid());
}

AtomicFile::~AtomicFile() {
  if (!committed_) std::remove(temp_.c_str());
}

void AtomicFile::commit() {
  auto fail = [&](const std::string& what) {
    std::remove(temp_.c_str());
    throw InputError(path_ + ": " + what);
  };
  if (!sync_path(temp_, O_RDONLY)) fail("cannot flush the written file to disk (" + errno_text() + ")");
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) fail("cannot move the written file into place (" + errno_text() + ")");
  committed_ = true;
  // The rename is durable once the folder's entry is: a crash now leaves old or new file,
  // never none. A folder that cannot be opened for syncing (rare) keeps the rename.
  sync_path(folder_of(path_), O_RDONLY | O_DIRECTORY);
}

}  // namespace rlx::io
