#include "io/gguf.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
#include "io/file_bytes.hpp"

namespace rlx::io {

// Values and blocks are read as little-endian; GGUF's big-endian variant is refused.
static_assert(std::endian::native == std::endian::little, "GGUF reading assumes a little-endian host");

namespace {

// Nested metadata arrays deeper than this are refused: no model writes more than two
// levels, and the parser recurses once per level.
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS

struct TypeInfo {
  const char* name;
  int64_t block;  // elements per block
  int64_t bytes;  // bytes per block
};

// ggml's tensor types (as of gguf 0.19): numbers missing here were retired or never used.
const TypeInfo* type_info(uint32_t t) {
  static const TypeInfo kTypes[] = {
      {"F32", 1, 4},        {"F16", 1, 2},         {"Q4_0", 32, 18},      {"Q4_1", 32, 20},     {nullptr, 0, 0},
      {nullptr, 0, 0},      {"Q5_0", 32, 22},      {"Q5_1", 32, 24},      {"Q8_0", 32, 34},     {"Q8_1", 32, 40},
      {"Q2_K", 256, 84},    {"Q3_K", 256, 110},    {"Q4_K", 256, 144},    {"Q5_K", 256, 176},   {"Q6_K", 256, 210},
      {"Q8_K", 256, 292},   {"IQ2_XXS", 256, 66},  {"IQ2_XS", 256, 74},   {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
      {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110},   {"IQ2_S", 256, 82},    {"IQ4_XS", 256, 136}, {"I8", 1, 1},
      {"I16", 1, 2},        {"I32", 1, 4},         {"I64", 1, 8},         {"F64", 1, 8},        {"IQ1_M", 256, 56},
      {"BF16", 1, 2},       {nullptr, 0, 0},       {nullptr, 0, 0},       {nullptr, 0, 0},      {"TQ1_0", 256, 54},
      {"TQ2_0", 256, 66},   {nullptr, 0, 0},       {nullptr, 0, 0},       {nullptr, 0, 0},      {"MXFP4", 32, 17},
      {"NVFP4", 64, 36},    {"Q1_0", 128, 18},
  };
  if (t >= std::size(kTypes) || !kTypes[t].name) return nullptr;
  return &kTypes[t];
}

std::string type_str(uint32_t t) {
  const TypeInfo* ti = type_info(t);
  return ti ? std::string(ti->name) + " (" + std::to_string(t) + ")" : "ggml type " + std::to_string(t);
}

// Sizes of the metadata value types with a fixed size; 0 for string and array.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::String: case GgufType::Array: return 0;
  }
  return 0;
}

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A cursor over the header that checks every read against the end of the file.
struct Cursor {
  const unsigned char* data;
  size_t size;
  size_t at = 0;
  const std::string& path;

