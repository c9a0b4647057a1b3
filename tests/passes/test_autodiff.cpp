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
#include <tuple>

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
// one feeding the value is refused, as are argmax, a data-dependent while, integer wrt and a
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
    expect_error([&] { grad(sum(r[0]), {x}); },
                 {"while at test_autodiff.cpp:" + std::to_string(line), "trip count depends on the data",
                  "does not compare a carried integer with a constant", "adjoint rule"});
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

// ---- Control flow: if, and while with a fixed trip count ----

using Vars = std::vector<Var>;
using Build = std::function<Var(const Vars&)>;

Tensor predicate(bool p) { return scalar_tensor(DType::Bool, p ? 1.0 : 0.0); }

Vars inputs_like(ir::Graph& g, const std::vector<Tensor>& in) {
  Vars xs;
  for (size_t i = 0; i < in.size(); ++i) xs.push_back(input(g, "x" + std::to_string(i), in[i].dtype(), in[i].shape()));
  return xs;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(at(t, i)));
  return m;
}

// The program on cpu against reference: every f64 result within 1e-10 of reference's
// (relative to the result's largest element, at least 1).
void cpu_matches_reference(const ir::Graph& g, const std::vector<Tensor>& in, const std::string& what) {
  Device& ref = DeviceRegistry::get().at("reference");
  Device& cpu = DeviceRegistry::get().at("cpu");
  auto want = run(compile(g, ref), ref, in), got = run(compile(g, cpu), cpu, in);
  for (size_t k = 0; k < want.size(); ++k) {
    double worst = 0;
    for (int64_t i = 0; i < want[k].numel(); ++i) worst = std::max(worst, std::abs(at(got[k], i) - at(want[k], i)));
    BOOST_TEST(worst <= 1e-10 * std::max(1.0, max_abs(want[k])), what << ": cpu result " << k << " off by " << worst);
  }
}

// f's gradient with respect to the inputs at `wrt` (f64) against central differences of f
// on the reference device (step 1e-6; error <= 1e-6 relative to the largest difference
// quotient, at least 1), then the whole program on cpu against reference.
void check_gradient(const Build& f, const std::vector<Tensor>& in, const std::vector<size_t>& wrt, const std::string& what) {
  ir::Graph g;
  Vars xs = inputs_like(g, in);
  Var y = f(xs);
  Vars w;
  for (size_t k : wrt) w.push_back(xs[k]);
  Vars outs{y};
  for (const Var& d : grad(y, w)) outs.push_back(d);
  output(g, outs);
  Device& ref = DeviceRegistry::get().at("reference");
  Program p = compile(g, ref);
  auto r = run(p, ref, in);
  const double h = 1e-6;
  for (size_t j = 0; j < wrt.size(); ++j) {
    double worst = 0, scale = 0;
    for (int64_t e = 0; e < in[wrt[j]].numel(); ++e) {
      auto moved = [&](double s) {
        std::vector<Tensor> m = in;
        m[wrt[j]] = in[wrt[j]].clone();
        m[wrt[j]].data<double>()[e] += s;
        return at(run(p, ref, m)[0], 0);
      };
      const double fd = (moved(h) - moved(-h)) / (2 * h);
      worst = std::max(worst, std::abs(fd - at(r[1 + j], e)));
      scale = std::max(scale, std::abs(fd));
    }
    BOOST_TEST(worst <= 1e-6 * std::max(1.0, scale),
               what << ": d/d input " << wrt[j] << " off by " << worst << " (scale " << scale << ")");
  }
  cpu_matches_reference(g, in, what);
}

