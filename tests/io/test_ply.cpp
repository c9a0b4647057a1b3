// Gaussian scenes as PLY (src/io/ply.hpp): files written here byte by byte in the standard
// 3DGS layout read into splat_render's layout (f_rest channel-major -> sh[n, k, c]); ascii,
// big-endian, reordered, extra and missing-normal files read the same; the writer's files
// read back bit for bit and hold the standard layout; every class of bad file is refused
// with a message naming the file and the fault; truncations and mutations are errors, never
// crashes.
#include <unistd.h>

#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "io/ply.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/errors.hpp"
#include "tests/support/seed.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  static const fs::path dir = test::scratch_dir("rlx_ply_test_");
  return dir / name;
}

void write_file(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// One Gaussian's values by property name, as a 3DGS file holds them.
using Vertex = std::vector<std::pair<std::string, double>>;

// The standard property order (x y z nx ny nz f_dc f_rest opacity scale rot) for degree d.
std::vector<std::string> standard_names(int degree) {
  std::vector<std::string> r = {"x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"};
  const int rest = 3 * ((degree + 1) * (degree + 1) - 1);
  for (int i = 0; i < rest; ++i) r.push_back("f_rest_" + std::to_string(i));
  for (const char* n : {"opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"}) r.push_back(n);
  return r;
}

// A random Gaussian with every standard property (distinct values, so a swap shows).
Vertex random_vertex(std::mt19937_64& rng, int degree) {
  std::uniform_real_distribution<double> u(-3, 3);
  Vertex v;
  for (const std::string& n : standard_names(degree)) v.emplace_back(n, double(float(u(rng))));
  return v;
}

struct Prop {
  std::string type, name;
};

std::string header(const std::string& format, int64_t n, const std::vector<Prop>& props, const std::string& extra = "") {
  std::string h = "ply\nformat " + format + " 1.0\ncomment made by test_ply\nelement vertex " + std::to_string(n) + "\n";
  for (const Prop& p : props) h += "property " + p.type + " " + p.name + "\n";
  return h + extra + "end_header\n";
}

std::vector<Prop> float_props(const std::vector<std::string>& names) {
  std::vector<Prop> r;
  for (const std::string& n : names) r.push_back({"float", n});
  return r;
}

template <class T>
void put(std::string& out, T v, bool big) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if (big) std::reverse(b, b + sizeof(T));
  out.append(b, sizeof(T));
}

double value(const Vertex& v, const std::string& name) {
  for (const auto& [n, x] : v)
    if (n == name) return x;
  BOOST_FAIL("no value " << name);
  return 0;
}

// The file of `vertices` with properties `props` (values looked up by name; a name the
// vertex lacks is written as 7).
std::string ply_file(const std::string& format, const std::vector<Prop>& props, const std::vector<Vertex>& vertices) {
  std::string r = header(format, int64_t(vertices.size()), props);
  const bool big = format == "binary_big_endian";
  for (const Vertex& v : vertices) {
    for (const Prop& p : props) {
      double x = 7;
      for (const auto& [n, val] : v)
        if (n == p.name) x = val;
      if (format == "ascii") {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g ", x);
        r += p.type == "uchar" || p.type == "int" ? std::to_string(int64_t(x)) + " " : buf;
      } else if (p.type == "float" || p.type == "float32") put(r, float(x), big);
      else if (p.type == "double") put(r, x, big);
      else if (p.type == "uchar") put(r, uint8_t(x), big);
      else if (p.type == "int") put(r, int32_t(x), big);
    }
    if (format == "ascii") r += "\n";
  }
  return r;
}

