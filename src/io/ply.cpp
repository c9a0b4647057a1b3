#include "io/ply.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <vector>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/file_bytes.hpp"

namespace rlx::io {

static_assert(std::endian::native == std::endian::little, "PLY I/O assumes a little-endian host");

namespace {

// A 3DGS header is about 1.5 KiB; these bound what a hostile header can make the reader hold.
constexpr size_t kMaxHeaderBytes = 1 << 20;
constexpr size_t kMaxLineBytes = 4096;
constexpr size_t kMaxPropertiesPerElement = 4096;
constexpr size_t kMaxElementKinds = 64;
constexpr int kMaxRest = 45;  // f_rest_* of SH degree 3

enum class Format { Ascii, BinaryLittle, BinaryBig };
enum class Kind { I8, U8, I16, U16, I32, U32, F32, F64 };

struct PlyType {
  const char* name;
  const char* alias;  // the sized names of later PLY writers
  Kind kind;
  int bytes;
};
constexpr PlyType kTypes[] = {
    {"char", "int8", Kind::I8, 1},     {"uchar", "uint8", Kind::U8, 1},   {"short", "int16", Kind::I16, 2},
    {"ushort", "uint16", Kind::U16, 2}, {"int", "int32", Kind::I32, 4},   {"uint", "uint32", Kind::U32, 4},
    {"float", "float32", Kind::F32, 4}, {"double", "float64", Kind::F64, 8},
};

const PlyType* find_type(std::string_view name) {
  for (const PlyType& t : kTypes)
    if (name == t.name || name == t.alias) return &t;
  return nullptr;
}

struct Property {
  std::string name;
  const PlyType* type = nullptr;
  const PlyType* list_count = nullptr;  // set for `property list <count> <item> <name>`
};
struct Element {
  std::string name;
  int64_t count = 0;
  std::vector<Property> props;
  int line = 0;
  bool has_list() const {
    return std::any_of(props.begin(), props.end(), [](const Property& p) { return p.list_count != nullptr; });
  }
  int64_t stride() const {  // bytes of one record without list properties (at most 8 * 4096)
    int64_t s = 0;
    for (const Property& p : props) s += p.type->bytes;
    return s;
  }
};
struct Header {
  Format format = Format::Ascii;
  std::vector<Element> elements;
  size_t data_offset = 0;
  int lines = 0;
};

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> r;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) r.push_back(s.substr(i, j - i));
    i = j;
  }
  return r;
}

std::optional<int64_t> parse_count(std::string_view s) {
  uint64_t v = 0;
  if (s.empty() || s[0] < '0' || s[0] > '9') return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v > uint64_t(kMaxElements)) return std::nullopt;
  return int64_t(v);
}

std::string type_list() {
  std::string r;
  for (const PlyType& t : kTypes) r += (r.empty() ? "" : ", ") + std::string(t.name) + "/" + t.alias;
  return r;
}