// jvp of f's value y along v against central differences of y, and hvp of sum(y^2) along
// v against central differences of its gradient (step 1e-5; error <= 1e-6 relative), with
// respect to input k (f64); then the program on cpu against reference.
void check_jvp_and_hvp(const Build& f, std::vector<Tensor> in, size_t k, const std::string& what) {
  ir::Graph g;
  Vars xs = inputs_like(g, in);
  Var v = input(g, "v", DType::F64, in[k].shape());
  Var y = f(xs);
  Var s = sum(y * y);
  output(g, {y, jvp({y}, {xs[k]}, {v})[0], grad(s, {xs[k]})[0], hvp(s, {xs[k]}, {v})[0]});
  in.push_back(random(in[k].shape()));
  Device& ref = DeviceRegistry::get().at("reference");
  Program p = compile(g, ref);
  auto r = run(p, ref, in);
  const double h = 1e-5;
  auto moved = [&](double t) {
    std::vector<Tensor> m = in;
    m[k] = in[k].clone();
    for (int64_t e = 0; e < m[k].numel(); ++e) m[k].data<double>()[e] += t * at(in.back(), e);
    return run(p, ref, m);
  };
  auto up = moved(h), down = moved(-h);
  for (auto [value, derivative, name] : {std::tuple{0, 1, "jvp"}, std::tuple{2, 3, "hvp"}}) {
    double worst = 0, scale = 0;
    for (int64_t e = 0; e < r[size_t(derivative)].numel(); ++e) {
      const double fd = (at(up[size_t(value)], e) - at(down[size_t(value)], e)) / (2 * h);
      worst = std::max(worst, std::abs(fd - at(r[size_t(derivative)], e)));
      scale = std::max(scale, std::abs(fd));
    }
    BOOST_TEST(worst <= 1e-6 * std::max(1.0, scale), what << ": " << name << " off by " << worst << " (scale " << scale << ")");
  }
  cpu_matches_reference(g, in, what);
}

Vars one(const Var& v) { return Vars{v}; }

// y = if p then sin(x) w else x^2 e^w: the gradient is the taken branch's.
Var two_branches(const Vars& in) {
  Var y = if_then_else(in[0], {in[1], in[2]}, [](const Vars& v) { return one(sin(v[0]) * v[1]); },
                       [](const Vars& v) { return one(v[0] * v[0] * exp(v[1])); })[0];
  return sum(y * y) + sum(in[1]);
}

BOOST_AUTO_TEST_CASE(if_gradient_follows_the_taken_branch) {
  for (bool p : {true, false})
    check_gradient(two_branches, {predicate(p), random({5}), random({5})}, {1, 2}, p ? "then" : "else");
  // Against the closed form as well: the else branch's d/dw of sum(y^2) is 2 y^2 per element.
  ir::Graph g;
  Vars xs = inputs_like(g, {predicate(false), random({5}), random({5})});
  Var y = if_then_else(xs[0], {xs[1], xs[2]}, [](const Vars& v) { return one(sin(v[0]) * v[1]); },
                       [](const Vars& v) { return one(v[0] * v[0] * exp(v[1])); })[0];
  output(g, {y, grad(sum(y * y), {xs[2]})[0]});
  auto r = eval(g, {predicate(false), random({5}), random({5})});
  for (int64_t i = 0; i < 5; ++i) BOOST_TEST(at(r[1], i) == 2 * at(r[0], i) * at(r[0], i), boost::test_tools::tolerance(1e-12));
}

// Branches reading different arguments (one returns an argument as it is, one reads an
// integer argument and one a value grad does not differentiate with respect to): each
// argument gets the taken branch's cotangent, zeros where that branch does not read it.
BOOST_AUTO_TEST_CASE(if_branches_using_different_arguments) {
  Tensor n = Tensor::empty(DType::I64, {});
  *n.data<int64_t>() = 3;
  auto f = [](const Vars& in) {
    auto r = if_then_else(
        in[0], {in[1], in[2], in[3], in[4], in[5]},
        [](const Vars& v) { return Vars{v[0] * v[1] * cast(v[4], DType::F64), v[2]}; },
        [](const Vars& v) { return Vars{exp(v[2]) * v[3], v[0]}; });
    return sum(r[0] * r[1]) + sum(r[0]);
  };
  for (bool p : {true, false})
    check_gradient(f, {predicate(p), random({4}), random({4}), random({4}), random({4}), n}, {1, 2, 3},
                   p ? "then reads x, w, z" : "else reads x, z, c");
}