  size_t left() const { return size - at; }
  [[noreturn]] void cut(size_t n, const std::string& what) const {
    throw InputError(path + ": " + what + " at byte " + std::to_string(at) + " needs " + std::to_string(n) +
                     " bytes but the file ends after " + std::to_string(left()) + " more");
  }
  const unsigned char* take(size_t n, const std::string& what) {
    if (n > left()) cut(n, what);
    const unsigned char* p = data + at;
    at += n;
    return p;
  }
  template <class T>
  T get(const std::string& what) {
    return load<T>(take(sizeof(T), what));
  }
  std::string string(const std::string& what) {
    const uint64_t n = get<uint64_t>(what + " (its length)");
    if (n > left())
      throw InputError(path + ": " + what + " at byte " + std::to_string(at) + " claims " + std::to_string(n) +
                       " bytes but the file ends after " + std::to_string(left()) + " more");
    const unsigned char* p = take(size_t(n), what);
    return std::string(reinterpret_cast<const char*>(p), size_t(n));
  }
  // A count of items that each take at least `least` bytes: refused when the rest of the
  // file cannot hold them, before anything is allocated for them.
  uint64_t count(uint64_t least, const std::string& what) {
    const uint64_t n = get<uint64_t>(what);
    if (n > left() / least)
      throw InputError(path + ": " + what + " is " + std::to_string(n) + " but the " + std::to_string(left()) +
                       " bytes left in the file hold at most " + std::to_string(left() / least));
    return n;
  }
};

GgufType value_type(Cursor& c, const std::string& what) {
  const uint32_t t = c.get<uint32_t>(what + " (its type)");
  if (t > uint32_t(GgufType::F64))
    throw InputError(c.path + ": " + what + " has value type " + std::to_string(t) +
                     ", not one of GGUF's (0-12: u8 i8 u16 i16 u32 i32 f32 bool string array u64 i64 f64)");
  return GgufType(t);
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& what, int depth) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufType::U8: v.u = c.get<uint8_t>(what); break;
    case GgufType::I8: v.i = c.get<int8_t>(what); break;
    case GgufType::U16: v.u = c.get<uint16_t>(what); break;
    case GgufType::I16: v.i = c.get<int16_t>(what); break;
    case GgufType::U32: v.u = c.get<uint32_t>(what); break;
    case GgufType::I32: v.i = c.get<int32_t>(what); break;
    case GgufType::U64: v.u = c.get<uint64_t>(what); break;
    case GgufType::I64: v.i = c.get<int64_t>(what); break;
    case GgufType::F32: v.f = c.get<float>(what); break;
    case GgufType::F64: v.f = c.get<double>(what); break;
    case GgufType::Bool: {
      const uint8_t b = c.get<uint8_t>(what);
      if (b > 1) throw InputError(c.path + ": " + what + " is a bool holding the byte " + std::to_string(b) + " (a bool is 0 or 1)");
      v.b = b != 0;
      break;
    }
    case GgufType::String: v.s = c.string(what); break;
    case GgufType::Array: {
      if (depth >= kMaxArrayDepth)
        throw InputError(c.path + ": " + what + " nests arrays deeper than " + std::to_string(kMaxArrayDepth));
      v.element = value_type(c, what + " (its element type)");
      const size_t fixed = scalar_size(v.element);
      // A string takes at least its 8-byte length, an array its type and count.
      v.count = c.count(fixed ? fixed : v.element == GgufType::String ? 8 : 12, what + " element count");
      if (fixed) {
        v.raw = {reinterpret_cast<const std::byte*>(c.take(size_t(v.count) * fixed, what)), size_t(v.count) * fixed};
        if (v.element == GgufType::Bool)
          for (size_t k = 0; k < v.raw.size(); ++k)
            if (const auto b = static_cast<unsigned>(v.raw[k]); b > 1)
              throw InputError(c.path + ": " + what + " element " + std::to_string(k) + " is a bool holding the byte " +
                               std::to_string(b) + " (a bool is 0 or 1)");
      } else if (v.element == GgufType::String) {
        v.strings.reserve(size_t(v.count));
        for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(c.string(what + " element " + std::to_string(k)));
      } else {
        v.arrays.reserve(size_t(v.count));
        // Each element is an array whose own element type and count follow at once.
        for (uint64_t k = 0; k < v.count; ++k)
          v.arrays.push_back(read_value(c, GgufType::Array, what + " element " + std::to_string(k), depth + 1));
      }
      break;
    }
  }
  return v;
}

// Element k of an array of numbers, as the widest type of its kind.
int64_t int_element(const GgufValue& v, size_t k, bool& fits) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(v.raw.data()) + k * scalar_size(v.element);
  fits = true;
  switch (v.element) {
    case GgufType::U8: return load<uint8_t>(p);
    case GgufType::I8: return load<int8_t>(p);
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::I64: return load<int64_t>(p);
    case GgufType::U64: {
      const uint64_t u = load<uint64_t>(p);
      fits = u <= uint64_t(INT64_MAX);
      return int64_t(u);
    }
    default: fits = false; return 0;
  }
}

