// The bytes of an untrusted input file, and the text helpers its readers' messages share
// (io::SafetensorsFile, io::GgufFile). A file is mapped private (copy-on-write: the file is
// never written), never read whole; bytes held in memory (a fuzz target's input) are copied into the same holder so
// both paths run the same checks.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace rlx::io {

class FileBytes {
 public:
  // Maps path. InputError naming path when it cannot be opened, is not a regular file (then
  // the message says `expected`, e.g. "a .gguf file") or cannot be mapped.
  static std::shared_ptr<const FileBytes> map(const std::string& path, std::string_view expected);
  static std::shared_ptr<const FileBytes> copy(std::string_view bytes);

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

  FileBytes() = default;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::string owned_;
};

// Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF.
bool valid_utf8(std::string_view s);
// Text from a file made fit for a message: control bytes (and every byte >= 0x80 when the
// text is not UTF-8) as \xNN, cut after about `limit` bytes at a character boundary.
std::string printable(std::string_view s, size_t limit = 120);
// printable(s) in single quotes.
std::string shown(std::string_view s);

// The tensor called `name` among a file's tensors (index: name -> position), or an
// InputError naming the file, the name asked for and how many tensors the file holds.
template <class T>
const T& named_tensor(const std::map<std::string, size_t, std::less<>>& index, const std::vector<T>& tensors,
                      const std::string& path, std::string_view name) {
  auto it = index.find(name);
  if (it == index.end())
    throw InputError(path + ": no tensor " + shown(name) + " (the file holds " + std::to_string(tensors.size()) + ")");
  return tensors[it->second];
}

}  // namespace rlx::io
