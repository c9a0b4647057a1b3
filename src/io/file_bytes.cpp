#include "io/file_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace rlx::io {

FileBytes::~FileBytes() {
  if (map_) ::munmap(map_, map_size_);
}

std::shared_ptr<const FileBytes> FileBytes::map(const std::string& path, std::string_view expected) {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw InputError(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw InputError(path + ": cannot read its size (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode)) throw InputError(path + ": not a regular file (expected " + std::string(expected) + ")");
  auto s = std::make_shared<FileBytes>();
  s->size_ = size_t(st.st_size);
  if (s->size_ > 0) {  // an empty file has nothing to map; the readers' checks refuse it
    // Private and writable: tensors over the mapping (SafetensorsFile::view) are ordinary host
    // tensors, and a write to one copies that page in this process instead of faulting; the
    // file is never written.
    void* m = ::mmap(nullptr, s->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, f.fd, 0);
    if (m == MAP_FAILED)
      throw InputError(path + ": cannot map " + std::to_string(s->size_) + " bytes (" + std::strerror(errno) + ")");
    s->map_ = m;
    s->map_size_ = s->size_;
    s->data_ = static_cast<const unsigned char*>(m);
  }
  return s;  // the mapping outlives the descriptor
}

std::shared_ptr<const FileBytes> FileBytes::copy(std::string_view bytes) {
  auto s = std::make_shared<FileBytes>();
  s->owned_.assign(bytes.data(), bytes.size());
  s->data_ = reinterpret_cast<const unsigned char*>(s->owned_.data());
  s->size_ = s->owned_.size();
  return s;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int more;
    uint32_t cp, least;
    if ((c & 0xe0) == 0xc0) more = 1, cp = c & 0x1fu, least = 0x80;
    else if ((c & 0xf0) == 0xe0) more = 2, cp = c & 0x0fu, least = 0x800;
    else if ((c & 0xf8) == 0xf0) more = 3, cp = c & 0x07u, least = 0x10000;
    else return false;
    if (s.size() - i <= size_t(more)) return false;
    for (int k = 1; k <= more; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += size_t(more) + 1;
  }
  return true;
}

std::string printable(std::string_view s, size_t limit) {
  const bool utf8 = valid_utf8(s);
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (r.size() >= limit && (!utf8 || (c & 0xc0) != 0x80)) return r + "...";
    if (c < 0x20 || c == 0x7f || (!utf8 && c >= 0x80)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    } else {
      r += char(c);
    }
  }
  return r;
}

std::string shown(std::string_view s) {
  std::string r = "'";
  r += printable(s);
  r += "'";
  return r;
}

}  // namespace rlx::io
