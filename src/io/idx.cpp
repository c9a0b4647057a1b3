#include "io/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <type_traits>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace rlx::io {

namespace {

struct IdxType {
  unsigned code;
  const char* name;  // the file's element type, as messages show it
  int file_bytes;    // bytes per element in the file
  DType dtype;       // what rlx holds it as
};

constexpr IdxType kIdxTypes[] = {{0x08, "u8", 1, DType::U8},   {0x09, "i8", 1, DType::I8},
                                 {0x0B, "i16", 2, DType::I32}, {0x0C, "i32", 4, DType::I32},
                                 {0x0D, "f32", 4, DType::F32}, {0x0E, "f64", 8, DType::F64}};

// deflate codes at most 258 bytes in 2 bits, so a stream of n bytes inflates to at most
// 1032 n bytes; the slack covers rounding. A header claiming more than this is refused
// before anything is inflated.
constexpr int64_t kMaxDeflateRatio = 1032;
constexpr int64_t kDeflateSlack = 1024;

// zlib counts in uInt; larger spans go in pieces of this size.
constexpr size_t kZlibChunk = size_t(1) << 30;

std::string hex_byte(unsigned b) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02X", b & 0xffu);
  return s;
}

[[noreturn]] void fail(const std::string& name, const std::string& what) { throw InputError(name + ": " + what); }

// A gzip member inflated on demand into the caller's memory, never further than asked.
class Inflater {
 public:
  Inflater(std::string_view in, const std::string& name) : in_(in), name_(name) {
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK)  // 16: a gzip wrapper, its CRC-32 checked
      throw std::bad_alloc();
  }
  ~Inflater() { inflateEnd(&z_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Inflates up to n bytes into dst; fewer only when the member ends.
  size_t read(char* dst, size_t n) {
    size_t done = 0;
    while (done < n && !ended_) {
      if (z_.avail_in == 0 && fed_ < in_.size()) {
        const size_t k = std::min(in_.size() - fed_, kZlibChunk);
        z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in_.data() + fed_));
        z_.avail_in = uInt(k);
        fed_ += k;
      }
      const size_t room = std::min(n - done, kZlibChunk);
      z_.next_out = reinterpret_cast<Bytef*>(dst + done);
      z_.avail_out = uInt(room);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      done += room - z_.avail_out;
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc == Z_BUF_ERROR && z_.avail_in == 0 && fed_ == in_.size()) {
        fail(name_, "truncated gzip stream: the file ends inside it, after " + std::to_string(z_.total_out) +
                        " decompressed bytes");
      } else if (rc == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (rc != Z_OK) {
        fail(name_, std::string("corrupt gzip stream (") + (z_.msg ? z_.msg : "zlib error " + std::to_string(rc)) + ")");
      }
    }
    return done;
  }

  bool ended() const { return ended_; }
  // Compressed bytes after the member's end (meaningful once ended()).
  size_t bytes_after() const { return in_.size() - fed_ + z_.avail_in; }

 private:
  z_stream z_{};
  std::string_view in_;
  const std::string& name_;
  size_t fed_ = 0;  // bytes of in_ handed to zlib so far
  bool ended_ = false;
};

// Big-endian elements of `width` bytes from `src` into `out` as T.
template <class T, class Raw>
void decode(const unsigned char* src, int64_t n, T* out) {
  constexpr int width = int(sizeof(Raw));
  for (int64_t i = 0; i < n; ++i, src += width) {
    Raw v = 0;
    for (int b = 0; b < width; ++b) v = Raw(Raw(v << 8) | src[b]);
    if constexpr (std::is_floating_point_v<T>)
      out[i] = std::bit_cast<T>(v);
    else
      out[i] = T(std::make_signed_t<Raw>(v));  // two's complement, as the format stores it
  }
}

Tensor decode_data(const IdxType& type, const Shape& shape, const unsigned char* src) {
  Tensor t = Tensor::empty(type.dtype, shape);
  const int64_t n = t.numel();
  switch (type.code) {
    case 0x08:
    case 0x09: std::memcpy(t.raw(), src, size_t(n)); break;
    case 0x0B: decode<int32_t, uint16_t>(src, n, t.data<int32_t>()); break;
    case 0x0C: decode<int32_t, uint32_t>(src, n, t.data<int32_t>()); break;
    case 0x0D: decode<float, uint32_t>(src, n, t.data<float>()); break;
    case 0x0E: decode<double, uint64_t>(src, n, t.data<double>()); break;
  }
  return t;
}

}  // namespace