// Checks the scene against the vertices it was read from: the mapping of docs/splat.md,
// with f_rest_{c·(K−1) + k−1} as sh[n, k, c].
void expect_scene(const io::SplatScene& s, const std::vector<Vertex>& vs, int degree) {
  const int64_t k = (degree + 1) * (degree + 1);
  BOOST_REQUIRE_EQUAL(s.size(), int64_t(vs.size()));
  BOOST_REQUIRE(s.sh.shape() == (Shape{int64_t(vs.size()), k, 3}));
  BOOST_TEST(s.sh_degree() == degree);
  for (size_t n = 0; n < vs.size(); ++n) {
    const Vertex& v = vs[n];
    const auto i = int64_t(n);
    for (int j = 0; j < 3; ++j) {
      BOOST_TEST(s.means.data<float>()[3 * i + j] == float(value(v, std::string(1, char('x' + j)))));
      BOOST_TEST(s.log_scales.data<float>()[3 * i + j] == float(value(v, "scale_" + std::to_string(j))));
    }
    for (int j = 0; j < 4; ++j) BOOST_TEST(s.quats.data<float>()[4 * i + j] == float(value(v, "rot_" + std::to_string(j))));
    BOOST_TEST(s.opacity_logits.data<float>()[i] == float(value(v, "opacity")));
    for (int c = 0; c < 3; ++c) {
      BOOST_TEST(s.sh.data<float>()[(i * k) * 3 + c] == float(value(v, "f_dc_" + std::to_string(c))));
      for (int64_t kk = 1; kk < k; ++kk)
        BOOST_TEST(s.sh.data<float>()[(i * k + kk) * 3 + c] ==
                   float(value(v, "f_rest_" + std::to_string(c * (k - 1) + kk - 1))));
    }
  }
}

// An ascii file with its first value replaced by `text`.
std::string with_first_value(const std::string& ascii, const std::string& text) {
  const size_t body = ascii.find("end_header\n") + 11;
  return ascii.substr(0, body) + text + ascii.substr(ascii.find(' ', body));
}

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> r(size_t(t.numel()));
  std::memcpy(r.data(), t.raw(), r.size() * 4);
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ply)

BOOST_AUTO_TEST_CASE(standard_files_of_every_degree_read_in_splat_render_layout) {
  std::mt19937_64 rng(test::run_seed("test_ply"));
  for (int degree = 0; degree <= 3; ++degree) {
    std::vector<Vertex> vs;
    for (int i = 0; i < 5; ++i) vs.push_back(random_vertex(rng, degree));
    const std::vector<Prop> props = float_props(standard_names(degree));
    const fs::path p = scratch("degree" + std::to_string(degree) + ".ply");
    write_file(p, ply_file("binary_little_endian", props, vs));
    expect_scene(io::read_splat_ply(p.string()), vs, degree);
    // The same values as ascii and big-endian.
    expect_scene(io::parse_splat_ply(ply_file("ascii", props, vs), "a.ply"), vs, degree);
    expect_scene(io::parse_splat_ply(ply_file("binary_big_endian", props, vs), "b.ply"), vs, degree);
  }
}