bool is_int(GgufType t) {
  return t == GgufType::U8 || t == GgufType::I8 || t == GgufType::U16 || t == GgufType::I16 || t == GgufType::U32 ||
         t == GgufType::I32 || t == GgufType::U64 || t == GgufType::I64;
}

bool is_unsigned(GgufType t) { return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64; }

std::string type_of(const GgufValue& v) {
  return v.type == GgufType::Array ? "an array of " + std::string(gguf_type_name(v.element))
                                   : std::string("a ") + gguf_type_name(v.type);
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* const kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) < std::size(kNames) ? kNames[uint32_t(t)] : "unknown";
}

const char* ggml_type_name(uint32_t type) {
  const TypeInfo* t = type_info(type);
  return t ? t->name : nullptr;
}

GgufFile::GgufFile(const std::string& path) : GgufFile(FileBytes::map(path, "a .gguf file"), path) {}

GgufFile GgufFile::from_bytes(std::string_view bytes, std::string name) {
  return GgufFile(FileBytes::copy(bytes), std::move(name));
}

GgufFile::GgufFile(std::shared_ptr<const FileBytes> bytes, std::string path)
    : bytes_(std::move(bytes)), path_(std::move(path)) {
  const std::string& p = path_;
  Cursor c{bytes_->data(), bytes_->size(), 0, p};
  if (c.size < 4 || std::memcmp(c.data, "GGUF", 4) != 0)
    throw InputError(p + ": not a GGUF file (it does not start with the magic 'GGUF')");
  c.at = 4;
  version_ = c.get<uint32_t>("the version");
  if (version_ == 1) throw InputError(p + ": GGUF version 1 is not supported (rlx reads versions 2 and 3)");
  if (version_ == 0x02000000u || version_ == 0x03000000u)
    throw InputError(p + ": a big-endian GGUF file (rlx reads little-endian GGUF only)");
  if (version_ != 2 && version_ != 3)
    throw InputError(p + ": GGUF version " + std::to_string(version_) + " is not supported (rlx reads versions 2 and 3)");
  // A tensor info takes at least 24 bytes (name length, dimension count, type, offset), a
  // key-value pair at least 13 (key length, value type, one byte of value).
  const uint64_t n_tensors = c.get<uint64_t>("the tensor count");
  const uint64_t n_kv = c.count(13, "the metadata count");
  if (n_tensors > c.left() / 24)
    throw InputError(p + ": the tensor count is " + std::to_string(n_tensors) + " but the " + std::to_string(c.left()) +
                     " bytes left in the file hold at most " + std::to_string(c.left() / 24) + " tensor infos");

  metadata_.reserve(size_t(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string("metadata key " + std::to_string(k));
    const std::string what = "metadata " + shown(key);
    if (keys_.count(key)) throw InputError(p + ": " + what + " appears twice");
    GgufValue v = read_value(c, value_type(c, what), what, 0);
    keys_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(v));
  }
  if (contains_key("general.alignment")) {
    const int64_t a = get_int("general.alignment");
    if (a <= 0 || !std::has_single_bit(uint64_t(a)))
      throw InputError(p + ": general.alignment is " + std::to_string(a) + ", not a power of two");
    if (a > (int64_t(1) << 30)) throw InputError(p + ": general.alignment " + std::to_string(a) + " is larger than 2^30");
    alignment_ = uint64_t(a);
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.string("tensor info " + std::to_string(k) + " (its name)");
    const std::string where = p + ": tensor " + shown(t.name);
    if (index_.count(t.name)) throw InputError(where + " appears twice");
    const uint32_t n_dims = c.get<uint32_t>("tensor " + shown(t.name) + " dimension count");
    if (n_dims > kMaxDims)
      throw InputError(where + ": " + std::to_string(n_dims) + " dimensions (GGUF tensors have at most " +
                       std::to_string(kMaxDims) + ")");
    for (uint32_t d = 0; d < n_dims; ++d)
      t.dims.push_back(checked_size(c.get<uint64_t>("tensor " + shown(t.name) + " extent " + std::to_string(d)),
                                    where + ": extent " + std::to_string(d)));
    t.shape.assign(t.dims.rbegin(), t.dims.rend());
    t.type = c.get<uint32_t>("tensor " + shown(t.name) + " type");
    const uint64_t offset = c.get<uint64_t>("tensor " + shown(t.name) + " offset");
    t.offset = checked_size(offset, where + ": offset");
    t.numel = std::find(t.dims.begin(), t.dims.end(), 0) != t.dims.end() ? 0 : 1;  // [0, 2^40, 2^40] is empty
    for (int64_t d : t.dims)
      if (t.numel) t.numel = checked_mul(t.numel, d, where + ": element count of " + shape_str(t.shape));
    if (const TypeInfo* ti = type_info(t.type)) {
      const int64_t first = t.dims.empty() ? 1 : t.dims[0];
      if (first % ti->block != 0)
        throw InputError(where + ": type " + ti->name + " packs " + std::to_string(ti->block) +
                         " elements per block but the first (fastest-varying) extent is " + std::to_string(first));
      t.nbytes = checked_mul(t.numel / ti->block, ti->bytes, where + ": byte count of " + ti->name + shape_str(t.shape));
    }
    if (uint64_t(t.offset) % alignment_ != 0)
      throw InputError(where + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                       std::to_string(alignment_));
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  data_offset_ = int64_t((uint64_t(c.at) + alignment_ - 1) / alignment_ * alignment_);
  // A file of metadata alone may end before the padding; one with tensors holds its data section.
  if (!tensors_.empty() && data_offset_ > int64_t(c.size))
    throw InputError(p + ": the data section starts at byte " + std::to_string(data_offset_) +
                     " (after the header, aligned to " + std::to_string(alignment_) + "), past the end of the file (" +
                     std::to_string(c.size) + " bytes)");
  const int64_t data_size = int64_t(c.size) > data_offset_ ? int64_t(c.size) - data_offset_ : 0;
  std::vector<const GgufTensor*> order;
  for (const GgufTensor& t : tensors_) {
    const std::string where = p + ": tensor " + shown(t.name);
    if (t.offset > data_size)
      throw InputError(where + ": offset " + std::to_string(t.offset) + " lies past the end of the data section (" +
                       std::to_string(data_size) + " bytes from byte " + std::to_string(data_offset_) + ")");
    if (t.nbytes < 0) continue;  // an unknown type: its extent in the file is unknown
    if (t.nbytes > data_size - t.offset)
      throw InputError(where + ": " + type_str(t.type) + shape_str(t.shape) + " takes " + std::to_string(t.nbytes) +
                       " bytes from offset " + std::to_string(t.offset) + ", past the end of the data section (" +
                       std::to_string(data_size) + " bytes)");
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) {
    return std::pair(a->offset, a->nbytes) < std::pair(b->offset, b->nbytes);
  });
  const GgufTensor* reach = nullptr;  // of the tensors so far, the one that ends last
  for (const GgufTensor* b : order) {
    if (reach && b->nbytes > 0 && b->offset < reach->offset + reach->nbytes)
      throw InputError(p + ": tensors " + shown(reach->name) + " [" + std::to_string(reach->offset) + ", " +
                       std::to_string(reach->offset + reach->nbytes) + ") and " + shown(b->name) + " [" +
                       std::to_string(b->offset) + ", " + std::to_string(b->offset + b->nbytes) +
                       ") overlap in the data section");
    if (!reach || b->offset + b->nbytes > reach->offset + reach->nbytes) reach = b;
  }
}

