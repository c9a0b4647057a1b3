// The text forms: graphs (L1/L2) and compiled programs (L3) print, parse back and print
// identically; malformed text fails with a ParseError at the right line.
#define BOOST_TEST_MODULE test_text
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "ir/text.hpp"
#include "runtime/program_text.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;

namespace {

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.type() != b.type()) return false;
  Tensor ha = a.to(host_allocator()), hb = b.to(host_allocator());
  return std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Attribute equality where a NaN equals itself (Attrs::operator== follows IEEE).
bool same_attrs(const ir::Attrs& a, const ir::Attrs& b) {
  if (a.items().size() != b.items().size()) return false;
  for (size_t i = 0; i < a.items().size(); ++i) {
    const auto& [an, av] = a.items()[i];
    const auto& [bn, bv] = b.items()[i];
    if (an != bn || av.index() != bv.index()) return false;
    bool same = std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          const T& y = std::get<T>(bv);
          if constexpr (std::is_same_v<T, Tensor>) {
            return same_tensor(x, y);
          } else if constexpr (std::is_same_v<T, double>) {
            return same_bits(x, y);
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), same_bits);
          } else {
            return x == y;
          }
        },
        av);
    if (!same) return false;
  }
  return true;
}

void check_same_graph(const ir::Graph& a, const ir::Graph& b) {
  BOOST_CHECK_EQUAL(a.name, b.name);
  BOOST_CHECK(a.params == b.params);
  BOOST_CHECK(a.results == b.results);
  BOOST_REQUIRE_EQUAL(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const ir::Node &x = a.nodes[i], &y = b.nodes[i];
    BOOST_TEST_CONTEXT("node %" << i << " " << x.op->name) {
      BOOST_CHECK_EQUAL(x.id, y.id);
      BOOST_CHECK_EQUAL(x.op, y.op);
      BOOST_CHECK(x.inputs == y.inputs);
      BOOST_CHECK(same_attrs(x.attrs, y.attrs));
      BOOST_CHECK(x.outputs == y.outputs);
      if (x.loc.known() && !x.loc.implicit) {
        BOOST_CHECK_EQUAL(x.loc.file, y.loc.file);
        BOOST_CHECK_EQUAL(x.loc.line, y.loc.line);
        BOOST_CHECK_EQUAL(x.loc.name, y.loc.name);
      } else {
        // No loc(...) written: the parser locates the node at its own line of the text.
        BOOST_CHECK(y.loc.implicit);
        BOOST_CHECK(y.loc.line > 0);
      }
      BOOST_CHECK_EQUAL(x.host, y.host);
      BOOST_REQUIRE_EQUAL(x.regions.size(), y.regions.size());
      for (size_t r = 0; r < x.regions.size(); ++r) check_same_graph(*x.regions[r], *y.regions[r]);
    }
  }
}

// print -> parse -> print: the graphs are equal and the two texts identical.
std::string round_trip(const ir::Graph& g) {
  std::string first = ir::print_graph(g);
  ir::Graph back = ir::parse_graph(first, "round_trip.rlx");
  check_same_graph(g, back);
  std::string second = ir::print_graph(back);
  BOOST_CHECK_EQUAL(first, second);
  return first;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

template <class Fn>
void expect_parse_error(Fn&& fn, const std::string& file, int line, std::initializer_list<std::string> parts) {
  try {
    fn();
    BOOST_ERROR("expected a ParseError at line " << line);
  } catch (const ParseError& e) {
    BOOST_TEST_CONTEXT("error: " << e.what()) {
      BOOST_CHECK_EQUAL(e.file(), file);
      BOOST_CHECK_EQUAL(e.line(), line);
      for (const auto& p : parts) BOOST_CHECK_MESSAGE(contains(e.what(), p), "message lacks '" << p << "'");
    }
  }
}

void expect_graph_error(std::string_view text, int line, std::initializer_list<std::string> parts) {
  expect_parse_error([&] { ir::parse_graph(text, "bad.rlx"); }, "bad.rlx", line, parts);
}

template <class T>
Tensor make_tensor(DType t, Shape s, std::initializer_list<T> values) {
  Tensor x = Tensor::empty(t, std::move(s));
  BOOST_REQUIRE_EQUAL(size_t(x.numel()), values.size());
  size_t i = 0;
  for (const T& v : values) x.data<T>()[i++] = v;
  return x;
}

const ir::OpDef& attrs_test_op() {
  // An op with one attribute of every kind (no built-in op takes a float list).
  static const ir::OpDef* op = [] {
    ir::OpRegistry& r = ir::OpRegistry::get();
    if (!r.find("text_test_attrs")) {
      r.add({.name = "text_test_attrs", .level = ir::Level::L2, .cls = ir::OpClass::Elementwise, .min_inputs = 1,
             .max_inputs = 1,
             .attrs = {{"i", ir::AttrKind::Int, false, int64_t(7)},
                       {"f", ir::AttrKind::Float, false, 0.5},
                       {"b", ir::AttrKind::Bool, false, false},
                       {"s", ir::AttrKind::String, false, std::string("none")},
                       {"is", ir::AttrKind::Ints, false, std::vector<int64_t>{}},
                       {"fs", ir::AttrKind::Floats, false, std::vector<double>{}},
                       {"t", ir::AttrKind::DType, false, DType::F32},
                       {"v", ir::AttrKind::Tensor, true}},
             .infer = [](const std::vector<TensorType>& in, const ir::Attrs&,
                         const std::vector<std::shared_ptr<ir::Graph>>&) { return in; },
             .dtypes = {DType::F32},
             .doc = "test_text: one attribute of every kind"});
    }
    return r.find("text_test_attrs");
  }();
  return *op;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(graph_form)

BOOST_AUTO_TEST_CASE(elementwise_family) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {2, 3});
  Var y = input(g, "y", DType::F32, {3});
  Var n = input(g, "n", DType::I32, {2, 3});
  Var p = input(g, "p", DType::Bool, {2, 3});
  std::vector<Var> out = {rlx::neg(x),   rlx::abs(x),   rlx::exp(x),   rlx::log(x),   rlx::sqrt(x),  rlx::rsqrt(x),
                          rlx::sin(x),   rlx::cos(x),   rlx::tanh(x),  rlx::erf(x),   rlx::recip(x), rlx::floor(x),
                          rlx::ceil(x),  rlx::round(x), rlx::sign(x),  rlx::sign(n),  x + y,         x - y,
                          x * y,         x / y,         rlx::pow(x, y), rlx::maximum(x, y), rlx::minimum(n, n),
                          rlx::div(n, n)};
  out.push_back(rlx::where(rlx::logical_and(rlx::lt(x, y), rlx::logical_not(p)), x, y));
  out.push_back(rlx::cast(rlx::logical_or(rlx::eq(x, y), rlx::ne(n, n)), DType::F16));
  out.push_back(rlx::cast(rlx::le(x, y), DType::I8));
  out.push_back(rlx::cast(rlx::gt(x, y), DType::BF16));
  out.push_back(rlx::cast(rlx::ge(n, n), DType::I4));
  Var z = rlx::make_complex(x, x);
  out.push_back(rlx::real(rlx::conj(z)) + rlx::imag(z) + rlx::abs(z));
  out.push_back(x + 2.5);
  output(g, out);
  std::string s = round_trip(g);
  BOOST_TEST_MESSAGE(s);
  BOOST_CHECK(contains(s, "graph @main(%x: f32[2,3] loc(\"test_text.cpp\":"));
  BOOST_CHECK(contains(s, "= cast(%"));
  BOOST_CHECK(contains(s, "{dtype=i4} : i4[2,3]"));
  BOOST_CHECK(contains(s, "= make_complex(%x, %x) : c64[2,3]"));
}

