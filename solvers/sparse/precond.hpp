// Preconditioners z = M^{-1} r, emitted into the solver's IR. Setup (factorizations)
// runs once on the host; the apply is IR (elementwise or sptrsv_csr), so it runs on the
// solver's device.
#pragma once
#include <memory>
#include <string>

#include "solvers/sparse/operator.hpp"

namespace rlx::sparse {

class Preconditioner {
 public:
  virtual ~Preconditioner() = default;
  virtual Var apply(BoundGraph& g, const Var& r) const = 0;
  virtual std::string name() const = 0;
};

// "none", "jacobi", "ilu0", "ic0", "ssor" (omega in (0, 2)). Throws InputError naming the
// row when the matrix does not admit the preconditioner (zero diagonal, IC(0) breakdown).
std::unique_ptr<Preconditioner> make_preconditioner(const std::string& name, const CsrOperator& A, double omega = 1.0);

// For an operator known only by its product and maybe its diagonal (HostOperator, a
// matrix-free stencil): "none", or "jacobi" from A.diagonal() (an InputError where the
// operator has none, or a zero on it).
std::unique_ptr<Preconditioner> make_operator_preconditioner(const std::string& name, const LinearOperator& A);

}  // namespace rlx::sparse