Header parse_header(std::string_view bytes, const std::string& path) {
  if (!bytes.starts_with("ply\n") && !bytes.starts_with("ply\r\n"))
    throw InputError(path + ": not a PLY file (it does not start with the line 'ply')");
  Header h;
  bool have_format = false;
  size_t pos = 0;
  for (;;) {
    if (pos >= bytes.size())
      throw ParseError(path, h.lines, "the PLY header ends without an end_header line (the file ends here)");
    if (pos > kMaxHeaderBytes)
      throw ParseError(path, h.lines, "the PLY header runs past " + std::to_string(kMaxHeaderBytes) + " bytes without end_header");
    ++h.lines;
    // Search a bounded window: a binary file whose header is cut is not scanned to its end.
    const std::string_view window = bytes.substr(pos, kMaxLineBytes + 1);
    const size_t nl = window.find('\n');
    if (nl == std::string_view::npos && window.size() > kMaxLineBytes)
      throw ParseError(path, h.lines, "header line longer than " + std::to_string(kMaxLineBytes) + " bytes");
    std::string_view text = window.substr(0, nl == std::string_view::npos ? window.size() : nl);
    pos += text.size() + (nl == std::string_view::npos ? 0 : 1);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (h.lines == 1) continue;  // "ply", checked above
    const std::vector<std::string_view> t = split(text);
    if (t.empty()) continue;
    const std::string_view kw = t[0];
    auto fail = [&](const std::string& what) { throw ParseError(path, h.lines, what); };
    if (kw == "comment" || kw == "obj_info") continue;
    if (kw == "format") {
      if (have_format) fail("a second format line");
      if (!h.elements.empty()) fail("the format line comes after an element (it must come first)");
      if (t.size() != 3) fail("expected 'format <ascii|binary_little_endian|binary_big_endian> 1.0'");
      if (t[1] == "ascii") h.format = Format::Ascii;
      else if (t[1] == "binary_little_endian") h.format = Format::BinaryLittle;
      else if (t[1] == "binary_big_endian") h.format = Format::BinaryBig;
      else fail("unknown PLY format " + shown(t[1]) + " (ascii, binary_little_endian, binary_big_endian)");
      if (t[2] != "1.0") fail("PLY version " + shown(t[2]) + " (only 1.0 exists)");
      have_format = true;
    } else if (kw == "element") {
      if (t.size() != 3) fail("expected 'element <name> <count>'");
      const std::optional<int64_t> n = parse_count(t[2]);
      if (!n) fail("element " + shown(t[1]) + ": count " + shown(t[2]) + " is not an integer in [0, 2^62]");
      for (const Element& e : h.elements)
        if (e.name == t[1]) fail("element " + shown(t[1]) + " appears twice (lines " + std::to_string(e.line) + " and " + std::to_string(h.lines) + ")");
      if (h.elements.size() == kMaxElementKinds) fail("more than " + std::to_string(kMaxElementKinds) + " elements");
      h.elements.push_back({std::string(t[1]), *n, {}, h.lines});
    } else if (kw == "property") {
      if (h.elements.empty()) fail("a property before any element");
      Element& e = h.elements.back();
      Property p;
      if (t.size() == 5 && t[1] == "list") {
        p.list_count = find_type(t[2]);
        p.type = find_type(t[3]);
        if (!p.list_count) fail("unknown list count type " + shown(t[2]) + " (" + type_list() + ")");
        if (p.list_count->kind == Kind::F32 || p.list_count->kind == Kind::F64)
          fail("list count type " + shown(t[2]) + " is not an integer type");
        if (!p.type) fail("unknown property type " + shown(t[3]) + " (" + type_list() + ")");
        p.name = std::string(t[4]);
      } else if (t.size() == 3) {
        p.type = find_type(t[1]);
        if (!p.type) fail("unknown property type " + shown(t[1]) + " (" + type_list() + ")");
        p.name = std::string(t[2]);
      } else {
        fail("expected 'property <type> <name>' or 'property list <count type> <type> <name>'");
      }
      for (const Property& q : e.props)
        if (q.name == p.name) fail("element " + shown(e.name) + ": property " + shown(p.name) + " appears twice");
      if (e.props.size() == kMaxPropertiesPerElement)
        fail("element " + shown(e.name) + " has more than " + std::to_string(kMaxPropertiesPerElement) + " properties");
      e.props.push_back(std::move(p));
    } else if (kw == "end_header") {
      if (t.size() != 1) fail("text after end_header");
      if (!have_format) fail("end_header before any format line");
      h.data_offset = pos;
      return h;
    } else {
      fail("unknown header keyword " + shown(kw) + " (ply, format, comment, obj_info, element, property, end_header)");
    }
  }
}

// The overflow threshold of double -> float: halfway between FLT_MAX and 2^128, which rounds
// to infinity; a plain cast of a larger double is undefined behaviour.
float to_float(double d) {
  constexpr double kHalfwayPastMax = 0x1.ffffffp127;
  if (d >= kHalfwayPastMax) return std::numeric_limits<float>::infinity();
  if (d <= -kHalfwayPastMax) return -std::numeric_limits<float>::infinity();
  return float(d);
}

template <class T>
T load_as(const unsigned char* p, bool swap) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swap) std::reverse(b, b + sizeof(T));
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

