// IDX files (src/io/idx.hpp): every element type read back from files written here, plain
// and gzip-compressed; every way a file can be wrong refused with a message naming it; the
// MNIST files of data/mnist read as published.
#include <zlib.h>

#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/idx.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/outcomes.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

fs::path idx_scratch() {
  static const fs::path d = test::scratch_dir("rlx_idx_test_");
  return d;
}

void put_file(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// n bytes of v, most significant first.
std::string big_endian(uint64_t v, int n) {
  std::string s(size_t(n), '\0');
  for (int i = n - 1; i >= 0; --i, v >>= 8) s[size_t(i)] = char(v & 0xff);
  return s;
}

std::string idx_header(unsigned type, const std::vector<uint32_t>& dims) {
  std::string s = {'\0', '\0', char(type), char(dims.size())};
  for (uint32_t d : dims) s += big_endian(d, 4);
  return s;
}

// A complete gzip member (header, deflate, CRC-32 and length) of s.
std::string gzip(const std::string& s) {
  z_stream z{};
  BOOST_REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, uLong(s.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = uInt(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  BOOST_REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// One element type's test values: the file's bytes and the tensor rlx must make of them.
struct TypeCase {
  unsigned code;
  DType dtype;
  std::vector<uint32_t> dims;
  std::string payload;  // big-endian, as the file holds it
  Tensor expect;
};

// n values of each type, the extremes first, then pseudo-random ones (seeded).
TypeCase type_case(unsigned code, std::vector<uint32_t> dims) {
  int64_t n = 1;
  for (uint32_t d : dims) n *= d;
  TypeCase c{code, DType::U8, dims, "", {}};
  auto fill = [&]<class T, class Raw>(DType dt, std::vector<T> extremes) {
    c.dtype = dt;
    Shape s(dims.begin(), dims.end());
    c.expect = Tensor::empty(dt, s);
    for (int64_t i = 0; i < n; ++i) {
      Raw raw;
      if (size_t(i) < extremes.size())
        raw = std::bit_cast<Raw>(extremes[size_t(i)]);
      else
        raw = Raw(rng_bits(code, uint64_t(i)));
      c.payload += big_endian(uint64_t(raw), int(sizeof(Raw)));
      using Out = std::conditional_t<sizeof(T) == 2, int32_t, T>;  // i16 widens to i32
      c.expect.data<Out>()[i] = Out(std::bit_cast<T>(raw));
    }
  };
  using L8 = std::numeric_limits<int8_t>;
  using L16 = std::numeric_limits<int16_t>;
  using L32 = std::numeric_limits<int32_t>;
  using F = std::numeric_limits<float>;
  using D = std::numeric_limits<double>;
  switch (code) {
    case 0x08: fill.operator()<uint8_t, uint8_t>(DType::U8, {0, 255, 128, 1}); break;
    case 0x09: fill.operator()<int8_t, uint8_t>(DType::I8, {L8::min(), L8::max(), -1, 0}); break;
    case 0x0B: fill.operator()<int16_t, uint16_t>(DType::I32, {L16::min(), L16::max(), -1, 256}); break;
    case 0x0C: fill.operator()<int32_t, uint32_t>(DType::I32, {L32::min(), L32::max(), -1, 16777216}); break;
    case 0x0D: fill.operator()<float, uint32_t>(DType::F32, {-0.0f, F::infinity(), F::denorm_min(), F::max(), F::quiet_NaN()}); break;
    case 0x0E: fill.operator()<double, uint64_t>(DType::F64, {-0.0, -D::infinity(), D::denorm_min(), D::lowest(), 1.0 / 3}); break;
  }
  return c;
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A bad IDX file: its name, its bytes, what the InputError must say besides the name.
struct BadIdx {
  std::string name;
  std::string content;
  std::string expect;
};

void expect_refused(const std::vector<BadIdx>& cases) {
  for (const BadIdx& c : cases) {
    fs::path p = idx_scratch() / c.name;
    put_file(p, c.content);
    try {
      Tensor t = io::read_idx(p.string());
      BOOST_ERROR(c.name << ": read as " << t.type().str() << ", expected: " << c.expect);
    } catch (const InputError& e) {
      const std::string m = e.what();
      BOOST_TEST(m.find(p.string() + ": ") == 0, m);
      BOOST_TEST(m.find(c.expect) != std::string::npos, c.name << ": '" << m << "' lacks '" << c.expect << "'");
    }
  }
}

constexpr unsigned kTypeCodes[] = {0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E};

}  // namespace

BOOST_AUTO_TEST_CASE(idx_every_type_reads_plain_and_gzip) {
  const std::vector<std::vector<uint32_t>> shapes = {{7}, {2, 3, 5}, {0, 4}, {1, 2, 1, 2, 1, 2, 1, 3}};
  for (unsigned code : kTypeCodes)
    for (const auto& dims : shapes) {
      TypeCase c = type_case(code, dims);
      const std::string file = idx_header(code, dims) + c.payload;
      for (bool gz : {false, true}) {
        const std::string what = "type " + std::to_string(code) + " " + c.expect.type().str() + (gz ? " gzip" : "");
        const fs::path p = idx_scratch() / (gz ? "t.idx.gz" : "t.idx");
        put_file(p, gz ? gzip(file) : file);
        Tensor t = io::read_idx(p.string());
        BOOST_TEST((t.dtype() == c.dtype), what);
        BOOST_TEST(same_tensor(t, c.expect), what);
        BOOST_TEST(same_tensor(io::read_idx_bytes(gz ? gzip(file) : file, "mem"), c.expect), what);
      }
    }
}

// A gzip file is recognised by its bytes, not its name, and every gzip header field zlib
// writes or skips (a stored name, a comment) is accepted.
BOOST_AUTO_TEST_CASE(idx_gzip_detected_by_magic_and_header_fields_accepted) {
  TypeCase c = type_case(0x0D, {4, 4});
  const std::string file = idx_header(0x0D, {4, 4}) + c.payload;
  put_file(idx_scratch() / "no_suffix", gzip(file));
  BOOST_TEST(same_tensor(io::read_idx((idx_scratch() / "no_suffix").string()), c.expect));
  // FLG = FNAME | FCOMMENT: a zero-terminated file name and comment before the deflate data.
  std::string named = gzip(file);
  named[3] = char(0x18);
  named.insert(10, std::string("digits.idx\0a comment\0", 21));
  BOOST_TEST(same_tensor(io::read_idx_bytes(named, "named.gz"), c.expect));
}

BOOST_AUTO_TEST_CASE(idx_bad_headers_are_named) {
  const std::string u8_2x3 = idx_header(0x08, {2, 3}) + "abcdef";
  expect_refused({
      {"empty.idx", "", "truncated IDX header: the file has 0 bytes"},
      {"three_bytes.idx", std::string("\0\0\x08", 3), "truncated IDX header: the file has 3 bytes"},
      {"zip.idx", "PK\x03\x04 and so on", "not an IDX file (bad magic: it starts 0x50 0x4B"},
      {"one_zero.idx", std::string("\0\x01\x08\x01", 4) + big_endian(1, 4) + "x", "bad magic"},
      {"type_0a.idx", idx_header(0x0A, {2}) + "ab", "unknown IDX element type 0x0A"},
      {"type_ff.idx", idx_header(0xFF, {2}) + "ab", "unknown IDX element type 0xFF"},
      {"rank0.idx", idx_header(0x08, {}) + "a", "declares 0 dimensions (rlx reads 1 to 8)"},
      {"rank9.idx", idx_header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1}) + "a", "declares 9 dimensions"},
      {"rank255.idx", idx_header(0x08, {}).substr(0, 3) + "\xff", "declares 255 dimensions"},
      {"short_dims.idx", idx_header(0x08, {60000, 28, 28}).substr(0, 13),
       "truncated IDX header: 3 dimensions need 16 bytes, the file has 13"},
      {"short_data.idx", u8_2x3.substr(0, u8_2x3.size() - 1),
       "truncated data: the header says u8[2,3] (6 bytes) but the file has 5 bytes after it"},
      {"i16_odd.idx", idx_header(0x0B, {3}) + "abcde", "the header says i16[3] (6 bytes) but the file has 5"},
      {"trailing.idx", u8_2x3 + "xyz", "3 unexpected bytes after the u8[2,3] data"},
  });
}

// Dimension products are checked for overflow and against the data before anything is
// allocated: a 28-byte file claiming 60000x28x28 images, or 2^32-1 extents whose product
// passes 2^62, are refused without an allocation of their size.
BOOST_AUTO_TEST_CASE(idx_sizes_are_checked_before_allocating) {
  const uint32_t big = 0xFFFFFFFFu;
  expect_refused({
      {"claims_mnist.idx", idx_header(0x08, {60000, 28, 28}) + "tiny",
       "truncated data: the header says u8[60000,28,28] (47040000 bytes) but the file has 4 bytes"},
      {"claims_4g_f64.idx", idx_header(0x0E, {big}) + "12345678", "(34359738360 bytes) but the file has 8"},
      {"overflow.idx", idx_header(0x08, {big, big, big}), "is impossible"},
      {"overflow_bytes.idx", idx_header(0x0E, {1u << 31, 1u << 31}), "bytes of an IDX file: 4611686018427387904 * 8"},
      {"overflow8.idx", idx_header(0x0C, std::vector<uint32_t>(8, big)), "the IDX header's i32[4294967295,4294967295,"},
  });
  try {
    io::read_idx_bytes(idx_header(0x08, {big, big, big}), "sized.idx");
    BOOST_ERROR("no error");
  } catch (const SizeError& e) {
    BOOST_TEST(std::string(e.what()).find("sized.idx: the IDX header's u8[4294967295,4294967295,4294967295] is impossible") == 0,
               e.what());
  }
}

BOOST_AUTO_TEST_CASE(idx_bad_gzip_is_named) {
  const std::string u8_100 = idx_header(0x08, {100}) + std::string(100, 'x');
  const std::string gz = gzip(u8_100);
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 0x01;  // the CRC-32 of the trailer
  std::string bad_size = gz;
  bad_size[bad_size.size() - 4] ^= 0x01;  // ISIZE, the length modulo 2^32
  std::string bad_method = gz;
  bad_method[2] = 7;  // compression method: only 8 (deflate) exists
  expect_refused({
      {"cut.gz", gz.substr(0, gz.size() - 6), "truncated gzip stream: the file ends inside it"},
      {"cut_header.gz", gz.substr(0, 5), "truncated gzip stream"},
      {"crc.gz", bad_crc, "corrupt gzip stream (incorrect data check)"},
      {"isize.gz", bad_size, "corrupt gzip stream (incorrect length check)"},
      {"method.gz", bad_method, "corrupt gzip stream (unknown compression method)"},
      {"trailing_junk.gz", gz + "junk", "4 unexpected bytes after the end of the gzip stream"},
      {"two_members.gz", gz + gz, "unexpected bytes after the end of the gzip stream"},
      {"short_data.gz", gzip(u8_100.substr(0, 50)),
       "truncated data: the header says u8[100] (100 bytes) but the gzip stream holds 42 bytes after it"},
      {"long_data.gz", gzip(u8_100 + "z"), "unexpected bytes after the u8[100] data (the gzip stream holds more"},
      {"short_header.gz", gzip(idx_header(0x08, {1, 2}).substr(0, 9)),
       "truncated IDX header: 2 dimensions need 12 bytes, the file (decompressed) has 9"},
      {"magic.gz", gzip("\x1f\x8b not idx"), "bad magic: it starts 0x1F 0x8B"},
  });
}

// A gzip bomb is refused without being inflated: a header claiming more than its stream can
// hold is refused from the sizes alone, and a stream holding more than its header says is
// inflated only one byte past the header's size.
BOOST_AUTO_TEST_CASE(idx_gzip_bombs_are_refused) {
  const std::string zeros(size_t(16) << 20, '\0');  // 16 MiB, about 16 KiB compressed
  const std::string bomb = gzip(idx_header(0x08, {16}) + zeros);
  BOOST_TEST(bomb.size() < size_t(1) << 20);
  const std::string claims = gzip(idx_header(0x08, {1u << 30, 64}) + std::string(1000, '\0'));
  expect_refused({
      {"bomb.gz", bomb, "unexpected bytes after the u8[16] data (the gzip stream holds more than the header's 16 bytes)"},
      {"claims_64g.gz", claims, "truncated data: the header says u8[1073741824,64] (68719476736 bytes) but a gzip file of " +
                                    std::to_string(claims.size()) + " bytes cannot hold more than"},
  });
}

// Every prefix of a valid file and every one-byte change of its header and first data
// bytes, plain and gzip, either reads (to no more data than the file can hold) or is an
// InputError: never another exception or a crash (tests/sanitize.sh runs this under ASan).
BOOST_AUTO_TEST_CASE(idx_truncations_and_mutations) {
  for (unsigned code : {0x08u, 0x0Bu, 0x0Eu}) {
    TypeCase c = type_case(code, {3, 5});
    const std::string plain = idx_header(code, {3, 5}) + c.payload;
    for (const std::string& file : {plain, gzip(plain)}) {
      test::Outcomes o;
      auto attempt = [&](const std::string& bytes, const std::string& what) {
        o.attempt(what, [&] {
          Tensor t = io::read_idx_bytes(bytes, "m");
          BOOST_CHECK_MESSAGE(t.numel() <= int64_t(plain.size()), what << ": more elements than the file's bytes");
        });
      };
      for (size_t len = 0; len < file.size(); ++len) attempt(file.substr(0, len), "prefix " + std::to_string(len));
      for (size_t i = 0; i < std::min<size_t>(file.size(), 24); ++i)
        for (int ch : {0x00, 0x01, 0x08, 0x0B, 0x0E, 0x1f, 0x7f, 0x8b, 0xff}) {
          std::string m = file;
          m[i] = char(ch);
          attempt(m, "byte " + std::to_string(i) + " -> " + std::to_string(ch));
        }
      BOOST_TEST(o.read > 0, code);
      BOOST_TEST(o.refused > 0, code);
    }
  }
}

BOOST_AUTO_TEST_CASE(idx_missing_file_and_folder_are_named) {
  const fs::path missing = idx_scratch() / "missing.idx";
  BOOST_CHECK_EXCEPTION(io::read_idx(missing.string()), InputError, [&](const InputError& e) {
    return std::string(e.what()).find(missing.string() + ": cannot open for reading") == 0;
  });
  fs::create_directories(idx_scratch() / "folder.idx");
  BOOST_CHECK_EXCEPTION(io::read_idx((idx_scratch() / "folder.idx").string()), InputError, [](const InputError& e) {
    return std::string(e.what()).find("folder.idx: is a directory") != std::string::npos;
  });
}

// The four MNIST files of data/mnist: shapes, the published first labels, and sums of the
// pixels and labels (plain and position-weighted) computed independently with Python:
//   python3 -c 'import gzip; b=gzip.open(F).read()[16:]   # [8:] for labels
//               print(sum(b), sum(x*(i%65521+1) for i,x in enumerate(b)))'
BOOST_AUTO_TEST_CASE(mnist_files_read_as_published) {
  struct Expect {
    const char* file;
    Shape shape;
    uint64_t sum, weighted;
  };
  const Expect files[] = {
      {"train-images-idx3-ubyte.gz", {60000, 28, 28}, 1567298545ull, 51357405085107ull},
      {"train-labels-idx1-ubyte.gz", {60000}, 267236ull, 8023005948ull},
      {"t10k-images-idx3-ubyte.gz", {10000, 28, 28}, 264923200ull, 8672111614975ull},
      {"t10k-labels-idx1-ubyte.gz", {10000}, 44434ull, 221901817ull},
  };
  for (const Expect& e : files) {
    Tensor t = io::read_idx(std::string(RLX_DATA) + "/mnist/" + e.file);
    BOOST_TEST((t.dtype() == DType::U8), e.file);
    BOOST_TEST(t.shape() == e.shape, e.file);
    uint64_t sum = 0, weighted = 0;
    const uint8_t* p = t.data<uint8_t>();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) {
      sum += p[i];
      weighted += uint64_t(p[i]) * uint64_t(i % 65521 + 1);
    }
    BOOST_TEST(sum == e.sum, e.file);
    BOOST_TEST(weighted == e.weighted, e.file);
  }
  Tensor train = io::read_idx(std::string(RLX_DATA) + "/mnist/train-labels-idx1-ubyte.gz");
  Tensor test = io::read_idx(std::string(RLX_DATA) + "/mnist/t10k-labels-idx1-ubyte.gz");
  const std::vector<int> first_train = {5, 0, 4, 1, 9, 2, 1, 3, 1, 4}, first_test = {7, 2, 1, 0, 4, 1, 4, 9, 5, 9};
  for (size_t i = 0; i < 10; ++i) {
    BOOST_TEST(int(train.data<uint8_t>()[i]) == first_train[i], i);
    BOOST_TEST(int(test.data<uint8_t>()[i]) == first_test[i], i);
  }
}