BOOST_AUTO_TEST_CASE(reductions_matmul_movement_sources) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {2, 3, 4});
  Var w = input(g, "w", DType::F32, {5, 4});
  Var idx = input(g, "idx", DType::I64, {2});
  std::vector<Var> out = {rlx::sum(x, {1}, true),
                          rlx::prod(x),
                          rlx::max(x, {0, 2}),
                          rlx::min(x, {-1}, true),
                          rlx::argmax(x, 1, true),
                          rlx::cumsum(x, 2, true, true),
                          rlx::matmul(x, w, false, true),
                          rlx::matmul(rlx::transpose(x), rlx::transpose(x), true, false),
                          rlx::reshape(x, {6, -1}),
                          rlx::permute(x, {2, 0, 1}),
                          rlx::broadcast_to(rlx::reshape(x, {1, 2, 3, 4}), {3, 2, 3, 4}),
                          rlx::slice(x, {0, 1, -3}, {2, 3, 4}, {1, 1, 2}),
                          rlx::concat({x, x, x}, 1),
                          rlx::pad(x, {0, 1, 2}, {1, 0, 0}, -1.25),
                          rlx::gather(x, idx, 0),
                          rlx::scatter_add(x, idx, rlx::gather(x, idx, 2), 2),
                          rlx::cast(rlx::iota(g, {3, 4}, 1, DType::I32), DType::F32),
                          rlx::rng_uniform(g, {4}, DType::F64, 0xfedcba9876543210ull, -2.0, 3.0),
                          rlx::rng_normal(g, {2, 2}, DType::F16, 42, 0.25, 1e-3)};
  output(g, out);
  std::string s = round_trip(g);
  BOOST_TEST_MESSAGE(s);
  BOOST_CHECK(contains(s, "sum(%x) {axes=[1], keepdims=true} : f32[2,1,4]"));
  BOOST_CHECK(contains(s, "prod(%x) : f32[]"));  // defaults are left out
  BOOST_CHECK(contains(s, "{transpose_b=true}"));
  BOOST_CHECK(contains(s, "value=-1.25"));
  BOOST_CHECK(contains(s, "seed=-81985529216486896"));
  BOOST_CHECK(contains(s, "stddev=0.001"));
}

BOOST_AUTO_TEST_CASE(l1_ops) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {2, 4, 8});
  Var w = input(g, "w", DType::F32, {8, 8});
  Var b = input(g, "b", DType::F32, {8});
  Var labels = input(g, "labels", DType::I64, {2});
  Var h = rlx::linear(x, w, b);
  std::vector<Var> out = {rlx::relu(h),
                          rlx::gelu(h, "tanh"),
                          rlx::gelu(h),
                          rlx::silu(h),
                          rlx::sigmoid(h),
                          rlx::softmax(h, 1),
                          rlx::log_softmax(h),
                          rlx::layer_norm(h, b, b, 1e-6),
                          rlx::rms_norm(h, b),
                          rlx::mse(h, x),
                          rlx::cross_entropy(rlx::sum(h, {1}), labels),
                          rlx::attention(h, x, x, "causal"),
                          rlx::attention(h, x, x, "none", rlx::matmul(x, x, false, true))};
  output(g, out);
  std::string s = round_trip(g);
  BOOST_TEST_MESSAGE(s);
  BOOST_CHECK(contains(s, "= linear(%x, %w, %b) : f32[2,4,8]"));
  BOOST_CHECK(contains(s, "gelu(%4) {approximate=\"tanh\"}"));
  BOOST_CHECK(contains(s, "{mask=\"causal\"}"));
}

BOOST_AUTO_TEST_CASE(attributes_of_every_kind) {
  const ir::OpDef& op = attrs_test_op();
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {2});
  Tensor v = make_tensor<int32_t>(DType::I32, {3}, {1, -2, 3});
  auto add = [&](ir::Attrs a) { return Var(&g, g.add(&op, {x.value()}, std::move(a))); };
  double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  output(g, {add({{"i", int64_t(-3)},
                  {"f", 0.1},
                  {"b", true},
                  {"s", std::string("a \"quoted\"\\ line\nand\ttab \x01 caf\xc3\xa9")},
                  {"is", std::vector<int64_t>{1, -2, std::numeric_limits<int64_t>::min()}},
                  {"fs", std::vector<double>{nan, inf, -inf, -0.0, 1e-300, 5e-324, 1e300, 3.0}},
                  {"t", DType::BF16},
                  {"v", v}}),
             add({{"v", make_tensor<float>(DType::F32, {2}, {1.5f, 2.0f})}, {"f", -0.0}, {"fs", std::vector<double>{}}})});
  std::string s = round_trip(g);
  BOOST_TEST_MESSAGE(s);
  BOOST_CHECK(contains(s, "b=true"));
  BOOST_CHECK(contains(s, "f=0.1"));
  BOOST_CHECK(contains(s, "fs=[nan, inf, -inf, -0.0, 1e-300, 5e-324, 1e+300, 3.0]"));
  BOOST_CHECK(contains(s, "i=-3"));
  BOOST_CHECK(contains(s, "is=[1, -2, -9223372036854775808]"));
  BOOST_CHECK(contains(s, "s=\"a \\\"quoted\\\"\\\\ line\\nand\\ttab \\x01 caf\xc3\xa9\""));
  BOOST_CHECK(contains(s, "t=bf16"));
  // A tensor whose type is not the result type carries its own.
  BOOST_CHECK(contains(s, "v=dense<[1, -2, 3]> : i32[3]"));
  BOOST_CHECK(contains(s, "{f=-0.0, v=dense<[1.5, 2.0]>} : f32[2]"));

  // Hand-written: `[]` and ints take the declared kinds; defaults are filled in.
  ir::Graph h = ir::parse_graph(R"(graph @main(%x: f32[2]) {
    %1 = text_test_attrs(%x) {is=[], fs=[], f=2, v=dense<[0.5, 1]>} : f32[2]
    return %1
  })");
  const ir::Attrs& a = h.nodes[1].attrs;
  BOOST_CHECK(a.get_ints("is").empty());
  BOOST_CHECK(a.get_floats("fs").empty());
  BOOST_CHECK_EQUAL(std::get<double>(*a.find("f")), 2.0);
  BOOST_CHECK_EQUAL(a.get_int("i"), 7);
  BOOST_CHECK_EQUAL(a.get_string("s"), "none");
  BOOST_CHECK(a.get_dtype("t") == DType::F32);
  BOOST_CHECK(same_tensor(a.get_tensor("v"), make_tensor<float>(DType::F32, {2}, {0.5f, 1.0f})));
}

