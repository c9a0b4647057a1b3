// The convolutional layers of nn/layers.hpp: conv2d, pooling, batch_norm (with its buffers),
// flatten, lenet, multi-head attention, rotary embedding and grouped-query attention — shapes, parameter names and counts, PyTorch's default initialisation,
// LeNet on the reference and cpu devices, and the gradient of a small conv + batch norm +
// pooling network against central finite differences.
#define BOOST_TEST_MODULE nn_layers
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "core/error.hpp"
#include "tests/support/errors.hpp"
#include "ir/op_registry.hpp"
#include "nn/layers.hpp"
#include "passes/autodiff.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

namespace rlx::nn {
namespace {

using test::expect_error;

Tensor random(Shape s, uint64_t seed, DType t, double lo = -1, double hi = 1) {
  Tensor r = Tensor::empty(t, std::move(s));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (t == DType::F32)
      r.data<float>()[i] = float(u(g));
    else
      r.data<double>()[i] = u(g);
  }
  return r;
}

double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::F32 ? double(t.data<float>()[i]) : t.data<double>()[i];
}


std::vector<std::string> names(const std::vector<Parameter>& ps) {
  std::vector<std::string> r;
  for (const Parameter& p : ps) r.push_back(p.name);
  return r;
}

// The graph's inputs in their order, from values given per input node.
std::vector<Tensor> feed(const ir::Graph& g, const std::map<int32_t, Tensor>& by_node) {
  std::vector<Tensor> r;
  for (ir::Value v : g.params) r.push_back(by_node.at(v.node));
  return r;
}

// Parameters (then buffers) at their initial values, keyed by input node.
std::map<int32_t, Tensor> initial(const Model& m, uint64_t seed) {
  std::map<int32_t, Tensor> r;
  std::vector<Tensor> p = m.initial_values(seed), b = m.initial_buffer_values(seed);
  for (size_t k = 0; k < p.size(); ++k) r[m.parameter_vars()[k].value().node] = p[k];
  for (size_t k = 0; k < b.size(); ++k) r[m.buffer_vars()[k].value().node] = b[k];
  return r;
}

BOOST_AUTO_TEST_CASE(conv2d_shapes_and_parameters) {
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {2, 3, 11, 9});
  Var y = conv2d(m, "c", x, 8, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}});
  BOOST_TEST(y.shape() == (Shape{2, 8, 6, 5}));
  Var d = conv2d(m, "dilated", x, 4, {3, 2}, {.stride = {1, 2}, .dilation = {2, 3}}, false);
  BOOST_TEST(d.shape() == (Shape{2, 4, 7, 3}));  // (11 - 4 - 1) + 1, (9 - 3 - 1) / 2 + 1
  Var x6 = m.input("x6", DType::F32, {2, 6, 7, 7});
  Var gr = conv2d(m, "grouped", x6, 9, {2, 2}, {.groups = 3});
  BOOST_TEST(gr.shape() == (Shape{2, 9, 6, 6}));
  BOOST_TEST(names(m.parameters()) ==
             (std::vector<std::string>{"c/weight", "c/bias", "dilated/weight", "grouped/weight", "grouped/bias"}));
  BOOST_TEST(m.parameters()[0].type.shape == (Shape{8, 3, 3, 3}));
  BOOST_TEST(m.parameters()[2].type.shape == (Shape{4, 3, 3, 2}));
  BOOST_TEST(m.parameters()[3].type.shape == (Shape{9, 2, 2, 2}));  // C/groups input channels
  BOOST_TEST(m.parameter_count() == 8 * 27 + 8 + 4 * 18 + 9 * 8 + 9);
  BOOST_TEST(m.buffers().empty());
  expect_error([&] { conv2d(m, "bad", x6, 8, {2, 2}, {.groups = 4}); }, {"groups 4 must divide"});
  expect_error([&] { conv2d(m, "flat", m.input("v", DType::F32, {2, 3}), 4, {1, 1}); }, {"[N, C, H, W]"});
  expect_error([&] { conv2d(m, "big", x, 4, {13, 3}); }, {"height window spans 13"});
}