BOOST_AUTO_TEST_CASE(other_writers_layouts_read_the_same) {
  std::mt19937_64 rng(test::run_seed("test_ply") + 1);
  std::vector<Vertex> vs;
  for (int i = 0; i < 4; ++i) vs.push_back(random_vertex(rng, 1));
  std::vector<std::string> names = standard_names(1);
  // No normals, properties reversed, colours and a double, extra elements before and after.
  names.erase(names.begin() + 3, names.begin() + 6);
  std::reverse(names.begin(), names.end());
  std::vector<Prop> props = float_props(names);
  props[0].type = "double";
  props[3].type = "float32";
  props.insert(props.begin() + 2, {"uchar", "red"});
  props.push_back({"int", "segment"});
  for (const std::string& f : {"binary_little_endian", "ascii"}) {
    const std::string file = ply_file(f, props, vs);
    expect_scene(io::parse_splat_ply(file, "x.ply"), vs, 1);
    // An element of fixed size before the vertices is skipped; one after (a mesh's faces,
    // with lists) is left unread.
    const size_t body = file.find("end_header\n") + 11;
    std::string before = file.substr(0, file.find("element vertex")) + "element camera 2\nproperty float f\n" +
                         file.substr(file.find("element vertex"), body - file.find("element vertex"));
    before += f == "ascii" ? std::string("1.5\n2.5\n") : std::string(8, '\0');
    before += file.substr(body);
    expect_scene(io::parse_splat_ply(before, "before.ply"), vs, 1);
    std::string after = file;
    after.insert(after.find("end_header"), "element face 1\nproperty list uchar int vertex_indices\n");
    after += f == "ascii" ? "3 0 1 2\n" : std::string("\x03", 1) + std::string(12, '\0');
    expect_scene(io::parse_splat_ply(after, "after.ply"), vs, 1);
  }
  // CRLF header lines and a scene of no Gaussians.
  std::string crlf = ply_file("binary_little_endian", float_props(standard_names(0)), {});
  for (size_t i = crlf.find('\n'); i != std::string::npos; i = crlf.find('\n', i + 2)) crlf.insert(i, "\r");
  const io::SplatScene empty = io::parse_splat_ply(crlf, "crlf.ply");
  BOOST_TEST(empty.size() == 0);
  BOOST_TEST(empty.sh.shape() == (Shape{0, 1, 3}));
}

BOOST_AUTO_TEST_CASE(non_finite_values_are_data) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(3);
  Vertex v = random_vertex(rng, 0);
  for (auto& [n, x] : v) {
    if (n == "opacity") x = nan;
    if (n == "scale_0") x = -inf;
  }
  std::vector<Prop> props = float_props(standard_names(0));
  const io::SplatScene s = io::parse_splat_ply(ply_file("binary_little_endian", props, {v}), "nan.ply");
  BOOST_TEST(std::isnan(s.opacity_logits.data<float>()[0]));
  BOOST_TEST(s.log_scales.data<float>()[0] == -std::numeric_limits<float>::infinity());
  // A double beyond float's range is infinite in the f32 scene, not undefined behaviour.
  props[0].type = "double";
  for (auto& [n, x] : v)
    if (n == "x") x = 1e300;
  BOOST_TEST(io::parse_splat_ply(ply_file("binary_little_endian", props, {v}), "big.ply").means.data<float>()[0] ==
             std::numeric_limits<float>::infinity());
  const std::string ascii = ply_file("ascii", float_props(standard_names(0)), {random_vertex(rng, 0)});
  BOOST_TEST(std::isnan(io::parse_splat_ply(with_first_value(ascii, "nan"), "nan.ply").means.data<float>()[0]));
  BOOST_TEST(io::parse_splat_ply(with_first_value(ascii, "-inf"), "inf.ply").means.data<float>()[0] ==
             -std::numeric_limits<float>::infinity());
}