BOOST_AUTO_TEST_CASE(constants_of_every_dtype) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {2});
  (void)x;
  float fnan = std::numeric_limits<float>::quiet_NaN(), finf = std::numeric_limits<float>::infinity();
  Tensor i4 = Tensor::zeros(DType::I4, {5});
  const int nibbles[5] = {-8, 7, 0, -1, 3};
  for (int i = 0; i < 5; ++i) i4.data<uint8_t>()[i / 2] |= uint8_t((nibbles[i] & 0xf) << (4 * (i % 2)));
  std::vector<Tensor> values = {
      make_tensor<bool>(DType::Bool, {3}, {true, false, true}),
      make_tensor<int8_t>(DType::I8, {2, 2}, {-128, 127, 0, -1}),
      make_tensor<uint8_t>(DType::U8, {3}, {0, 255, 17}),
      make_tensor<int32_t>(DType::I32, {2}, {std::numeric_limits<int32_t>::min(), 123456}),
      make_tensor<int64_t>(DType::I64, {2}, {std::numeric_limits<int64_t>::max(), -5}),
      make_tensor<f16>(DType::F16, {4}, {f16(0.1f), f16(-65504.0f), f16(6e-8f), f16(finf)}),
      make_tensor<bf16>(DType::BF16, {3}, {bf16(3.14159f), bf16(-1e30f), bf16(fnan)}),
      make_tensor<float>(DType::F32, {2, 3}, {0.1f, -0.0f, finf, -finf, fnan, 1e-45f}),
      make_tensor<double>(DType::F64, {3}, {0.1, 1.0 / 3.0, -2.5e-310}),
      make_tensor<c64>(DType::C64, {2}, {c64(1.5f, -2.0f), c64(0.1f, 3.0f)}),
      make_tensor<float>(DType::F32, {}, {42.0f}),
      Tensor::zeros(DType::F32, {0, 3}),
      i4,
  };
  std::vector<Var> outs;
  for (const Tensor& t : values) outs.push_back(constant(g, t));
  output(g, outs);
  std::string s = round_trip(g);
  BOOST_TEST_MESSAGE(s);
  BOOST_CHECK(contains(s, "{value=dense<[true, false, true]>} : bool[3]"));
  BOOST_CHECK(contains(s, "{value=dense<[-128, 127, 0, -1]>} : i8[2,2]"));
  BOOST_CHECK(contains(s, "{value=dense<[0, 255, 17]>} : u8[3]"));
  BOOST_CHECK(contains(s, "{value=dense<[-2147483648, 123456]>} : i32[2]"));
  BOOST_CHECK(contains(s, "{value=dense<[9223372036854775807, -5]>} : i64[2]"));
  BOOST_CHECK(contains(s, "{value=dense<[0.099975586, -65504.0, 5.9604645e-08, inf]>} : f16[4]"));
  BOOST_CHECK(contains(s, "{value=dense<[3.140625, -1.00025555e+30, nan]>} : bf16[3]"));
  BOOST_CHECK(contains(s, "{value=dense<[0.1, -0.0, inf, -inf, nan, 1e-45]>} : f32[2,3]"));
  BOOST_CHECK(contains(s, "{value=dense<[0.1, 0.3333333333333333, -2.5e-310]>} : f64[3]"));
  BOOST_CHECK(contains(s, "{value=dense<[(1.5, -2.0), (0.1, 3.0)]>} : c64[2]"));
  BOOST_CHECK(contains(s, "{value=dense<[42.0]>} : f32[]"));
  BOOST_CHECK(contains(s, "{value=dense<[]>} : f32[0,3]"));
  BOOST_CHECK(contains(s, "{value=dense<[-8, 7, 0, -1, 3]>} : i4[5]"));

  // Hand-written: a single value without brackets fills the tensor.
  ir::Graph h = ir::parse_graph("graph @k() {\n  %0 = constant() {value=dense<1>} : i32[2,2]\n  return %0\n}\n");
  BOOST_CHECK(same_tensor(h.nodes[0].attrs.get_tensor("value"), make_tensor<int32_t>(DType::I32, {2, 2}, {1, 1, 1, 1})));
}

BOOST_AUTO_TEST_CASE(control_flow_and_multi_results) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {3});
  Var n = input(g, "n", DType::I64, {});
  auto loop = rlx::while_loop(
      {x, n}, [](const std::vector<Var>& v) { return std::vector<Var>{rlx::gt(v[1], rlx::scalar_like(v[1], 0))}; },
      [](const std::vector<Var>& v) {
        return std::vector<Var>{v[0] * 2.0, v[1] - rlx::scalar_like(v[1], 1)};
      });
  Var pred = rlx::gt(rlx::sum(loop[0]), rlx::scalar_like(loop[0], 0.0));
  auto branch = rlx::if_then_else(
      pred, {loop[0], loop[1]},
      [](const std::vector<Var>& v) {
        // A nested loop inside a region.
        auto inner = rlx::while_loop(
            {v[1]}, [](const std::vector<Var>& w) { return std::vector<Var>{rlx::lt(w[0], rlx::scalar_like(w[0], 10))}; },
            [](const std::vector<Var>& w) { return std::vector<Var>{w[0] + rlx::scalar_like(w[0], 3)}; });
        return std::vector<Var>{rlx::exp(v[0]), inner[0]};
      },
      [](const std::vector<Var>& v) { return std::vector<Var>{-v[0], v[1]}; });
  output(g, {branch[0], loop[1], branch[1]});
  std::string s = round_trip(g);
  BOOST_TEST_MESSAGE(s);
  BOOST_CHECK(contains(s, ":2 = while(%x, %n) : (f32[3], i64[])"));
  BOOST_CHECK(contains(s, "cond(%c0: f32[3], %c1: i64[]) {"));
  BOOST_CHECK(contains(s, "then(%t0: f32[3], %t1: i64[]) {"));
  BOOST_CHECK(contains(s, "#1"));
  ir::Graph back = ir::parse_graph(s);
  BOOST_REQUIRE_EQUAL(back.nodes[size_t(back.results[2].node)].regions.size(), 2u);
}

BOOST_AUTO_TEST_CASE(locations_and_names) {
  ir::Graph g;
  Var x = input(g, "input.1", DType::F32, {2});
  Var y = input(g, "a weird \"name\"", DType::F32, {2});
  Var z = input(g, "7up", DType::F32, {2});
  Var r;
  {
    LocationScope named(ir::Location{"", 0, "encoder/layer.0/Add"});
    r = x + y;
  }
  {
    LocationScope both(ir::Location{"model.onnx", 12, "Mul_3"});
    r = r * z;
  }
  {
    LocationScope none(ir::Location{});
    r = rlx::neg(r);
  }
  output(g, {r, x});
  std::string s = round_trip(g);
  BOOST_TEST_MESSAGE(s);
  BOOST_CHECK(contains(s, "graph @main(%input.1: f32[2]"));
  BOOST_CHECK(contains(s, "%\"a weird \\\"name\\\"\": f32[2]"));
  BOOST_CHECK(contains(s, "%\"7up\": f32[2]"));
  BOOST_CHECK(contains(s, "loc(\"encoder/layer.0/Add\")"));
  BOOST_CHECK(contains(s, "loc(\"model.onnx\":12, \"Mul_3\")"));
  BOOST_CHECK(contains(s, "= neg(%4) : f32[2]\n"));
  BOOST_CHECK(contains(s, "return %5, %input.1"));
}

