#include "solvers/dense/solve.hpp"

#include "core/error.hpp"
#include "ir/frontend.hpp"
#include "runtime/runtime.hpp"

namespace rlx::dense {

namespace {

void check(const Tensor& A, const Tensor& B, const char* what) {
  if (A.rank() != 2 || A.shape()[0] != A.shape()[1])
    throw InputError(std::string(what) + ": A must be square, got " + shape_str(A.shape()));
  if (B.rank() < 1 || B.rank() > 2 || B.shape()[0] != A.shape()[0])
    throw InputError(std::string(what) + ": right-hand side must be [" + std::to_string(A.shape()[0]) + "] or [" +
                     std::to_string(A.shape()[0]) + ", k], got " + shape_str(B.shape()));
  if (B.dtype() != A.dtype()) throw InputError(std::string(what) + ": A and B dtypes differ");
}

std::vector<Tensor> run_on(ir::Graph& g, const std::string& device, const std::vector<Tensor>& in) {
  Device& d = DeviceRegistry::get().runnable_at(device);
  return run(compile(g, d), d, in);
}

// X as a matrix [n, k] (a vector is one column).
Var as_matrix(const Var& v) { return v.rank() == 1 ? reshape(v, {v.shape()[0], 1}) : v; }

}  // namespace

Tensor solve(const Tensor& A, const Tensor& B, const std::string& device) {
  check(A, B, "dense::solve");
  ir::Graph g;
  Var a = input(g, "A", A.dtype(), A.shape()), b = input(g, "B", B.dtype(), B.shape());
  auto lu = op_multi("lu_factor", {a});
  output(g, {op("lu_solve", {lu[0], lu[1], b})});
  return run_on(g, device, {A, B})[0];
}

SolveVjp solve_vjp(const Tensor& A, const Tensor& X, const Tensor& G, const std::string& device) {
  check(A, X, "dense::solve_vjp");
  if (G.type() != X.type()) throw InputError("dense::solve_vjp: grad_X must be " + X.type().str() + ", got " + G.type().str());
  ir::Graph g;
  Var a = input(g, "A", A.dtype(), A.shape()), x = input(g, "X", X.dtype(), X.shape());
  Var gx = input(g, "G", G.dtype(), G.shape());
  Var ah = transpose(a);
  if (A.dtype() == DType::C64) ah = conj(ah);
  auto lu = op_multi("lu_factor", {ah});
  Var lambda = op("lu_solve", {lu[0], lu[1], gx});
  Var xh = transpose(as_matrix(x));
  if (A.dtype() == DType::C64) xh = conj(xh);
  Var grad_a = -matmul(as_matrix(lambda), xh);
  output(g, {grad_a, lambda});
  auto r = run_on(g, device, {A, X, G});
  return {r[0], r[1]};
}

}  // namespace rlx::dense