const GgufValue& GgufFile::value(std::string_view key) const {
  auto it = keys_.find(key);
  if (it == keys_.end()) throw InputError(path_ + ": no metadata key " + shown(key));
  return metadata_[it->second].second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const GgufValue& v, const char* want) {
  throw InputError(path + ": metadata " + shown(key) + " is " + type_of(v) + ", not " + want);
}
}  // namespace

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = value(key);
  if (!is_int(v.type)) wrong_type(path_, key, v, "an integer");
  if (!is_unsigned(v.type)) return v.i;
  if (v.u > uint64_t(INT64_MAX))
    throw InputError(path_ + ": metadata " + shown(key) + " is " + std::to_string(v.u) + ", beyond int64");
  return int64_t(v.u);
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::F32 && v.type != GgufType::F64) wrong_type(path_, key, v, "a float (f32 or f64)");
  return v.f;
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Bool) wrong_type(path_, key, v, "a bool");
  return v.b;
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::String) wrong_type(path_, key, v, "a string");
  return v.s;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || !is_int(v.element)) wrong_type(path_, key, v, "an array of integers");
  std::vector<int64_t> r(size_t(v.count));
  for (size_t k = 0; k < r.size(); ++k) {
    bool fits;
    r[k] = int_element(v, k, fits);
    if (!fits) throw InputError(path_ + ": metadata " + shown(key) + " element " + std::to_string(k) + " is beyond int64");
  }
  return r;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || (v.element != GgufType::F32 && v.element != GgufType::F64))
    wrong_type(path_, key, v, "an array of floats");
  std::vector<double> r(size_t(v.count));
  const auto* p = reinterpret_cast<const unsigned char*>(v.raw.data());
  for (size_t k = 0; k < r.size(); ++k)
    r[k] = v.element == GgufType::F32 ? double(load<float>(p + 4 * k)) : load<double>(p + 8 * k);
  return r;
}