double load(const unsigned char* p, Kind k, bool swap) {
  switch (k) {
    case Kind::I8: return load_as<int8_t>(p, swap);
    case Kind::U8: return load_as<uint8_t>(p, swap);
    case Kind::I16: return load_as<int16_t>(p, swap);
    case Kind::U16: return load_as<uint16_t>(p, swap);
    case Kind::I32: return load_as<int32_t>(p, swap);
    case Kind::U32: return load_as<uint32_t>(p, swap);
    case Kind::F32: return load_as<float>(p, swap);
    case Kind::F64: return load_as<double>(p, swap);
  }
  return 0;
}

// Whitespace-separated values of an ascii body, with the line each is on.
struct AsciiReader {
  std::string_view text;
  size_t pos;
  int line;
  const std::string& path;

  std::string_view next() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\r' || text[pos] == '\n')) {
      if (text[pos] == '\n') ++line;
      ++pos;
    }
    const size_t b = pos;
    while (pos < text.size() && text[pos] != ' ' && text[pos] != '\t' && text[pos] != '\r' && text[pos] != '\n') ++pos;
    return text.substr(b, pos - b);
  }
  // The next value as a `type`, or a ParseError naming `what`.
  double value(const PlyType& type, const std::string& what) {
    std::string_view tok = next();
    if (tok.empty()) throw ParseError(path, line, what + ": the file ends here");
    std::string_view digits = tok;
    if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-') digits.remove_prefix(1);  // from_chars takes no '+'
    const char* b = digits.data();
    const char* e = b + digits.size();
    if (type.kind == Kind::F32 || type.kind == Kind::F64) {
      double v = 0;
      auto [end, ec] = std::from_chars(b, e, v);
      if (ec == std::errc::result_out_of_range) throw ParseError(path, line, what + ": " + shown(tok) + " is out of the range of a double");
      if (ec != std::errc() || end != e) throw ParseError(path, line, what + ": " + shown(tok) + " is not a number");
      return v;
    }
    int64_t v = 0;
    auto [end, ec] = std::from_chars(b, e, v);
    int64_t lo = 0, hi = 0;
    switch (type.kind) {
      case Kind::I8: lo = -128, hi = 127; break;
      case Kind::U8: hi = 255; break;
      case Kind::I16: lo = -32768, hi = 32767; break;
      case Kind::U16: hi = 65535; break;
      case Kind::I32: lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(); break;
      default: hi = std::numeric_limits<uint32_t>::max(); break;
    }
    if (ec != std::errc() || end != e || v < lo || v > hi)
      throw ParseError(path, line, what + ": " + shown(tok) + " is not a " + type.name + " (an integer in [" +
                                       std::to_string(lo) + ", " + std::to_string(hi) + "])");
    return double(v);
  }
};

// Where each vertex property goes in a record of splat values:
//   [0, 3) x y z, [3, 6) f_dc_0..2, 6 opacity, [7, 10) scale_0..2, [10, 14) rot_0..3,
//   [14, 14 + M) f_rest_0..M-1; -1: not a splat value (normals, colours, anything else).
constexpr int kRest = 14;
constexpr const char* kFixedNames[kRest] = {"x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
                                            "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"};

struct VertexLayout {
  std::vector<int> dest;  // per property
  int rest = 0;           // M
};

VertexLayout layout_of(const Element& v, const std::string& path) {
  VertexLayout l;
  bool seen[kRest + kMaxRest] = {};
  for (const Property& p : v.props) {
    int d = -1;
    for (int i = 0; i < kRest; ++i)
      if (p.name == kFixedNames[i]) d = i;
    if (p.name.starts_with("f_rest_")) {
      const std::string_view digits = std::string_view(p.name).substr(7);
      int k = -1;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
      const bool canonical = !digits.empty() && (digits.size() == 1 || digits[0] != '0');
      if (ec != std::errc() || end != digits.data() + digits.size() || !canonical || k < 0 || k >= kMaxRest)
        throw InputError(path + ": vertex property " + shown(p.name) + " is not one of f_rest_0..f_rest_44");
      d = kRest + k;
      ++l.rest;
    }
    if (d >= 0 && p.list_count)
      throw InputError(path + ": vertex property " + shown(p.name) + " is a list (a 3DGS file stores one number)");
    if (d >= 0) seen[d] = true;
    l.dest.push_back(d);
  }
  for (int i = 0; i < kRest; ++i)
    if (!seen[i])
      throw InputError(path + ": element 'vertex' has no property '" + kFixedNames[i] +
                       "' (a Gaussian needs x y z, f_dc_0..2, opacity, scale_0..2, rot_0..3)");
  if (l.rest != 0 && l.rest != 9 && l.rest != 24 && l.rest != 45)
    throw InputError(path + ": " + std::to_string(l.rest) +
                     " f_rest properties; SH of degree 0, 1, 2 or 3 has 0, 9, 24 or 45");
  for (int k = 0; k < l.rest; ++k)
    if (!seen[kRest + k])
      throw InputError(path + ": " + std::to_string(l.rest) + " f_rest properties but no f_rest_" + std::to_string(k) +
                       " (they are f_rest_0..f_rest_" + std::to_string(l.rest - 1) + ")");
  return l;
}


