#include "io/npy.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace rlx::io {

namespace {

constexpr size_t kMaxNpyRank = 64;  // NumPy's own limit (NPY_MAXDIMS) is 32 or 64

const char* descr_of(DType t) {
  switch (t) {
    case DType::Bool: return "|b1";
    case DType::I8: return "|i1";
    case DType::U8: return "|u1";
    case DType::I32: return "<i4";
    case DType::I64: return "<i8";
    case DType::F16: return "<f2";
    case DType::F32: return "<f4";
    case DType::F64: return "<f8";
    case DType::C64: return "<c8";
    default: return nullptr;
  }
}

DType dtype_of_descr(const std::string& d, const std::string& path) {
  for (DType t : kAllDTypes)
    if (const char* s = descr_of(t); s && (d == s || (d.size() == 3 && d[0] == '=' && d.substr(1) == std::string(s).substr(1))))
      return t;
  if (d == "<i1" || d == "=i1") return DType::I8;
  if (d == "<u1" || d == "=u1") return DType::U8;
  throw InputError(path + ": unsupported .npy dtype '" + d +
                   "' (supported: bool, int8, uint8, int32, int64, float16, float32, float64, complex64, little-endian)");
}

// Finds `'key': value` in the header dict and returns the raw value text.
std::string dict_value(const std::string& h, const std::string& key, const std::string& path) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) throw InputError(path + ": .npy header has no '" + key + "' entry");
  size_t c = h.find(':', k);
  if (c == std::string::npos) throw InputError(path + ": malformed .npy header near '" + key + "'");
  size_t b = h.find_first_not_of(' ', c + 1);
  if (b == std::string::npos) throw InputError(path + ": malformed .npy header near '" + key + "'");
  size_t e;
  if (h[b] == '\'') {
    e = h.find('\'', b + 1);
    if (e == std::string::npos) throw InputError(path + ": unterminated string in .npy header");
    return h.substr(b + 1, e - b - 1);
  }
  if (h[b] == '(') {
    e = h.find(')', b);
    if (e == std::string::npos) throw InputError(path + ": unterminated shape tuple in .npy header");
    return h.substr(b, e - b + 1);
  }
  e = h.find_first_of(",}", b);
  return h.substr(b, e - b);
}

}  // namespace

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open for reading");
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw InputError(path + ": not a .npy file (bad magic)");
  int major = magic[6];
  uint32_t hlen = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) throw InputError(path + ": truncated .npy header");
    hlen = b[0] | (uint32_t(b[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) throw InputError(path + ": truncated .npy header");
    hlen = b[0] | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
  } else {
    throw InputError(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (hlen > (1u << 24)) throw InputError(path + ": implausible .npy header length " + std::to_string(hlen));
  std::string h(hlen, '\0');
  if (!f.read(h.data(), hlen)) throw InputError(path + ": truncated .npy header");
  DType t = dtype_of_descr(dict_value(h, "descr", path), path);
  std::string fo = dict_value(h, "fortran_order", path);
  if (fo.find("True") != std::string::npos)
    throw InputError(path + ": Fortran-ordered arrays are not supported (save with numpy.ascontiguousarray)");
  std::string st = dict_value(h, "shape", path);
  Shape shape;
  for (size_t i = 1; i < st.size();) {
    size_t j = st.find_first_of(",)", i);
    if (j == std::string::npos) break;
    std::string tok = st.substr(i, j - i);
    tok.erase(0, tok.find_first_not_of(' '));
    tok.erase(tok.find_last_not_of(" L") + 1);
    if (!tok.empty()) {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(tok.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || errno == ERANGE)
        throw InputError(path + ": bad shape entry '" + tok + "' in .npy header");
      if (shape.size() >= kMaxNpyRank) throw InputError(path + ": .npy shape has more than " + std::to_string(kMaxNpyRank) + " dimensions");
      shape.push_back(v);
    }
    i = j + 1;
  }
  // The header's claim is checked against the file before anything is allocated.
  int64_t want = 0;
  try {
    want = int64_t(dtype_storage_bytes(t, numel(shape)));
  } catch (const SizeError& e) {
    throw InputError(path + ": .npy header shape " + shape_str(shape) + " is impossible: " + e.what());
  }
  const std::streamoff data_at = f.tellg();
  f.seekg(0, std::ios::end);
  const std::streamoff have = f.tellg() - data_at;
  f.seekg(data_at);
  const std::string type = std::string(dtype_name(t)) + shape_str(shape);
  if (!f || have < want)
    throw InputError(path + ": truncated data: the header says " + type + " (" + std::to_string(want) +
                     " bytes) but the file has " + std::to_string(std::max<std::streamoff>(have, 0)) + " bytes after it");
  if (have > want)
    throw InputError(path + ": " + std::to_string(have - want) + " unexpected bytes after the " + type + " data");
  Tensor r = Tensor::empty(t, shape);
  if (!f.read(static_cast<char*>(r.raw()), std::streamsize(r.nbytes())))
    throw InputError(path + ": read failed after the header");
  // A bool is one byte holding 0 or 1 (what NumPy writes); any other byte is not a C++ bool.
  if (t == DType::Bool) {
    const unsigned char* b = static_cast<const unsigned char*>(r.raw());
    for (int64_t i = 0; i < r.numel(); ++i)
      if (b[i] > 1)
        throw InputError(path + ": bool element " + std::to_string(i) + " holds the byte " + std::to_string(int(b[i])) +
                         " (a .npy bool is 0 or 1)");
  }
  return r;
}

void write_npy(const std::string& path, const Tensor& t0) {
  const char* d = descr_of(t0.dtype());
  if (!d) throw InputError(path + ": dtype " + std::string(dtype_name(t0.dtype())) + " has no .npy equivalent (cast it first)");
  Tensor t = t0.is_host() ? t0.contiguous() : t0.to(host_allocator());
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + (t.shape().size() == 1 ? "," : (i + 1 < t.shape().size() ? ", " : ""));
  shape += ")";
  std::string h = "{'descr': '" + std::string(d) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  AtomicFile out(path);
  {
    std::ofstream f(out.temp(), std::ios::binary | std::ios::trunc);
    if (!f) throw InputError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
    f.write("\x93NUMPY\x01\x00", 8);
    unsigned char len[2] = {static_cast<unsigned char>(h.size() & 0xff), static_cast<unsigned char>(h.size() >> 8)};
    f.write(reinterpret_cast<char*>(len), 2);
    f.write(h.data(), std::streamsize(h.size()));
    f.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
    f.close();
    if (!f) throw InputError(path + ": write failed (" + std::strerror(errno) + ")");
  }
  out.commit();
}

}  // namespace rlx::io
