#include "io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/file_bytes.hpp"
#include "io/json_text.hpp"

namespace rlx::io {

// Tensor bytes go between the file and memory unchanged; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using Json = nlohmann::ordered_json;  // keeps the header's order: tensors() lists them as the file does

// The reference implementation's limit (a header takes about 100 bytes per tensor); a larger
// claim is refused before the JSON parser sees it.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxRank = 64;  // as for .npy and the text IR

struct StDtype {
  const char* name;
  int bits;  // per element; F4 and F6 pack several elements into each byte
  std::optional<DType> rlx;
};

// Every dtype of the format (as of safetensors 0.8); the order only matters for the error text.
constexpr StDtype kDtypes[] = {
    {"BOOL", 8, DType::Bool},  {"U8", 8, DType::U8},     {"I8", 8, DType::I8},    {"I16", 16, {}},
    {"U16", 16, {}},           {"F16", 16, DType::F16},  {"BF16", 16, DType::BF16}, {"I32", 32, DType::I32},
    {"U32", 32, {}},           {"F32", 32, DType::F32},  {"I64", 64, DType::I64}, {"U64", 64, {}},
    {"F64", 64, DType::F64},   {"C64", 64, DType::C64},  {"F8_E5M2", 8, {}},      {"F8_E4M3", 8, {}},
    {"F8_E8M0", 8, {}},        {"F8_E4M3FNUZ", 8, {}},   {"F8_E5M2FNUZ", 8, {}},  {"F6_E2M3", 6, {}},
    {"F6_E3M2", 6, {}},        {"F4", 4, {}},
};

const StDtype* find_dtype(std::string_view name) {
  for (const StDtype& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string dtype_list() {
  std::string r;
  for (const StDtype& d : kDtypes) r += (r.empty() ? "" : " ") + std::string(d.name);
  return r;
}

bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// Empty if `name` may name a tensor, else why not.
std::string name_problem(std::string_view name) {
  if (name.empty()) return "an empty tensor name";
  if (!valid_utf8(name)) return "tensor name " + shown(name) + " is not valid UTF-8";
  if (has_control(name)) return "tensor name " + shown(name) + " holds control characters";
  return {};
}

std::string describe(const Json& v) { return describe_json(v); }

// A non-negative JSON integer (the lexer gives non-negative literals as unsigned, "-0" as
// signed, literals beyond uint64 as floating point).
int64_t non_negative(const Json& v, const std::string& what) {
  if (v.is_number_unsigned()) return checked_size(v.get<uint64_t>(), what);
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0) throw InputError(what + " is negative (" + std::to_string(x) + ")");
    return x;
  }
  throw InputError(what + " is " + describe(v) + ", not a non-negative integer");
}

// Parses the header, refusing what the JSON DOM would hide or what no header needs:
// duplicate keys (the DOM keeps one of them), nesting past tensor -> shape -> extent, arrays
// longer than a shape can be. The DOM's size stays proportional to the header's.
Json parse_header(std::string_view text, const std::string& path) {
  struct Open {
    bool object;
    std::set<std::string, std::less<>> keys;
    std::string last_key;
    int elements = 0;
  };
  std::vector<Open> open;
  // Where the parser is, by the keys of the open objects: "tensor 'w': 'shape'".
  auto location = [&](size_t levels) {
    std::string r;
    for (size_t i = 0; i < levels && i < open.size() && open[i].object; ++i) {
      const std::string& k = open[i].last_key;
      r += i == 0 ? (k == "__metadata__" ? std::string("__metadata__") : "tensor " + shown(k)) : ": " + shown(k);
    }
    return r.empty() ? std::string("the header") : r;
  };
  using Event = Json::parse_event_t;
  auto check = [&](int depth, Event ev, Json& parsed) {
    switch (ev) {
      case Event::object_start:
      case Event::array_start:
        // depth 0: the header; 1: a tensor's entry or the metadata; 2: a shape or data_offsets
        if (depth > 2)
          throw InputError(path + ": header nests deeper than a safetensors header does (inside " + location(open.size()) + ")");
        open.push_back({ev == Event::object_start, {}, {}, 0});
        break;
      case Event::object_end:
      case Event::array_end:
        open.pop_back();
        break;
      case Event::key: {
        Open& o = open.back();
        o.last_key = parsed.get<std::string>();
        if (!o.keys.insert(o.last_key).second) {
          if (open.size() == 1) throw InputError(path + ": " + location(1) + " appears twice in the header");
          throw InputError(path + ": " + location(open.size() - 1) + ": key " + shown(o.last_key) + " appears twice");
        }
        break;
      }
      case Event::value:
        if (!open.empty() && !open.back().object && ++open.back().elements > kMaxRank)
          throw InputError(path + ": " + location(open.size() - 1) + " has more than " + std::to_string(kMaxRank) +
                           " elements (a shape has at most " + std::to_string(kMaxRank) + " extents)");
        break;
    }
    return true;
  };
  return parse_untrusted_json<Json>(text, path, "safetensors header JSON", "header byte", check);
}

}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view dtype) {
  const StDtype* d = find_dtype(dtype);
  return d ? d->rlx : std::nullopt;
}