BOOST_AUTO_TEST_CASE(hand_written_text) {
  const char* text = R"(// A loop written by hand: named values, comments, loose literals.
graph @f(%x: f32[2,3], %n: i64[]) {
  %s = sum(%x) {axes=[1], keepdims=true} : f32[2,1]   // row sums
  %e = exp(%s) loc("model.rlx":7)
  %k = constant() {value=dense<2>} : f32[2,1]
  %m = mul(%e, %k) : f32[2,1]
  %p = pad(%m) {low=[0, 1], high=[1, 0], value=3} : f32[3,2]
  %w:2 = while(%m, %n) {
    cond(%a: f32[2,1], %i: i64[]) {
      %z = constant() {value=dense<[3]>} : i64[]
      %c = lt(%i, %z) : bool[]
      return %c
    }
    body(%a: f32[2,1], %i: i64[]) {
      %one = constant() {value=dense<[1]>} : i64[]
      %j = add(%i, %one)
      return %a, %j
    }
  }
  return %w#0, %p, %w#1
}
)";
  ir::Graph g = ir::parse_graph(text, "hand.rlx");
  BOOST_CHECK_EQUAL(g.name, "f");
  BOOST_REQUIRE_EQUAL(g.nodes.size(), 8u);
  BOOST_CHECK_EQUAL(g.param_name(1), "n");
  BOOST_CHECK_EQUAL(g.nodes[3].loc.file, "model.rlx");
  BOOST_CHECK_EQUAL(g.nodes[3].loc.line, 7);
  BOOST_CHECK_EQUAL(g.nodes[6].attrs.get_float("value"), 3.0);
  BOOST_CHECK_EQUAL(g.nodes[7].outputs.size(), 2u);
  BOOST_CHECK(g.results[2] == (ir::Value{7, 1}));
  BOOST_CHECK(g.nodes[7].regions[1]->nodes[3].outputs[0] == (TensorType{DType::I64, {}}));
  round_trip(g);

  // Node ids as names with a parameter used before its gap: parameters come first.
  ir::Graph h = ir::parse_graph("graph @g(%x: f32[]) {\n  %0 = neg(%x) : f32[]\n  return %0\n}");
  BOOST_CHECK_EQUAL(h.nodes[0].op->name, "param");
  BOOST_CHECK(h.results[0] == (ir::Value{1, 0}));
}

