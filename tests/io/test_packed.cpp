// Packed GGUF weights (GgufFile::packed, the ops dequantize and matmul_packed) on fresh random
// data, on every device that runs here:
//   - blocks made by quantizing random f32 with the plain quantizers below (Q8_0, Q4_0, Q4_K;
//     written from the block layouts, independent of rlx's decoders, and checked by their
//     round-trip error) or, for the other formats, random quants under finite scales;
//   - written into a GGUF file, read back packed (the bytes the file holds) and dequantized
//     by the op bit for bit as GgufFile::dequantize decodes them, on every device; also the
//     files the gguf package quantized (tests/io/data/gguf/every_type.gguf);
//   - matmul_packed for M in {1, 3, 12, 16, 40, 64, 70} (each of the cuda GEMV's row
//     bounds and blocks, and its cuBLAS path) against x · dequant(W)^T in f64, within
//     K · 2^-24 · sum_k |x_k w_k| per result (what any order of an f32 sum over K terms
//     keeps to), and the route each device took: native for Q8_0 Q4_0 Q4_K BF16 F16 on cpu and cuda,
//     rewritten:dequant-then-matmul for the other formats;
//   - shapes and attributes that do not fit refused with an InputError at graph build.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
#include "core/half.hpp"
#include "io/gguf.hpp"
#include "ir/frontend.hpp"
#include "runtime/runtime.hpp"
#include "tests/support/errors.hpp"
#include "tests/support/gguf_bytes.hpp"
#include "tests/support/seed.hpp"

using namespace rlx;
using test::expect_error;

namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 r(test::run_seed("test_packed"));
  return r;
}
float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng()); }

void put_half(unsigned char* at, float v) {
  const uint16_t h = f16::from_float(v);
  std::memcpy(at, &h, 2);
}
float read_half(const unsigned char* at) {
  uint16_t h;
  std::memcpy(&h, at, 2);
  return f16::to_float(h);
}
void put_nibble(unsigned char* qs, int j, int q) {  // element j < 16: low nibble of byte j
  if (j < 16) qs[j] = uint8_t((qs[j] & 0xf0) | q);
  else qs[j - 16] = uint8_t((qs[j - 16] & 0x0f) | (q << 4));
}

// ---- the plain quantizers: one block of x into b, returning the values b decodes to

void quantize_q8_0(const float* x, unsigned char* b, float* back) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  put_half(b, d);
  const float dh = read_half(b);
  for (int j = 0; j < 32; ++j) {
    const int q = d == 0 ? 0 : std::clamp(int(std::lround(x[j] / d)), -127, 127);
    b[2 + j] = uint8_t(int8_t(q));
    back[j] = float(q) * dh;
  }
}

void quantize_q4_0(const float* x, unsigned char* b, float* back) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 7.0f;
  put_half(b, d);
  const float dh = read_half(b);
  for (int j = 0; j < 32; ++j) {
    const int q = d == 0 ? 0 : std::clamp(int(std::lround(x[j] / d)), -8, 7);
    put_nibble(b + 2, j, q + 8);
    back[j] = float(q) * dh;
  }
}