// The scene's tensors for n Gaussians with M f_rest values, filled from records.
struct SceneBuilder {
  SplatScene s;
  int64_t k;
  int rest;
  SceneBuilder(int64_t n, int m) : k(m / 3 + 1), rest(m) {
    s.means = Tensor::empty(DType::F32, {n, 3});
    s.log_scales = Tensor::empty(DType::F32, {n, 3});
    s.quats = Tensor::empty(DType::F32, {n, 4});
    s.opacity_logits = Tensor::empty(DType::F32, {n});
    s.sh = Tensor::empty(DType::F32, {n, k, 3});
  }
  void put(int64_t i, const float* r) {
    std::copy(r, r + 3, s.means.data<float>() + 3 * i);
    std::copy(r + 7, r + 10, s.log_scales.data<float>() + 3 * i);
    std::copy(r + 10, r + 14, s.quats.data<float>() + 4 * i);
    s.opacity_logits.data<float>()[i] = r[6];
    float* sh = s.sh.data<float>() + 3 * k * i;
    for (int c = 0; c < 3; ++c) {
      sh[c] = r[3 + c];
      // The file holds channel c's higher coefficients together: f_rest_{c(K-1) + k-1}.
      for (int64_t j = 1; j < k; ++j) sh[3 * j + c] = r[kRest + c * (k - 1) + (j - 1)];
    }
  }
};

}  // namespace

int SplatScene::sh_degree() const {
  const int64_t k = sh.shape().at(1);
  return k >= 16 ? 3 : k >= 9 ? 2 : k >= 4 ? 1 : 0;
}

