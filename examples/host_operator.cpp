// A physics code's own operator, solved with rlx's Krylov methods without handing rlx a
// matrix: the code keeps its stencil routine (here one backward-Euler step of 1D diffusion
// with a variable conductivity, u/dt - d/dx (k(x) du/dx), applied matrix-free), and
// sparse::HostOperator wraps it
// so that each product of the solver's compiled program calls it (the host_call op:
// docs/runtime.md, "Host functions"). Jacobi comes from the diagonal the code knows. The
// program's dispatch report names the call; the answer is checked on the host against the
// same routine: ||b - A x|| / ||b|| below the tolerance asked for.
#include <cmath>
#include <cstdio>
#include <vector>

#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/precond.hpp"

using namespace rlx;

namespace {

// The code's own discretisation: n cells on [0, 1], Dirichlet ends, conductivity k(x) on the
// cell faces, c = 1/dt from the time step.
struct Diffusion {
  int64_t n;
  double c;
  std::vector<double> k;  // n + 1 faces
  explicit Diffusion(int64_t cells, double reaction) : n(cells), c(reaction), k(size_t(cells) + 1) {
    for (int64_t f = 0; f <= n; ++f) k[size_t(f)] = 1.0 + 0.9 * std::sin(6.0 * double(f) / double(n));
  }
  double h2() const { return 1.0 / (double(n + 1) * double(n + 1)); }
  void apply(const double* u, double* y) const {
    for (int64_t i = 0; i < n; ++i) {
      const double left = i > 0 ? u[i - 1] : 0.0, right = i + 1 < n ? u[i + 1] : 0.0;
      y[i] = (k[size_t(i)] * (u[i] - left) + k[size_t(i) + 1] * (u[i] - right)) / h2() + c * u[i];
    }
  }
  double diagonal(int64_t i) const { return (k[size_t(i)] + k[size_t(i) + 1]) / h2() + c; }
};

}  // namespace

int main() {
  const Diffusion phys(4000, 1.0 / 1e-4);  // 4,000 cells, dt = 1e-4
  const int64_t n = phys.n;
  Tensor diag = Tensor::empty(DType::F64, {n});
  for (int64_t i = 0; i < n; ++i) diag.data<double>()[i] = phys.diagonal(i);
  const sparse::HostOperator A(
      n, n, DType::F64, [&](const Tensor& x, Tensor& y) { phys.apply(x.data<double>(), y.data<double>()); },
      "1D diffusion stencil", diag);
  auto M = sparse::make_operator_preconditioner("jacobi", A);

  Tensor b = Tensor::empty(DType::F64, {n});
  for (int64_t i = 0; i < n; ++i) b.data<double>()[i] = std::exp(-40.0 * std::pow(double(i) / double(n) - 0.3, 2));
  sparse::KrylovOptions o;
  o.method = "cg";
  o.rtol = 1e-10;
  o.max_it = 100000;
  const sparse::KrylovResult r = sparse::krylov_solve(A, b, *M, o);
  for (const auto& node : r.report.nodes)
    if (node.op == "host_call") std::printf("%s: host_call (%s) at %s\n", A.describe().c_str(), route_name(node.route), node.location.c_str());

  // The check, with the code's own routine.
  std::vector<double> ax(static_cast<size_t>(n));
  phys.apply(r.x.data<double>(), ax.data());
  double rr = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = b.data<double>()[i] - ax[size_t(i)];
    rr += d * d, bb += b.data<double>()[i] * b.data<double>()[i];
  }
  const double rel = std::sqrt(rr / bb);
  std::printf("%s after %d iterations; true relative residual %.3e\n", sparse::stop_reason_name(r.reason), r.iterations,
              rel);
  return sparse::converged(r.reason) && rel <= 1e-9 ? 0 : 1;
}
