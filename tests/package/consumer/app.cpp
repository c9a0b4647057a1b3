// A downstream program built against an installed rlx (tests/package): a graph compiled
// for the cpu device and run, then a sparse system solved with CG. Exit 0 only when both
// answers are right.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ir/frontend.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/precond.hpp"

using namespace rlx;

static Tensor tensor(const Shape& shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

int main() {
  // relu(x w + b) on small integers: every product and sum is exact in f32.
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {2, 3});
  auto w = input(g, "w", DType::F32, {3, 2});
  auto b = input(g, "b", DType::F32, {2});
  output(g, {relu(matmul(x, w) + b)});
  Device& cpu = DeviceRegistry::get().at("cpu");
  Program p = compile(g, cpu);
  Tensor y = run(p, cpu, {tensor({2, 3}, {1, 2, 3, 4, 5, 6}), tensor({3, 2}, {1, -1, 0, 2, 1, -3}), tensor({2}, {0.5f, 1})})[0];
  const float want[] = {4.5f, 0, 10.5f, 0};  // x w = [[4, -6], [10, -12]]
  int bad = 0;
  for (int i = 0; i < 4; ++i) bad += y.data<float>()[i] != want[i];
  std::printf("graph on %s: [%g %g; %g %g] %s\n", cpu.name().c_str(), y.data<float>()[0], y.data<float>()[1],
              y.data<float>()[2], y.data<float>()[3], bad ? "WRONG" : "ok");

  // The 1D Laplacian (2 on the diagonal, -1 beside it), b = A x* for a known x*; CG.
  const int64_t n = 50;
  std::vector<int64_t> ri, ci;
  std::vector<double> v;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = r - 1; c <= r + 1; ++c)
      if (c >= 0 && c < n) ri.push_back(r), ci.push_back(c), v.push_back(c == r ? 2.0 : -1.0);
  const sparse::CsrOperator A(sparse::CsrMatrix::from_coo(n, n, ri, ci, v));
  std::vector<double> xs(n);
  Tensor rhs = Tensor::empty(DType::F64, {n});
  for (int64_t r = 0; r < n; ++r) xs[size_t(r)] = std::sin(0.3 * double(r)) + 1.0;
  for (int64_t r = 0; r < n; ++r)
    rhs.data<double>()[r] = 2 * xs[size_t(r)] - (r > 0 ? xs[size_t(r - 1)] : 0) - (r + 1 < n ? xs[size_t(r + 1)] : 0);
  sparse::KrylovOptions o;
  o.method = "cg";
  o.rtol = 1e-12;
  o.device = "cpu";
  const sparse::KrylovResult s = sparse::krylov_solve(A, rhs, *sparse::make_preconditioner("none", A), o);
  double err = 0;
  for (int64_t r = 0; r < n; ++r) err = std::max(err, std::fabs(s.x.data<double>()[r] - xs[size_t(r)]));
  const bool solved = s.reason == sparse::StopReason::ConvergedRtol && err < 1e-8;
  std::printf("cg: %s after %d iterations, max |x - x*| = %.2e %s\n", sparse::stop_reason_name(s.reason), s.iterations,
              err, solved ? "ok" : "WRONG");
  return bad == 0 && solved ? 0 : 1;
}
