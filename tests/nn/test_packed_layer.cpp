// nn::linear_packed and the GGUF loading beside it (nn/packed.hpp): a model whose projection
// reads packed Q8_0 and Q4_K weights of a GGUF file, compiled for every device that runs here,
// against x · W^T in f64 with W the reader's own dequantization; the packed bytes are the
// file's; a tensor of another format or shape is refused naming the file and the tensor.
#define BOOST_TEST_MODULE nn_packed
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.hpp"
#include "core/half.hpp"
#include "nn/packed.hpp"
#include "runtime/runtime.hpp"
#include "tests/support/errors.hpp"
#include "tests/support/gguf_bytes.hpp"
#include "tests/support/seed.hpp"

namespace rlx::nn {
namespace {

using test::expect_error;

// A GGUF file holding "q8" (Q8_0 [5, 64]) and "q4k" (Q4_K [3, 256]): random quants under
// f16 scales of 0.02 (and Q4_K mins of 0.01).
io::GgufFile file(std::mt19937_64& rng) {
  std::string q8(5 * 2 * 34, '\0'), q4k(3 * 144, '\0');
  for (char& c : q8) c = char(rng());
  for (char& c : q4k) c = char(rng());
  const uint16_t d = f16::from_float(0.02f), mn = f16::from_float(0.01f);
  for (size_t b = 0; b < q8.size(); b += 34) std::memcpy(&q8[b], &d, 2);
  for (size_t b = 0; b < q4k.size(); b += 144) std::memcpy(&q4k[b], &d, 2), std::memcpy(&q4k[b + 2], &mn, 2);
  test::Bytes g = test::header(2, 0);
  g.info("q8", {64, 5}, 8, 0).info("q4k", {256, 3}, 12, 352).pad(32).raw(q8).raw(std::string(352 - q8.size(), '\0')).raw(q4k);
  return io::GgufFile::from_bytes(g.b, "layer.gguf");
}

BOOST_AUTO_TEST_CASE(linear_packed_reads_gguf_weights_on_every_device) {
  std::mt19937_64 rng(test::run_seed("test_nn_packed"));
  const io::GgufFile f = file(rng);
  for (const std::string name : {"q8", "q4k"}) {
    const int64_t rows = f.tensor_info(name).shape[0], k = f.tensor_info(name).shape[1];
    ir::Graph g;
    Model m(g);
    Var x = m.input("x", DType::F32, {2, k});
    Var y = [&] {
      Model::Scope s(m, "blk0");
      return linear_packed(m, "proj", x, rows, packed_type(f, name));
    }();
    output(g, {y});
    Var w = packed_weight_input(m, "blk0/proj");
    BOOST_TEST(w.shape() == Shape({rows, f.packed(name).blocks.shape()[1]}), boost::test_tools::per_element());
    const Tensor wt = load_packed(f, name, w);
    BOOST_TEST(std::memcmp(wt.raw(), f.bytes(name).data(), wt.nbytes()) == 0);
    Tensor xt = Tensor::empty(DType::F32, {2, k});
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = u(rng);
    const Tensor wd = f.dequantize(name);
    for (Device* d : DeviceRegistry::get().runnable()) {
      const Tensor got = run(compile(g, *d), *d, {xt, wt})[0];
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < rows; ++j) {
          double s = 0, a = 0;
          for (int64_t e = 0; e < k; ++e) {
            const double t = double(xt.data<float>()[i * k + e]) * wd.data<float>()[j * k + e];
            s += t, a += std::fabs(t);
          }
          BOOST_TEST(std::fabs(got.data<float>()[i * rows + j] - s) <= double(k) * std::ldexp(1.0, -24) * a,
                     d->name() << " " << name);
        }
    }
  }
}

BOOST_AUTO_TEST_CASE(weights_that_do_not_fit_the_layer_are_refused) {
  std::mt19937_64 rng(1);
  const io::GgufFile f = file(rng);
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {2, 256});
  output(g, {linear_packed(m, "a", x, 3, "Q4_0"), linear_packed(m, "b", x, 4, "Q4_K")});
  // Q4_0 rows of 256 take 144 bytes, as Q4_K's: the format, not the shape, tells them apart.
  expect_error([&] { load_packed(f, "q4k", packed_weight_input(m, "a")); },
               {"layer.gguf: tensor 'q4k' is Q4_K but the layer reading it was built for Q4_0"});
  expect_error([&] { load_packed(f, "q4k", packed_weight_input(m, "b")); },
               {"layer.gguf: tensor 'q4k' packs to [3,144]", "the layer's input is [4,144]"});
  expect_error([&] { linear_packed(m, "c", m.input("x2", DType::F32, {2, 100}), 3, "Q8_0"); },
               {"linear_packed 'c': rows of 100 are not a multiple of Q8_0's block of 32"});
  expect_error([&] { linear_packed(m, "d", x, 3, "Q3_K"); }, {"'Q3_K' is not a packed format"});
  expect_error([&] { packed_weight_input(m, "zz"); }, {"no packed weight input 'zz/weight'"});
}

}  // namespace
}  // namespace rlx::nn