BOOST_AUTO_TEST_CASE(pooling_and_flatten_shapes) {
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {2, 3, 11, 9});
  BOOST_TEST(max_pool2d(x, 2).shape() == (Shape{2, 3, 5, 4}));
  BOOST_TEST(avg_pool2d(x, 3, 2, 1).shape() == (Shape{2, 3, 6, 5}));
  BOOST_TEST(rlx::max_pool2d(x, {3, 2}, {1, 2}).shape() == (Shape{2, 3, 9, 4}));
  BOOST_TEST(flatten(x).shape() == (Shape{2, 297}));
  BOOST_TEST(flatten(m.input("e", DType::F32, {0, 4, 5})).shape() == (Shape{0, 20}));
  BOOST_TEST(m.parameters().empty());
  expect_error([&] { max_pool2d(x, 2, 2, 2); }, {"at most half the kernel"});
}

BOOST_AUTO_TEST_CASE(lenet_has_lenet5s_parameters) {
  ir::Graph g;
  Model m(g);
  Var x = m.input("images", DType::F32, {7, 1, 28, 28});
  Var logits = lenet(m, "lenet", x);
  BOOST_TEST(logits.shape() == (Shape{7, 10}));
  BOOST_TEST(names(m.parameters()) ==
             (std::vector<std::string>{"lenet/conv1/weight", "lenet/conv1/bias", "lenet/conv2/weight", "lenet/conv2/bias",
                                       "lenet/fc1/weight", "lenet/fc1/bias", "lenet/fc2/weight", "lenet/fc2/bias",
                                       "lenet/fc3/weight", "lenet/fc3/bias"}));
  std::vector<Shape> shapes;
  for (const Parameter& p : m.parameters()) shapes.push_back(p.type.shape);
  BOOST_TEST(shapes == (std::vector<Shape>{{6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {120, 400}, {120}, {84, 120}, {84},
                                           {10, 84}, {10}}));
  BOOST_TEST(m.parameter_count() == 61706);
  expect_error([&] { lenet(m, "small", m.input("s", DType::F32, {7, 1, 14, 14})); }, {"[N, 1, 28, 28]"});
}

// PyTorch's nn.Conv2d default: weight and bias from U(-b, b), b = 1/sqrt(C/groups * kh * kw).
BOOST_AUTO_TEST_CASE(conv2d_initialisation_is_pytorchs) {
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {1, 8, 9, 9});
  conv2d(m, "c", x, 64, {5, 5});                   // fan_in 200: 12,800 weights
  conv2d(m, "g", x, 32, {3, 3}, {.groups = 4});    // fan_in 18
  std::vector<Tensor> v = m.initial_values(7);
  const double bounds[] = {1 / std::sqrt(200.0), 1 / std::sqrt(200.0), 1 / std::sqrt(18.0), 1 / std::sqrt(18.0)};
  for (size_t k = 0; k < v.size(); ++k) {
    BOOST_TEST_CONTEXT(m.parameters()[k].name) {
      const double b = bounds[k];
      const int64_t n = v[k].numel();
      double lo = INFINITY, hi = -INFINITY, mean = 0, sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        lo = std::min(lo, at(v[k], i));
        hi = std::max(hi, at(v[k], i));
        mean += at(v[k], i) / double(n);
        sq += at(v[k], i) * at(v[k], i) / double(n);
      }
      BOOST_TEST(lo >= -b);
      BOOST_TEST(hi <= b);
      // A uniform's mean is 0 and variance b^2/3: within 5 standard errors.
      BOOST_TEST(std::abs(mean) <= 5 * b / std::sqrt(3.0 * double(n)));
      if (n >= 1000) {
        BOOST_TEST(hi - lo >= 1.99 * b);
        BOOST_TEST(std::abs(sq / (b * b / 3) - 1) <= 5 * std::sqrt(0.8 / double(n)));
      }
    }
  }
  std::vector<Tensor> again = m.initial_values(7), other = m.initial_values(8);
  BOOST_TEST(std::equal(again[0].data<float>(), again[0].data<float>() + again[0].numel(), v[0].data<float>()));
  BOOST_TEST(!std::equal(other[0].data<float>(), other[0].data<float>() + other[0].numel(), v[0].data<float>()));
}