// An if inside a branch of another: all four paths.
BOOST_AUTO_TEST_CASE(nested_if) {
  auto f = [](const Vars& in) {
    Var y = if_then_else(
        in[0], {in[1], in[2], in[3]},
        [](const Vars& v) {
          Var z = if_then_else(v[0], {v[1], v[2]}, [](const Vars& u) { return one(sin(u[0]) * u[1]); },
                               [](const Vars& u) { return one(u[0] * u[1] * u[1]); })[0];
          return one(z + v[1]);
        },
        [](const Vars& v) { return one(exp(v[1]) * v[2]); })[0];
    return sum(y * y);
  };
  for (bool p : {true, false})
    for (bool q : {true, false})
      check_gradient(f, {predicate(p), predicate(q), random({4}), random({4})}, {2, 3},
                     std::string("p=") + (p ? "1" : "0") + " q=" + (q ? "1" : "0"));
}

// The loop x <- x + 0.5 sin(x) w, the counter i from `start` stepped by `step` while
// `cond(i)`: grad unrolls it as many times as it runs.
Vars counted_loop(const Var& x, const Var& w, const Var& start, const RegionFn& cond, const std::function<Var(const Var&)>& step) {
  return while_loop({start, x, w}, cond, [&](const Vars& v) { return Vars{step(v[0]), v[1] + sin(v[1]) * v[2] * 0.5, v[2]}; });
}

BOOST_AUTO_TEST_CASE(fixed_trip_while) {
  // The brief's loop: x <- sin(x) w + x for 5 trips, with respect to x and w.
  check_gradient(
      [](const Vars& in) {
        Var x = while_loop({scalar(*in[0].graph(), 0, DType::I64), in[0], in[1]},
                           [](const Vars& v) { return one(lt(v[0], scalar_like(v[0], 5))); },
                           [](const Vars& v) { return Vars{v[0] + scalar_like(v[0], 1), sin(v[1]) * v[2] + v[1], v[2]}; })[1];
        return sum(x * x);
      },
      {random({6}, -1, 1), random({6}, -1, 1)}, {0, 1}, "x <- sin(x) w + x, 5 trips");
  // Counters in every form grad recognizes; a wrong count would miss the differences.
  struct Form {
    const char* what;
    DType t;
    int64_t start;
    std::function<Var(const Var&)> cond, step;
  };
  auto k = [](const Var& like, double v) { return scalar_like(like, v); };
  const std::vector<Form> forms = {
      {"i = 5; i > 0; i -= 1", DType::I64, 5, [&](const Var& i) { return gt(i, k(i, 0)); }, [&](const Var& i) { return i - k(i, 1); }},
      {"i = 0; 6 > i; i = 2 + i", DType::I32, 0, [&](const Var& i) { return gt(k(i, 6), i); }, [&](const Var& i) { return k(i, 2) + i; }},
      {"i = 1; i <= 7; i += 3", DType::I64, 1, [&](const Var& i) { return le(i, k(i, 7)); }, [&](const Var& i) { return i + k(i, 3); }},
      {"i = 10; i >= 0; i += -4", DType::I32, 10, [&](const Var& i) { return ge(i, k(i, 0)); }, [&](const Var& i) { return i + k(i, -4); }},
      {"i = 0; i != 6; i += 2", DType::I64, 0, [&](const Var& i) { return ne(i, k(i, 6)); }, [&](const Var& i) { return i + k(i, 2); }},
  };
  for (const Form& form : forms)
    check_gradient(
        [&](const Vars& in) {
          Var start = scalar(*in[0].graph(), double(form.start), form.t);
          Vars r = counted_loop(in[0], in[1], start, [&](const Vars& v) { return one(form.cond(v[0])); }, form.step);
          return sum(r[1] * r[1]) + sum(r[2]);
        },
        {random({3}, -1, 1), random({3}, -1, 1)}, {0, 1}, form.what);
}

