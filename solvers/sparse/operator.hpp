// What a Krylov solver needs from a matrix or a preconditioner: the ability to emit its
// action into an IR graph. A CSR matrix emits spmv_csr; a row-partitioned MPI matrix or
// a matrix-free stencil emits whatever IR it likes. The tensors it needs enter the
// graph as bound inputs, so they stay on the device across iterations.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/frontend.hpp"

namespace rlx::sparse {

// A graph under construction plus the tensors its inputs are bound to.
class BoundGraph {
 public:
  ir::Graph graph;
  // A graph input fed with t on every run.
  Var bind(const std::string& name, const Tensor& t);
  // A graph input fed by the caller (returned by free_inputs() in order).
  Var input(const std::string& name, DType dt, Shape s);
  // The inputs for a run: bound tensors, with the caller's in the order they were declared.
  std::vector<Tensor> inputs(const std::vector<Tensor>& free) const;
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
};

// A CSR matrix on the host: row_ptr [rows+1], col_idx [nnz] (i32 or i64), values [nnz].
class CsrOperator final : public LinearOperator {
 public:
  CsrOperator(Tensor row_ptr, Tensor col_idx, Tensor values, int64_t cols);
  int64_t rows() const override { return row_ptr_.numel() - 1; }
  int64_t cols() const override { return cols_; }
  DType dtype() const override { return values_.dtype(); }
  Var apply(BoundGraph& g, const Var& x) const override;
  Tensor diagonal() const override;
  std::string describe() const override;
  const Tensor& row_ptr() const { return row_ptr_; }
  const Tensor& col_idx() const { return col_idx_; }
  const Tensor& values() const { return values_; }

 private:
  Tensor row_ptr_, col_idx_, values_;
  int64_t cols_;
};

}  // namespace rlx::sparse