BOOST_AUTO_TEST_CASE(host_flag) {
  ir::Graph g = ir::parse_graph("graph @main(%x: f32[2,2]) {\n  %1 = host matmul(%x, %x) : f32[2,2]\n  return %1\n}\n");
  BOOST_CHECK(g.nodes[1].host);
  BOOST_CHECK(contains(round_trip(g), "%1 = host matmul(%x, %x) : f32[2,2]"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(bad_input)

BOOST_AUTO_TEST_CASE(empty_and_truncated) {
  expect_graph_error("", 1, {"expected 'graph'", "found end of file"});
  expect_graph_error("  // only a comment\n\n", 1, {"expected 'graph'", "end of file"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n", 2,
                     {"expected a node definition or 'return'", "end of file"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x", 2, {"expected ')'", "end of file"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4\n\n", 2, {"expected ']'", "end of file"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x)\n  return %1\n", 3, {"expected '}'", "end of file"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = cast(%x) {dtype=\"f16\n}\n", 2, {"unterminated string"});
}

BOOST_AUTO_TEST_CASE(unknown_op_and_values) {
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  %2 = foo(%1) : f32[4]\n  return %2\n}", 3,
                     {"unknown op 'foo'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  %2 = add(%1, %q) : f32[4]\n  return %2\n}",
                     3, {"unknown value %q"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  return %7\n}", 3, {"unknown value %7"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%2) : f32[4]\n  %2 = exp(%x) : f32[4]\n  return %2\n}", 2,
                     {"%2 is used before its definition on line 3"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  %1 = neg(%x) : f32[4]\n  return %1\n}", 3,
                     {"duplicate definition of %1 (first defined on line 2)"});
  expect_graph_error("graph @main(%x: f32[4], %x: f32[4]) {\n  return %x\n}", 1, {"duplicate definition of %x"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = add(%x) : f32[4]\n  return %1\n}", 2,
                     {"op 'add'", "takes 2 inputs, got 1"});
  const char* loop = "graph @main(%x: f32[], %n: i64[]) {\n"
                     "  %2:2 = while(%x, %n) : (f32[], i64[]) {\n"
                     "    cond(%a: f32[], %b: i64[]) {\n      %2 = gt(%b, %b) : bool[]\n      return %2\n    }\n"
                     "    body(%a: f32[], %b: i64[]) {\n      return %a, %b\n    }\n"
                     "  }\n"
                     "  %3 = neg(%2) : f32[]\n"
                     "  return %3\n}\n";
  expect_graph_error(loop, 11, {"%2 has 2 results; name one as %2#0"});
  std::string capture = loop;
  capture.replace(capture.find("gt(%b, %b)"), 10, "gt(%b, %n)");
  expect_graph_error(capture, 4, {"unknown value %n: it is defined outside this region"});
  std::string out_of_range = loop;
  out_of_range.replace(out_of_range.find("neg(%2)"), 7, "neg(%2#2)");
  expect_graph_error(out_of_range, 11, {"%2#2 does not exist"});
  std::string bad_region = loop;
  bad_region.replace(bad_region.find("return %a, %b"), 13, "return %b, %a");
  expect_graph_error(bad_region, 2, {"op 'while'", "body returns (i64[], f32[])"});
}

BOOST_AUTO_TEST_CASE(type_mismatches) {
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  %2 = neg(%1) : f32[5]\n  return %2\n}", 3,
                     {"shape mismatch", "f32[4]", "f32[5]", "op 'neg'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f64[4]\n  return %1\n}", 2,
                     {"type mismatch", "f32[4]", "f64[4]"});
  expect_graph_error("graph @main(%x: f32[4], %y: f32[3]) {\n\n  %2 = add(%x, %y) : f32[4]\n  return %2\n}", 3,
                     {"op 'add'", "[4] and [3] do not broadcast"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : (f32[4], f32[4])\n  return %1\n}", 2,
                     {"produces 1 result(s) but the text gives 2 type(s)"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f33[4]\n  return %1\n}", 2, {"unknown dtype 'f33'"});
}

BOOST_AUTO_TEST_CASE(attribute_errors) {
  expect_graph_error("graph @main(%x: f32[4,4]) {\n  %1 = argmax(%x) {axis=\"a\"} : i64[4]\n  return %1\n}", 2,
                     {"attribute 'axis' of op 'argmax' expects int, got string"});
  expect_graph_error("graph @main(%x: f32[4,4]) {\n  %1 = sum(%x)\n    {axes=[0, 1.5]} : f32[]\n  return %1\n}", 3,
                     {"attribute 'axes' of op 'sum' expects list of ints, got a list containing float"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = cast(%x) {dtype=f33} : f32[4]\n  return %1\n}", 2,
                     {"attribute 'dtype' of op 'cast' expects a dtype", "got 'f33'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = cast(%x) {dtype=1.5} : f32[4]\n  return %1\n}", 2,
                     {"expects dtype, got float"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) {foo=1} : f32[4]\n  return %1\n}", 2,
                     {"op 'exp'", "has no attribute 'foo'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = cumsum(%x) : f32[4]\n  return %1\n}", 2,
                     {"requires attribute 'axis'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = cumsum(%x) {axis=0, axis=0} : f32[4]\n  return %1\n}", 2,
                     {"duplicate attribute 'axis'"});
  expect_graph_error("graph @k() {\n  %0 = constant() {value=dense<[1.0, 2.0]>} : f32[3]\n  return %0\n}", 2,
                     {"dense<...> has 2 value(s) but f32[3] has 3 element(s)"});
  expect_graph_error("graph @k() {\n  %0 = constant() {value=dense<[300]>} : u8[1]\n  return %0\n}", 2,
                     {"value 300 is out of range for u8"});
  expect_graph_error("graph @k() {\n  %0 = constant() {value=dense<[1.5]>}\n  return %0\n}", 2,
                     {"dense<...> takes its shape from the result type"});
  expect_graph_error("graph @k() {\n  %0 = constant() {value=dense<[1, \"a\"]>} : i32[2]\n  return %0\n}", 2,
                     {"dense<...> of i32 expects integers, got string"});
  expect_graph_error("graph @k() {\n  %0 = iota() {shape=[4], dtype=f32, axis=99999999999999999999} : f32[4]\n"
                     "  return %0\n}",
                     2, {"integer '99999999999999999999' is out of range"});
}

BOOST_AUTO_TEST_CASE(missing_return_and_garbage) {
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n}\n", 3,
                     {"expected a node definition or 'return', found '}'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  \x01\n  return %1\n}", 3,
                     {"unexpected byte 0x01"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  return %1 $\n}", 3,
                     {"unexpected character '$'"});
  static const char binary[] = "graph @main(%x: f32[4]) {\n\n\n  %1 = exp(%x) \xff\xfe\0 : f32[4]\n}";
  expect_graph_error(std::string_view(binary, sizeof binary - 1), 4, {"unexpected byte 0xff"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  return %x\n}\n}\n", 4, {"expected end of file, found '}'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  return %1,\n}", 4,
                     {"expected a value (%name), found '}'"});
  expect_graph_error("graph main() {\n  return\n}", 1, {"expected a graph name (like @main), found 'main'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4] loc(model.rlx:3)\n  return %1\n}", 2,
                     {"expected a file or name string in loc(...)", "found 'model.rlx'"});
  expect_graph_error("graph @main(%x: f32[4]) {\n  %1 = exp(%x) : f32[4]\n  %2 = 12abc\n  return %1\n}", 3,
                     {"malformed number '12abc'"});
}

// Every prefix of a valid text and every one-byte change either parses or fails with a
// ParseError inside the text: never another exception, never a crash.
// Sizes that overflow, nesting past the limit and oversized constants are ParseErrors at
// their line, found before anything is allocated (issue: a type with a negative extent read
// a freed token; deep nesting overflowed the stack; a 2^63-element constant was built).
BOOST_AUTO_TEST_CASE(sizes_nesting_and_constants_have_limits) {
  const std::string ret = "  return %x\n}\n";
  expect_graph_error("graph @main(%x: f32[4294967296,4294967296,4]) {\n" + ret, 1, {"too large", "f32[4294967296"});
  expect_graph_error("graph @main(%x: f64[2305843009213693952]) {\n" + ret, 1, {"too large"});  // 2^61 elements, 2^64 bytes
  expect_graph_error("graph @main(%x: i4[4611686018427387904]) {\n" + ret, 1, {"too large"});   // 2^62 nibbles + 1
  expect_graph_error("graph @main(%x: f32[3]) {\n  %1 = exp(%x) : f32[-3]\n  return %1\n}\n", 2, {"negative extent"});
  std::string many = "graph @main(%x: f32[";
  for (int i = 0; i < 70; ++i) many += i ? ",1" : "1";
  expect_graph_error(many + "]) {\n" + ret, 1, {"more than 64 dimensions"});
  // A shape rule whose result overflows (concat of two 2^61 extents) is refused at its node.
  expect_graph_error("graph @main(%x: u8[2305843009213693952]) {\n  %1 = concat(%x, %x, %x) {axis=0} : u8[1]\n"
                     "  return %1\n}\n", 2, {"concat"});

  // Nested literals and regions.
  std::string deep = "graph @main(%x: f32[2]) {\n  %1 = permute(%x) {perm=" + std::string(100000, '[');
  expect_graph_error(deep, 2, {"nested more than 64 levels"});
  std::string loops = "graph @main(%x: f32[]) {\n";
  for (int i = 0; i < 5000; ++i) loops += "%w" + std::to_string(i) + " = while(%x) : f32[] {\nbody(%b: f32[]) {\n";
  expect_graph_error(loops, 3 + 2 * 64, {"nested more than 64 levels"});

  // A splat constant the size of its type is built only below the limit.
  expect_graph_error("graph @k() {\n  %0 = constant() {value=dense<1.0>} : f32[9223372036854775807]\n  return %0\n}\n", 2,
                     {"too large"});
  expect_graph_error("graph @k() {\n  %0 = constant() {value=dense<1.0>} : f32[1048576,1024]\n  return %0\n}\n", 2,
                     {"more than the constants of one file in the text form may hold", "pass large data as an input"});
  // The limit is the file's, not each constant's: two of 160 MiB pass it together, and a
  // caller may lower it.
  const std::string big = "dense<1.0>} : f32[40960,1024]\n";
  expect_graph_error("graph @k() {\n  %0 = constant() {value=" + big + "  %1 = constant() {value=" + big +
                         "  return %0, %1\n}\n",
                     3, {"needs 167772160 bytes after 167772160 in the file's earlier constants", "(268435456)"});
  const std::string small = "graph @k() {\n  %0 = constant() {value=dense<1.0>} : f32[1024,64]\n  return %0\n}\n";
  BOOST_CHECK_EXCEPTION(ir::parse_graph(small, "small.rlx", ir::ParseLimits{65536}), ParseError, [](const ParseError& e) {
    return std::string(e.what()).find("may hold (65536)") != std::string::npos;
  });
  BOOST_CHECK_NO_THROW(ir::parse_graph(small, "small.rlx", ir::ParseLimits{262144}));
  ir::Graph ok = ir::parse_graph("graph @k() {\n  %0 = constant() {value=dense<1.0>} : f32[1024,64]\n  return %0\n}\n");
  BOOST_CHECK_EQUAL(ok.nodes[0].attrs.get_tensor("value").numel(), 65536);
}

// A splat fills every element with its one value (converted once, then copied): each
// dtype's element read back one by one, i4 at odd and even counts (two a byte, a last high
// nibble of 0), and a large one. (The speed is the fuzz corpus's guard: a splat of ~46 M
// elements converted per element ran past the fuzzer's 10 s timeout.)
BOOST_AUTO_TEST_CASE(splat_constants_fill_every_element) {
  auto splat = [](const std::string& value, const std::string& type) {
    ir::Graph g = ir::parse_graph("graph @k() {\n  %0 = constant() {value=dense<" + value + ">} : " + type +
                                  "\n  return %0\n}\n");
    return g.nodes[0].attrs.get_tensor("value");
  };
  for (int64_t n : {1, 2, 7, 1000}) {
    const std::string shape = "[" + std::to_string(n) + "]";
    Tensor f = splat("-2.5", "f32" + shape);
    Tensor d = splat("0.1", "f64" + shape);
    Tensor i = splat("-123456789012", "i64" + shape);
    Tensor b = splat("true", "bool" + shape);
    Tensor c = splat("(1.5, -2.0)", "c64" + shape);
    Tensor h = splat("3.0", "bf16" + shape);
    Tensor q = splat("-3", "i4" + shape);
    const auto* qb = q.data<uint8_t>();
    for (int64_t k = 0; k < n; ++k) {
      BOOST_TEST(f.data<float>()[k] == -2.5f);
      BOOST_TEST(d.data<double>()[k] == 0.1);
      BOOST_TEST(i.data<int64_t>()[k] == -123456789012);
      BOOST_TEST(b.data<bool>()[k]);
      BOOST_TEST((c.data<c64>()[k] == c64(1.5f, -2.0f)));
      BOOST_TEST(float(h.data<bf16>()[k]) == 3.0f);
      BOOST_TEST(((qb[k / 2] >> (4 * (k % 2))) & 0xf) == (-3 & 0xf), "i4 element " << k << " of " << n);
    }
    if (n % 2) BOOST_TEST((qb[n / 2] >> 4) == 0, "i4[" << n << "]: the last byte's high nibble");
  }
  Tensor big = splat("7.0", "f32[4096,4097]");  // the doubling copies' last, partial one
  BOOST_TEST(big.data<float>()[4096 * 4097 - 1] == 7.0f);
  BOOST_TEST(big.data<float>()[4096 * 2048 + 5] == 7.0f);
}

BOOST_AUTO_TEST_CASE(truncations_and_mutations) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {3});
  Var n = input(g, "n", DType::I64, {});
  auto loop = rlx::while_loop(
      {x, n}, [](const std::vector<Var>& v) { return std::vector<Var>{rlx::gt(v[1], rlx::scalar_like(v[1], 0))}; },
      [](const std::vector<Var>& v) { return std::vector<Var>{v[0] * 2.0, v[1] - rlx::scalar_like(v[1], 1)}; });
  Var c = constant(g, make_tensor<c64>(DType::C64, {2}, {c64(1.0f, 2.0f), c64(-0.5f, 0.0f)}));
  output(g, {rlx::sum(rlx::pad(loop[0], {1}, {0}, 2.5), {0}, true), rlx::real(c), loop[1]});
  const std::string text = ir::print_graph(g);
  const int lines = int(std::count(text.begin(), text.end(), '\n'));
  auto attempt = [&](const std::string& t, const std::string& what) {
    try {
      ir::parse_graph(t, "fuzz.rlx");
      return true;
    } catch (const ParseError& e) {
      BOOST_CHECK_MESSAGE(e.line() >= 1 && e.line() <= lines + 1, what << ": line " << e.line() << " outside the text");
    } catch (const std::exception& e) {
      BOOST_ERROR(what << ": not a ParseError: " << e.what());
    }
    return false;
  };
  for (size_t len = 0; len + 1 < text.size(); ++len)
    BOOST_CHECK_MESSAGE(!attempt(text.substr(0, len), "prefix " + std::to_string(len)), "prefix " << len << " parsed");
  for (size_t i = 0; i < text.size(); i += 3)
    for (char ch : {'}', '%', '"', '0', 'x', '\n', '\x7f', '[', '-'}) {
      std::string t = text;
      t[i] = ch;
      attempt(t, "byte " + std::to_string(i) + " -> " + std::to_string(int(ch)));
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(program_form)

namespace {

void check_same_program(const Program& a, const Program& b) {
  BOOST_CHECK_EQUAL(a.device, b.device);
  BOOST_CHECK_EQUAL(a.arena_bytes, b.arena_bytes);
  check_same_graph(a.graph, b.graph);
  BOOST_REQUIRE_EQUAL(a.slots.size(), b.slots.size());
  for (size_t i = 0; i < a.slots.size(); ++i) {
    BOOST_REQUIRE_EQUAL(a.slots[i].size(), b.slots[i].size());
    for (size_t o = 0; o < a.slots[i].size(); ++o) {
      const BufferSlot &x = a.slots[i][o], &y = b.slots[i][o];
      BOOST_TEST_CONTEXT("slot of %" << i << "#" << o) {
        BOOST_CHECK_EQUAL(int(x.kind), int(y.kind));
        BOOST_CHECK_EQUAL(x.offset, y.offset);
        BOOST_CHECK_EQUAL(x.bytes, y.bytes);
        BOOST_CHECK_EQUAL(x.index, y.index);
        BOOST_CHECK(x.alias == y.alias);
      }
    }
  }
  BOOST_REQUIRE_EQUAL(a.kernels.size(), b.kernels.size());
  for (size_t k = 0; k < a.kernels.size(); ++k) {
    const Kernel &x = a.kernels[k], &y = b.kernels[k];
    BOOST_TEST_CONTEXT("kernel " << k) {
      BOOST_CHECK_EQUAL(int(x.kind), int(y.kind));
      BOOST_CHECK(x.nodes == y.nodes);
      BOOST_CHECK(x.inputs == y.inputs);
      BOOST_CHECK(x.outputs == y.outputs);
      if (x.kind == Kernel::Fused) {
        BOOST_CHECK(x.region.nodes == y.region.nodes);
        BOOST_CHECK(x.region.inputs == y.region.inputs);
        BOOST_CHECK(x.region.outputs == y.region.outputs);
        BOOST_CHECK(x.region.shape == y.region.shape);
      }
      const auto &xs = a.regions_of(x), &ys = b.regions_of(y);
      BOOST_REQUIRE_EQUAL(xs.size(), ys.size());
      for (size_t s = 0; s < xs.size(); ++s) check_same_program(*xs[s], *ys[s]);
    }
  }
  BOOST_REQUIRE_EQUAL(a.constants.size(), b.constants.size());
  for (size_t c = 0; c < a.constants.size(); ++c) {
    BOOST_CHECK(b.constants[c].is_host());
    BOOST_CHECK_MESSAGE(same_tensor(a.constants[c], b.constants[c]), "constant " << c);
  }
}

ir::Graph model() {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {4, 8});
  Var w = input(g, "w", DType::F32, {16, 8});
  Var b = input(g, "b", DType::F32, {16});
  Var h = rlx::gelu(rlx::linear(x, w, b), "tanh");
  Tensor c = Tensor::empty(DType::F32, {16});
  for (int i = 0; i < 16; ++i) c.data<float>()[i] = 0.25f * float(i) - 1.0f;
  Var z = rlx::exp(h * constant(g, c)) + 1.0;
  Var flat = rlx::reshape(z, {64});
  Var total = rlx::sum(flat);
  auto loop = rlx::while_loop(
      {total, rlx::scalar(g, 0, DType::I64)},
      [](const std::vector<Var>& v) { return std::vector<Var>{rlx::lt(v[1], rlx::scalar_like(v[1], 3))}; },
      [](const std::vector<Var>& v) {
        return std::vector<Var>{v[0] * 0.5, v[1] + rlx::scalar_like(v[1], 1)};
      });
  auto pick = rlx::if_then_else(
      rlx::gt(loop[0], rlx::scalar_like(loop[0], 0.0)), {loop[0]},
      [](const std::vector<Var>& v) { return std::vector<Var>{rlx::sqrt(v[0])}; },
      [](const std::vector<Var>& v) { return std::vector<Var>{-v[0]}; });
  Var mask = rlx::cast(rlx::gt(rlx::softmax(h), rlx::scalar_like(h, 0.05)), DType::I8);
  output(g, {rlx::softmax(h), flat, loop[0], loop[1], pick[0], mask, x});
  return g;
}

std::vector<Tensor> model_inputs() {
  std::vector<Tensor> in = {Tensor::empty(DType::F32, {4, 8}), Tensor::empty(DType::F32, {16, 8}),
                            Tensor::empty(DType::F32, {16})};
  uint64_t s = 0x1234;
  for (auto& t : in)
    for (int64_t i = 0; i < t.numel(); ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      t.data<float>()[i] = float(int64_t(s >> 40) % 2001 - 1000) / 2000.0f;
    }
  return in;
}

void program_round_trip(const std::string& device, const CompileOptions& opts) {
  Device& d = DeviceRegistry::get().at(device);
  Program p = compile(model(), d, opts);
  std::string first = print_program(p);
  BOOST_TEST_MESSAGE(first);
  Program q = parse_program(first, "model.l3");
  check_same_program(p, q);
  std::string second = print_program(q);
  BOOST_CHECK_EQUAL(first, second);
  BOOST_CHECK(contains(first, "program @main device \"" + device + "\" arena " + std::to_string(p.arena_bytes) + " {"));
  BOOST_CHECK(contains(first, "param %x: f32[4,8]"));
  BOOST_CHECK(contains(first, "-> param 0"));
  BOOST_CHECK(contains(first, "-> const 0"));
  BOOST_CHECK(contains(first, "-> view %"));
  BOOST_CHECK(contains(first, "-> result 0"));
  BOOST_CHECK(contains(first, " control("));
  BOOST_CHECK(contains(first, "    program @cond device"));
  BOOST_CHECK(contains(first, "    program @then device"));

  // The parsed program runs and computes what the compiled one does.
  std::vector<Tensor> in = model_inputs();
  std::vector<Tensor> want = run(p, d, in), got = run(q, d, in);
  BOOST_REQUIRE_EQUAL(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) BOOST_CHECK_MESSAGE(same_tensor(want[i], got[i]), "result " << i);
}

}  // namespace

BOOST_AUTO_TEST_CASE(reference_program) { program_round_trip("reference", {}); }

namespace {
// `depth` while loops, each the body of the one outside it.
std::vector<Var> nested_loops(const std::vector<Var>& v, int depth) {
  if (depth == 0) return {v[0] + rlx::scalar_like(v[0], 1.0)};
  return rlx::while_loop(
      v, [](const std::vector<Var>& w) { return std::vector<Var>{rlx::lt(w[0], rlx::scalar_like(w[0], 3.0))}; },
      [depth](const std::vector<Var>& w) { return nested_loops(w, depth - 1); });
}
std::string nested_program_text(int depth, Program* out = nullptr) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {});
  output(g, nested_loops({x}, depth));
  Program p = compile(g, DeviceRegistry::get().at("reference"));
  std::string s = print_program(p);
  if (out) *out = std::move(p);
  return s;
}
}  // namespace

// Each region prints once, as its compiled program: the text (its indentation aside) grows
// with the nesting depth, not with its cube (80 nested loops printed 7 MB when regions were
// printed at every level).
BOOST_AUTO_TEST_CASE(nested_loops_print_each_region_once) {
  auto visible = [](const std::string& s) { return double(s.size() - size_t(std::count(s.begin(), s.end(), ' '))); };
  const double at20 = visible(nested_program_text(20)), at40 = visible(nested_program_text(40));
  BOOST_TEST_MESSAGE("L3 text of 20 / 40 nested loops: " << at20 << " / " << at40 << " characters besides spaces");
  BOOST_CHECK_LT(at40 / at20, 2.1);
  Program p;
  std::string first = nested_program_text(5, &p);
  Program q = parse_program(first, "nested.l3");
  check_same_program(p, q);
  BOOST_CHECK_EQUAL(first, print_program(q));
  Device& ref = DeviceRegistry::get().at("reference");
  Tensor x = Tensor::empty(DType::F32, {});
  *x.data<float>() = 0.5f;
  BOOST_CHECK_EQUAL(*run(q, ref, {x})[0].data<float>(), *run(p, ref, {x})[0].data<float>());
}

BOOST_AUTO_TEST_CASE(unfolded_program) {
  CompileOptions opts;
  opts.fold_constants = false;
  opts.cse = false;
  program_round_trip("reference", opts);
}

BOOST_AUTO_TEST_CASE(host_staged_program) {
  CompileOptions opts;
  opts.policy = Policy::AllowHost;
  opts.deny_native = {"matmul"};
  Program p = compile(model(), DeviceRegistry::get().at("cpu"), opts);
  std::string s = print_program(p);
  BOOST_CHECK(contains(s, " host_staged(%x, %w) -> (%3) {"));
  BOOST_CHECK(contains(s, "%3 = host matmul(%x, %w) {transpose_b=true}"));
  program_round_trip("cpu", opts);
}

BOOST_AUTO_TEST_CASE(fused_program) {
  // Fusion happens on devices that fuse elementwise chains.
  for (Device* d : DeviceRegistry::get().runnable()) {
    if (!d->fuses_elementwise()) continue;
    BOOST_TEST_CONTEXT("device " << d->name()) {
      Program p = compile(model(), *d);
      bool fused = false;
      for (auto& k : p.kernels) fused |= k.kind == Kernel::Fused;
      BOOST_CHECK(fused);
      BOOST_CHECK(contains(print_program(p), " fused("));
      program_round_trip(d->name(), {});
    }
  }
}

BOOST_AUTO_TEST_CASE(hand_written_program) {
  const char* text = R"(program @main device "reference" arena 128 {
  param %x: f32[4] -> param 0
  %1 = constant() {value=dense<[1.0, 2.0, 3.0, 4.0]>} : f32[4] -> const 0
  kernel 0 single(%x, %1) -> (%2) {
    %2 = add(%x, %1) : f32[4] -> arena 64+16
  }
  %3 = reshape(%2) {shape=[2, 2]} : f32[2,2] -> view %2
  kernel 1 single(%3) -> (%4) {
    %4 = neg(%3) : f32[2,2] -> result 0
  }
  return %4
}
)";
  Program p = parse_program(text, "hand.l3");
  BOOST_CHECK_EQUAL(p.arena_bytes, 128);
  BOOST_REQUIRE_EQUAL(p.kernels.size(), 2u);
  BOOST_CHECK(p.slot({2, 0}).kind == BufferSlot::Arena);
  BOOST_CHECK_EQUAL(p.slot({2, 0}).offset, 64);
  BOOST_CHECK_EQUAL(p.slot({2, 0}).bytes, 16);
  BOOST_CHECK(p.slot({3, 0}).alias == (ir::Value{2, 0}));
  BOOST_CHECK_EQUAL(p.slot({4, 0}).bytes, 16);
  BOOST_REQUIRE_EQUAL(p.constants.size(), 1u);
  BOOST_CHECK_EQUAL(print_program(p), text);
  Tensor x = Tensor::empty(DType::F32, {4});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = float(i);
  std::vector<Tensor> r = run(p, DeviceRegistry::get().at("reference"), {x});
  BOOST_REQUIRE_EQUAL(r.size(), 1u);
  BOOST_CHECK(same_tensor(r[0], make_tensor<float>(DType::F32, {2, 2}, {-1.0f, -3.0f, -5.0f, -7.0f})));
}