BOOST_AUTO_TEST_CASE(written_files_read_back_bit_for_bit_in_the_standard_layout) {
  std::mt19937_64 rng(test::run_seed("test_ply") + 2);
  std::uniform_real_distribution<float> u(-2, 2);
  for (int degree = 0; degree <= 3; ++degree) {
    const int64_t n = 37, k = (degree + 1) * (degree + 1);
    io::SplatScene s{Tensor::empty(DType::F32, {n, 3}), Tensor::empty(DType::F32, {n, 3}), Tensor::empty(DType::F32, {n, 4}),
                     Tensor::empty(DType::F32, {n}), Tensor::empty(DType::F32, {n, k, 3})};
    for (Tensor* t : {&s.means, &s.log_scales, &s.quats, &s.opacity_logits, &s.sh})
      for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = u(rng);
    s.opacity_logits.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
    const fs::path p = scratch("written" + std::to_string(degree) + ".ply");
    io::write_splat_ply(p.string(), s);
    const io::SplatScene r = io::read_splat_ply(p.string());
    for (auto [a, b] : {std::pair{&s.means, &r.means}, {&s.log_scales, &r.log_scales}, {&s.quats, &r.quats},
                        {&s.opacity_logits, &r.opacity_logits}, {&s.sh, &r.sh}}) {
      BOOST_TEST(a->shape() == b->shape());
      BOOST_TEST(bits(*a) == bits(*b));
    }
    // The file is the standard layout: the header lists standard_names, and vertex 5's
    // f_rest_j holds sh[5, 1 + j % (K−1), j / (K−1)].
    const std::string file = test::slurp(p);
    std::string want = "ply\nformat binary_little_endian 1.0\nelement vertex 37\n";
    for (const std::string& name : standard_names(degree)) want += "property float " + name + "\n";
    want += "end_header\n";
    BOOST_REQUIRE(file.substr(0, want.size()) == want);
    const size_t stride = standard_names(degree).size() * 4;
    BOOST_TEST(file.size() == want.size() + size_t(n) * stride);
    const char* v5 = file.data() + want.size() + 5 * stride;
    auto at = [&](size_t field) {
      float f;
      std::memcpy(&f, v5 + 4 * field, 4);
      return f;
    };
    BOOST_TEST(at(3) == 0.0f);  // nx
    for (int64_t j = 0; j < 3 * (k - 1); ++j)
      BOOST_TEST(at(size_t(9 + j)) == s.sh.data<float>()[(5 * k + 1 + j % (k - 1)) * 3 + j / (k - 1)]);
  }
  // f64 scenes write as f32; tensors that are not a scene are refused naming the file.
  io::SplatScene bad{Tensor::zeros(DType::F64, {2, 3}), Tensor::zeros(DType::F64, {2, 3}), Tensor::zeros(DType::F64, {2, 4}),
                     Tensor::zeros(DType::F64, {2}), Tensor::zeros(DType::F64, {2, 2, 3})};
  test::expect_error([&] { io::write_splat_ply(scratch("bad.ply").string(), bad); },
                     {"bad.ply: cannot write the scene: sh is [2,2,3], not [N, K, 3] with K = 1, 4, 9 or 16"});
  bad.sh = Tensor::zeros(DType::F64, {2, 4, 3});
  io::write_splat_ply(scratch("f64.ply").string(), bad);
  BOOST_TEST(io::read_splat_ply(scratch("f64.ply").string()).sh.shape() == (Shape{2, 4, 3}));
  BOOST_TEST(!fs::exists(scratch("bad.ply")));
}