// batch_norm's weight and bias are parameters; its running statistics are buffers, updated
// from the op's extra results in training and left alone in inference.
BOOST_AUTO_TEST_CASE(batch_norm_keeps_running_statistics_in_buffers) {
  ir::Graph g;
  Model m(g, DType::F64);
  Var x = m.input("x", DType::F64, {5, 3, 4, 2});
  Var y = batch_norm(m, "bn", x, true, 0.2);
  Var z = batch_norm(m, "eval", x, false);
  BOOST_TEST(y.shape() == x.shape());
  BOOST_TEST(names(m.parameters()) == (std::vector<std::string>{"bn/weight", "bn/bias", "eval/weight", "eval/bias"}));
  BOOST_TEST(names(m.buffers()) == (std::vector<std::string>{"bn/running_mean", "bn/running_var", "eval/running_mean",
                                                              "eval/running_var"}));
  BOOST_TEST(m.parameter_count() == 12);
  std::vector<Tensor> b = m.initial_buffer_values(0);
  BOOST_TEST(at(b[0], 1) == 0.0);
  BOOST_TEST(at(b[1], 1) == 1.0);
  std::vector<Tensor> p = m.initial_values(0);
  BOOST_TEST(at(p[0], 2) == 1.0);
  BOOST_TEST(at(p[1], 2) == 0.0);
  // Only the training layer's buffers have updates.
  BOOST_REQUIRE(m.buffer_updates().size() == 2u);
  BOOST_TEST((m.buffer_updates()[0].first.value() == m.buffer_vars()[0].value()));
  BOOST_TEST((m.buffer_updates()[1].first.value() == m.buffer_vars()[1].value()));

  // The updates' values: (1 - 0.2) * 0 + 0.2 * mean and (1 - 0.2) * 1 + 0.2 * unbiased var.
  output(g, {y, z, m.buffer_updates()[0].second, m.buffer_updates()[1].second});
  Tensor xv = random({5, 3, 4, 2}, 3, DType::F64, -2, 3);
  std::map<int32_t, Tensor> in = initial(m, 0);
  in[x.value().node] = xv;
  Device& cpu = DeviceRegistry::get().at("cpu");
  std::vector<Tensor> r = run(compile(g, cpu), cpu, feed(g, in));
  for (int64_t c = 0; c < 3; ++c) {
    double mean = 0, sq = 0;
    std::vector<double> vals;
    for (int64_t n = 0; n < 5; ++n)
      for (int64_t k = 0; k < 8; ++k) vals.push_back(at(xv, (n * 3 + c) * 8 + k));
    for (double v : vals) mean += v / 40;
    for (double v : vals) sq += (v - mean) * (v - mean);
    BOOST_TEST(at(r[2], c) == 0.2 * mean, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(at(r[3], c) == 0.8 + 0.2 * sq / 39, boost::test_tools::tolerance(1e-12));
    // Inference with the initial statistics (0, 1): y = x / sqrt(1 + eps).
    BOOST_TEST(at(r[1], (2 * 3 + c) * 8) == at(xv, (2 * 3 + c) * 8) / std::sqrt(1 + 1e-5),
               boost::test_tools::tolerance(1e-12));
  }

  expect_error([&] { m.buffer("bn/weight", {3}, Init::zeros()); }, {"'bn/weight' is declared twice"});
  expect_error([&] { m.update_buffer(m.buffer_vars()[0], m.buffer_updates()[0].second); }, {"updated twice"});
  expect_error([&] { m.update_buffer(x, x); }, {"not one of the model's buffers"});
  expect_error([&] { m.update_buffer(m.buffer_vars()[2], x); }, {"f64[5,3,4,2], the buffer f64[3]"});
}

// Multi-head attention against the formula in double, written out per head: projections,
// softmax(q k^T / sqrt(d) + mask) v, the heads concatenated, the output projection. Self-attention
// with the causal mask, and cross-attention with a key padding mask, on reference and cpu.
// rotary_embedding against the rotate-half formula written out per pair (f64 angles, so the
// f32 angles of the layer allow 1e-5 at positions up to 1000), at positions given as data.
BOOST_AUTO_TEST_CASE(rotary_embedding_turns_each_feature_pair_by_its_angle) {
  const int64_t t = 4, h = 3, d = 8;
  const double theta = 10000.0;
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {2, t, h, d});
  Var pos = input(g, "pos", DType::I64, {t});
  output(g, {rotary_embedding(x, pos, theta)});
  Tensor xv = random({2, t, h, d}, 5, DType::F32, -2, 2);
  Tensor pv = Tensor::empty(DType::I64, {t});
  const int64_t positions[t] = {0, 1, 17, 1000};
  std::copy(positions, positions + t, pv.data<int64_t>());
  for (const char* dev : {"reference", "cpu"}) {
    Device& dd = DeviceRegistry::get().at(dev);
    Tensor got = run(compile(g, dd), dd, {xv, pv})[0];
    double worst = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t k = 0; k < h; ++k)
          for (int64_t c = 0; c < d; ++c) {
            const int64_t base = ((b * t + i) * h + k) * d, pair = c % (d / 2);
            const double a = double(positions[i]) * std::pow(theta, -2.0 * double(pair) / double(d));
            const double x0 = at(xv, base + pair), x1 = at(xv, base + pair + d / 2);
            const double want = c < d / 2 ? x0 * std::cos(a) - x1 * std::sin(a) : x1 * std::cos(a) + x0 * std::sin(a);
            worst = std::max(worst, std::abs(at(got, base + c) - want));
          }
    BOOST_TEST(worst <= 1e-5, dev << ": largest difference " << worst);
  }
  Var odd = input(g, "odd", DType::F32, {1, t, h, 7});
  expect_error([&] { rotary_embedding(odd, pos, theta); }, {"rotary_embedding", "D even"});
  expect_error([&] { rotary_embedding(x, input(g, "p3", DType::I64, {3}), theta); }, {"positions must be i64 [4]"});
}