BOOST_AUTO_TEST_CASE(hand_written_fused_program) {
  // Any device runs a fused kernel (node by node by default); the region is rebuilt.
  const char* text = R"(program @main device "reference" arena 64 {
  param %x: f32[2,2] -> param 0
  kernel 0 fused(%x) -> (%2, %3) {
    %1 = exp(%x) : f32[2,2] -> internal
    %2 = neg(%1) : f32[2,2] -> arena 0+16
    %3 = mul(%2, %x) : f32[2,2] -> result 1
  }
  return %2, %3
}
)";
  Program p = parse_program(text, "fused.l3");
  BOOST_REQUIRE_EQUAL(p.kernels.size(), 1u);
  const Kernel& k = p.kernels[0];
  BOOST_CHECK(k.kind == Kernel::Fused);
  BOOST_CHECK(k.region.nodes == (std::vector<int32_t>{1, 2, 3}));
  BOOST_CHECK(k.region.inputs == (std::vector<ir::Value>{{0, 0}}));
  BOOST_CHECK(k.region.outputs == (std::vector<ir::Value>{{2, 0}, {3, 0}}));
  BOOST_CHECK(k.region.shape == (Shape{2, 2}));
  BOOST_CHECK(p.slot({1, 0}).kind == BufferSlot::Internal);
  BOOST_CHECK_EQUAL(p.slot({1, 0}).bytes, 16);
  BOOST_CHECK_EQUAL(print_program(p), text);
  Tensor x = make_tensor<float>(DType::F32, {2, 2}, {0.0f, 1.0f, -1.0f, 2.0f});
  std::vector<Tensor> r = run(p, DeviceRegistry::get().at("reference"), {x});
  BOOST_REQUIRE_EQUAL(r.size(), 2u);
  for (int i = 0; i < 4; ++i) {
    float e = -std::exp(x.data<float>()[i]);
    BOOST_CHECK_CLOSE(r[0].data<float>()[i], e, 1e-4);
    BOOST_CHECK_CLOSE(r[1].data<float>()[i], e * x.data<float>()[i] + 0.0f, 1e-4);
  }
}

