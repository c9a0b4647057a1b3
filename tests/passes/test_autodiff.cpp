// grad, vjp, jvp and hvp (passes/autodiff.hpp) as a user meets them: values against
// closed forms and finite differences, accumulation over several uses, pruning, the
// backward's source locations, the complex convention and every refusal's message.
// (Each op's own VJP is checked in the op suite's grad mode, tests/ops/test_grad.cpp.)
#define BOOST_TEST_MODULE autodiff
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <complex>
#include <functional>
#include <random>

#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "passes/autodiff.hpp"
#include "tests/support/errors.hpp"
#include "runtime/runtime.hpp"

namespace rlx {
namespace {

using test::expect_error;

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

Tensor random(Shape s, double lo = -2, double hi = 2) {
  Tensor t = Tensor::empty(DType::F64, std::move(s));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(rng());
  return t;
}

std::vector<Tensor> eval(ir::Graph& g, const std::vector<Tensor>& in, const std::string& device = "reference") {
  Device& d = DeviceRegistry::get().at(device);
  return run(compile(g, d), d, in);
}

double at(const Tensor& t, int64_t i) { return t.data<double>()[i]; }


BOOST_AUTO_TEST_CASE(gradients_match_closed_forms_and_accumulate_over_uses) {
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {3, 4});
  Var w = input(g, "w", DType::F64, {4});
  // L = sum(x * x * w + x + sin(x)): x is used four times.
  Var loss = sum(x * x * w + x + sin(x));
  auto d = grad(loss, {x, w});
  output(g, {loss, d[0], d[1]});
  Tensor xv = random({3, 4}), wv = random({4});
  auto r = eval(g, {xv, wv});
  for (int64_t i = 0; i < 12; ++i) {
    const double xi = at(xv, i), wi = at(wv, i % 4);
    BOOST_TEST(at(r[1], i) == 2 * xi * wi + 1 + std::cos(xi), boost::test_tools::tolerance(1e-12));
  }
  for (int64_t j = 0; j < 4; ++j) {
    double want = 0;
    for (int64_t i = 0; i < 3; ++i) want += at(xv, i * 4 + j) * at(xv, i * 4 + j);
    BOOST_TEST(at(r[2], j) == want, boost::test_tools::tolerance(1e-12));
  }
}

// An L1 op without its own VJP (linear) differentiates through its lowering, also when
// one value feeds two of its inputs: L = sum(x x^T) = sum_k (sum_i x_ik)^2.
BOOST_AUTO_TEST_CASE(lowering_with_a_repeated_input) {
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {3, 4});
  Var loss = sum(linear(x, x));
  output(g, grad(loss, {x}));
  Tensor xv = random({3, 4});
  auto r = eval(g, {xv});
  for (int64_t i = 0; i < 12; ++i) {
    double col = 0;
    for (int64_t k = 0; k < 3; ++k) col += at(xv, k * 4 + i % 4);
    BOOST_TEST(at(r[0], i) == 2 * col, boost::test_tools::tolerance(1e-12));
  }
}

// Nodes off the path from wrt to the output get no backward; a wrt value the output
// does not depend on gets zeros.
BOOST_AUTO_TEST_CASE(unused_branches_are_pruned) {
  auto backward_nodes = [](bool with_branch) {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {8});
    Var c = input(g, "c", DType::F64, {8});
    Var loss = sum(exp(x));
    if (with_branch) loss = loss + sum(tanh(c * c) * log(c * c + 1.0));
    size_t before = g.nodes.size();
    grad(loss, {x});
    return g.nodes.size() - before;
  };
  BOOST_TEST(backward_nodes(true) == backward_nodes(false));
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {5});
  Var y = input(g, "y", DType::F64, {5});
  auto d = grad(sum(x * x), {y});
  output(g, d);
  auto r = eval(g, {random({5}), random({5})});
  for (int64_t i = 0; i < 5; ++i) BOOST_TEST(at(r[0], i) == 0.0);
}