BOOST_AUTO_TEST_CASE(bad_files_are_refused_naming_the_file_and_the_fault) {
  std::mt19937_64 rng(5);
  const std::vector<Prop> std0 = float_props(standard_names(0));
  const Vertex v = random_vertex(rng, 0);
  const std::string good = ply_file("binary_little_endian", std0, {v, v});
  auto with_header = [&](const std::string& from, const std::string& to) {
    std::string r = good;
    r.replace(r.find(from), from.size(), to);
    return r;
  };
  std::vector<std::string> no_opacity = standard_names(0);
  no_opacity.erase(std::find(no_opacity.begin(), no_opacity.end(), "opacity"));
  std::vector<std::string> rest10 = standard_names(0), gap = standard_names(1);
  for (int i = 0; i < 10; ++i) rest10.push_back("f_rest_" + std::to_string(i));
  std::replace(gap.begin(), gap.end(), std::string("f_rest_0"), std::string("f_rest_9"));
  const std::string ascii = ply_file("ascii", std0, {v});
  std::vector<Prop> with_red = std0;
  with_red.push_back({"uchar", "red"});
  Vertex red = v;
  red.emplace_back("red", 300);
  std::string long_header = "ply\nformat ascii 1.0\n";
  while (long_header.size() < (1u << 20) + 10) long_header += "comment " + std::string(100, 'c') + "\n";
  long_header += "element vertex 0\nend_header\n";
  struct Case {
    const char* name;
    std::string bytes;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"empty", "", "not a PLY file (it does not start with the line 'ply')"},
      {"obj", "v 1 2 3\n", "not a PLY file"},
      {"no_end", "ply\nformat ascii 1.0\nelement vertex 1\n", ":3: the PLY header ends without an end_header line"},
      {"long_line", "ply\ncomment " + std::string(5000, 'x') + "\n", ":2: header line longer than 4096 bytes"},
      {"long_header", long_header, "the PLY header runs past 1048576 bytes without end_header"},
      {"format_unknown", with_header("binary_little_endian", "binary_middle_endian"), ":2: unknown PLY format 'binary_middle_endian'"},
      {"version_2", with_header("1.0", "2.0"), ":2: PLY version '2.0' (only 1.0 exists)"},
      {"no_format", "ply\nelement vertex 0\nend_header\n", ":3: end_header before any format line"},
      {"format_twice", with_header("comment", "format ascii 1.0\ncomment"), ":3: a second format line"},
      {"format_late", "ply\nelement vertex 0\nformat ascii 1.0\nend_header\n", ":3: the format line comes after an element"},
      {"keyword", with_header("comment made", "colour made"), ":3: unknown header keyword 'colour'"},
      {"property_first", "ply\nformat ascii 1.0\nproperty float x\nend_header\n", ":3: a property before any element"},
      {"type_unknown", with_header("property float opacity", "property half opacity"), "unknown property type 'half'"},
      {"count_negative", with_header("vertex 2", "vertex -2"), ":4: element 'vertex': count '-2' is not an integer in [0, 2^62]"},
      {"count_text", with_header("vertex 2", "vertex two"), "count 'two' is not an integer"},
      {"count_2_64", with_header("vertex 2", "vertex 18446744073709551616"), "count '18446744073709551616' is not an integer"},
      {"element_twice", with_header("end_header", "element vertex 1\nend_header"), "element 'vertex' appears twice (lines 4 and 22)"},
      {"property_twice", with_header("property float rot_3", "property float rot_3\nproperty float x"), "element 'vertex': property 'x' appears twice"},
      {"no_vertex", "ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n", "declares no element 'vertex'"},
      {"no_opacity", ply_file("binary_little_endian", float_props(no_opacity), {v}), "element 'vertex' has no property 'opacity'"},
      {"rest_10", ply_file("binary_little_endian", float_props(rest10), {v}), "10 f_rest properties; SH of degree 0, 1, 2 or 3 has 0, 9, 24 or 45"},
      {"rest_gap", ply_file("binary_little_endian", float_props(gap), {v}), "9 f_rest properties but no f_rest_0 (they are f_rest_0..f_rest_8)"},
      {"rest_name", with_header("property float opacity", "property float f_rest_07\nproperty float opacity"), "vertex property 'f_rest_07' is not one of f_rest_0..f_rest_44"},
      {"rest_45", with_header("property float opacity", "property float f_rest_45\nproperty float opacity"), "'f_rest_45' is not one of"},
      {"list_value", with_header("property float opacity", "property list uchar float opacity"), "vertex property 'opacity' is a list"},
      {"list_extra", with_header("property float opacity", "property float opacity\nproperty list uchar int ids"), "vertex property 'ids' is a list (not supported"},
      {"list_before", with_header("element vertex", "element face 1\nproperty list uchar int vertex_indices\nelement vertex"), "element 'face' comes before 'vertex' and has list properties"},
      {"truncated", good.substr(0, good.size() - 1), "truncated: the header declares 2 vertices of 68 bytes, 136 bytes, but 135 bytes follow the header"},
      {"trailing", good + "x", "137 bytes follow the header but its elements take 136 (trailing bytes)"},
      {"claims_2_40", with_header("vertex 2", "vertex 1099511627776"), "the header declares 1099511627776 vertices of 68 bytes, 74766790688768 bytes, but 136 bytes follow"},
      {"overflow", with_header("vertex 2", "vertex 4611686018427387904"), "bytes of element 'vertex': 4611686018427387904 * 68 is larger than rlx accepts"},
      {"overflow_before", with_header("element vertex", "element pad 4611686018427387904\nproperty double a\nproperty double b\nelement vertex"), "bytes of element 'pad'"},
      {"ascii_word", with_first_value(ascii, "abc"), ":23: vertex 0, property 'x': 'abc' is not a number"},
      {"ascii_uchar", ply_file("ascii", with_red, {red}), "property 'red': '300' is not a uchar (an integer in [0, 255])"},
      {"ascii_short", ascii.substr(0, ascii.find("end_header\n") + 31), ":23: vertex 0, property"},
      {"ascii_extra", ascii + "1 2\n", ":24: value '1' after the last vertex (the header declares 1)"},
      {"ascii_claims", header("ascii", 9999999, std0) + "1 2 3\n", "the header declares 169999983 values but only 6 bytes follow it"},
      {"ascii_huge", with_first_value(ascii, "1e999"), "'1e999' is out of the range of a double"},
  };
  for (const Case& c : cases) {
    const fs::path p = scratch(std::string(c.name) + ".ply");
    write_file(p, c.bytes);
    std::string from_file;
    try {
      io::read_splat_ply(p.string());
      BOOST_ERROR(c.name << ": read without an error");
    } catch (const InputError& e) {
      from_file = e.what();
    }
    BOOST_TEST(from_file.find(p.string()) == 0u, c.name << ": " << from_file);
    BOOST_TEST(from_file.find(c.expect) != std::string::npos, c.name << ": " << from_file);
  }
  test::expect_error([&] { io::read_splat_ply(scratch("missing.ply").string()); }, {"missing.ply: cannot open for reading"});
  test::expect_error([&] { io::read_splat_ply(scratch("").string()); }, {"not a regular file (expected a .ply file)"});
}