Tensor read_idx_bytes(std::string_view data, const std::string& name) {
  const bool gzip = data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
                    static_cast<unsigned char>(data[1]) == 0x8b;
  std::optional<Inflater> inflater;
  if (gzip) inflater.emplace(data, name);
  const std::string where = gzip ? " (decompressed)" : "";
  size_t pos = 0;  // plain files: the next unread byte
  // The header's bytes from the file or the gzip stream: fewer than n only at its end.
  auto take = [&](unsigned char* dst, size_t n) -> size_t {
    if (gzip) return inflater->read(reinterpret_cast<char*>(dst), n);
    const size_t k = std::min(n, data.size() - pos);
    std::memcpy(dst, data.data() + pos, k);
    pos += k;
    return k;
  };

  unsigned char head[4 + 4 * kMaxIdxRank];
  const size_t got = take(head, 4);
  if (got >= 2 && (head[0] != 0 || head[1] != 0))
    fail(name, "not an IDX file (bad magic: it starts " + hex_byte(head[0]) + " " + hex_byte(head[1]) +
                   ", an IDX file 0x00 0x00)");
  if (got < 4)
    fail(name, "truncated IDX header: the file" + where + " has " + std::to_string(got) +
                   " bytes, the magic alone is 4");
  const IdxType* type = nullptr;
  for (const IdxType& t : kIdxTypes)
    if (t.code == head[2]) type = &t;
  if (!type)
    fail(name, "unknown IDX element type " + hex_byte(head[2]) +
                   " (known: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)");
  const int rank = head[3];
  if (rank == 0 || rank > kMaxIdxRank)
    fail(name, "the IDX header declares " + std::to_string(rank) + " dimensions (rlx reads 1 to " +
                   std::to_string(kMaxIdxRank) + ")");
  const size_t dims_got = take(head + 4, 4 * size_t(rank));
  if (dims_got < 4 * size_t(rank))
    fail(name, "truncated IDX header: " + std::to_string(rank) + " dimensions need " + std::to_string(4 + 4 * rank) +
                   " bytes, the file" + where + " has " + std::to_string(4 + dims_got));

  Shape shape(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const unsigned char* p = head + 4 + 4 * d;
    shape[size_t(d)] = int64_t(uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]);
  }
  const std::string desc = std::string(type->name) + shape_str(shape);
  int64_t want = 0;
  try {
    int64_t n = 1;
    for (int64_t e : shape) n = checked_mul(n, e, "elements of an IDX file");
    want = checked_mul(n, type->file_bytes, "bytes of an IDX file");
  } catch (const SizeError& e) {
    throw SizeError(name + ": the IDX header's " + desc + " is impossible: " + e.what());
  }
  const std::string claim = "the header says " + desc + " (" + std::to_string(want) + " bytes)";

  if (!gzip) {
    const size_t have = data.size() - pos;
    if (int64_t(have) < want)
      fail(name, "truncated data: " + claim + " but the file has " + std::to_string(have) + " bytes after it");
    if (int64_t(have) > want)
      fail(name, std::to_string(int64_t(have) - want) + " unexpected bytes after the " + desc + " data");
    return decode_data(*type, shape, reinterpret_cast<const unsigned char*>(data.data() + pos));
  }

  const int64_t can_hold = saturating_mul(int64_t(data.size()), kMaxDeflateRatio) + kDeflateSlack;
  if (want > can_hold)
    fail(name, "truncated data: " + claim + " but a gzip file of " + std::to_string(data.size()) +
                   " bytes cannot hold more than " + std::to_string(can_hold));
  // Inflated into a buffer that grows with what the stream really holds, up to one byte past
  // the header's size: the tensor is allocated only once the length is known to match.
  const size_t cap = size_t(want) + 1;
  std::string buf;
  size_t have = 0;
  while (!inflater->ended() && have < cap) {
    if (have == buf.size()) buf.resize(std::min(cap, std::max(2 * buf.size(), size_t(1) << 20)));
    have += inflater->read(buf.data() + have, buf.size() - have);
  }
  if (int64_t(have) < want)
    fail(name, "truncated data: " + claim + " but the gzip stream holds " + std::to_string(have) + " bytes after it");
  if (int64_t(have) > want)
    fail(name, "unexpected bytes after the " + desc + " data (the gzip stream holds more than the header's " +
                   std::to_string(want) + " bytes)");
  if (size_t extra = inflater->bytes_after())
    fail(name, std::to_string(extra) + " unexpected bytes after the end of the gzip stream");
  return decode_data(*type, shape, reinterpret_cast<const unsigned char*>(buf.data()));
}

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not an IDX file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open for reading (") + std::strerror(errno) + ")");
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  f.seekg(0);
  if (!f || size < 0) fail(path, "cannot determine the file's size");
  std::string bytes(size_t(size), '\0');
  if (!f.read(bytes.data(), std::streamsize(size))) fail(path, "read failed");
  return read_idx_bytes(bytes, path);
}

}  // namespace rlx::io