// Q4_K: 8 sub-blocks of 32, each x ~ (d * sc) * q - dmin * mn with 6-bit sc and mn.
void quantize_q4_k(const float* x, unsigned char* b, float* back) {
  float scale[8], lo[8];
  float max_scale = 0, max_lo = 0;
  for (int s = 0; s < 8; ++s) {
    float mn = 0, mx = 0;
    for (int l = 0; l < 32; ++l) mn = std::min(mn, x[32 * s + l]), mx = std::max(mx, x[32 * s + l]);
    scale[s] = (mx - mn) / 15.0f;
    lo[s] = -mn;
    max_scale = std::max(max_scale, scale[s]);
    max_lo = std::max(max_lo, lo[s]);
  }
  const float d = max_scale / 63.0f, dmin = max_lo / 63.0f;
  put_half(b, d);
  put_half(b + 2, dmin);
  const float dh = read_half(b), dminh = read_half(b + 2);
  unsigned char* s12 = b + 4;
  std::memset(s12, 0, 12);
  std::memset(b + 16, 0, 128);
  for (int s = 0; s < 8; ++s) {
    const int sc = dh == 0 ? 0 : std::clamp(int(std::lround(scale[s] / dh)), 0, 63);
    const int mn = dminh == 0 ? 0 : std::clamp(int(std::lround(lo[s] / dminh)), 0, 63);
    if (s < 4) {
      s12[s] = uint8_t((s12[s] & 0xc0) | sc);
      s12[s + 4] = uint8_t((s12[s + 4] & 0xc0) | mn);
    } else {  // low 4 bits in byte s + 4, top 2 bits in the top of bytes s - 4 (scale) and s (min)
      s12[s + 4] = uint8_t((sc & 0xf) | ((mn & 0xf) << 4));
      s12[s - 4] = uint8_t(s12[s - 4] | ((sc >> 4) << 6));
      s12[s] = uint8_t(s12[s] | ((mn >> 4) << 6));
    }
    const float step = dh * float(sc), off = dminh * float(mn);
    for (int l = 0; l < 32; ++l) {
      const int q = step == 0 ? 0 : std::clamp(int(std::lround((x[32 * s + l] + off) / step)), 0, 15);
      unsigned char& byte = b[16 + 32 * (s / 2) + l];
      byte = uint8_t(byte | (q << (4 * (s & 1))));
      back[32 * s + l] = step * float(q) - off;
    }
  }
}

// Random quants under finite scales (the formats without a quantizer here).
void random_block(const ggml::BlockFormat& f, unsigned char* b) {
  for (int i = 0; i < f.bytes; ++i) b[i] = uint8_t(rng()());
  auto scale = [] { return uniform(0.001f, 0.05f); };
  switch (f.type) {
    case ggml::kF32: { const float v = uniform(-2, 2); std::memcpy(b, &v, 4); break; }
    case ggml::kF16: put_half(b, uniform(-2, 2)); break;
    case ggml::kBF16: { const uint16_t h = bf16(uniform(-2, 2)).bits; std::memcpy(b, &h, 2); break; }
    case ggml::kQ6_K: put_half(b + 208, scale()); break;
    case ggml::kQ4_1: case ggml::kQ5_1: case ggml::kQ4_K: case ggml::kQ5_K:
      put_half(b, scale());
      put_half(b + 2, scale());
      break;
    default: put_half(b, scale()); break;
  }
}

// A packed [n, k] weight of format f, from random f32 in [-1, 1] where a quantizer exists.
Tensor make_weight(const ggml::BlockFormat& f, int64_t n, int64_t k) {
  const int64_t blocks = k / f.block, row_bytes = blocks * f.bytes;
  Tensor t = Tensor::empty(DType::U8, {n, row_bytes});
  auto* p = t.data<unsigned char>();
  std::vector<float> x(size_t(f.block)), back(size_t(f.block));
  double err2 = 0, x2 = 0, worst_step = 0;
  for (int64_t blk = 0; blk < n * blocks; ++blk) {
    unsigned char* b = p + blk * f.bytes;
    for (float& v : x) v = uniform(-1, 1);
    switch (f.type) {
      case ggml::kQ8_0: quantize_q8_0(x.data(), b, back.data()); break;
      case ggml::kQ4_0: quantize_q4_0(x.data(), b, back.data()); break;
      case ggml::kQ4_K: quantize_q4_k(x.data(), b, back.data()); break;
      default: random_block(f, b); continue;
    }
    float amax = 0;
    for (int j = 0; j < f.block; ++j) amax = std::max(amax, std::fabs(x[size_t(j)]));
    for (int j = 0; j < f.block; ++j) {
      const double e = double(x[size_t(j)]) - back[size_t(j)];
      err2 += e * e, x2 += double(x[size_t(j)]) * x[size_t(j)];
      // Q8_0 and Q4_0 round to the nearest step of amax / 127 (amax / 7), the step itself
      // rounded to f16 (relative 2^-11, times at most 127 steps).
      if (f.type != ggml::kQ4_K) worst_step = std::max(worst_step, std::fabs(e) / (amax / (f.type == ggml::kQ8_0 ? 127 : 7)));
    }
  }
  if (f.type == ggml::kQ8_0 || f.type == ggml::kQ4_0) BOOST_TEST(worst_step <= 0.57, f.name << " round trip");
  if (f.type == ggml::kQ4_K) BOOST_TEST(std::sqrt(err2 / x2) < 0.1, f.name << " round trip rms");
  return t;
}

