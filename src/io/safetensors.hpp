// safetensors files (Hugging Face's format for weights and checkpoints), read through a
// read-only memory map and written atomically. docs/io.md describes the layout, which
// checks a file must pass and how the writer lays the data out.
//
//   io::SafetensorsFile f("model.safetensors");     // maps the file, checks the whole header
//   for (const io::SafetensorsEntry& e : f.tensors()) ...   // header order
//   Tensor w = f.tensor("encoder.layer.0.weight");  // a host copy, of the matching rlx dtype
//   Tensor v = f.view("encoder.layer.0.weight");    // the same values over the mapping, no copy
//
//   io::write_safetensors("ckpt.safetensors", {{"w", w}, {"b", b}}, {{"step", "100"}});
//
// The file is untrusted input: anything wrong with it is an InputError (a ParseError for
// malformed header JSON) naming the file and, where there is one, the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace rlx::io {

class FileBytes;

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as the file spells it: "F32", "BF16", "F8_E4M3", ...
  Shape shape;
  int64_t begin = 0, end = 0;  // byte range in the data section (which follows the header)
};

class SafetensorsFile {
 public:
  // Maps path (read-only, private) and validates the header: every later call only reads.
  // The mapping lives as long as any copy of this object (and bytes() spans must not
  // outlive them). A file truncated by another process while mapped faults on access, as
  // any mapped file does.
  explicit SafetensorsFile(const std::string& path);
  // The same checks over bytes held in memory (a copy is kept); `name` stands for the file
  // in messages. The fuzz target's entry.
  static SafetensorsFile from_bytes(std::string_view bytes, std::string name);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& tensors() const { return entries_; }  // header order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Where the data section starts in the file: 8 + the header length.
  int64_t data_offset() const { return data_offset_; }

  bool contains(std::string_view name) const { return index_.count(name) != 0; }
  // Throws InputError naming the file and the name when there is no such tensor.
  const SafetensorsEntry& entry(std::string_view name) const;
  // The tensor's bytes inside the mapping, without a copy, for every dtype (those rlx has
  // no type for included). Little-endian, row-major; aligned only as the writer chose.
  std::span<const std::byte> bytes(std::string_view name) const;
  // A host tensor of the matching rlx dtype (BOOL, U8, I8, I32, I64, F16, BF16, F32, F64,
  // C64) holding a copy of the data. InputError for a dtype rlx has no type for (I16, U16,
  // U32, U64, the F8/F6/F4 formats: bytes() still reads them) and for a BOOL element that
  // is not 0 or 1.
  Tensor tensor(std::string_view name) const;
  // The same tensor over the mapping, without a copy, when its bytes are aligned to its
  // element size (a copy, as tensor() makes, when they are not): it keeps the mapping alive,
  // and a write to it stays in this process (the mapping is private). Same errors as tensor().
  Tensor view(std::string_view name) const;
  // What keeps the mapping alive, for tensors made over bytes() spans (Tensor::over).
  std::shared_ptr<const void> mapping() const { return storage_; }

 private:
  SafetensorsFile(std::shared_ptr<const FileBytes> storage, std::string path);  // validates

  std::shared_ptr<const FileBytes> storage_;
  std::string path_;
  int64_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in entries_
};

// The rlx dtype of a safetensors dtype name; nullopt for the names rlx has no type for and
// for names that are not safetensors dtypes.
std::optional<DType> dtype_from_safetensors(std::string_view dtype);
// The safetensors name of an rlx dtype; nullptr for I4 (packed, no safetensors equivalent).
const char* safetensors_dtype_name(DType t);

// Writes the tensors (any allocator, any strides) and the metadata to path atomically
// (io::AtomicFile). The header lists the tensors in the given order, so a file read back
// lists them the same way; the data places tensors of larger elements first (stable within
// one element size), so each tensor starts at a multiple of its element size in the file, as
// the reference writer arranges. InputError naming path and the tensor for an empty name,
// "__metadata__", a name that is not UTF-8 or holds control characters, metadata that is not
// UTF-8, a duplicate name, an undefined or i4 tensor; nothing is written then.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace rlx::io
