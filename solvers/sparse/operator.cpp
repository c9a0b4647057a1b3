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

int64_t BoundGraph::param_of_free(size_t k) const {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i].first && k-- == 0) return int64_t(i);
  return -1;
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

Var CsrOperator::apply(BoundGraph& g, const Var& x) const {
  // The matrix arrays are bound once per graph (a second apply reuses them).
  auto& v = g.bound_by[this];
  if (v.empty()) v = {g.bind("A.row_ptr", row_ptr()), g.bind("A.col_idx", col_idx()), g.bind("A.values", values())};
  return op("spmv_csr", {v[0], v[1], v[2], x}, {{"cols", cols()}});
}

Tensor CsrOperator::diagonal() const {
  Tensor d = Tensor::zeros(values().dtype(), {std::min(rows(), cols())});
  auto walk = [&](auto idx_zero) {
    using I = decltype(idx_zero);
    const I* rp = row_ptr().data<I>();
    const I* ci = col_idx().data<I>();
    visit_dtype(values().dtype(), [&](auto vz) {
      using V = decltype(vz);
      const V* val = values().data<V>();
      V* out = d.data<V>();
      for (int64_t r = 0; r < d.numel(); ++r)
        for (I k = rp[r]; k < rp[r + 1]; ++k)
          if (int64_t(ci[k]) == r) out[r] = val[k];
    });
  };
  if (row_ptr().dtype() == DType::I32) walk(int32_t{}); else walk(int64_t{});
  return d;
}

std::string CsrOperator::describe() const {
  return "csr " + std::to_string(rows()) + "x" + std::to_string(cols()) + " nnz=" + std::to_string(values().numel()) + " " +
         dtype_name(values().dtype()) + "/" + dtype_name(row_ptr().dtype());
}

HostOperator::HostOperator(int64_t rows, int64_t cols, DType t, Product product, std::string name, Tensor diagonal,
                           std::optional<dist::Communicator> comm)
    : rows_(rows), cols_(cols), t_(t), name_(std::move(name)), diag_(std::move(diagonal)), comm_(std::move(comm)),
      fn_(name_, [product = std::move(product), t, rows, cols](std::span<const Tensor> in, Tensor& out) {
        if (in.size() != 1 || in[0].type() != TensorType{t, {cols}} || out.type() != TensorType{t, {rows}})
          throw InputError("the operator maps " + TensorType{t, {cols}}.str() + " to " + TensorType{t, {rows}}.str());
        product(in[0], out);
      }) {
  if (rows < 0 || cols < 0) throw InputError("host operator '" + name_ + "': negative size");
  if (!is_inexact(t))
    throw InputError("host operator '" + name_ + "': values must be floating point, got " + dtype_name(t));
  if (diag_.defined() && diag_.type() != TensorType{t, {rows}})
    throw InputError("host operator '" + name_ + "': the diagonal is " + diag_.type().str() + ", expected " +
                     TensorType{t, {rows}}.str());
  if (diag_.defined() && !diag_.is_host()) diag_ = diag_.to(host_allocator());
}

Var HostOperator::apply(BoundGraph&, const Var& x) const { return host_call(fn_.id(), {x}, t_, {rows_}); }

std::string HostOperator::describe() const {
  return "host operator '" + name_ + "' " + std::to_string(rows_) + "x" + std::to_string(cols_) + " " + dtype_name(t_);
}

}  // namespace rlx::sparse