int64_t k_for(const ggml::BlockFormat& f) { return f.block == 256 ? 768 : 288; }  // 3 and 9 blocks, 288 elements

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> r(size_t(t.numel()));
  std::memcpy(r.data(), t.raw(), r.size() * 4);
  return r;
}

Var packed_input(ir::Graph& g, const ggml::BlockFormat& f, int64_t n, int64_t k) {
  return input(g, "w", DType::U8, {n, k / f.block * f.bytes});
}
ir::Attrs attrs(const std::string& type, int64_t k) { return {{"type", type}, {"k", k}}; }

const NodeReport& report_of(const Program& p, const std::string& op) {
  for (const NodeReport& r : p.report.nodes)
    if (r.op == op) return r;
  throw InternalError("no " + op + " node in the report");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(packed)

// Fresh random weights of every format in one GGUF file: packed() hands back the file's
// bytes, and the dequantize op gives GgufFile::dequantize's values bit for bit everywhere.
BOOST_AUTO_TEST_CASE(dequantize_op_matches_the_reader_bit_for_bit_on_every_device) {
  const int64_t n = 37;
  test::Bytes data;
  test::Bytes g = test::header(std::size(ggml::kBlockFormats), 0);
  std::vector<Tensor> weights;
  for (const ggml::BlockFormat& f : ggml::kBlockFormats) {
    const int64_t k = k_for(f);
    weights.push_back(make_weight(f, n, k));
    data.pad(32);
    g.info(f.name, {uint64_t(k), uint64_t(n)}, f.type, data.b.size());
    data.raw(std::string(static_cast<const char*>(weights.back().raw()), weights.back().nbytes()));
  }
  g.pad(32).raw(data.b);
  const io::GgufFile file = io::GgufFile::from_bytes(g.b, "fresh.gguf");
  for (size_t i = 0; i < weights.size(); ++i) {
    const ggml::BlockFormat& f = ggml::kBlockFormats[i];
    const io::PackedTensor p = file.packed(f.name);
    BOOST_TEST(p.type == f.name);
    BOOST_TEST(p.k == k_for(f));
    BOOST_TEST(p.blocks.shape() == Shape({n, k_for(f) / f.block * f.bytes}), boost::test_tools::per_element());
    BOOST_TEST(std::memcmp(p.blocks.raw(), weights[i].raw(), weights[i].nbytes()) == 0, f.name << ": packed bytes");
    const Tensor want = file.dequantize(f.name);
    ir::Graph gr;
    output(gr, {op("dequantize", {packed_input(gr, f, n, p.k)}, attrs(p.type, p.k))});
    for (Device* d : DeviceRegistry::get().runnable()) {
      const Program prog = compile(gr, *d);
      BOOST_TEST((report_of(prog, "dequantize").route == Route::Native), d->name() << " " << f.name);
      const Tensor got = run(prog, *d, {p.blocks})[0];
      BOOST_TEST(bits_of(got) == bits_of(want), d->name() << " " << f.name << ": dequantized bits differ");
    }
  }
}

// The files the gguf package quantized with its own quantizers (tests/io/data/gguf).
BOOST_AUTO_TEST_CASE(dequantize_op_reads_the_packages_files_bit_for_bit) {
  io::GgufFile f((std::filesystem::path(RLX_IO_DATA) / "gguf" / "every_type.gguf").string());
  int checked = 0;
  for (const io::GgufTensor& t : f.tensors()) {
    const io::PackedTensor p = f.packed(t.name);
    // The blocks are the file's bytes in place (no copy), held by the tensor.
    BOOST_TEST(static_cast<const void*>(p.blocks.raw()) == static_cast<const void*>(f.bytes(t.name).data()), t.name);
    const Tensor want = f.dequantize(t.name);
    ir::Graph g;
    Var w = input(g, "w", DType::U8, p.blocks.shape());
    output(g, {op("dequantize", {w}, attrs(p.type, p.k))});
    for (Device* d : DeviceRegistry::get().runnable()) {
      const Tensor got = run(compile(g, *d), *d, {p.blocks})[0];
      BOOST_TEST(numel(got.shape()) == numel(want.shape()));
      BOOST_TEST(bits_of(got) == bits_of(want), d->name() << " " << t.name);
      ++checked;
    }
  }
  BOOST_TEST(checked >= 13);
}

BOOST_AUTO_TEST_CASE(matmul_packed_matches_f64_on_every_device_and_says_its_route) {
  const int64_t n = 37;  // not a multiple of any tile or warp count
  for (const ggml::BlockFormat& f : ggml::kBlockFormats) {
    const bool half16 = f.type == ggml::kBF16 || f.type == ggml::kF16;
    // The 16-bit floats also at rows the wide loads cannot take (cuda: k not a multiple of
    // 8), with a tail after the cpu kernel's 64-element steps (k = 200), and over four of the
    // cuda 9-16-row kernel's 256-column tiles, the last one short (k = 1000: split-K).
    for (int64_t k : half16 ? std::vector<int64_t>{k_for(f), 37, 200, 1000} : std::vector<int64_t>{k_for(f)}) {
      const Tensor w = make_weight(f, n, k);
      // The exact f32 weights, decoded by the reference device's dequantize.
      ir::Graph gd;
      output(gd, {op("dequantize", {packed_input(gd, f, n, k)}, attrs(f.name, k))});
      Device& ref = DeviceRegistry::get().at("reference");
      const Tensor wd = run(compile(gd, ref), ref, {w})[0];
      const float* wv = wd.data<float>();
      const bool native = f.type == ggml::kQ8_0 || f.type == ggml::kQ4_0 || f.type == ggml::kQ4_K || half16;
      for (int64_t m : {1, 3, 12, 16, 40, 64, 70}) {
        Tensor x = Tensor::empty(DType::F32, {m, k});
        for (int64_t i = 0; i < m * k; ++i) x.data<float>()[i] = uniform(-1, 1);
        ir::Graph g;
        Var xv = input(g, "x", DType::F32, {m, k});
        output(g, {op("matmul_packed", {xv, packed_input(g, f, n, k)}, attrs(f.name, k))});
        for (Device* d : DeviceRegistry::get().runnable()) {
          const Program p = compile(g, *d);
          const NodeReport& r = report_of(p, "matmul_packed");
          if (d->name() == "reference" || native) {
            BOOST_TEST((r.route == Route::Native), d->name() << " " << f.name);
          } else {
            BOOST_TEST((r.route == Route::Rewritten), d->name() << " " << f.name);
            BOOST_TEST(r.rule == "dequant-then-matmul", d->name() << " " << f.name);
          }
          const Tensor y = run(p, *d, {x, w})[0];
          BOOST_TEST_REQUIRE((y.shape() == Shape{m, n}));
          double worst = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = 0, a = 0;
              for (int64_t e = 0; e < k; ++e) {
                const double t = double(x.data<float>()[i * k + e]) * wv[j * k + e];
                s += t, a += std::fabs(t);
              }
              const double bound = double(k) * std::ldexp(1.0, -24) * a;
              worst = std::max(worst, std::fabs(y.data<float>()[i * n + j] - s) / bound);
            }
          BOOST_TEST(worst <= 1.0, d->name() << " " << f.name << " m=" << m << " k=" << k << ": error / bound " << worst);
        }
      }
    }
  }
}

