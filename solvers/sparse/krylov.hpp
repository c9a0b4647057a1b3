// Krylov solvers as IR programs. Each method compiles its iteration once for the chosen
// device; vectors stay on that device, and per iteration only a few scalars (residual
// norm, the dots that detect breakdown) come back to the host, which decides when to
// stop. Every solve says why it stopped.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "dispatch/report.hpp"
#include "solvers/sparse/operator.hpp"
#include "solvers/sparse/precond.hpp"

namespace rlx::sparse {

enum class StopReason { ConvergedRtol, ConvergedAtol, DivergedMaxIt, DivergedBreakdown, DivergedIndefinite, DivergedNan };
const char* stop_reason_name(StopReason r);  // "converged-rtol", "diverged-max-it", ...
inline bool converged(StopReason r) { return r == StopReason::ConvergedRtol || r == StopReason::ConvergedAtol; }

struct KrylovOptions {
  std::string method = "cg";  // cg | bicgstab | gmres | minres  (pcg = cg with a preconditioner)
  double rtol = 1e-8;         // stop when ||r|| <= max(rtol ||b||, atol)
  double atol = 0.0;
  int max_it = 10000;
  int restart = 30;  // gmres
  std::string device = "cpu";
  Policy policy = Policy::PreferNative;
  bool error_if_not_converged = false;  // throw SolveError instead of returning the reason
  // Called after every iteration with (iteration, residual norm); for --monitor.
  std::function<void(int, double)> monitor;
};

struct KrylovResult {
  Tensor x;  // on the host
  StopReason reason = StopReason::DivergedMaxIt;
  int iterations = 0;
  double residual = 0;        // the last residual norm the method tracked
  std::vector<double> history;  // residual norm per iteration, starting with ||r0||
  DispatchReport report;      // how the iteration program runs on the device
};

class SolveError : public Error {
 public:
  SolveError(const std::string& what, KrylovResult r) : Error(what), result(std::move(r)) {}
  KrylovResult result;
};

// Solves A x = b (x0 = 0 unless given). Throws InputError for bad input (shapes,
// dtypes, unknown method); non-convergence is a reason, or a SolveError on request.
KrylovResult krylov_solve(const LinearOperator& A, const Tensor& b, const Preconditioner& M, const KrylovOptions& opts,
                          const Tensor& x0 = {});

}  // namespace rlx::sparse