BOOST_AUTO_TEST_CASE(program_truncations_and_mutations) {
  const std::string text = print_program(compile(model(), DeviceRegistry::get().at("reference")));
  auto attempt = [&](const std::string& t, const std::string& what) {
    try {
      parse_program(t, "fuzz.l3");
      return true;
    } catch (const ParseError&) {
    } catch (const std::exception& e) {
      BOOST_ERROR(what << ": not a ParseError: " << e.what());
    }
    return false;
  };
  for (size_t len = 0; len + 1 < text.size(); len += 5)
    BOOST_CHECK_MESSAGE(!attempt(text.substr(0, len), "prefix " + std::to_string(len)), "prefix " << len << " parsed");
  for (size_t i = 0; i < text.size(); i += 7)
    for (char ch : {'}', '%', '0', '9', 'x', '\n', '+', '('}) {
      std::string t = text;
      t[i] = ch;
      attempt(t, "byte " + std::to_string(i) + " -> " + std::to_string(int(ch)));
    }
}

BOOST_AUTO_TEST_CASE(program_errors) {
  auto expect = [](std::string_view text, int line, std::initializer_list<std::string> parts) {
    expect_parse_error([&] { parse_program(text, "bad.l3"); }, "bad.l3", line, parts);
  };
  const std::string good = "program @main device \"reference\" arena 64 {\n"
                           "  param %x: f32[4] -> param 0\n"
                           "  kernel 0 single(%x) -> (%1) {\n"
                           "    %1 = neg(%x) : f32[4] -> result 0\n"
                           "  }\n"
                           "  return %1\n"
                           "}\n";
  BOOST_CHECK_NO_THROW(parse_program(good, "good.l3"));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  expect("", 1, {"expected 'program'", "end of file"});
  expect(good.substr(0, good.find("  return")), 5, {"expected a node, 'param', 'kernel' or 'return'", "end of file"});
  expect(with("kernel 0", "kernel 3"), 3, {"expected kernel 0, found kernel 3"});
  expect(with("single", "triple"), 3, {"a kernel kind", "found 'triple'"});
  expect(with("result 0", "heap 0"), 4, {"expected a buffer slot", "found 'heap'"});
  expect(with("result 0", "result 0 colour=3"), 4, {"unknown slot field 'colour'"});
  expect(with("-> param 0", "-> const 0"), 2, {"a const slot needs a constant node, found op 'param'"});
  expect(with("%1 = neg", "%x1 = neg"), 4, {"expected a node id (%<number>) as the name, found %x1"});
  expect(with("%1 = neg", "%9 = neg"), 4, {"node id %9 is out of range: the graph has 2 nodes"});
  expect(with("-> result 0", "-> (result 0, result 1)"), 4, {"%1 has 1 result(s) but the text gives 2 slot(s)"});
  expect(with("neg(%x) : f32[4]", "neg(%x) : f32[5]"), 4, {"shape mismatch", "f32[4]", "f32[5]"});
  expect(with("-> (%1)", "-> (%2)"), 3, {"unknown value %2"});
  expect(with("arena 64", "arena 64 64"), 1, {"expected '{' to open the program, found '64'"});
}

BOOST_AUTO_TEST_SUITE_END()