// Every backward node carries the location of the forward node it differentiates.
BOOST_AUTO_TEST_CASE(backward_nodes_carry_the_forward_locations) {
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {4});
  const int line_a = __LINE__ + 1;
  Var a = exp(x);
  const int line_b = __LINE__ + 1;
  Var b = sum(a * x);
  const size_t forward = g.nodes.size();
  grad(b, {x});
  BOOST_TEST(g.nodes.size() > forward);
  for (size_t i = forward; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    BOOST_TEST(n.loc.file == "test_autodiff.cpp", n.op->name);
    // (the seed's constant is made at the grad call's own line)
    BOOST_TEST((n.loc.line == line_a || n.loc.line == line_b || n.loc.line == line_b + 2), n.op->name << " at " << n.loc.line);
  }
}

// A comparison feeding a where's condition is not a path (relu written by hand works);
// one feeding the value is refused, as are argmax, while loops, integer wrt and a
// non-scalar without a cotangent. (Every op in the registry has a rule or says it is not
// differentiable, so "has no VJP rule" is not reachable from the built-in ops.)
BOOST_AUTO_TEST_CASE(what_grad_refuses_names_the_node) {
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {6});
    Var relu = where(gt(x, scalar_like(x, 0.0)), x, scalar_like(x, 0.0));
    output(g, grad(sum(relu), {x}));
    Tensor xv = random({6});
    auto r = eval(g, {xv});
    for (int64_t i = 0; i < 6; ++i) BOOST_TEST(at(r[0], i) == (at(xv, i) > 0 ? 1.0 : 0.0));
  }
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {4, 6});
    const int line = __LINE__ + 1;
    Var idx = argmax(x, 1);
    Var loss = sum(cast(idx, DType::F64) * sum(x, {1}));
    expect_error([&] { grad(loss, {x}); }, {"argmax at test_autodiff.cpp:" + std::to_string(line), "i64", "no gradient"});
  }
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {4});
    Var loss = sum(cast(gt(x, scalar_like(x, 0.5)), DType::F64) * x);
    expect_error([&] { grad(loss, {x}); }, {"gt at test_autodiff.cpp:", "bool"});
  }
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {4});
    const int line = __LINE__ + 1;
    auto r = while_loop({x}, [](const std::vector<Var>& v) { return std::vector<Var>{lt(sum(v[0]), scalar_like(v[0], 100.0))}; },
                        [](const std::vector<Var>& v) { return std::vector<Var>{v[0] * 2.0}; });
    expect_error([&] { grad(sum(r[0]), {x}); }, {"while at test_autodiff.cpp:" + std::to_string(line), "control flow"});
  }
  {
    ir::Graph g;
    Var i = input(g, "i", DType::I64, {4});
    Var x = input(g, "x", DType::F64, {4});
    expect_error([&] { grad(sum(x), {i}); }, {"cannot differentiate with respect to a i64"});
    expect_error([&] { grad(x, {x}); }, {"shape [4]", "one element"});
  }
}

// gelu's tanh form (the op suite's example covers the erf form) against its derivative.
BOOST_AUTO_TEST_CASE(gelu_tanh_gradient) {
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {7});
  output(g, grad(sum(gelu(x, "tanh")), {x}));
  Tensor xv = random({7}, -4, 4);
  auto r = eval(g, {xv});
  const double c = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < 7; ++i) {
    const double v = at(xv, i), h = 1e-6;
    auto f = [&](double z) { return 0.5 * z * (1 + std::tanh(c * (z + 0.044715 * z * z * z))); };
    // (absolute near zero: the difference quotient's own error is about 1e-10)
    const double fd = (f(v + h) - f(v - h)) / (2 * h);
    BOOST_TEST(std::abs(at(r[0], i) - fd) <= 1e-7 * std::max(1.0, std::abs(fd)), at(r[0], i) << " vs " << fd);
  }
}