const std::vector<std::string>& GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = value(key);
  if (v.type != GgufType::Array || v.element != GgufType::String) wrong_type(path_, key, v, "an array of strings");
  return v.strings;
}

const GgufTensor& GgufFile::tensor_info(std::string_view name) const {
  return named_tensor(index_, tensors_, path_, name);
}

std::span<const std::byte> GgufFile::bytes(std::string_view name) const {
  const GgufTensor& t = tensor_info(name);
  if (t.nbytes < 0)
    throw InputError(path_ + ": tensor " + shown(t.name) + " has " + type_str(t.type) +
                     ", a type rlx does not know the size of");
  return {reinterpret_cast<const std::byte*>(bytes_->data()) + data_offset_ + t.offset, size_t(t.nbytes)};
}

namespace {
// The rlx dtype of a tensor that has one; InputError naming the file and tensor otherwise.
DType rlx_dtype(const GgufTensor& t, const std::string& path) {
  switch (GgmlType(t.type)) {
    case GgmlType::F32: return DType::F32;
    case GgmlType::F16: return DType::F16;
    case GgmlType::BF16: return DType::BF16;
    case GgmlType::F64: return DType::F64;
    case GgmlType::I8: return DType::I8;
    case GgmlType::I32: return DType::I32;
    case GgmlType::I64: return DType::I64;
    default:
      throw InputError(path + ": tensor " + shown(t.name) + " has " + type_str(t.type) +
                       ", which has no rlx dtype (tensor() reads F32 F16 BF16 F64 I8 I32 I64; dequantize() decodes the quantized types)");
  }
}
}  // namespace

Tensor GgufFile::tensor(std::string_view name) const {
  const GgufTensor& t = tensor_info(name);
  const DType d = rlx_dtype(t, path_);
  const std::span<const std::byte> src = bytes(name);
  Tensor r = Tensor::empty(d, t.shape);
  if (r.nbytes() != src.size()) throw InternalError(path_ + ": tensor " + shown(t.name) + ": validated size differs from the tensor's");
  if (!src.empty()) std::memcpy(r.raw(), src.data(), src.size());
  return r;
}