static SplatScene parse_body(std::string_view bytes, const std::string& path) {
  const Header h = parse_header(bytes, path);
  const Element* vertex = nullptr;
  size_t vertex_index = 0;
  for (size_t i = 0; i < h.elements.size() && !vertex; ++i)
    if (h.elements[i].name == "vertex") vertex = &h.elements[i], vertex_index = i;
  if (!vertex) throw InputError(path + ": the PLY header declares no element 'vertex' (one per Gaussian)");
  const VertexLayout layout = layout_of(*vertex, path);
  for (const Property& p : vertex->props)
    if (p.list_count)
      throw InputError(path + ": vertex property " + shown(p.name) + " is a list (not supported: each vertex must have a fixed size)");
  for (size_t i = 0; i < vertex_index; ++i)
    if (h.elements[i].has_list())
      throw InputError(path + ": element " + shown(h.elements[i].name) +
                       " comes before 'vertex' and has list properties (not supported)");

  const int64_t n = vertex->count;
  const int64_t nprops = int64_t(vertex->props.size());
  const int64_t remaining = int64_t(bytes.size() - h.data_offset);
  std::vector<float> record(size_t(kRest + layout.rest), 0.0f);

  if (h.format == Format::Ascii) {
    // Every value takes at least one byte: a count the file cannot hold is refused before
    // the tensors are allocated.
    int64_t values_before = 0;
    for (size_t i = 0; i < vertex_index; ++i) {
      const Element& e = h.elements[i];
      values_before = checked_add(values_before, checked_mul(e.count, int64_t(e.props.size()), "values of element '" + e.name + "'"), "values");
    }
    const int64_t values = checked_add(values_before, checked_mul(n, nprops, "values of element 'vertex'"), "values");
    if (values > remaining)
      throw InputError(path + ": the header declares " + std::to_string(values) + " values but only " +
                       std::to_string(remaining) + " bytes follow it (ascii data)");
    AsciiReader in{bytes, h.data_offset, h.lines + 1, path};
    for (size_t i = 0; i < vertex_index; ++i) {
      const Element& e = h.elements[i];
      for (int64_t r = 0; r < e.count && !e.props.empty(); ++r)
        for (const Property& p : e.props) in.value(*p.type, "element '" + e.name + "' " + std::to_string(r) + ", property " + shown(p.name));
    }
    SceneBuilder b(n, layout.rest);
    for (int64_t v = 0; v < n; ++v) {
      for (int64_t j = 0; j < nprops; ++j) {
        const Property& p = vertex->props[size_t(j)];
        const double x = in.value(*p.type, "vertex " + std::to_string(v) + ", property " + shown(p.name));
        if (layout.dest[size_t(j)] >= 0) record[size_t(layout.dest[size_t(j)])] = to_float(x);
      }
      b.put(v, record.data());
    }
    if (vertex_index + 1 == h.elements.size()) {
      const std::string_view extra = in.next();
      if (!extra.empty())
        throw ParseError(path, in.line, "value " + shown(extra) + " after the last vertex (the header declares " +
                                            std::to_string(n) + ")");
    }
    return std::move(b.s);
  }

  const bool swap = h.format == Format::BinaryBig;
  int64_t offset = 0;  // from the end of the header
  for (size_t i = 0; i < vertex_index; ++i) {
    const Element& e = h.elements[i];
    offset = checked_add(offset, checked_mul(e.count, e.stride(), "bytes of element '" + e.name + "'"), "bytes");
  }
  const int64_t stride = vertex->stride();
  const int64_t vertex_bytes = checked_mul(n, stride, "bytes of element 'vertex'");
  int64_t end = checked_add(offset, vertex_bytes, "bytes");
  if (end > remaining)
    throw InputError(path + ": truncated: the header declares " + std::to_string(n) + " vertices of " + std::to_string(stride) +
                     " bytes" + (offset ? " after " + std::to_string(offset) + " bytes of other elements" : std::string()) +
                     ", " + std::to_string(end) + " bytes, but " + std::to_string(remaining) + " bytes follow the header");
  // With only fixed-size elements the file's length is known exactly: bytes past it mean
  // the counts are wrong, and reading would silently drop Gaussians.
  bool exact = true;
  for (size_t i = vertex_index + 1; i < h.elements.size(); ++i) {
    const Element& e = h.elements[i];
    if (e.has_list()) {
      exact = false;
      break;
    }
    end = checked_add(end, checked_mul(e.count, e.stride(), "bytes of element '" + e.name + "'"), "bytes");
  }
  if (exact && end != remaining)
    throw InputError(path + ": " + std::to_string(remaining) + " bytes follow the header but its elements take " +
                     std::to_string(end) + (end > remaining ? " (truncated)" : " (trailing bytes)"));

  SceneBuilder b(n, layout.rest);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes.data()) + h.data_offset + offset;
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t j = 0; j < nprops; ++j) {
      const PlyType& t = *vertex->props[size_t(j)].type;
      if (const int d = layout.dest[size_t(j)]; d >= 0) record[size_t(d)] = to_float(load(p, t.kind, swap));
      p += t.bytes;
    }
    b.put(v, record.data());
  }
  return std::move(b.s);
}

SplatScene parse_splat_ply(std::string_view bytes, const std::string& path) {
  try {
    return parse_body(bytes, path);
  } catch (const SizeError& e) {  // sizes from the header that overflow: name the file
    throw InputError(path + ": " + e.what());
  }
}

SplatScene read_splat_ply(const std::string& path) {
  const std::shared_ptr<const FileBytes> f = FileBytes::map(path, "a .ply file");
  return parse_splat_ply(std::string_view(reinterpret_cast<const char*>(f->data()), f->size()), path);
}

