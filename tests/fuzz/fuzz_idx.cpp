// IDX reader (src/io/idx.hpp), as the MNIST loader reads data files: the input's bytes go
// to io::read_idx_bytes, plain or gzip-compressed. A file that reads must encode back to
// exactly its (decompressed) bytes: the header, then each element big-endian in the file's
// width; an int16 file's values (held as i32) must fit 16 bits. The gzip case is inflated
// here again with zlib directly, never further than the encoded size plus one byte.
#include <zlib.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/idx.hpp"

using namespace rlx;

namespace {

// Bytes per element of an IDX type code the reader accepted.
int file_width(unsigned code) {
  switch (code) {
    case 0x0B: return 2;
    case 0x0C:
    case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 1;
  }
}

void put_big_endian(std::string& s, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i) s += char((v >> (8 * i)) & 0xff);
}

// The IDX bytes of t read from a file of type `code`.
std::string encode(const Tensor& t, unsigned code) {
  std::string s = {'\0', '\0', char(code), char(t.rank())};
  for (int64_t d : t.shape()) put_big_endian(s, uint64_t(d), 4);
  const int w = file_width(code);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    switch (t.dtype()) {
      case DType::U8: v = t.data<uint8_t>()[i]; break;
      case DType::I8: v = uint8_t(t.data<int8_t>()[i]); break;
      case DType::I32: {
        const int32_t x = t.data<int32_t>()[i];
        if (w == 2 && (x < INT16_MIN || x > INT16_MAX)) fuzz::finding("an int16 element read as " + std::to_string(x));
        v = w == 2 ? uint16_t(x) : uint32_t(x);
        break;
      }
      case DType::F32: v = std::bit_cast<uint32_t>(t.data<float>()[i]); break;
      case DType::F64: v = std::bit_cast<uint64_t>(t.data<double>()[i]); break;
      default: fuzz::finding(std::string("an IDX file read as dtype ") + dtype_name(t.dtype()));
    }
    put_big_endian(s, v, w);
  }
  return s;
}

// The gzip input inflated by zlib alone, at most `limit` bytes (empty when it is not gzip).
std::string inflate_all(std::string_view in, size_t limit) {
  std::string out(limit, '\0');
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fuzz::finding("inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  inflate(&z, Z_FINISH);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  RLX_FUZZ_GUARD({
    Tensor t = io::read_idx_bytes(in, "fuzz.idx");
    const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    // The type code: byte 2 of the plain file, or of what the gzip stream holds.
    const std::string head = gzip ? inflate_all(in, 4) : std::string(in.substr(0, 4));
    if (head.size() < 4) fuzz::finding("a file read without a 4-byte header");
    const std::string want = encode(t, static_cast<unsigned char>(head[2]));
    const std::string have = gzip ? inflate_all(in, want.size() + 1) : std::string(in);
    if (have != want)
      fuzz::finding("IDX " + t.type().str() + " does not encode back to its " + std::to_string(have.size()) +
                    " (decompressed) bytes");
  })
  return 0;
}