// jvp against the closed form; hvp against finite differences of the gradient.
BOOST_AUTO_TEST_CASE(jvp_and_hvp) {
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {5});
  Var v = input(g, "v", DType::F64, {5});
  Var y = sin(x) * x;
  auto t = jvp({y}, {x}, {v});
  Var f = sum(x * x * x) + sum(exp(x)) * sum(x);
  auto h = hvp(f, {x}, {v});
  auto gr = grad(f, {x});
  output(g, {t[0], h[0], gr[0]});
  Tensor xv = random({5}), vv = random({5});
  auto r = eval(g, {xv, vv});
  double ex = 0, sx = 0;
  for (int64_t i = 0; i < 5; ++i) {
    ex += std::exp(at(xv, i));
    sx += at(xv, i);
  }
  for (int64_t i = 0; i < 5; ++i) {
    const double xi = at(xv, i), vi = at(vv, i);
    BOOST_TEST(at(r[0], i) == (std::cos(xi) * xi + std::sin(xi)) * vi, boost::test_tools::tolerance(1e-12));
  }
  // H = diag(6x + e^x sum(x)) + e^x 1^T + 1 e^x^T.
  double ev = 0, sv = 0;
  for (int64_t j = 0; j < 5; ++j) {
    ev += std::exp(at(xv, j)) * at(vv, j);
    sv += at(vv, j);
  }
  for (int64_t i = 0; i < 5; ++i) {
    const double xi = at(xv, i), vi = at(vv, i);
    const double want = (6 * xi + std::exp(xi) * sx) * vi + std::exp(xi) * sv + ev;
    BOOST_TEST(at(r[1], i) == want, boost::test_tools::tolerance(1e-10));
  }
}

// The library primitives' VJPs are IR made of ops with VJPs (solves, factorizations,
// gathers), so second derivatives go through them: hvp against central differences of the
// gradient for log|det A| (whose backward runs lu_factor and lu_solve), a function of the
// Cholesky factor, of the eigenvalues and vectors, and of the singular values.
BOOST_AUTO_TEST_CASE(hvp_through_library_primitives) {
  const std::vector<std::pair<std::string, std::function<Var(const Var&)>>> fs = {
      {"slogdet", [](const Var& a) { return op_multi("slogdet", {a})[1]; }},
      {"cholesky", [](const Var& a) { Var l = op("cholesky", {a}); return sum(l * l * l); }},
      {"eigh", [](const Var& a) {
         std::vector<Var> wv = op_multi("eigh", {a});
         Var v = wv[1] * wv[1];  // the squared vectors: free of their signs
         return sum(wv[0] * wv[0] * wv[0]) + sum(v * v * iota(*a.graph(), {4, 4}, 1, DType::F64));
       }},
      {"svd", [](const Var& a) { Var s = op_multi("svd", {a})[1]; return sum(s * s * s); }},
  };
  for (const auto& [name, f] : fs) {
    ir::Graph g;
    Var a = input(g, "a", DType::F64, {4, 4});
    Var v = input(g, "v", DType::F64, {4, 4});
    Var y = f(a);
    output(g, {grad(y, {a})[0], hvp(y, {a}, {v})[0]});
    // Symmetric, diagonally dominant: positive definite, eigenvalues and singular values apart.
    Tensor m = random({4, 4}, -1, 1), av = Tensor::empty(DType::F64, {4, 4}), vv = random({4, 4});
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j) av.data<double>()[i * 4 + j] = at(m, i * 4 + j) + at(m, j * 4 + i) + (i == j ? 3.0 * (i + 2) : 0.0);
    const double h = 1e-5;
    auto moved = [&](double s) {
      Tensor t = av.clone();
      for (int64_t i = 0; i < 16; ++i) t.data<double>()[i] += s * at(vv, i);
      return eval(g, {t, vv})[0];
    };
    Tensor hv = eval(g, {av, vv})[1], up = moved(h), down = moved(-h);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < 16; ++i) {
      const double fd = (at(up, i) - at(down, i)) / (2 * h);
      worst = std::max(worst, std::abs(fd - at(hv, i)));
      scale = std::max(scale, std::abs(fd));
    }
    BOOST_TEST(worst <= 1e-6 * std::max(scale, 1.0), name << ": hvp off by " << worst << " (scale " << scale << ")");
  }
}

