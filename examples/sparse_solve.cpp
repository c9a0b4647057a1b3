// A sparse SPD system solved by preconditioned CG on the best device this process can use
// (cuda where there is a GPU, else cpu), with the matrix applied the way rlx measures
// fastest there: sparse::operator_for(A, device, "auto") lays a long-row f64 matrix out in
// tiles on a GPU (the tile_csr op, built on the device) and keeps CSR elsewhere; it says
// which and why. The answer is checked on the host: ||b - A x|| / ||b|| against the
// tolerance asked for.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/device.hpp"
#include "solvers/sparse/direct.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/precond.hpp"
#include "solvers/sparse/tiled.hpp"

using namespace rlx;

int main() {
  // A symmetric matrix with ~120 random off-diagonal entries per row (each entry stored on
  // both sides), made positive definite by a dominant diagonal.
  const int64_t n = 20000;
  std::mt19937_64 g(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<int64_t> i, j;
  std::vector<double> v, diag(static_cast<size_t>(n), 1.0);
  for (int64_t r = 0; r < n; ++r)
    for (int k = 0; k < 60; ++k) {
      const int64_t c = int64_t(g() % uint64_t(n));
      if (c == r) continue;
      const double a = u(g);
      i.insert(i.end(), {r, c}), j.insert(j.end(), {c, r}), v.insert(v.end(), {a, a});
      diag[size_t(r)] += std::fabs(a), diag[size_t(c)] += std::fabs(a);
    }
  for (int64_t r = 0; r < n; ++r) i.push_back(r), j.push_back(r), v.push_back(diag[size_t(r)]);
  const sparse::CsrMatrix A = sparse::CsrMatrix::from_coo(n, n, i, j, v);  // (duplicates summed)
  const sparse::CsrOperator op(A);

  Device* cuda = DeviceRegistry::get().find("cuda");
  Device& dev = cuda && cuda->unavailable().empty() ? *cuda : DeviceRegistry::get().at("cpu");
  const sparse::OperatorChoice choice = sparse::operator_for(op, dev, "auto");
  std::printf("device %s; spmv %s\n", dev.name().c_str(), choice.why.c_str());
  if (choice.op) std::printf("operator: %s (%s)\n", choice.op->describe().c_str(), choice.layout.c_str());
  const sparse::LinearOperator& apply = choice.op ? static_cast<const sparse::LinearOperator&>(*choice.op) : op;

  Tensor b = Tensor::empty(DType::F64, {n});
  for (int64_t r = 0; r < n; ++r) b.data<double>()[r] = u(g);
  auto M = sparse::make_preconditioner("jacobi", op);
  sparse::KrylovOptions o;
  o.method = "cg";
  o.rtol = 1e-10;
  o.device = dev.name();
  const sparse::KrylovResult r = sparse::krylov_solve(apply, b, *M, o);
  const double rel = sparse::relative_residual(A, r.x, b);
  std::printf("%s after %d iterations; true relative residual %.3e\n", sparse::stop_reason_name(r.reason), r.iterations,
              rel);
  return r.reason == sparse::StopReason::ConvergedRtol && rel <= 1e-9 ? 0 : 1;
}