// A leading batch dimension and the rewrite under policy strict (it is lossless).
BOOST_AUTO_TEST_CASE(matmul_packed_takes_leading_dimensions) {
  const ggml::BlockFormat& f = *ggml::block_format(std::string_view("Q6_K"));
  const int64_t n = 9, k = 256;
  const Tensor w = make_weight(f, n, k);
  Tensor x = Tensor::empty(DType::F32, {2, 3, k});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = uniform(-1, 1);
  ir::Graph g;
  Var xv = input(g, "x", DType::F32, {2, 3, k});
  Var y = op("matmul_packed", {xv, packed_input(g, f, n, k)}, attrs(f.name, k));
  BOOST_TEST(y.shape() == Shape({2, 3, n}), boost::test_tools::per_element());
  output(g, {y});
  Device& ref = DeviceRegistry::get().at("reference");
  const Tensor want = run(compile(g, ref), ref, {x, w})[0];
  CompileOptions strict;
  strict.policy = Policy::Strict;
  for (Device* d : DeviceRegistry::get().runnable()) {
    const Tensor got = run(compile(g, *d, strict), *d, {x, w})[0];
    BOOST_TEST_REQUIRE(got.numel() == want.numel());
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      worst = std::max(worst, double(std::fabs(got.data<float>()[i] - want.data<float>()[i])));
      scale = std::max(scale, double(std::fabs(want.data<float>()[i])));
    }
    BOOST_TEST(worst <= 1e-5 * scale, d->name() << ": " << worst << " against the largest result " << scale);
  }
}