void write_splat_ply(const std::string& path, const SplatScene& s) {
  auto refuse = [&](const std::string& why) { throw InputError(path + ": cannot write the scene: " + why); };
  const Tensor* parts[] = {&s.means, &s.log_scales, &s.quats, &s.opacity_logits, &s.sh};
  const char* names[] = {"means", "log_scales", "quats", "opacity_logits", "sh"};
  for (int i = 0; i < 5; ++i) {
    if (!parts[i]->defined() || !parts[i]->is_host()) refuse(std::string(names[i]) + " is not a tensor in host memory");
    if (parts[i]->dtype() != DType::F32 && parts[i]->dtype() != DType::F64)
      refuse(std::string(names[i]) + " is " + dtype_name(parts[i]->dtype()) + ", not f32 or f64");
  }
  if (s.means.shape().size() != 2 || s.means.shape()[1] != 3) refuse("means is " + shape_str(s.means.shape()) + ", not [N, 3]");
  const int64_t n = s.means.shape()[0];
  auto need = [&](const Tensor& t, const Shape& want, const char* name) {
    if (t.shape() != want) refuse(std::string(name) + " is " + shape_str(t.shape()) + ", not " + shape_str(want));
  };
  need(s.log_scales, {n, 3}, "log_scales");
  need(s.quats, {n, 4}, "quats");
  need(s.opacity_logits, {n}, "opacity_logits");
  const Shape& shs = s.sh.shape();
  if (shs.size() != 3 || shs[0] != n || shs[2] != 3 || (shs[1] != 1 && shs[1] != 4 && shs[1] != 9 && shs[1] != 16))
    refuse("sh is " + shape_str(shs) + ", not [N, K, 3] with K = 1, 4, 9 or 16");
  const int64_t k = shs[1];
  const int rest = int(3 * (k - 1));

  std::string header = "ply\nformat binary_little_endian 1.0\nelement vertex " + std::to_string(n) + "\n";
  auto property = [&](const std::string& name) { header += "property float " + name + "\n"; };
  for (const char* p : {"x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"}) property(p);
  for (int i = 0; i < rest; ++i) property("f_rest_" + std::to_string(i));
  for (const char* p : {"opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"}) property(p);
  header += "end_header\n";

  const Tensor c[] = {s.means.contiguous(), s.log_scales.contiguous(), s.quats.contiguous(), s.opacity_logits.contiguous(),
                      s.sh.contiguous()};
  auto at = [](const Tensor& t, int64_t i) {
    return t.dtype() == DType::F32 ? t.data<float>()[i] : to_float(t.data<double>()[i]);
  };
  AtomicFile out(path);
  {
    std::ofstream f(out.temp(), std::ios::binary | std::ios::trunc);
    if (!f) throw InputError(path + ": cannot open " + out.temp() + " for writing (" + std::strerror(errno) + ")");
    f.write(header.data(), std::streamsize(header.size()));
    constexpr int64_t kChunk = 4096;  // vertices per write
    std::vector<float> buf;
    for (int64_t v0 = 0; v0 < n && f; v0 += kChunk) {
      buf.clear();
      for (int64_t v = v0; v < std::min(n, v0 + kChunk); ++v) {
        for (int j = 0; j < 3; ++j) buf.push_back(at(c[0], 3 * v + j));
        buf.insert(buf.end(), {0.0f, 0.0f, 0.0f});
        for (int ch = 0; ch < 3; ++ch) buf.push_back(at(c[4], 3 * k * v + ch));
        for (int ch = 0; ch < 3; ++ch)
          for (int64_t j = 1; j < k; ++j) buf.push_back(at(c[4], 3 * k * v + 3 * j + ch));
        buf.push_back(at(c[3], v));
        for (int j = 0; j < 3; ++j) buf.push_back(at(c[1], 3 * v + j));
        for (int j = 0; j < 4; ++j) buf.push_back(at(c[2], 4 * v + j));
      }
      f.write(reinterpret_cast<const char*>(buf.data()), std::streamsize(buf.size() * sizeof(float)));
    }
    f.close();
    if (!f) throw InputError(path + ": writing " + out.temp() + " failed (" + std::strerror(errno) + ")");
  }
  out.commit();
}

}  // namespace rlx::io