const char* safetensors_dtype_name(DType t) {
  for (const StDtype& d : kDtypes)
    if (d.rlx == t) return d.name;
  return nullptr;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : SafetensorsFile(FileBytes::map(path, "a .safetensors file"), path) {}

SafetensorsFile SafetensorsFile::from_bytes(std::string_view bytes, std::string name) {
  return SafetensorsFile(FileBytes::copy(bytes), std::move(name));
}

SafetensorsFile::SafetensorsFile(std::shared_ptr<const FileBytes> storage, std::string path)
    : storage_(std::move(storage)), path_(std::move(path)) {
  const std::string& p = path_;
  const size_t size = storage_->size();
  if (size < 8)
    throw InputError(p + ": not a safetensors file: " + std::to_string(size) +
                     " bytes, fewer than the 8-byte header length that starts one");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(storage_->data()[i]) << (8 * i);
  if (n > size - 8)
    throw InputError(p + ": header length " + std::to_string(n) + " (the first 8 bytes) runs past the end of the file (" +
                     std::to_string(size) + " bytes)");
  if (n > kMaxHeaderBytes)
    throw InputError(p + ": header length " + std::to_string(n) + " is larger than the " +
                     std::to_string(kMaxHeaderBytes) + " bytes a safetensors header may have");
  data_offset_ = int64_t(8 + n);
  const int64_t data_size = int64_t(size) - data_offset_;
  const Json header = parse_header(std::string_view(reinterpret_cast<const char*>(storage_->data()) + 8, size_t(n)), p);
  if (!header.is_object()) throw InputError(p + ": the header is " + describe(header) + ", not a JSON object");

  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;  // as the reference reader allows
      if (!v.is_object()) throw InputError(p + ": __metadata__ is " + describe(v) + ", not an object of strings");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string())
          throw InputError(p + ": metadata " + shown(mk) + " is " + describe(mv) + ", not a string");
        metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    if (std::string why = name_problem(key); !why.empty()) throw InputError(p + ": " + why);
    const std::string where = p + ": tensor " + shown(key);
    if (!v.is_object()) throw InputError(where + ": its entry is " + describe(v) + ", not an object");
    // Keys other than these three are ignored, as the reference reader does.
    auto field = [&](const char* f) -> const Json& {
      auto it = v.find(f);
      if (it == v.end()) throw InputError(where + ": no \"" + std::string(f) + "\"");
      return *it;
    };
    const Json& jd = field("dtype");
    if (!jd.is_string()) throw InputError(where + ": dtype is " + describe(jd) + ", not a string");
    const StDtype* dt = find_dtype(jd.get_ref<const std::string&>());
    if (!dt)
      throw InputError(where + ": unknown dtype " + shown(jd.get_ref<const std::string&>()) +
                       " (safetensors dtypes: " + dtype_list() + ")");
    const Json& js = field("shape");
    if (!js.is_array()) throw InputError(where + ": shape is " + describe(js) + ", not an array");
    SafetensorsEntry e;
    e.name = key;
    e.dtype = dt->name;
    for (size_t i = 0; i < js.size(); ++i)
      e.shape.push_back(non_negative(js[i], where + ": shape extent " + std::to_string(i)));
    const Json& jo = field("data_offsets");
    if (!jo.is_array() || jo.size() != 2)
      throw InputError(where + ": data_offsets is " + (jo.is_array() ? "an array of " + std::to_string(jo.size()) + " elements" : describe(jo)) +
                       ", not [begin, end]");
    e.begin = non_negative(jo[0], where + ": data_offsets begin");
    e.end = non_negative(jo[1], where + ": data_offsets end");
    const std::string type = e.dtype + shape_str(e.shape);
    if (e.begin > e.end)
      throw InputError(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                       "] end before they begin");
    if (e.end > data_size)
      throw InputError(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                       "] run past the end of the data section (" + std::to_string(data_size) + " bytes after the header)");
    int64_t count = 1;
    if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) count = 0;  // [0, 2^62, 2^62] is empty
    for (int64_t d : e.shape)
      if (count) count = checked_mul(count, d, where + ": element count of " + type);
    const int64_t bits = checked_mul(count, dt->bits, where + ": bit count of " + type);
    if (bits % 8 != 0)
      throw InputError(where + ": " + type + " takes " + std::to_string(bits) + " bits, not a whole number of bytes");
    if (bits / 8 != e.end - e.begin)
      throw InputError(where + ": " + type + " takes " + std::to_string(bits / 8) + " bytes but data_offsets [" +
                       std::to_string(e.begin) + ", " + std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin));
    index_.emplace(e.name, entries_.size());
    entries_.push_back(std::move(e));
  }

  // The format requires the tensors to tile the data section: no overlap, no hole, nothing after.
  std::vector<size_t> order(entries_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries_[a].begin, entries_[a].end) < std::pair(entries_[b].begin, entries_[b].end);
  });
  int64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (size_t i : order) {
    const SafetensorsEntry& e = entries_[i];
    if (e.begin < covered)
      throw InputError(p + ": tensors " + shown(prev->name) + " [" + std::to_string(prev->begin) + ", " +
                       std::to_string(prev->end) + ") and " + shown(e.name) + " [" + std::to_string(e.begin) + ", " +
                       std::to_string(e.end) + ") overlap in the data section");
    if (e.begin > covered)
      throw InputError(p + ": bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                       ") of the data section belong to no tensor (a hole before " + shown(e.name) + ")");
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size)
    throw InputError(p + ": bytes [" + std::to_string(covered) + ", " + std::to_string(data_size) +
                     ") of the data section belong to no tensor (" +
                     (entries_.empty() ? "the header lists none" : "after the last one") + ")");
}

