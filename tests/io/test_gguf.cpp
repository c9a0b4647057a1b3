// GGUF (src/io/gguf.hpp): files of llama.cpp's own Python writer (tests/io/data/gguf, made by
// make_gguf.py) read with their metadata of every value type, shapes in rlx order, and every
// dequantized type equal bit for bit to the package's quants.dequantize; every class of bad
// file refused with a message naming the file and what is wrong; truncations and mutations
// that end in an InputError, never a crash.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "io/npy.hpp"
#include "tests/support/errors.hpp"
#include "tests/support/gguf_bytes.hpp"
#include "tests/support/outcomes.hpp"

using namespace rlx;
namespace fs = std::filesystem;
using test::expect_error;
using test::Bytes;
using test::header;

namespace {

fs::path gguf_data(const std::string& name) { return fs::path(RLX_IO_DATA) / "gguf" / name; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

io::GgufFile parse(const Bytes& g) { return io::GgufFile::from_bytes(g.b, "bad.gguf"); }

std::vector<uint32_t> float_bits_of(const Tensor& t) {
  std::vector<uint32_t> r(size_t(t.numel()));
  std::memcpy(r.data(), t.raw(), r.size() * 4);
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gguf)

BOOST_AUTO_TEST_CASE(metadata_of_every_value_type) {
  io::GgufFile f(gguf_data("every_type.gguf").string());
  BOOST_TEST(f.version() == 3u);
  BOOST_TEST(f.alignment() == 32u);
  BOOST_TEST(f.data_offset() % 32 == 0);
  BOOST_TEST(f.get_string("general.architecture") == "rlxtest");
  BOOST_TEST(f.get_int("test.u8") == 200);
  BOOST_TEST(f.get_int("test.i8") == -100);
  BOOST_TEST(f.get_int("test.u16") == 60000);
  BOOST_TEST(f.get_int("test.i16") == -30000);
  BOOST_TEST(f.get_int("test.u32") == 4000000000);
  BOOST_TEST(f.get_int("test.i32") == -2000000000);
  BOOST_TEST(f.value("test.u64").u == ~uint64_t(0));
  BOOST_TEST(f.get_int("test.i64") == std::numeric_limits<int64_t>::min());
  BOOST_TEST(f.get_float("test.f32") == double(0.1f));
  BOOST_TEST(f.get_float("test.f64") == -1e300);
  BOOST_TEST(f.get_bool("test.bool"));
  BOOST_TEST(f.get_string("test.string") == "h\xc3\xa9llo");
  BOOST_TEST(f.get_int_array("test.array_i32") == std::vector<int64_t>({1, -2, 3}), boost::test_tools::per_element());
  BOOST_TEST(f.get_string_array("test.array_string") == std::vector<std::string>({"a", "", "\xc3\xbc" "ber"}),
             boost::test_tools::per_element());
  BOOST_TEST(f.get_float_array("test.array_f32") == std::vector<double>({0.5, -1.5}), boost::test_tools::per_element());
  const io::GgufValue& nested = f.value("test.array_nested");
  BOOST_TEST((nested.element == io::GgufType::Array));
  BOOST_TEST(nested.arrays.size() == 2u);
  BOOST_TEST(nested.arrays[0].count == 2u);
  BOOST_TEST(nested.arrays[1].count == 1u);
  BOOST_TEST((nested.arrays[1].element == io::GgufType::I32));
  // Metadata in file order: the writer puts general.architecture first.
  BOOST_TEST(f.metadata().front().first == "general.architecture");
  BOOST_TEST(f.metadata().size() == 17u);

  // The getters name the key and the type they found.
  expect_error([&] { f.get_int("test.string"); }, {"every_type.gguf: metadata 'test.string' is a string, not an integer"});
  expect_error([&] { f.get_int("test.u64"); }, {"metadata 'test.u64' is 18446744073709551615, beyond int64"});
  expect_error([&] { f.get_string("test.f32"); }, {"metadata 'test.f32' is a f32, not a string"});
  expect_error([&] { f.get_float("test.bool"); }, {"'test.bool' is a bool, not a float"});
  expect_error([&] { f.get_bool("test.u8"); }, {"'test.u8' is a u8, not a bool"});
  expect_error([&] { f.get_int_array("test.array_string"); }, {"'test.array_string' is an array of string, not an array of integers"});
  expect_error([&] { f.get_string_array("test.array_nested"); }, {"is an array of array, not an array of strings"});
  expect_error([&] { f.get_float_array("test.i8"); }, {"'test.i8' is a i8, not an array of floats"});
  expect_error([&] { f.value("missing.key"); }, {"every_type.gguf: no metadata key 'missing.key'"});
}

// Every type rlx dequantizes, against the package's quants.dequantize: the same f32 bits.
BOOST_AUTO_TEST_CASE(every_type_dequantizes_bit_for_bit) {
  io::GgufFile f(gguf_data("every_type.gguf").string());
  const std::vector<std::pair<std::string, std::string>> want = {
      {"f32", "F32"},   {"f16", "F16"},   {"bf16", "BF16"}, {"q8_0", "Q8_0"}, {"q4_0", "Q4_0"},
      {"q4_1", "Q4_1"}, {"q5_0", "Q5_0"}, {"q5_1", "Q5_1"}, {"q4_k", "Q4_K"}, {"q5_k", "Q5_K"},
      {"q6_k", "Q6_K"}, {"q8_0_rank3", "Q8_0"}, {"f32_rank1", "F32"}};
  BOOST_TEST_REQUIRE(f.tensors().size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const io::GgufTensor& t = f.tensors()[i];
    BOOST_TEST(t.name == want[i].first);
    BOOST_TEST(io::ggml_type_name(t.type) == want[i].second);
    BOOST_TEST(t.offset % 32 == 0);
    const Tensor expect = io::read_npy(gguf_data(t.name + ".npy").string());
    const Tensor got = f.dequantize(t.name);
    BOOST_TEST((got.dtype() == DType::F32));
    BOOST_TEST(got.shape() == expect.shape(), boost::test_tools::per_element());
    BOOST_TEST(t.shape == expect.shape(), t.name << ": the shape in rlx order");
    BOOST_TEST(float_bits_of(got) == float_bits_of(expect), t.name << ": dequantized bits differ");
    BOOST_TEST(f.bytes(t.name).size() == size_t(t.nbytes));
  }
  // The file lists dims fastest-varying first; rlx's shape is their reverse.
  BOOST_TEST(f.tensor_info("q8_0_rank3").dims == std::vector<int64_t>({32, 3, 2}), boost::test_tools::per_element());
  BOOST_TEST(f.tensor_info("q8_0_rank3").shape == Shape({2, 3, 32}), boost::test_tools::per_element());
  BOOST_TEST(f.tensor_info("q4_k").nbytes == 4 * 144);

  // F32, F16 and BF16 also read in their own dtype; the conversion to f32 is exact.
  BOOST_TEST((f.tensor("f16").dtype() == DType::F16));
  BOOST_TEST((f.tensor("bf16").dtype() == DType::BF16));
  const Tensor h = f.tensor("f16"), hf = f.dequantize("f16");
  for (int64_t k = 0; k < h.numel(); ++k) BOOST_TEST(float(h.data<f16>()[k]) == hf.data<float>()[k]);
  BOOST_TEST(float_bits_of(f.tensor("f32")) == float_bits_of(f.dequantize("f32")));
  expect_error([&] { f.tensor("q4_0"); }, {"every_type.gguf: tensor 'q4_0' has Q4_0 (2), which has no rlx dtype"});
  // view(): the same values over the file's mapping, no copy.
  for (const char* name : {"f32", "f16", "bf16", "f32_rank1"}) {
    const Tensor v = f.view(name), c = f.tensor(name);
    BOOST_TEST((v.type() == c.type()), name);
    BOOST_TEST(std::memcmp(v.raw(), c.raw(), c.nbytes()) == 0, name);
    BOOST_TEST(v.raw() == static_cast<const void*>(f.bytes(name).data()), name << ": not over the mapping");
  }
  expect_error([&] { f.view("q4_0"); }, {"every_type.gguf: tensor 'q4_0' has Q4_0 (2), which has no rlx dtype"});
  expect_error([&] { f.dequantize("nope"); }, {"every_type.gguf: no tensor 'nope'"});
}

BOOST_AUTO_TEST_CASE(alignment_64) {
  io::GgufFile f(gguf_data("align64.gguf").string());
  BOOST_TEST(f.alignment() == 64u);
  BOOST_TEST(f.get_int("general.alignment") == 64);
  BOOST_TEST(f.data_offset() % 64 == 0);
  for (const io::GgufTensor& t : f.tensors()) BOOST_TEST(t.offset % 64 == 0, t.name);
  const Tensor a = f.dequantize("a");
  BOOST_TEST(std::vector<float>(a.data<float>(), a.data<float>() + 3) == std::vector<float>({0, 1, 2}),
             boost::test_tools::per_element());
  const Tensor c = f.dequantize("c");
  BOOST_TEST(c.shape() == Shape({3, 2}), boost::test_tools::per_element());
  BOOST_TEST(std::vector<float>(c.data<float>(), c.data<float>() + 6) == std::vector<float>({1, 2, 3, 4, 5, 6}),
             boost::test_tools::per_element());
  const Tensor b = f.dequantize("b");
  BOOST_TEST(std::abs(b.data<float>()[0] + 1.0f) < 1e-3f);
  BOOST_TEST(std::abs(b.data<float>()[31] - 1.0f) < 1e-3f);

  // The same tensors written at 32-byte offsets under general.alignment 64 are refused.
  Bytes g = header(1, 1);
  g.str("general.alignment").u32(uint32_t(io::GgufType::U32)).u32(64).info("x", {8}, 0, 32).pad(64).raw(std::string(64, '\0'));
  expect_error([&] { parse(g); }, {"bad.gguf: tensor 'x': offset 32 is not a multiple of the alignment 64"});
}

BOOST_AUTO_TEST_CASE(bad_files_are_refused_naming_the_file) {
  expect_error([&] { io::GgufFile::from_bytes("GGU", "bad.gguf"); }, {"bad.gguf: not a GGUF file"});
  expect_error([&] { io::GgufFile::from_bytes(std::string_view("GGML\x03\0\0\0", 8), "bad.gguf"); }, {"bad.gguf: not a GGUF file"});
  expect_error([&] { parse(header(0, 0, 1)); }, {"bad.gguf: GGUF version 1 is not supported (rlx reads versions 2 and 3)"});
  expect_error([&] { parse(header(0, 0, 7)); }, {"GGUF version 7 is not supported"});
  expect_error([&] { parse(header(0, 0, 0x03000000)); }, {"a big-endian GGUF file"});
  expect_error([&] { io::GgufFile::from_bytes(std::string_view("GGUF\x03\0\0\0\0\0", 10), "bad.gguf"); },
               {"bad.gguf: the tensor count at byte 8 needs 8 bytes but the file ends after 2 more"});
  // Version 2 and an empty file of version 3 read.
  BOOST_TEST(parse(header(0, 0, 2)).version() == 2u);
  BOOST_TEST(parse(header(0, 0)).tensors().empty());

  // Counts and lengths are checked against what is left of the file before anything is allocated.
  expect_error([&] { parse(header(uint64_t(1) << 60, 0)); },
               {"bad.gguf: the tensor count is 1152921504606846976 but the 0 bytes left in the file hold at most 0 tensor infos"});
  expect_error([&] { parse(header(0, uint64_t(1) << 60)); }, {"the metadata count is 1152921504606846976"});
  {
    Bytes g = header(0, 1);
    g.u64(uint64_t(1) << 62).raw("abcdefghijklmn");
    expect_error([&] { parse(g); }, {"bad.gguf: metadata key 0 at byte 32 claims 4611686018427387904 bytes but the file ends after 14 more"});
  }
  {
    Bytes g = header(0, 1);
    g.str("k").u32(uint32_t(io::GgufType::String)).u64(100).raw("short");
    expect_error([&] { parse(g); }, {"metadata 'k' at byte", "claims 100 bytes but the file ends after 5 more"});
  }
  {
    Bytes g = header(0, 1);
    g.str("k").u32(uint32_t(io::GgufType::Array)).u32(uint32_t(io::GgufType::U32)).u64(uint64_t(1) << 61).raw(std::string(20, 'x'));
    expect_error([&] { parse(g); }, {"metadata 'k' element count is 2305843009213693952 but the 20 bytes left in the file hold at most 5"});
  }
  {
    Bytes g = header(0, 1);
    g.str("k").u32(13).u32(0);
    expect_error([&] { parse(g); }, {"bad.gguf: metadata 'k' has value type 13, not one of GGUF's"});
  }
  {
    Bytes g = header(0, 1);
    g.str("k").u32(uint32_t(io::GgufType::Bool)).raw("\x02");
    expect_error([&] { parse(g); }, {"metadata 'k' is a bool holding the byte 2"});
  }
  {
    Bytes g = header(0, 2);
    g.str("k").u32(uint32_t(io::GgufType::U8)).raw("\x01").str("k").u32(uint32_t(io::GgufType::U8)).raw("\x02");
    expect_error([&] { parse(g); }, {"bad.gguf: metadata 'k' appears twice"});
  }
  {
    Bytes g = header(0, 1);
    g.str("deep").u32(uint32_t(io::GgufType::Array));
    for (int k = 0; k < 9; ++k) g.u32(uint32_t(io::GgufType::Array)).u64(1);
    g.u32(uint32_t(io::GgufType::U8)).u64(1).raw("x");
    expect_error([&] { parse(g); }, {"metadata 'deep' element 0", "nests arrays deeper than 8"});
  }
  {
    Bytes g = header(0, 1);
    g.str("general.alignment").u32(uint32_t(io::GgufType::U32)).u32(48);
    expect_error([&] { parse(g); }, {"bad.gguf: general.alignment is 48, not a power of two"});
    Bytes s = header(0, 1);
    s.str("general.alignment").u32(uint32_t(io::GgufType::String)).str("32");
    expect_error([&] { parse(s); }, {"metadata 'general.alignment' is a string, not an integer"});
  }
}

BOOST_AUTO_TEST_CASE(bad_tensor_infos_are_refused_naming_the_tensor) {
  auto file = [](const std::vector<std::pair<std::vector<uint64_t>, std::pair<uint32_t, uint64_t>>>& ts, size_t data) {
    Bytes g = header(ts.size(), 0);
    for (size_t k = 0; k < ts.size(); ++k) g.info("t" + std::to_string(k), ts[k].first, ts[k].second.first, ts[k].second.second);
    g.pad().raw(std::string(data, '\0'));
    return g;
  };
  // A good file of two tensors, then one thing wrong at a time.
  BOOST_TEST(parse(file({{{8}, {0, 0}}, {{32, 2}, {8, 32}}}, 32 + 68)).tensors().size() == 2u);
  expect_error([&] { parse(file({{{1, 1, 1, 1, 1}, {0, 0}}}, 32)); }, {"bad.gguf: tensor 't0': 5 dimensions (GGUF tensors have at most 4)"});
  expect_error([&] { parse(file({{{uint64_t(1) << 31, uint64_t(1) << 31, uint64_t(1) << 31}, {0, 0}}}, 32)); },
               {"bad.gguf: tensor 't0': element count of [2147483648,2147483648,2147483648]", "larger than rlx accepts"});
  expect_error<SizeError>([&] { parse(file({{{~uint64_t(0)}, {0, 0}}}, 32)); }, {"tensor 't0': extent 0: 18446744073709551615"});
  expect_error([&] { parse(file({{{48}, {2, 0}}}, 32)); },
               {"tensor 't0': type Q4_0 packs 32 elements per block but the first (fastest-varying) extent is 48"});
  expect_error([&] { parse(file({{{8}, {0, 16}}}, 64)); }, {"tensor 't0': offset 16 is not a multiple of the alignment 32"});
  expect_error([&] { parse(file({{{8}, {0, 0}}}, 16)); },
               {"tensor 't0': F32 (0)[8] takes 32 bytes from offset 0, past the end of the data section (16 bytes)"});
  expect_error([&] { parse(file({{{8}, {0, 64}}}, 32)); }, {"tensor 't0': offset 64 lies past the end of the data section"});
  {
    Bytes g = header(1, 0);
    g.info("t", {0}, 0, 0);  // an empty tensor, but the file ends before its data section
    expect_error([&] { parse(g); }, {"bad.gguf: the data section starts at byte 64 (after the header, aligned to 32), past the end of the file (57 bytes)"});
  }
  expect_error([&] { parse(file({{{16}, {0, 0}}, {{8}, {0, 32}}}, 64)); },
               {"bad.gguf: tensors 't0' [0, 64) and 't1' [32, 64) overlap in the data section"});
  expect_error([&] { parse(file({{{8}, {0, 0}}, {{8}, {0, 0}}}, 32)); }, {"tensors 't0' [0, 32) and 't1' [0, 32) overlap"});
  {
    Bytes g = header(2, 0);
    g.info("w", {8}, 0, 0).info("w", {8}, 0, 32).pad().raw(std::string(64, '\0'));
    expect_error([&] { parse(g); }, {"bad.gguf: tensor 'w' appears twice"});
  }
  // A type ggml does not define is listed; its data cannot be read.
  const io::GgufFile u = parse(file({{{8}, {99, 0}}, {{256}, {10, 32}}}, 32 + 84));
  BOOST_TEST(u.tensors()[0].type == 99u);
  BOOST_TEST(u.tensors()[0].nbytes == -1);
  BOOST_TEST(io::ggml_type_name(99) == nullptr);
  expect_error([&] { u.dequantize("t0"); }, {"bad.gguf: tensor 't0' has ggml type 99, which dequantize() does not decode"});
  expect_error([&] { u.bytes("t0"); }, {"bad.gguf: tensor 't0' has ggml type 99, a type rlx does not know the size of"});
  // A type ggml defines but rlx does not decode (Q2_K): its bytes read, dequantize names it.
  BOOST_TEST(u.bytes("t1").size() == 84u);
  expect_error([&] { u.dequantize("t1"); }, {"tensor 't1' has Q2_K (10), which dequantize() does not decode"});
}

// Every prefix of a valid file and byte changes all through its header either read (then
// every tensor dequantizes) or end in an InputError: nothing else, no crash
// (tests/sanitize.sh runs this under ASan/UBSan).
BOOST_AUTO_TEST_CASE(truncations_and_mutations_are_errors_not_crashes) {
  test::Outcomes o;
  auto read_all = [](const std::string& bytes, const std::string& what) {
    const io::GgufFile f = io::GgufFile::from_bytes(bytes, what);
    for (const auto& [k, v] : f.metadata()) (void)v;
    for (const io::GgufTensor& t : f.tensors()) {
      BOOST_TEST((t.nbytes < 0 || f.data_offset() + t.offset + t.nbytes <= int64_t(bytes.size())), what);
      f.dequantize(t.name);  // an undecoded type is an InputError
    }
  };
  const std::string small = slurp(gguf_data("align64.gguf"));
  const io::GgufFile whole = io::GgufFile::from_bytes(small, "align64.gguf");
  int64_t data_end = 0;  // the padding after the last tensor may be cut
  for (const io::GgufTensor& t : whole.tensors()) data_end = std::max(data_end, whole.data_offset() + t.offset + t.nbytes);
  for (size_t len = 0; len < small.size(); ++len)
    o.attempt("prefix " + std::to_string(len), [&] { read_all(small.substr(0, len), "prefix"); });
  BOOST_TEST(o.read == int(small.size()) - int(data_end), "only prefixes that hold every tensor read");
  const std::string good = slurp(gguf_data("every_type.gguf"));
  const size_t header_end = size_t(io::GgufFile::from_bytes(good, "good").data_offset());
  for (size_t i = 0; i < header_end; ++i)
    for (unsigned char ch : {0x00, 0x01, 0x02, 0x09, 0x0c, 0x20, 0x7f, 0x80, 0xff}) {
      if (static_cast<unsigned char>(good[i]) == ch) continue;
      std::string m = good;
      m[i] = char(ch);
      const std::string what = "byte " + std::to_string(i) + " -> " + std::to_string(ch);
      o.attempt(what, [&] { read_all(m, what); });
    }
  BOOST_TEST(o.read > 0);
  BOOST_TEST(o.refused > 0);
}

BOOST_AUTO_TEST_SUITE_END()