// grouped_query_attention against attention with each key/value head repeated for its
// query heads (transformers' repeat_kv), causal and with an additive bias.
BOOST_AUTO_TEST_CASE(grouped_query_attention_equals_attention_over_repeated_heads) {
  const int64_t b = 2, nh = 6, kv = 2, t = 5, s = 5, d = 4, groups = nh / kv;
  for (bool causal : {true, false}) {
    ir::Graph g;
    Var q = input(g, "q", DType::F64, {b, nh, t, d}), k = input(g, "k", DType::F64, {b, kv, s, d});
    Var v = input(g, "v", DType::F64, {b, kv, s, d});
    std::optional<Var> bias;
    if (!causal) bias = input(g, "bias", DType::F64, {1, 1, 1, 1, s});
    output(g, {grouped_query_attention(q, k, v, causal, bias)});
    Tensor qv = random({b, nh, t, d}, 1, DType::F64), kvv = random({b, kv, s, d}, 2, DType::F64),
           vv = random({b, kv, s, d}, 3, DType::F64), bv = Tensor::zeros(DType::F64, {1, 1, 1, 1, s});
    bv.data<double>()[s - 1] = -INFINITY;  // (the last key masked, as the decode step masks)
    bv.data<double>()[1] = 0.5;
    std::vector<Tensor> in{qv, kvv, vv};
    if (!causal) in.push_back(bv);
    Device& ref = DeviceRegistry::get().at("reference");
    Tensor got = run(compile(g, ref), ref, in)[0];
    BOOST_REQUIRE(got.shape() == (Shape{b, nh, t, d}));
    double worst = 0;
    for (int64_t n = 0; n < b; ++n)
      for (int64_t hh = 0; hh < nh; ++hh)
        for (int64_t i = 0; i < t; ++i) {
          const int64_t kh = hh / groups;
          std::vector<double> w(static_cast<size_t>(s));
          double mx = -INFINITY, z = 0;
          for (int64_t j = 0; j < s; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < d; ++c) dot += at(qv, ((n * nh + hh) * t + i) * d + c) * at(kvv, ((n * kv + kh) * s + j) * d + c);
            w[size_t(j)] = causal && j > i ? -INFINITY : dot / std::sqrt(double(d)) + (causal ? 0.0 : at(bv, j));
            mx = std::max(mx, w[size_t(j)]);
          }
          for (double& e : w) z += (e = std::exp(e - mx));
          for (int64_t c = 0; c < d; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < s; ++j) acc += w[size_t(j)] / z * at(vv, ((n * kv + kh) * s + j) * d + c);
            worst = std::max(worst, std::abs(at(got, ((n * nh + hh) * t + i) * d + c) - acc));
          }
        }
    BOOST_TEST(worst <= 1e-12, (causal ? "causal" : "bias") << ": largest difference " << worst);
  }
  ir::Graph g;
  Var q = input(g, "q", DType::F32, {1, 5, 2, 4}), k = input(g, "k", DType::F32, {1, 2, 2, 4});
  expect_error([&] { grouped_query_attention(q, k, k, true); }, {"grouped_query_attention", "must divide the query heads"});
}