const SafetensorsEntry& SafetensorsFile::entry(std::string_view name) const {
  return named_tensor(index_, entries_, path_, name);
}

std::span<const std::byte> SafetensorsFile::bytes(std::string_view name) const {
  const SafetensorsEntry& e = entry(name);
  return {reinterpret_cast<const std::byte*>(storage_->data()) + data_offset_ + e.begin, size_t(e.end - e.begin)};
}

namespace {
// The rlx dtype of entry e, its bytes checked to be a valid tensor of it: InputError for a
// dtype rlx has no type for and for a BOOL byte that is not 0 or 1.
DType checked_dtype(const std::string& path, const SafetensorsEntry& e, std::span<const std::byte> src) {
  const std::optional<DType> t = dtype_from_safetensors(e.dtype);
  if (!t)
    throw InputError(path + ": tensor " + shown(e.name) + " has dtype " + e.dtype +
                     ", which rlx has no type for (SafetensorsFile::bytes gives its raw data)");
  if (dtype_storage_bytes(*t, numel(e.shape)) != src.size())
    throw InternalError(path + ": tensor " + shown(e.name) + ": validated size differs from the tensor's");
  // A bool is one byte holding 0 or 1; any other byte is not a C++ bool.
  if (*t == DType::Bool)
    for (size_t i = 0; i < src.size(); ++i)
      if (const auto b = static_cast<unsigned>(src[i]); b > 1)
        throw InputError(path + ": tensor " + shown(e.name) + ": BOOL element " + std::to_string(i) + " holds the byte " +
                         std::to_string(b) + " (a bool is 0 or 1)");
  return *t;
}
}  // namespace

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry& e = entry(name);
  const std::span<const std::byte> src = bytes(name);
  Tensor r = Tensor::empty(checked_dtype(path_, e, src), e.shape);
  if (!src.empty()) std::memcpy(r.raw(), src.data(), src.size());
  return r;
}

Tensor SafetensorsFile::view(std::string_view name) const {
  const SafetensorsEntry& e = entry(name);
  const std::span<const std::byte> src = bytes(name);
  const DType t = checked_dtype(path_, e, src);
  if (src.empty() || reinterpret_cast<uintptr_t>(src.data()) % dtype_size(t) != 0) return tensor(name);
  return Tensor::over(storage_, src.data(), t, e.shape);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    if (std::string why = name_problem(name); !why.empty()) throw InputError(path + ": " + why);
    const std::string where = path + ": tensor " + shown(name);
    if (name == "__metadata__") throw InputError(where + ": the name is reserved for the file's metadata");
    if (!seen.insert(name).second) throw InputError(where + " is given twice");
    if (!t.defined()) throw InputError(where + " is an undefined tensor");
    if (!safetensors_dtype_name(t.dtype()))
      throw InputError(where + ": dtype " + std::string(dtype_name(t.dtype())) + " has no safetensors equivalent (cast it first)");
  }
  for (const auto& [k, v] : metadata)
    if (!valid_utf8(k) || !valid_utf8(v)) throw InputError(path + ": metadata " + shown(k) + " is not valid UTF-8");

  // Larger elements first: with the header padded to 8 bytes, every tensor starts aligned.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  std::vector<std::pair<int64_t, int64_t>> range(tensors.size());
  int64_t at = 0;
  for (size_t i : order) {
    const int64_t end = checked_add(at, int64_t(tensors[i].second.nbytes()), path + ": data section");
    range[i] = {at, end};
    at = end;
  }

  Json header = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    header[tensors[i].first] = Json{{"dtype", safetensors_dtype_name(t.dtype())},
                                    {"shape", t.shape()},
                                    {"data_offsets", {range[i].first, range[i].second}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // spaces, as the reference writer pads

  AtomicFile out(path);
  {
    std::ofstream f(out.temp(), std::ios::binary | std::ios::trunc);
    if (!f) throw InputError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(text.data(), std::streamsize(text.size()));
    for (size_t i : order) {  // one host copy at a time: a device checkpoint never sits in host memory whole
      const Tensor& t = tensors[i].second;
      const Tensor h = t.is_host() ? t.contiguous() : t.to(host_allocator());
      if (h.nbytes() > 0) f.write(static_cast<const char*>(h.raw()), std::streamsize(h.nbytes()));
    }
    f.close();
    if (!f) throw InputError(path + ": write failed (" + std::strerror(errno) + ")");
  }
  out.commit();
}

}  // namespace rlx::io