// A loop that runs no trips is the identity: d sum(x c)/dx = c, and w, carried but never
// read, gets zeros.
BOOST_AUTO_TEST_CASE(zero_trip_while) {
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {4}), w = input(g, "w", DType::F64, {4}), c = input(g, "c", DType::F64, {4});
  Vars r = counted_loop(x, w, scalar(g, 5, DType::I64), [](const Vars& v) { return one(lt(v[0], scalar_like(v[0], 3))); },
                        [](const Var& i) { return i + scalar_like(i, 1); });
  output(g, grad(sum(r[1] * c), {x, w}));
  Tensor xv = random({4}), wv = random({4}), cv = random({4});
  auto d = eval(g, {xv, wv, cv});
  for (int64_t i = 0; i < 4; ++i) {
    BOOST_TEST(at(d[0], i) == at(cv, i));
    BOOST_TEST(at(d[1], i) == 0.0);
  }
  cpu_matches_reference(g, {xv, wv, cv}, "zero trips");
}

// An if in a loop's body, its predicate read off the counter: the first two trips take
// one branch, the other two the other.
Var if_in_loop(const Vars& in) {
  Vars r = while_loop(
      {scalar(*in[0].graph(), 0, DType::I64), in[0], in[1]}, [](const Vars& v) { return one(lt(v[0], scalar_like(v[0], 4))); },
      [](const Vars& v) {
        Var y = if_then_else(lt(v[0], scalar_like(v[0], 2)), {v[1], v[2]}, [](const Vars& u) { return one(sin(u[0]) * u[1]); },
                             [](const Vars& u) { return one(u[0] * u[1] + cos(u[0])); })[0];
        return Vars{v[0] + scalar_like(v[0], 1), y, v[2]};
      });
  return sum(r[1] * r[1]);
}

BOOST_AUTO_TEST_CASE(if_inside_a_while_body) {
  check_gradient(if_in_loop, {random({5}, -1, 1), random({5}, -1, 1)}, {0, 1}, "if in a loop");
}

// A fixed-trip loop in a branch: unrolled inside the branch's VJP region.
BOOST_AUTO_TEST_CASE(while_inside_an_if_branch) {
  auto f = [](const Vars& in) {
    Var y = if_then_else(
        in[0], {in[1], in[2]},
        [](const Vars& v) {
          return one(while_loop({scalar(*v[0].graph(), 0, DType::I64), v[0], v[1]},
                                [](const Vars& u) { return one(lt(u[0], scalar_like(u[0], 3))); },
                                [](const Vars& u) { return Vars{u[0] + scalar_like(u[0], 1), sin(u[1]) * u[2] + u[1], u[2]}; })[1]);
        },
        [](const Vars& v) { return one(v[0] * v[1]); })[0];
    return sum(y * y);
  };
  for (bool p : {true, false})
    check_gradient(f, {predicate(p), random({4}, -1, 1), random({4}, -1, 1)}, {1, 2}, p ? "loop branch" : "product branch");
}

// jvp transposes the if's VJP (itself an if) and hvp differentiates it again; the
// unrolled loop differentiates as ordinary ops.
BOOST_AUTO_TEST_CASE(jvp_and_hvp_through_control_flow) {
  auto branches = [](const Vars& in) {
    return if_then_else(in[0], {in[1], in[2]}, [](const Vars& v) { return one(sin(v[0]) * v[1] * v[0]); },
                        [](const Vars& v) { return one(exp(v[0]) * v[1]); })[0];
  };
  for (bool p : {true, false})
    for (size_t k : {1, 2})
      check_jvp_and_hvp(branches, {predicate(p), random({5}, -1, 1), random({5}, -1, 1)}, k,
                        std::string("if ") + (p ? "then" : "else") + ", input " + std::to_string(k));
  auto loop = [](const Vars& in) {
    return while_loop({scalar(*in[0].graph(), 0, DType::I64), in[0], in[1]},
                      [](const Vars& v) { return one(lt(v[0], scalar_like(v[0], 5))); },
                      [](const Vars& v) { return Vars{v[0] + scalar_like(v[0], 1), sin(v[1]) * v[2] + v[1], v[2]}; })[1];
  };
  for (size_t k : {0, 1}) check_jvp_and_hvp(loop, {random({4}, -1, 1), random({4}, -1, 1)}, k, "while, input " + std::to_string(k));
  check_jvp_and_hvp([](const Vars& in) { return reshape(if_in_loop(in), {1}); }, {random({3}, -1, 1), random({3}, -1, 1)}, 1,
                    "if in a loop");
}