BOOST_AUTO_TEST_CASE(multi_head_attention_matches_the_formula) {
  const int64_t n = 2, e = 8, heads = 2, d = e / heads;
  for (bool cross : {false, true}) {
    BOOST_TEST_CONTEXT((cross ? "cross-attention with padding" : "causal self-attention")) {
      const int64_t lq = cross ? 3 : 5, lk = cross ? 6 : 5;
      ir::Graph g;
      Model m(g, DType::F64);
      Var x = m.input("x", DType::F64, {n, lq, e});
      Var kv = cross ? m.input("kv", DType::F64, {n, lk, e}) : x;
      std::optional<Var> pad;
      if (cross) pad = m.input("pad", DType::Bool, {n, lk});
      output(g, {multi_head_attention(m, "mha", x, kv, heads, !cross, pad)});
      BOOST_TEST(names(m.parameters()) == (std::vector<std::string>{"mha/q/weight", "mha/q/bias", "mha/k/weight",
                                                                    "mha/k/bias", "mha/v/weight", "mha/v/bias",
                                                                    "mha/out/weight", "mha/out/bias"}),
                 boost::test_tools::per_element());
      std::map<int32_t, Tensor> in = initial(m, 3);
      Tensor xv = random({n, lq, e}, 7, DType::F64, -2, 2), kvv = random({n, lk, e}, 8, DType::F64, -2, 2);
      Tensor padv = Tensor::empty(DType::Bool, {n, lk});
      for (int64_t b = 0; b < n; ++b)
        for (int64_t j = 0; j < lk; ++j) padv.data<bool>()[b * lk + j] = j >= lk - 1 - b;  // the last 1 or 2 keys
      in[x.value().node] = xv;
      if (cross) {
        in[kv.value().node] = kvv;
        in[pad->value().node] = padv;
      }
      const Tensor& kvs = cross ? kvv : xv;
      auto P = m.initial_values(3);
      auto proj = [&](const Tensor& src, int64_t len, int w) {  // [n, len, e] times P[w]^T + P[w+1]
        std::vector<double> r(size_t(n * len * e));
        for (int64_t i = 0; i < n * len; ++i)
          for (int64_t o = 0; o < e; ++o) {
            double s = P[size_t(w + 1)].data<double>()[o];
            for (int64_t c = 0; c < e; ++c) s += src.data<double>()[i * e + c] * P[size_t(w)].data<double>()[o * e + c];
            r[size_t(i * e + o)] = s;
          }
        return r;
      };
      auto Q = proj(xv, lq, 0), K = proj(kvs, lk, 2), V = proj(kvs, lk, 4);
      std::vector<double> heads_out(size_t(n * lq * e), 0.0);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < lq; ++i) {
            std::vector<double> s(static_cast<size_t>(lk));
            double mx = -INFINITY;
            for (int64_t j = 0; j < lk; ++j) {
              double dot = 0;
              for (int64_t c = 0; c < d; ++c) dot += Q[size_t((b * lq + i) * e + h * d + c)] * K[size_t((b * lk + j) * e + h * d + c)];
              const bool masked = cross ? padv.data<bool>()[b * lk + j] : j > i;
              s[size_t(j)] = masked ? -INFINITY : dot / std::sqrt(double(d));
              mx = std::max(mx, s[size_t(j)]);
            }
            double z = 0;
            for (double& t : s) z += (t = std::exp(t - mx));
            for (int64_t c = 0; c < d; ++c) {
              double acc = 0;
              for (int64_t j = 0; j < lk; ++j) acc += s[size_t(j)] / z * V[size_t((b * lk + j) * e + h * d + c)];
              heads_out[size_t((b * lq + i) * e + h * d + c)] = acc;
            }
          }
      std::vector<double> want(size_t(n * lq * e));
      for (int64_t i = 0; i < n * lq; ++i)
        for (int64_t o = 0; o < e; ++o) {
          double s = P[7].data<double>()[o];
          for (int64_t c = 0; c < e; ++c) s += heads_out[size_t(i * e + c)] * P[6].data<double>()[o * e + c];
          want[size_t(i * e + o)] = s;
        }
      for (const char* dev : {"reference", "cpu"}) {
        Device& dd = DeviceRegistry::get().at(dev);
        Tensor got = run(compile(g, dd), dd, feed(g, in))[0];
        BOOST_REQUIRE(got.shape() == (Shape{n, lq, e}));
        double worst = 0;
        for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, std::abs(got.data<double>()[i] - want[size_t(i)]));
        BOOST_TEST(worst <= 1e-12, dev << ": largest difference " << worst);
      }
    }
  }
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {2, 4, 6});
  expect_error([&] { multi_head_attention(m, "mha", x, x, 4); }, {"multi_head_attention 'mha'", "4 heads", "6 features"});
  Var bad = m.input("pad", DType::Bool, {2, 5});
  expect_error([&] { multi_head_attention(m, "mha2", x, x, 2, false, bad); }, {"multi_head_attention 'mha2'", "key_padding_mask must be bool[2,4], got bool[2,5]"});
}