// Every prefix of a valid file, and single-byte changes all through its header, either
// read (then the scene's sizes agree) or end in an InputError; tests/sanitize.sh runs this
// under ASan/UBSan.
BOOST_AUTO_TEST_CASE(truncations_and_mutations_are_errors_not_crashes) {
  std::mt19937_64 rng(9);
  std::vector<Vertex> vs = {random_vertex(rng, 1), random_vertex(rng, 1)};
  int read = 0, refused = 0;
  for (const std::string& format : {"binary_little_endian", "ascii"}) {
    const std::string good = ply_file(format, float_props(standard_names(1)), vs);
    const size_t header_end = good.find("end_header\n") + 11;
    auto attempt = [&](const std::string& bytes, const std::string& what) {
      try {
        const io::SplatScene s = io::parse_splat_ply(bytes, what);
        BOOST_TEST(s.sh.shape().at(0) == s.size(), what);
        BOOST_TEST(s.quats.shape() == (Shape{s.size(), 4}), what);
        ++read;
      } catch (const InputError&) {
        ++refused;
      } catch (const std::exception& e) {
        BOOST_ERROR(what << ": not an InputError: " << e.what());
      }
    };
    for (size_t len = 0; len < good.size(); ++len) attempt(good.substr(0, len), format + " prefix " + std::to_string(len));
    for (size_t i = 0; i < header_end + (format == "ascii" ? 40 : 0); ++i)
      for (char ch : {'\0', '\n', '\r', ' ', '0', '9', '-', 'e', 'x', '_', '\xff'}) {
        std::string m = good;
        m[i] = ch;
        attempt(m, format + " byte " + std::to_string(i) + " -> " + std::to_string(int(static_cast<unsigned char>(ch))));
      }
  }
  BOOST_TEST(read > 0);
  BOOST_TEST(refused > 0);
}

BOOST_AUTO_TEST_SUITE_END()
