#include "solvers/sparse/operator.hpp"

#include "core/error.hpp"

namespace rlx::sparse {

// Graph input names must be unique; two operators may both call theirs "A.values".
static std::string unique_name(const ir::Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.params.size(); ++i)
    if (g.param_name(i) == name) return name + "." + std::to_string(g.params.size());
  return name;
}

Var BoundGraph::bind(const std::string& name, const Tensor& t) {
  slots_.push_back({true, t});
  return rlx::input(graph, unique_name(graph, name), t.dtype(), t.shape());
}

Var BoundGraph::input(const std::string& name, DType dt, Shape s) {
  slots_.push_back({false, Tensor{}});
  return rlx::input(graph, unique_name(graph, name), dt, std::move(s));
}

void BoundGraph::move_bound_to(Allocator* a) {
  for (auto& [bound, t] : slots_)
    if (bound && t.allocator() != a) t = t.to(a);
}

std::vector<Tensor> BoundGraph::inputs(const std::vector<Tensor>& free) const {
  std::vector<Tensor> r;
  size_t k = 0;
  for (auto& [bound, t] : slots_) {
    if (bound) {
      r.push_back(t);
    } else {
      if (k >= free.size()) throw InternalError("BoundGraph: too few run-time inputs");
      r.push_back(free[k++]);
    }
  }
  if (k != free.size()) throw InternalError("BoundGraph: too many run-time inputs");
  return r;
}

CsrOperator::CsrOperator(Tensor row_ptr, Tensor col_idx, Tensor values, int64_t cols)
    : row_ptr_(std::move(row_ptr)), col_idx_(std::move(col_idx)), values_(std::move(values)), cols_(cols) {
  if (row_ptr_.rank() != 1 || row_ptr_.numel() < 1) throw InputError("CSR row_ptr must be [rows+1]");
}

Var CsrOperator::apply(BoundGraph& g, const Var& x) const {
  // The matrix arrays are bound once per graph (a second apply reuses them).
  auto& v = g.bound_by[this];
  if (v.empty()) v = {g.bind("A.row_ptr", row_ptr_), g.bind("A.col_idx", col_idx_), g.bind("A.values", values_)};
  return op("spmv_csr", {v[0], v[1], v[2], x}, {{"cols", cols_}});
}

Tensor CsrOperator::diagonal() const {
  Tensor d = Tensor::zeros(values_.dtype(), {std::min(rows(), cols_)});
  auto walk = [&](auto idx_zero) {
    using I = decltype(idx_zero);
    const I* rp = row_ptr_.data<I>();
    const I* ci = col_idx_.data<I>();
    visit_dtype(values_.dtype(), [&](auto vz) {
      using V = decltype(vz);
      const V* val = values_.data<V>();
      V* out = d.data<V>();
      for (int64_t r = 0; r < d.numel(); ++r)
        for (I k = rp[r]; k < rp[r + 1]; ++k)
          if (int64_t(ci[k]) == r) out[r] = val[k];
    });
  };
  if (row_ptr_.dtype() == DType::I32) walk(int32_t{}); else walk(int64_t{});
  return d;
}

std::string CsrOperator::describe() const {
  return "csr " + std::to_string(rows()) + "x" + std::to_string(cols_) + " nnz=" + std::to_string(values_.numel()) + " " +
         dtype_name(values_.dtype()) + "/" + dtype_name(row_ptr_.dtype());
}

}  // namespace rlx::sparse