BOOST_AUTO_TEST_CASE(lenet_forward_agrees_on_reference_and_cpu) {
  ir::Graph g;
  Model m(g);
  Var x = m.input("images", DType::F32, {6, 1, 28, 28});
  output(g, {lenet(m, "lenet", x)});
  std::map<int32_t, Tensor> in = initial(m, 11);
  in[x.value().node] = random({6, 1, 28, 28}, 5, DType::F32, 0, 1);
  Device& ref = DeviceRegistry::get().at("reference");
  Device& cpu = DeviceRegistry::get().at("cpu");
  Tensor want = run(compile(g, ref), ref, feed(g, in))[0];
  Tensor got = run(compile(g, cpu), cpu, feed(g, in))[0];
  BOOST_TEST(got.shape() == (Shape{6, 10}));
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    scale = std::max(scale, std::abs(at(want, i)));
    worst = std::max(worst, std::abs(at(got, i) - at(want, i)));
  }
  BOOST_TEST(scale > 0.01);  // the logits are not all zero
  BOOST_TEST(worst <= 1e-5 * scale, "largest difference " << worst << " over logits up to " << scale);
}

// grad differentiates conv2d and the pools through their lowering, which gathers the windows
// again; the compiled program runs each gather once (the index constants are shared, so CSE
// merges the backward's copies into the forward's).
BOOST_AUTO_TEST_CASE(the_backward_reuses_the_forwards_windows) {
  auto gathers = [](bool backward) {
    ir::Graph g;
    Model m(g);
    Var x = m.input("images", DType::F32, {4, 1, 28, 28});
    Var labels = m.input("labels", DType::I64, {4});
    Var loss = cross_entropy(lenet(m, "lenet", x), labels);
    std::vector<Var> outs{loss};
    if (backward)
      for (const Var& d : grad(loss, m.parameter_vars())) outs.push_back(d);
    output(g, outs);
    Program p = compile(g, DeviceRegistry::get().at("cpu"));
    int n = 0;
    for (const ir::Node& node : p.graph.nodes) n += node.op->name == "gather";
    return n;
  };
  BOOST_TEST(gathers(false) == 4);  // two convolutions, two pools
  BOOST_TEST(gathers(true) == 4);
}

