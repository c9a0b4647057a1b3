// GGUF files (llama.cpp's format for quantized weights), versions 2 and 3, read through a
// read-only memory map. docs/io.md describes the layout and the checks a file must pass.
//
//   io::GgufFile f("model.gguf");                      // maps the file, checks every header
//   int64_t n = f.get_int("llama.block_count");         // typed metadata getters
//   for (const io::GgufTensor& t : f.tensors()) ...     // file order; t.shape in rlx order
//   Tensor w = f.dequantize("blk.0.attn_q.weight");     // f32, exactly as ggml decodes it
//   io::PackedTensor p = f.packed("blk.0.attn_q.weight");  // the blocks, undecoded
//
// The file is untrusted input: anything wrong with it is an InputError (a SizeError for a
// size past 2^62) naming the file and, where there is one, the key or the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace rlx::io {

class FileBytes;

// Metadata value types, numbered as the file numbers them.
enum class GgufType : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64 };
const char* gguf_type_name(GgufType t);  // "u8", ..., "string", "array"

// One metadata value. Scalars fill the field of their kind; an array of numbers or bools
// keeps its elements in place in the file (little-endian, `count` of `element`), an array of
// strings or of arrays holds them decoded.
struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t u = 0;  // U8 U16 U32 U64
  int64_t i = 0;   // I8 I16 I32 I64
  double f = 0;    // F32 (exact in double) F64
  bool b = false;  // Bool
  std::string s;   // String
  GgufType element = GgufType::U8;  // Array
  uint64_t count = 0;
  std::span<const std::byte> raw;  // numeric and bool elements
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;
};

// ggml's tensor type numbers that dequantize() decodes; the others are listed by number.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};
// ggml's name of a type number ("Q4_K"), or nullptr for a number ggml does not define.
const char* ggml_type_name(uint32_t type);

// A tensor's ggml blocks as they are stored, undecoded: `blocks` is a host u8 tensor
// [N, row_bytes] (row n holds the K / block blocks of weight row n), `type` ggml's name of the
// format ("Q4_K"), `k` the logical row length. The ops dequantize and matmul_packed take the
// blocks as their packed operand with `type` and `k` as attributes (docs/io.md).
struct PackedTensor {
  Tensor blocks;
  std::string type;
  int64_t k = 0;
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;          // ggml's type number
  std::vector<int64_t> dims;  // as the file lists them: fastest-varying first
  Shape shape;                // rlx order (row-major): dims reversed
  int64_t numel = 0;
  int64_t offset = 0;  // from the start of the data section
  int64_t nbytes = -1; // -1 for a type the reader does not know the block size of
};

class GgufFile {
 public:
  // Maps path (read-only, private) and validates the whole header: every later call only
  // reads. The mapping lives as long as any copy of this object (bytes() spans and array
  // values must not outlive them).
  explicit GgufFile(const std::string& path);
  // The same checks over bytes in memory (a copy is kept); `name` stands for the file in
  // messages. The fuzz target's entry.
  static GgufFile from_bytes(std::string_view bytes, std::string name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }  // general.alignment, 32 when absent
  int64_t data_offset() const { return data_offset_; }  // where the data section starts

  // Metadata in file order, and by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  bool contains_key(std::string_view key) const { return keys_.count(key) != 0; }
  // InputError naming the file and the key when there is none.
  const GgufValue& value(std::string_view key) const;
  // Typed getters: InputError naming the key and the type found when it differs (any
  // integer type for get_int, as long as the value fits int64; f32 or f64 for get_float).
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // file order
  bool contains(std::string_view name) const { return index_.count(name) != 0; }
  const GgufTensor& tensor_info(std::string_view name) const;  // InputError when absent
  // The tensor's bytes in place (for every type whose block size the reader knows).
  std::span<const std::byte> bytes(std::string_view name) const;
  // A host copy in the tensor's own rlx dtype: F32, F16, BF16, F64, I8, I32, I64.
  Tensor tensor(std::string_view name) const;
  // The same over the mapping, without a copy (it keeps the mapping alive; a write to it stays
  // in this process), or a copy where the file places the tensor unaligned for its dtype.
  Tensor view(std::string_view name) const;
  // An f32 host tensor of the values ggml's reference dequantization gives, bit for bit:
  // F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K. InputError naming the
  // tensor and its type for the others.
  Tensor dequantize(std::string_view name) const;
  // The tensor's blocks undecoded, as rows of its fastest-varying dimension (the others
  // folded into N), for the same types as dequantize(): a tensor over the mapping (no copy;
  // it keeps the mapping alive, and a write to it stays in this process). InputError naming
  // the tensor for another type or rows that do not hold whole blocks.
  PackedTensor packed(std::string_view name) const;

 private:
  GgufFile(std::shared_ptr<const FileBytes> bytes, std::string path);  // validates

  std::shared_ptr<const FileBytes> bytes_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  int64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> keys_;  // key -> position in metadata_
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
};

}  // namespace rlx::io