// Every node grad appends through an if and a loop, in the regions as well, carries a
// location in this file: the if's or the loop's line, or the line inside a region function
// of the node it recomputes or differentiates.
BOOST_AUTO_TEST_CASE(control_flow_backward_carries_the_forward_locations) {
  ir::Graph g;
  Var p = input(g, "p", DType::Bool, {}), x = input(g, "x", DType::F64, {4}), w = input(g, "w", DType::F64, {4});
  Var y = two_branches({p, x, w}) + if_in_loop({x, w});
  const size_t forward = g.nodes.size();
  grad(y, {x, w});
  std::function<void(const ir::Graph&, size_t)> check = [&](const ir::Graph& r, size_t from) {
    for (size_t i = from; i < r.nodes.size(); ++i) {
      const ir::Node& n = r.nodes[i];
      if (n.op->name != "param") BOOST_TEST(n.loc.file == "test_autodiff.cpp", n.op->name << " at " << n.loc.str());
      for (const auto& region : n.regions) check(*region, 0);
    }
  };
  BOOST_TEST(g.nodes.size() > forward);
  check(g, forward);
}

// A loop whose trip count depends on the data (its condition reads a value; its counter
// starts at an input or steps by one), one that never ends and one that would unroll past
// the limit are refused with the node, the reason and the count.
BOOST_AUTO_TEST_CASE(what_grad_refuses_in_loops) {
  auto body = [](const Vars& v) { return Vars{v[0] + scalar_like(v[0], 1), v[1] * 1.0001}; };
  auto below = [](int64_t n) {
    return [n](const Vars& v) { return one(lt(v[0], scalar_like(v[0], double(n)))); };
  };
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {4}), n = input(g, "n", DType::I64, {});
    const int line = __LINE__ + 1;
    Vars r = while_loop({n, x}, below(10), body);
    expect_error([&] { grad(sum(r[1]), {x}); },
                 {"while at test_autodiff.cpp:" + std::to_string(line), "depends on the data", "does not start at a constant"});
  }
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {4});
    const int line = __LINE__ + 1;
    Vars r = while_loop({scalar(g, 0, DType::I64), x}, below(10), [](const Vars& v) {
      return Vars{v[0] + cast(gt(sum(v[1]), scalar_like(v[1], 0.0)), DType::I64) + scalar_like(v[0], 1), v[1] * 2.0};
    });
    expect_error([&] { grad(sum(r[1]), {x}); },
                 {"while at test_autodiff.cpp:" + std::to_string(line), "depends on the data", "does not step its counter"});
  }
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {4});
    const int line = __LINE__ + 1;
    Vars r = while_loop({scalar(g, 0, DType::I64), x}, below(10),
                        [](const Vars& v) { return Vars{v[0] - scalar_like(v[0], 1), v[1] * 2.0}; });
    expect_error([&] { grad(sum(r[1]), {x}); }, {"while at test_autodiff.cpp:" + std::to_string(line), "never ends"});
  }
  {
    ir::Graph g;
    Var x = input(g, "x", DType::F64, {4});
    const int line = __LINE__ + 1;
    Vars r = while_loop({scalar(g, 0, DType::I64), x}, below(200000), body);
    Var loss = sum(r[1]);
    const size_t before = g.nodes.size();
    expect_error([&] { grad(loss, {x}); }, {"while at test_autodiff.cpp:" + std::to_string(line), "200000 trips",
                                            "4-node body", "more than 100000 nodes"});
    BOOST_TEST(g.nodes.size() == before + 1);  // the seed; nothing of a backward
  }
}

}  // namespace
}  // namespace rlx