BOOST_AUTO_TEST_CASE(shapes_and_attributes_that_do_not_fit_are_refused_at_graph_build) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {2, 256});
  Var w = input(g, "w", DType::U8, {4, 144});  // 4 rows of one Q4_K block
  Var w8 = input(g, "w8", DType::U8, {4, 34 * 7});
  Var wf = input(g, "wf", DType::F32, {4, 144});
  BOOST_TEST(op("matmul_packed", {x, w}, attrs("Q4_K", 256)).shape() == Shape({2, 4}), boost::test_tools::per_element());
  expect_error([&] { op("matmul_packed", {x, w}, attrs("Q4_K", 128)); },
               {"matmul_packed", "k = 128 is not a multiple of Q4_K's block of 256"});
  expect_error([&] { op("matmul_packed", {x, w8}, attrs("Q8_0", 256)); },
               {"the packed weight's rows are 238 bytes", "256 elements of Q8_0 take 272"});
  expect_error([&] { op("matmul_packed", {x, w}, attrs("Q8_0", 256)); },
               {"rows are 144 bytes", "256 elements of Q8_0 take 272 (8 blocks of 34)"});
  expect_error([&] { op("dequantize", {w}, attrs("Q3_K", 256)); }, {"dequantize: type 'Q3_K' is not a packed format"});
  expect_error([&] { op("dequantize", {wf}, attrs("Q4_K", 256)); }, {"the packed weight is f32, needs u8"});
  expect_error([&] { op("matmul_packed", {input(g, "x2", DType::F32, {2, 512}), w}, attrs("Q4_K", 256)); },
               {"the input's last dimension is 512", "k = 256"});
  expect_error([&] { op("matmul_packed", {input(g, "x3", DType::F64, {2, 256}), w}, attrs("Q4_K", 256)); },
               {"matmul_packed input dtype f64"});
  expect_error([&] { op("dequantize", {w}, attrs("Q4_K", 0)); }, {"k is 0, needs k >= 1"});
}

// A tensor whose rows do not hold whole blocks cannot be handed out packed.
BOOST_AUTO_TEST_CASE(packed_refuses_what_it_cannot_hand_out) {
  test::Bytes g = test::header(2, 0);
  g.info("i32", {4}, 26, 0).info("q", {32, 2}, ggml::kQ8_0, 32).pad(32).raw(std::string(32 + 68, '\1'));
  const io::GgufFile f = io::GgufFile::from_bytes(g.b, "small.gguf");
  expect_error([&] { f.packed("i32"); }, {"small.gguf: tensor 'i32' has I32 (26), which packed() does not take"});
  expect_error([&] { f.packed("none"); }, {"small.gguf: no tensor 'none'"});
  BOOST_TEST(f.packed("q").blocks.shape() == Shape({2, 34}), boost::test_tools::per_element());
  // The blocks hold the file's bytes after the file object is gone.
  io::PackedTensor q;
  {
    const io::GgufFile h = io::GgufFile::from_bytes(g.b, "small.gguf");
    q = h.packed("q");
  }
  BOOST_TEST(q.blocks.data<unsigned char>()[67] == 1);
}

BOOST_AUTO_TEST_SUITE_END()
