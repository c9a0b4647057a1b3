// What a Krylov solver needs from a matrix or a preconditioner: the ability to emit its
// action into an IR graph. A CSR matrix emits spmv_csr; a row-partitioned MPI matrix or
// a matrix-free stencil emits whatever IR it likes. The tensors it needs enter the
// graph as bound inputs, so they stay on the device across iterations.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.hpp"
#include "ir/frontend.hpp"
#include "runtime/host_function.hpp"
#include "solvers/sparse/csr.hpp"

namespace rlx::sparse {

// A graph under construction plus the tensors its inputs are bound to.
class BoundGraph {
 public:
  ir::Graph graph;
  // A graph input fed with t on every run.
  Var bind(const std::string& name, const Tensor& t);
  // A graph input fed by the caller: its tensor goes into inputs()'s `free`, in the order
  // of the input() calls.
  Var input(const std::string& name, DType dt, Shape s);
  // The inputs for a run: bound tensors, with the caller's in the order they were declared.
  std::vector<Tensor> inputs(const std::vector<Tensor>& free) const;
  // The graph parameter index of the caller's k-th input (none past the last: -1).
  int64_t param_of_free(size_t k) const;
  // Copies the bound tensors to a device once (they are reused by every run).
  void move_bound_to(Allocator* a);
  // Inputs an operator already bound in this graph, keyed by the operator.
  std::map<const void*, std::vector<Var>> bound_by;

 private:
  std::vector<std::pair<bool, Tensor>> slots_;  // per graph input: bound?, tensor
};

class LinearOperator {
 public:
  virtual ~LinearOperator() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  virtual DType dtype() const = 0;
  // y = A x, emitted into x's graph; bind whatever tensors it needs through g.
  virtual Var apply(BoundGraph& g, const Var& x) const = 0;
  // The diagonal (for Jacobi); operators without one return an undefined Tensor.
  virtual Tensor diagonal() const { return {}; }
  virtual std::string describe() const = 0;
  // For an operator distributed over processes (its vectors are each rank's part): their
  // communicator, over which the solvers all_reduce dot products. nullptr: one process.
  virtual const dist::Communicator* communicator() const { return nullptr; }
};

// A CsrMatrix as an operator: apply emits spmv_csr with the matrix arrays bound once.
class CsrOperator final : public LinearOperator {
 public:
  explicit CsrOperator(CsrMatrix A) : A_(std::move(A)) {}
  int64_t rows() const override { return A_.rows(); }
  int64_t cols() const override { return A_.cols(); }
  DType dtype() const override { return A_.value_type(); }
  Var apply(BoundGraph& g, const Var& x) const override;
  Tensor diagonal() const override;
  std::string describe() const override;
  const CsrMatrix& matrix() const { return A_; }
  const Tensor& row_ptr() const { return A_.row_ptr(); }
  const Tensor& col_idx() const { return A_.col_idx(); }
  const Tensor& values() const { return A_.values(); }

 private:
  CsrMatrix A_;
};

// An operator whose product y = A x is code of the running program (a PETSc MatMult, a
// physics code's own routine): apply emits host_call (src/runtime/host_function.hpp), so the
// operator's data is never copied into rlx structures. The product gets x (contiguous, host
// memory, `cols` entries of dtype t) and writes all of y (`rows` entries); it runs once per
// product the solver's program makes, in program order on every rank, so a collective inside
// it (MatMult's halo exchange) is matched. On devices without host memory the call is
// host-staged, which the solve must allow. `diagonal` (optional, `rows` entries of t) serves
// Jacobi; `comm` makes the operator distributed (its vectors are this rank's rows, dot products
// are summed over comm). No derivative flows through it.
class HostOperator final : public LinearOperator {
 public:
  using Product = std::function<void(const Tensor& x, Tensor& y)>;
  HostOperator(int64_t rows, int64_t cols, DType t, Product product, std::string name, Tensor diagonal = {},
               std::optional<dist::Communicator> comm = std::nullopt);
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  DType dtype() const override { return t_; }
  Var apply(BoundGraph& g, const Var& x) const override;
  Tensor diagonal() const override { return diag_; }
  std::string describe() const override;
  const dist::Communicator* communicator() const override { return comm_ ? &*comm_ : nullptr; }

 private:
  int64_t rows_, cols_;
  DType t_;
  std::string name_;
  Tensor diag_;
  std::optional<dist::Communicator> comm_;
  HostFunction fn_;
};

}  // namespace rlx::sparse
