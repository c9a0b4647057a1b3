// safetensors (src/io/safetensors.hpp): files of Hugging Face's own writer read value for
// value (tests/io/data, made by make_safetensors.py there), round trips of every rlx dtype,
// every class of bad file refused with a message naming the file and the tensor, and
// truncations and mutations that end in an InputError, never a crash.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/safetensors.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("rlx_safetensors_test_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

fs::path scratch(const std::string& name) {
  static Scratch s;
  return s.dir / name;
}

fs::path data_file(const std::string& name) { return fs::path(RLX_IO_DATA) / name; }

void write_file(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A safetensors file: the 8-byte little-endian length, the header text, the data.
std::string st_file(const std::string& header, const std::string& data = "") {
  std::string r(8, '\0');
  for (int i = 0; i < 8; ++i) r[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return r + header + data;
}

// One tensor entry of a header.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, int64_t begin, int64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

template <class T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

template <class T>
std::vector<T> raw_values(std::span<const std::byte> b) {
  std::vector<T> r(b.size() / sizeof(T));
  std::memcpy(r.data(), b.data(), r.size() * sizeof(T));
  return r;
}

template <class T>
std::vector<uint16_t> bits16(const Tensor& t) {
  std::vector<uint16_t> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(t.data<T>()[i].bits);
  return r;
}

uint32_t bits_of(float f) { return float_bits(f); }

Tensor random_tensor(DType t, Shape s, uint64_t seed) {
  Tensor r = Tensor::empty(t, std::move(s));
  auto* b = static_cast<uint8_t*>(r.raw());
  for (size_t i = 0; i < r.nbytes(); ++i) b[i] = uint8_t(rng_bits(seed, i));  // every bit pattern, NaNs included
  if (t == DType::Bool)
    for (size_t i = 0; i < r.nbytes(); ++i) b[i] &= 1;
  return r;
}

// What `read` throws, as an InputError; fails the test when it throws nothing.
template <class F>
std::string error_of(F&& read) {
  try {
    read();
  } catch (const InputError& e) {
    return e.what();
  }
  BOOST_ERROR("no error");
  return {};
}

bool has(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

// every_dtype.safetensors holds one tensor per dtype of the format, written by
// safetensors.serialize_file: the values are make_safetensors.py's, bit for bit.
BOOST_AUTO_TEST_CASE(files_of_the_reference_writer_read_value_for_value) {
  io::SafetensorsFile f(data_file("every_dtype.safetensors").string());
  BOOST_TEST(f.metadata().size() == 2u);
  BOOST_TEST(f.metadata().at("format") == "np");
  BOOST_TEST(f.metadata().at("made_by") == "tests/io/data/make_safetensors.py");
  BOOST_TEST(f.data_offset() % 8 == 0, "the reference writer pads the header to 8 bytes");
  // The header's order, which the reference writer sorts by alignment, then name.
  std::vector<std::string> names;
  for (const io::SafetensorsEntry& e : f.tensors()) names.push_back(e.name);
  const std::vector<std::string> want = {"u64", "i64", "f64", "c64", "f32",     "u32", "i32", "bf16",
                                         "f16", "u16", "i16", "f8_e4m3", "i8", "u8",  "bool"};
  BOOST_TEST(names == want, boost::test_tools::per_element());
  BOOST_TEST(f.entry("bf16").dtype == "BF16");
  BOOST_TEST(f.entry("bf16").shape == Shape({2, 3}), boost::test_tools::per_element());
  BOOST_TEST(f.entry("bf16").end - f.entry("bf16").begin == 12);

  Tensor b = f.tensor("bool");
  BOOST_TEST(b.type().str() == "bool[5]");
  BOOST_TEST(raw_values<uint8_t>(f.bytes("bool")) == std::vector<uint8_t>({1, 0, 1, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(values<uint8_t>(f.tensor("u8")) == std::vector<uint8_t>({0, 1, 2, 127, 128, 255}), boost::test_tools::per_element());
  BOOST_TEST(f.tensor("u8").shape() == Shape({2, 3}), boost::test_tools::per_element());
  BOOST_TEST(values<int8_t>(f.tensor("i8")) == std::vector<int8_t>({-128, -1, 0, 1, 2, 127}), boost::test_tools::per_element());
  BOOST_TEST(values<int32_t>(f.tensor("i32")) ==
                 std::vector<int32_t>({std::numeric_limits<int32_t>::min(), -1, 0, std::numeric_limits<int32_t>::max()}),
             boost::test_tools::per_element());
  BOOST_TEST(values<int64_t>(f.tensor("i64")) ==
                 std::vector<int64_t>({std::numeric_limits<int64_t>::min(), 0, std::numeric_limits<int64_t>::max()}),
             boost::test_tools::per_element());

  // f16: 0, -0, 1, -2.5, 65504 (largest), 2^-24 (smallest subnormal), inf, NaN; exact in f32.
  Tensor h = f.tensor("f16");
  BOOST_TEST((h.dtype() == DType::F16));
  BOOST_TEST(bits16<f16>(h) == std::vector<uint16_t>({0x0000, 0x8000, 0x3c00, 0xc100, 0x7bff, 0x0001, 0x7c00, 0x7e00}),
             boost::test_tools::per_element());
  const float hf[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), INFINITY};
  for (int i = 0; i < 7; ++i) BOOST_TEST(bits_of(float(h.data<f16>()[i])) == bits_of(hf[i]), "f16 element " << i);
  BOOST_TEST(std::isnan(float(h.data<f16>()[7])));

  // bf16: 1, -2.5, the largest finite, the smallest subnormal, -inf, NaN.
  Tensor bf = f.tensor("bf16");
  BOOST_TEST((bf.dtype() == DType::BF16));
  BOOST_TEST(bits16<bf16>(bf) == std::vector<uint16_t>({0x3f80, 0xc020, 0x7f7f, 0x0001, 0xff80, 0x7fc0}),
             boost::test_tools::per_element());
  const float bff[] = {1.0f, -2.5f, 3.3895313892515355e38f, std::ldexp(1.0f, -133), -INFINITY};
  for (int i = 0; i < 5; ++i) BOOST_TEST(bits_of(float(bf.data<bf16>()[i])) == bits_of(bff[i]), "bf16 element " << i);
  BOOST_TEST(std::isnan(float(bf.data<bf16>()[5])));

  Tensor s = f.tensor("f32");
  const float sf[] = {0.5f, -1.25f, std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), -0.0f, 1.0f / 3.0f};
  for (int i = 0; i < 6; ++i) BOOST_TEST(bits_of(s.data<float>()[i]) == bits_of(sf[i]), "f32 element " << i);
  Tensor d = f.tensor("f64");
  const double df[] = {0.1, -1e300, std::numeric_limits<double>::denorm_min(), std::numbers::pi};
  for (int i = 0; i < 4; ++i) BOOST_TEST(d.data<double>()[i] == df[i], "f64 element " << i);
  BOOST_TEST(values<c64>(f.tensor("c64")) == std::vector<c64>({c64(1, 2), c64(-0.5f, -0.25f)}), boost::test_tools::per_element());

  // Dtypes rlx has no type for: tensor() says so, bytes() reads them.
  for (const char* n : {"i16", "u16", "u32", "u64", "f8_e4m3"}) {
    const std::string m = error_of([&] { f.tensor(n); });
    BOOST_TEST(has(m, "every_dtype.safetensors: tensor '" + std::string(n) + "' has dtype " + f.entry(n).dtype + ", which rlx has no type for"), m);
  }
  BOOST_TEST(raw_values<int16_t>(f.bytes("i16")) == std::vector<int16_t>({-32768, -1, 0, 32767}), boost::test_tools::per_element());
  BOOST_TEST(raw_values<uint16_t>(f.bytes("u16")) == std::vector<uint16_t>({0, 1, 65535}), boost::test_tools::per_element());
  BOOST_TEST(raw_values<uint32_t>(f.bytes("u32")) == std::vector<uint32_t>({0, 4294967295u}), boost::test_tools::per_element());
  BOOST_TEST(raw_values<uint64_t>(f.bytes("u64")) == std::vector<uint64_t>({0, ~uint64_t(0)}), boost::test_tools::per_element());
  BOOST_TEST(raw_values<uint8_t>(f.bytes("f8_e4m3")) == std::vector<uint8_t>({0x00, 0x38, 0x7e, 0xff}), boost::test_tools::per_element());
  BOOST_TEST(has(error_of([&] { f.tensor("missing"); }), "every_dtype.safetensors: no tensor 'missing'"));

  // Through the package's NumPy front end: a rank-0 tensor, an empty one, metadata with a
  // newline and a non-ASCII character.
  io::SafetensorsFile g(data_file("numpy_api.safetensors").string());
  BOOST_TEST(g.metadata().at("step") == "100");
  BOOST_TEST(g.metadata().at("note") == "line 1\nline 2 \xc3\xa9");
  BOOST_TEST(g.tensor("scalar").type().str() == "f32[]");
  BOOST_TEST(g.tensor("scalar").data<float>()[0] == 2.5f);
  BOOST_TEST(g.tensor("empty").type().str() == "f32[0,3]");
  BOOST_TEST(values<int64_t>(g.tensor("counts")) == std::vector<int64_t>({0, 1, 2, 3, 4, 5}), boost::test_tools::per_element());
  Tensor w = g.tensor("weight");
  BOOST_TEST(w.type().str() == "f32[3,4]");
  for (int i = 0; i < 12; ++i) BOOST_TEST(w.data<float>()[i] == (float(i) - 5.5f) / 4, "weight element " << i);
}

// Every rlx dtype safetensors can hold, at rank 0, 1, 2 and empty, with metadata: written
// and read back to the same names (in the given order), types and bytes; every tensor's data
// starts at a multiple of its element size.
BOOST_AUTO_TEST_CASE(round_trip_every_dtype) {
  std::vector<std::pair<std::string, Tensor>> ts;
  uint64_t seed = 1;
  for (DType t : kAllDTypes) {
    if (t == DType::I4) continue;
    for (Shape s : {Shape{}, Shape{7}, Shape{3, 5}, Shape{2, 0, 4}})
      ts.emplace_back(std::string("layer.") + dtype_name(t) + "." + std::to_string(s.size()), random_tensor(t, s, seed++));
  }
  // A strided view is written as its elements in row-major order.
  Tensor base = random_tensor(DType::F32, {3, 4}, 99);
  ts.emplace_back("transposed", base.with_strides({4, 3}, {1, 4}, 0));
  const std::map<std::string, std::string> meta = {{"step", "12"}, {"config", "{\"lr\": 0.1}\n"}};
  const fs::path p = scratch("round.safetensors");
  io::write_safetensors(p.string(), ts, meta);

  io::SafetensorsFile f(p.string());
  BOOST_TEST((f.metadata() == meta));
  BOOST_TEST(f.data_offset() % 8 == 0);
  BOOST_REQUIRE_EQUAL(f.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const io::SafetensorsEntry& e = f.tensors()[i];
    const Tensor want = ts[i].second.contiguous();
    BOOST_TEST(e.name == ts[i].first);
    BOOST_TEST(e.dtype == io::safetensors_dtype_name(want.dtype()));
    BOOST_TEST((f.data_offset() + e.begin) % int64_t(dtype_size(want.dtype())) == 0, e.name << " is not aligned");
    const Tensor got = f.tensor(e.name);
    BOOST_TEST((got.type() == want.type()), e.name);
    BOOST_TEST(std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0, e.name);
  }
  BOOST_TEST(f.tensor("transposed").data<float>()[1] == base.data<float>()[4]);

  // A file of the reference writer, read and written again, reads back the same.
  io::SafetensorsFile ref(data_file("numpy_api.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> again;
  for (const io::SafetensorsEntry& e : ref.tensors()) again.emplace_back(e.name, ref.tensor(e.name));
  io::write_safetensors(scratch("again.safetensors").string(), again, ref.metadata());
  io::SafetensorsFile back(scratch("again.safetensors").string());
  BOOST_TEST((back.metadata() == ref.metadata()));
  for (const io::SafetensorsEntry& e : ref.tensors()) {
    BOOST_TEST(back.entry(e.name).shape == e.shape, boost::test_tools::per_element());
    const auto a = ref.bytes(e.name), b = back.bytes(e.name);
    BOOST_TEST((a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0), e.name);
  }

  // No tensors at all is a valid file.
  io::write_safetensors(scratch("none.safetensors").string(), {});
  BOOST_TEST(io::SafetensorsFile(scratch("none.safetensors").string()).tensors().empty());
  BOOST_TEST(read_file(scratch("none.safetensors")) == st_file("{}      "));
}

// view() reads the mapping in place: the same values as tensor(), no copy when aligned, the
// mapping alive after the file object is gone, writes private to the process; misaligned
// data and bad BOOL bytes take tensor()'s path and errors.
BOOST_AUTO_TEST_CASE(views_read_the_mapping_in_place) {
  const Tensor w = random_tensor(DType::F32, {64, 33}, 7), h = random_tensor(DType::BF16, {5, 3}, 8);
  const fs::path p = scratch("view.safetensors");
  io::write_safetensors(p.string(), {{"w", w}, {"h", h}, {"flag", random_tensor(DType::Bool, {9}, 9)}});
  const std::string before = read_file(p);
  Tensor v, vh;
  {
    io::SafetensorsFile f(p.string());
    v = f.view("w");
    vh = f.view("h");
    BOOST_TEST(static_cast<const void*>(v.raw()) == static_cast<const void*>(f.bytes("w").data()));  // no copy
    BOOST_TEST(static_cast<const void*>(vh.raw()) == static_cast<const void*>(f.bytes("h").data()));
    BOOST_TEST((v.type() == w.type()));
    BOOST_TEST((f.view("flag").dtype() == DType::Bool));
  }
  // The file object is gone; the views keep the mapping.
  BOOST_TEST(std::memcmp(v.raw(), w.raw(), w.nbytes()) == 0);
  BOOST_TEST(bits16<bf16>(vh) == bits16<bf16>(h), boost::test_tools::per_element());
  const Tensor part = v.reshape({33 * 64}).with_strides({10}, {1}, 100);  // a view of the view
  BOOST_TEST(part.data<float>()[3] == w.data<float>()[103]);
  v.data<float>()[0] = 12345.0f;  // private: the process sees it, the file does not
  BOOST_TEST(v.data<float>()[0] == 12345.0f);
  BOOST_TEST(read_file(p) == before);
  BOOST_TEST(io::SafetensorsFile(p.string()).tensor("w").data<float>()[0] == w.data<float>()[0]);

  // An f32 tensor at an odd offset cannot be viewed: it is copied, values intact.
  std::string data(1 + 8, '\0');
  const float vals[2] = {1.5f, -2.25f};
  std::memcpy(data.data() + 1, vals, 8);
  const fs::path odd = scratch("odd.safetensors");
  std::string header = "{" + entry("pad", "U8", "[1]", 0, 1) + "," + entry("x", "F32", "[2]", 1, 9) + "}";
  header.resize((header.size() + 7) / 8 * 8, ' ');  // the data section 8-aligned: x at an odd address
  write_file(odd, st_file(header, data));
  io::SafetensorsFile f(odd.string());
  const Tensor x = f.view("x");
  BOOST_TEST(static_cast<const void*>(x.raw()) != static_cast<const void*>(f.bytes("x").data()));
  BOOST_TEST(x.data<float>()[0] == 1.5f);
  BOOST_TEST(x.data<float>()[1] == -2.25f);

  // A BOOL byte that is not 0 or 1 is refused by view() as by tensor().
  const fs::path bad = scratch("badbool.safetensors");
  write_file(bad, st_file("{" + entry("b", "BOOL", "[2]", 0, 2) + "}", std::string("\x01\x07", 2)));
  BOOST_TEST(has(error_of([&] { io::SafetensorsFile(bad.string()).view("b"); }), "BOOL element 1"));
}

// What the writer refuses, before anything is written.
BOOST_AUTO_TEST_CASE(writer_refuses_what_the_format_cannot_hold) {
  const Tensor x = Tensor::zeros(DType::F32, {2});
  const fs::path p = scratch("refused.safetensors");
  struct Case {
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> meta;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{{"w", Tensor::zeros(DType::I4, {4})}}, {}, "tensor 'w': dtype i4 has no safetensors equivalent"},
      {{{"w", x}, {"b", x}, {"w", x}}, {}, "tensor 'w' is given twice"},
      {{{"", x}}, {}, "an empty tensor name"},
      {{{"__metadata__", x}}, {}, "the name is reserved"},
      {{{"bad\xff", x}}, {}, "tensor name 'bad\\xff' is not valid UTF-8"},
      {{{"tab\there", x}}, {}, "tensor name 'tab\\x09here' holds control characters"},
      {{{"w", Tensor()}}, {}, "tensor 'w' is an undefined tensor"},
      {{{"w", x}}, {{"k", "\xc3"}}, "metadata 'k' is not valid UTF-8"},
  };
  for (const Case& c : cases) {
    const std::string m = error_of([&] { io::write_safetensors(p.string(), c.tensors, c.meta); });
    BOOST_TEST(has(m, p.string() + ": "), m);
    BOOST_TEST(has(m, c.expect), m);
    BOOST_TEST(!fs::exists(p), c.expect << ": a file was written");
  }
}

// Every class of bad file: an InputError naming the file and (where there is one) the
// tensor, read from a mapped file and from memory alike.
BOOST_AUTO_TEST_CASE(bad_files_are_refused_with_the_file_and_the_tensor) {
  const std::string u8x4 = entry("a", "U8", "[4]", 0, 4);
  std::string rank_65 = "[1";
  for (int i = 1; i < 65; ++i) rank_65 += ",1";
  rank_65 += "]";
  struct Case {
    const char* name;
    std::string bytes;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"empty", "", "0 bytes, fewer than the 8-byte header length"},
      {"truncated", std::string("\x10\x00\x00", 3), "3 bytes, fewer than the 8-byte header length"},
      {"length_past_end", std::string("\x03\0\0\0\0\0\0\0", 8) + "{}", "header length 3 (the first 8 bytes) runs past the end of the file (10 bytes)"},
      {"length_2_64", std::string(8, '\xff') + "{}", "header length 18446744073709551615 (the first 8 bytes) runs past the end"},
      {"bad_json", st_file("{\"a\":{\"dtype\":"), "bad_json.safetensors:1: safetensors header JSON: parse error"},
      {"bad_json_line_3", st_file("{\n\n x}"), "bad_json_line_3.safetensors:3: safetensors header JSON"},
      {"not_utf8", st_file("{\"a\xff\":1}"), "safetensors header JSON: parse error"},
      {"trailing_nul", st_file("{}" + std::string(1, '\0') + "junk"), "trailing_nul.safetensors:1: safetensors header JSON: a NUL byte at header byte 2"},
      {"huge_number", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1e999],\"data_offsets\":[0,0]}}"), "safetensors header JSON"},
      {"not_object", st_file("[1, 2]"), "the header is a JSON array, not a JSON object"},
      {"entry_not_object", st_file("{\"a\":5}"), "tensor 'a': its entry is the JSON number 5, not an object"},
      {"no_dtype", st_file("{\"a\":{\"shape\":[],\"data_offsets\":[0,0]}}"), "tensor 'a': no \"dtype\""},
      {"no_shape", st_file("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,0]}}"), "tensor 'a': no \"shape\""},
      {"no_offsets", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[]}}"), "tensor 'a': no \"data_offsets\""},
      {"dtype_number", st_file("{\"a\":{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,4]}}", "abcd"), "tensor 'a': dtype is the JSON number 7, not a string"},
      {"unknown_dtype", st_file("{" + entry("w", "Q4_0", "[4]", 0, 4) + "}", "abcd"), "tensor 'w': unknown dtype 'Q4_0' (safetensors dtypes: BOOL U8"},
      {"lowercase_dtype", st_file("{" + entry("w", "f32", "[1]", 0, 4) + "}", "abcd"), "tensor 'w': unknown dtype 'f32'"},
      {"shape_string", st_file("{" + entry("a", "U8", "\"4\"", 0, 4) + "}", "abcd"), "tensor 'a': shape is the JSON string \"4\", not an array"},
      {"negative_extent", st_file("{" + entry("a", "U8", "[-4]", 0, 4) + "}", "abcd"), "tensor 'a': shape extent 0 is negative (-4)"},
      {"float_extent", st_file("{" + entry("a", "U8", "[2,2.0]", 0, 4) + "}", "abcd"), "tensor 'a': shape extent 1 is the JSON number 2.0, not a non-negative integer"},
      {"extent_past_2_62", st_file("{" + entry("a", "U8", "[9223372036854775807]", 0, 4) + "}", "abcd"), "tensor 'a': shape extent 0: 9223372036854775807 is larger than rlx accepts"},
      {"overflow_shape", st_file("{" + entry("a", "F32", "[4294967296,4294967296,4]", 0, 4) + "}", "abcd"), "tensor 'a': element count of F32[4294967296,4294967296,4]: 4294967296 * 4294967296 is larger than rlx accepts"},
      {"overflow_bits", st_file("{" + entry("a", "F64", "[1152921504606846976]", 0, 4) + "}", "abcd"), "tensor 'a': bit count of F64[1152921504606846976]"},
      {"rank_65", st_file("{" + entry("a", "U8", rank_65, 0, 1) + "}", "a"), "tensor 'a': 'shape' has more than 64 elements"},
      {"claims_2_40_bytes", st_file("{" + entry("a", "F32", "[1099511627776]", 0, 4) + "}", "abcd"), "tensor 'a': F32[1099511627776] takes 4398046511104 bytes but data_offsets [0, 4] hold 4"},
      {"size_mismatch", st_file("{" + entry("a", "F32", "[2]", 0, 4) + "}", "abcd"), "tensor 'a': F32[2] takes 8 bytes but data_offsets [0, 4] hold 4"},
      {"half_byte", st_file("{" + entry("a", "F4", "[3]", 0, 2) + "}", "ab"), "tensor 'a': F4[3] takes 12 bits, not a whole number of bytes"},
      {"offsets_short", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0]}}"), "tensor 'a': data_offsets is an array of 1 elements, not [begin, end]"},
      {"offsets_string", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":\"0,0\"}}"), "tensor 'a': data_offsets is the JSON string \"0,0\", not [begin, end]"},
      {"offsets_backwards", st_file("{" + entry("a", "U8", "[4]", 4, 0) + "}", "abcd"), "tensor 'a': data_offsets [4, 0] end before they begin"},
      {"offsets_past_end", st_file("{" + entry("a", "U8", "[400]", 0, 400) + "}", "abcd"), "tensor 'a': data_offsets [0, 400] run past the end of the data section (4 bytes after the header)"},
      {"overlap", st_file("{" + entry("a", "U8", "[8]", 0, 8) + "," + entry("b", "U8", "[8]", 4, 12) + "}", std::string(12, 'x')), "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
      {"empty_inside_another", st_file("{" + entry("a", "U8", "[8]", 0, 8) + "," + entry("z", "U8", "[0]", 3, 3) + "}", std::string(8, 'x')), "tensors 'a' [0, 8) and 'z' [3, 3) overlap"},
      {"hole", st_file("{" + u8x4 + "," + entry("b", "U8", "[4]", 6, 10) + "}", std::string(10, 'x')), "bytes [4, 6) of the data section belong to no tensor (a hole before 'b')"},
      {"hole_at_start", st_file("{" + entry("a", "U8", "[4]", 2, 6) + "}", std::string(6, 'x')), "bytes [0, 2) of the data section belong to no tensor (a hole before 'a')"},
      {"trailing_data", st_file("{" + u8x4 + "}", "abcdef"), "bytes [4, 6) of the data section belong to no tensor (after the last one)"},
      {"data_without_tensors", st_file("{}", "ab"), "bytes [0, 2) of the data section belong to no tensor (the header lists none)"},
      {"duplicate_name", st_file("{" + u8x4 + "," + u8x4 + "}", "abcd"), "tensor 'a' appears twice in the header"},
      {"duplicate_field", st_file("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "abcd"), "tensor 'a': key 'dtype' appears twice"},
      {"duplicate_metadata_key", st_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"), "__metadata__: key 'k' appears twice"},
      {"duplicate_metadata", st_file("{\"__metadata__\":{},\"__metadata__\":{}}"), "__metadata__ appears twice in the header"},
      {"metadata_not_object", st_file("{\"__metadata__\":[\"k\"]}"), "__metadata__ is a JSON array, not an object of strings"},
      {"metadata_number", st_file("{\"__metadata__\":{\"k\":1}}"), "metadata 'k' is the JSON number 1, not a string"},
      {"empty_name", st_file("{" + entry("", "U8", "[4]", 0, 4) + "}", "abcd"), "an empty tensor name"},
      {"control_name", st_file("{" + entry("a\\u0000b", "U8", "[4]", 0, 4) + "}", "abcd"), "tensor name 'a\\x00b' holds control characters"},
      {"nested_shape", st_file("{" + entry("a", "U8", "[[4]]", 0, 4) + "}", "abcd"), "header nests deeper than a safetensors header does (inside tensor 'a': 'shape')"},
      {"deep_brackets", st_file(std::string(100000, '[')), "header nests deeper than a safetensors header does (inside the header)"},
  };
  for (const Case& c : cases) {
    const fs::path p = scratch(std::string(c.name) + ".safetensors");
    write_file(p, c.bytes);
    const std::string from_file = error_of([&] { io::SafetensorsFile f(p.string()); });
    BOOST_TEST(has(from_file, p.string()), c.name << ": " << from_file);
    BOOST_TEST(has(from_file, c.expect), c.name << ": " << from_file);
    const std::string from_memory = error_of([&] { io::SafetensorsFile::from_bytes(c.bytes, p.string()); });
    BOOST_TEST(from_memory == from_file, c.name);
  }
  // Malformed JSON is a ParseError (file:line), the rest InputErrors.
  BOOST_CHECK_THROW(io::SafetensorsFile::from_bytes(st_file("{\"a\":"), "x"), ParseError);

  // A bool element that is not 0 or 1 is refused when the tensor is read.
  const io::SafetensorsFile b = io::SafetensorsFile::from_bytes(st_file("{" + entry("flags", "BOOL", "[3]", 0, 3) + "}", std::string("\x01\x02\x00", 3)), "flags.safetensors");
  BOOST_TEST(has(error_of([&] { b.tensor("flags"); }), "flags.safetensors: tensor 'flags': BOOL element 1 holds the byte 2 (a bool is 0 or 1)"));

  // Sub-byte dtypes read when they fill whole bytes; folders and missing files are named.
  const io::SafetensorsFile f4 = io::SafetensorsFile::from_bytes(st_file("{" + entry("q", "F4", "[2,3]", 0, 3) + "}", "abc"), "f4");
  BOOST_TEST(f4.bytes("q").size() == 3u);
  BOOST_TEST(has(error_of([&] { io::SafetensorsFile f(scratch("").string()); }), "not a regular file"));
  BOOST_TEST(has(error_of([&] { io::SafetensorsFile f(scratch("missing.safetensors").string()); }), "missing.safetensors: cannot open for reading"));
}

// The header length is checked against the reference's 100 MB limit before the JSON is
// looked at (a sparse file: nothing is written to disk).
BOOST_AUTO_TEST_CASE(header_longer_than_100_mb_is_refused_unread) {
  const fs::path p = scratch("big_header.safetensors");
  const uint64_t n = 100'000'001;
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[size_t(i)] = char((n >> (8 * i)) & 0xff);
  write_file(p, length);
  fs::resize_file(p, 8 + 100'000'001 + 16);
  const std::string m = error_of([&] { io::SafetensorsFile f(p.string()); });
  BOOST_TEST(has(m, "big_header.safetensors: header length 100000001 is larger than the 100000000 bytes"), m);
}

// Every prefix of a valid file and single-byte changes all through its header either read
// (then every tensor lies inside the file) or end in an InputError: nothing else, no crash
// (tests/sanitize.sh runs this under ASan/UBSan).
BOOST_AUTO_TEST_CASE(truncations_and_mutations_are_errors_not_crashes) {
  const std::string good = read_file(data_file("numpy_api.safetensors"));
  const size_t header = size_t(io::SafetensorsFile::from_bytes(good, "good").data_offset());
  int read = 0, refused = 0;
  auto attempt = [&](const std::string& bytes, const std::string& what) {
    try {
      const io::SafetensorsFile f = io::SafetensorsFile::from_bytes(bytes, what);
      for (const io::SafetensorsEntry& e : f.tensors()) {
        BOOST_TEST(f.data_offset() + e.end <= int64_t(bytes.size()), what);
        if (io::dtype_from_safetensors(e.dtype)) BOOST_TEST(f.tensor(e.name).nbytes() == size_t(e.end - e.begin));
      }
      ++read;
    } catch (const InputError&) {
      ++refused;
    } catch (const std::exception& e) {
      BOOST_ERROR(what << ": not an InputError: " << e.what());
    }
  };
  for (size_t len = 0; len < good.size(); ++len) attempt(good.substr(0, len), "prefix " + std::to_string(len));
  for (size_t i = 0; i < header; ++i)
    for (char ch : {'\0', '\x01', '\x7f', '\xff', ' ', '"', '{', '}', '[', ']', ':', ',', '-', '0', '9', 'e', 'F', '\\'}) {
      std::string m = good;
      m[i] = ch;
      attempt(m, "byte " + std::to_string(i) + " -> " + std::to_string(int(static_cast<unsigned char>(ch))));
    }
  BOOST_TEST(read > 0);
  BOOST_TEST(refused > 0);
}

BOOST_AUTO_TEST_SUITE_END()