// conv (padding) -> batch norm (training) -> relu -> max pool -> grouped conv -> avg pool ->
// flatten -> linear -> mse, in f64: d loss / d every parameter against central differences
// on the reference device, and the cpu device's gradients against the reference's.
BOOST_AUTO_TEST_CASE(small_network_gradient_matches_finite_differences) {
  ir::Graph g;
  Model m(g, DType::F64);
  Var x = m.input("x", DType::F64, {3, 2, 6, 6});
  Var t = m.input("t", DType::F64, {3, 2});
  Var h = conv2d(m, "c1", x, 4, {3, 3}, {.padding = {1, 1}});
  h = max_pool2d(relu(batch_norm(m, "bn", h, true)), 2);              // [3, 4, 3, 3]
  h = avg_pool2d(conv2d(m, "c2", h, 6, {2, 2}, {.groups = 2}), 2);    // [3, 6, 1, 1]
  Var loss = mse(linear(m, "fc", flatten(h), 2), t);
  std::vector<Var> grads = grad(loss, m.parameter_vars());
  std::vector<Var> outs{loss};
  outs.insert(outs.end(), grads.begin(), grads.end());
  output(g, outs);

  std::map<int32_t, Tensor> in = initial(m, 3);
  in[x.value().node] = random({3, 2, 6, 6}, 1, DType::F64);
  in[t.value().node] = random({3, 2}, 2, DType::F64);
  Device& ref = DeviceRegistry::get().at("reference");
  Program p = compile(g, ref);
  Executor ex(p, ref);
  const std::vector<Tensor> base = ex.run(feed(g, in));
  const double h_step = 1e-6;
  int checked = 0;
  for (size_t k = 0; k < m.parameters().size(); ++k) {
    const int32_t node = m.parameter_vars()[k].value().node;
    const Tensor p0 = in[node];
    const Tensor& gk = base[1 + k];
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < p0.numel(); ++i) {
      double side[2];
      for (int s = 0; s < 2; ++s) {
        Tensor moved = random(p0.shape(), 0, DType::F64);
        std::copy(p0.data<double>(), p0.data<double>() + p0.numel(), moved.data<double>());
        moved.data<double>()[i] += s ? -h_step : h_step;
        in[node] = moved;
        side[s] = at(ex.run(feed(g, in))[0], 0);
      }
      in[node] = p0;
      const double fd = (side[0] - side[1]) / (2 * h_step);
      worst = std::max(worst, std::abs(fd - at(gk, i)));
      scale = std::max({scale, std::abs(fd), std::abs(at(gk, i))});
      ++checked;
    }
    BOOST_TEST(worst <= 1e-6 * std::max(scale, 1e-3),
               m.parameters()[k].name << ": largest difference " << worst << " over gradients up to " << scale);
  }
  BOOST_TEST(checked == m.parameter_count());

  Device& cpu = DeviceRegistry::get().at("cpu");
  std::vector<Tensor> on_cpu = run(compile(g, cpu), cpu, feed(g, in));
  // Per result, normalized by its largest element (c1's bias gets ~1e-16: batch norm removes
  // any per-channel shift).
  for (size_t k = 0; k < base.size(); ++k) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < base[k].numel(); ++i) {
      worst = std::max(worst, std::abs(at(on_cpu[k], i) - at(base[k], i)));
      scale = std::max(scale, std::abs(at(base[k], i)));
    }
    BOOST_TEST(worst <= 1e-9 * std::max(scale, 1e-3), "result " << k << ": " << worst << " over values up to " << scale);
  }
}

}  // namespace
}  // namespace rlx::nn