// A CSR matrix's rows as grad finds them from row_ptr, empty rows (first, inner, last) and an
// empty matrix included: d values[k] = u[row(k)] x[col(k)], dx = A^T u.
BOOST_AUTO_TEST_CASE(sparse_gradients_with_empty_rows) {
  auto i32 = [](std::vector<int32_t> v) {
    Tensor t = Tensor::empty(DType::I32, {int64_t(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
    return t;
  };
  struct Case {
    std::vector<int32_t> row_ptr, col;
  };
  for (const Case& c : {Case{{0, 0, 2, 2, 3, 3}, {0, 2, 1}}, Case{{0, 0, 0}, {}}}) {
    const int64_t rows = int64_t(c.row_ptr.size()) - 1, nnz = int64_t(c.col.size()), cols = 3;
    ir::Graph g;
    Var rp = input(g, "row_ptr", DType::I32, {rows + 1}), ci = input(g, "col_idx", DType::I32, {nnz});
    Var v = input(g, "values", DType::F64, {nnz}), x = input(g, "x", DType::F64, {cols});
    Var u = input(g, "u", DType::F64, {rows});
    Var y = op("spmv_csr", {rp, ci, v, x}, {{"cols", cols}});
    output(g, grad(sum(y * u), {v, x}));
    Tensor vv = random({nnz}), xv = random({cols}), uv = random({rows});
    auto r = eval(g, {i32(c.row_ptr), i32(c.col), vv, xv, uv});
    std::vector<double> dx(size_t(cols), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int32_t k = c.row_ptr[size_t(i)]; k < c.row_ptr[size_t(i) + 1]; ++k) {
        BOOST_TEST(at(r[0], k) == at(uv, i) * at(xv, c.col[size_t(k)]), boost::test_tools::tolerance(1e-14));
        dx[size_t(c.col[size_t(k)])] += at(vv, k) * at(uv, i);
      }
    for (int64_t j = 0; j < cols; ++j) BOOST_TEST(at(r[1], j) == dx[size_t(j)], boost::test_tools::tolerance(1e-14));
  }
}

// For z = a + ib the gradient of a real loss is dL/da + i dL/db: |z|^2 gives 2z.
BOOST_AUTO_TEST_CASE(complex_gradients_follow_the_conjugate_convention) {
  ir::Graph g;
  Var z = input(g, "z", DType::C64, {6});
  Var m = abs(z);
  output(g, grad(sum(m * m), {z}));
  Tensor zv = Tensor::empty(DType::C64, {6});
  std::uniform_real_distribution<float> u(-2, 2);
  for (int64_t i = 0; i < 6; ++i) zv.data<c64>()[i] = c64(u(rng()), u(rng()));
  auto r = eval(g, {zv});
  for (int64_t i = 0; i < 6; ++i) {
    std::complex<float> want = 2.0f * zv.data<c64>()[i], got = r[0].data<c64>()[i];
    BOOST_TEST(std::abs(got - want) <= 1e-5 * std::abs(want) + 1e-6, got << " vs " << want);
  }
}

// The graph-to-graph form: results, then the gradient of one of them per input.
BOOST_AUTO_TEST_CASE(grad_pass_on_a_graph) {
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {3});
  Var w = input(g, "w", DType::F64, {3});
  output(g, {sum(x * w), x * w});
  ir::Graph d = passes::grad(g);
  BOOST_TEST(d.results.size() == 4u);
  Tensor xv = random({3}), wv = random({3});
  auto r = eval(d, {xv, wv});
  for (int64_t i = 0; i < 3; ++i) {
    BOOST_TEST(at(r[2], i) == at(wv, i));
    BOOST_TEST(at(r[3], i) == at(xv, i));
  }
  ir::Graph e = passes::grad(g, 1, {0}, true);
  BOOST_TEST(e.params.size() == 3u);
  Tensor u = random({3});
  auto s = eval(e, {xv, wv, u});
  for (int64_t i = 0; i < 3; ++i) BOOST_TEST(at(s[2], i) == at(u, i) * at(wv, i));
  expect_error([&] { passes::grad(g, 5); }, {"no result 5"});
}

}  // namespace
}  // namespace rlx
