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

enum class StopReason {
  ConvergedRtol,
  ConvergedAtol,
  DivergedMaxIt,
  DivergedBreakdown,
  DivergedIndefinite,
  DivergedNan,
  DivergedStagnation,  // the method's recursion said converged, the true residual did not, and restarting
                       // from the true residual made no progress (a singular or inconsistent system,
                       // or a tolerance below the attainable accuracy); GMRES(m): a restart cycle that
                       // did not reduce the true residual
};
const char* stop_reason_name(StopReason r);  // "converged-rtol", "diverged-max-it", ...
inline bool converged(StopReason r) { return r == StopReason::ConvergedRtol || r == StopReason::ConvergedAtol; }

// A solve reports convergence only when the true residual ||b - A x|| of the x it returns,
// computed afresh on the device (one operator product, at claimed convergence), is within
// kTrueResidualSlack times the tolerance max(rtol ||b||, atol). The methods' recursively
// updated residuals drift from the true one by rounding (a few ulps of ||A|| ||x|| per
// iteration), and MINRES tracks a preconditioned norm that differs from ||r|| by up to the
// preconditioner's scaling; 10 absorbs both in healthy solves without hiding a false claim
// (those are off by orders of magnitude: 0.4 and 1.4 relative on the issue-14 systems).
// When the check fails the method restarts from x with the true residual and a stop
// threshold lowered by the factor it missed by; if the true residual has not at least
// halved since the previous check the solve stops with diverged-stagnation.
inline constexpr double kTrueResidualSlack = 10.0;

struct KrylovOptions {
  std::string method = "cg";  // cg | pipecg | bicgstab | gmres | minres  (pcg = cg with a preconditioner)
  double rtol = 1e-8;         // stop when ||r|| <= max(rtol ||b||, atol)
  double atol = 0.0;
  int max_it = 10000;
  int restart = 30;  // gmres
  // gmres: how each Arnoldi vector is orthogonalized against the basis. "cgs2": classical
  // Gram-Schmidt twice (four passes over the basis a step, three where the device fuses
  // project_out; orthogonal to working precision even when the first pass cancels badly);
  // "cgs": once (two passes; PETSc's default, whose loss of orthogonality grows with the
  // square of the basis's condition number and can stall a restart cycle).
  std::string orthogonalization = "cgs2";
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
  double true_residual = 0;   // ||b - A x|| of the returned x, computed on the device
  std::vector<double> history;  // residual norm per iteration, starting with ||r0||
  DispatchReport report;      // how the iteration program runs on the device
};

class SolveError : public Error {
 public:
  SolveError(const std::string& what, KrylovResult r) : Error(what), result(std::move(r)) {}
  KrylovResult result;
};

// Whether `name` is a KrylovOptions::orthogonalization krylov_solve knows (cgs2, cgs).
bool known_orthogonalization(const std::string& name);

// Solves A x = b (x0 = 0 unless given). Throws InputError for bad input (shapes,
// dtypes, unknown method); non-convergence is a reason, or a SolveError on request.
KrylovResult krylov_solve(const LinearOperator& A, const Tensor& b, const Preconditioner& M, const KrylovOptions& opts,
                          const Tensor& x0 = {});

}  // namespace rlx::sparse