Tensor GgufFile::view(std::string_view name) const {
  const GgufTensor& t = tensor_info(name);
  const DType d = rlx_dtype(t, path_);
  const std::span<const std::byte> src = bytes(name);
  // (a file aligned to less than the element's size may place it where it cannot be read in place)
  if (src.empty() || reinterpret_cast<uintptr_t>(src.data()) % dtype_size(d) != 0) return tensor(name);
  if (int64_t(src.size()) != t.numel * int64_t(dtype_size(d)))
    throw InternalError(path_ + ": tensor " + shown(t.name) + ": validated size differs from the tensor's");
  return Tensor::over(bytes_, src.data(), d, t.shape);
}

Tensor GgufFile::dequantize(std::string_view name) const {
  const GgufTensor& t = tensor_info(name);
  const ggml::BlockFormat* f = ggml::block_format(t.type);
  if (!f)
    throw InputError(path_ + ": tensor " + shown(t.name) + " has " + type_str(t.type) +
                     ", which dequantize() does not decode (it decodes " + ggml::block_format_names() + ")");
  const std::span<const std::byte> src = bytes(name);
  const auto* p = reinterpret_cast<const unsigned char*>(src.data());
  Tensor r = Tensor::empty(DType::F32, t.shape);
  float* y = r.data<float>();
  const int64_t blocks = t.numel / f->block;
  if (blocks * f->bytes != int64_t(src.size()))
    throw InternalError(path_ + ": tensor " + shown(t.name) + ": validated size differs from the blocks'");
  if (f->type == ggml::kF32) {
    if (!src.empty()) std::memcpy(y, p, src.size());
  } else if (f->block == 1) {  // F16, BF16: one element a block, decoded without a dispatch per element
    const uint32_t type = f->type;
    if (type == ggml::kF16)
      for (int64_t k = 0; k < blocks; ++k) y[k] = ggml::half(p + 2 * k);
    else
      for (int64_t k = 0; k < blocks; ++k) y[k] = ggml::decode_element(ggml::kBF16, p + 2 * k, 0);
  } else {
    for (int64_t k = 0; k < blocks; ++k) ggml::decode_block(f->type, p + k * f->bytes, y + k * f->block);
  }
  return r;
}

PackedTensor GgufFile::packed(std::string_view name) const {
  const GgufTensor& t = tensor_info(name);
  const ggml::BlockFormat* f = ggml::block_format(t.type);
  if (!f)
    throw InputError(path_ + ": tensor " + shown(t.name) + " has " + type_str(t.type) +
                     ", which packed() does not take (it takes " + ggml::block_format_names() + ")");
  // Rows along the fastest-varying dimension (dims[0] = K), every other dimension folded
  // into N; a row holds whole blocks (ggml's rule, which the header checks kept).
  const int64_t k = t.dims.empty() ? 1 : t.dims[0];
  if (k % f->block != 0)
    throw InputError(path_ + ": tensor " + shown(t.name) + " has rows of " + std::to_string(k) + " elements, not a multiple of " +
                     f->name + "'s block of " + std::to_string(f->block));
  const int64_t n = k == 0 ? 0 : t.numel / k;
  // (checked: an empty tensor, [K, 0], may declare a K whose row would not fit in 64 bits)
  const int64_t row_bytes = checked_mul(k / f->block, f->bytes, path_ + ": tensor " + shown(t.name) + ": bytes per row");
  const std::span<const std::byte> src = bytes(name);
  if (n * row_bytes != int64_t(src.size()))
    throw InternalError(path_ + ": tensor " + shown(t.name) + ": validated size differs from the rows'");
  PackedTensor r;
  r.blocks = src.empty() ? Tensor::empty(DType::U8, {n, row_bytes}) : Tensor::over(bytes_, src.data(), DType::U8, {n, row_bytes});
  r.type = f->name;
  r.k = k;
  return r;
}

}  // namespace rlx::io
