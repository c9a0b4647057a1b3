#include "solvers/sparse/precond.hpp"

#include <cmath>
#include <complex>

#include "core/error.hpp"
#include "solvers/sparse/scalar.hpp"

namespace rlx::sparse {

namespace {

// A CSR matrix in plain vectors for host-side setup (any index width, any value dtype).
template <class T>
struct HostCsr {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> rp, ci;
  std::vector<T> v;
};

template <class T, class S>
HostCsr<T> to_host(const CsrOperator& A) {
  HostCsr<T> h;
  h.rows = A.rows();
  h.cols = A.cols();
  auto copy = [&](auto z) {
    using I = decltype(z);
    const I* rp = A.row_ptr().data<I>();
    const I* ci = A.col_idx().data<I>();
    h.rp.assign(rp, rp + h.rows + 1);
    h.ci.assign(ci, ci + A.col_idx().numel());
  };
  if (A.row_ptr().dtype() == DType::I32) copy(int32_t{}); else copy(int64_t{});
  const S* val = A.values().data<S>();
  h.v.resize(size_t(A.values().numel()));
  for (size_t k = 0; k < h.v.size(); ++k) h.v[k] = widen<T>(val[k]);
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t k = h.rp[size_t(r)] + 1; k < h.rp[size_t(r) + 1]; ++k)
      if (h.ci[size_t(k)] <= h.ci[size_t(k) - 1])
        throw InputError("row " + std::to_string(r) + " has unsorted or repeated column indices");
  return h;
}

// Back to device-ready tensors with A's index width and value dtype.
template <class S, class T>
std::unique_ptr<CsrOperator> to_operator(const HostCsr<T>& h, DType index, DType value) {
  int64_t nnz = int64_t(h.ci.size());
  Tensor rp = Tensor::empty(index, {h.rows + 1}), ci = Tensor::empty(index, {nnz}), v = Tensor::empty(value, {nnz});
  auto fill = [&](auto z) {
    using I = decltype(z);
    for (size_t i = 0; i < h.rp.size(); ++i) rp.data<I>()[i] = I(h.rp[i]);
    for (size_t i = 0; i < h.ci.size(); ++i) ci.data<I>()[i] = I(h.ci[i]);
  };
  if (index == DType::I32) fill(int32_t{}); else fill(int64_t{});
  for (size_t k = 0; k < h.v.size(); ++k) v.data<S>()[k] = narrow<S>(h.v[k]);
  return std::make_unique<CsrOperator>(CsrMatrix(h.rows, h.cols, rp, ci, v));
}

template <class T>
HostCsr<T> conj_transpose(const HostCsr<T>& a) {
  HostCsr<T> t;
  t.rows = a.cols;
  t.cols = a.rows;
  t.rp.assign(size_t(a.cols) + 1, 0);
  for (int64_t c : a.ci) ++t.rp[size_t(c) + 1];
  for (size_t i = 1; i < t.rp.size(); ++i) t.rp[i] += t.rp[i - 1];
  t.ci.resize(a.ci.size());
  t.v.resize(a.v.size());
  std::vector<int64_t> next(t.rp.begin(), t.rp.end() - 1);
  for (int64_t r = 0; r < a.rows; ++r)
    for (int64_t k = a.rp[size_t(r)]; k < a.rp[size_t(r) + 1]; ++k) {
      int64_t dst = next[size_t(a.ci[size_t(k)])]++;
      t.ci[size_t(dst)] = r;
      t.v[size_t(dst)] = conj_of(a.v[size_t(k)]);
    }
  return t;
}

// Keeps the entries with lower ? col <= row : col >= row (strict: without the diagonal).
template <class T>
HostCsr<T> triangle(const HostCsr<T>& a, bool lower, bool strict = false) {
  HostCsr<T> t;
  t.rows = a.rows;
  t.cols = a.cols;
  t.rp.push_back(0);
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t k = a.rp[size_t(r)]; k < a.rp[size_t(r) + 1]; ++k) {
      int64_t c = a.ci[size_t(k)];
      if (c == r ? !strict : lower ? c < r : c > r) {
        t.ci.push_back(c);
        t.v.push_back(a.v[size_t(k)]);
      }
    }
    t.rp.push_back(int64_t(t.ci.size()));
  }
  return t;
}

template <class T>
int64_t diag_pos(const HostCsr<T>& a, int64_t r) {
  for (int64_t k = a.rp[size_t(r)]; k < a.rp[size_t(r) + 1]; ++k)
    if (a.ci[size_t(k)] == r) return k;
  return -1;
}

Var trsv(BoundGraph& g, const CsrOperator& T, const Var& b, bool lower, bool unit) {
  auto& v = g.bound_by[&T];
  if (v.empty()) v = {g.bind("M.row_ptr", T.row_ptr()), g.bind("M.col_idx", T.col_idx()), g.bind("M.values", T.values())};
  return op("sptrsv_csr", {v[0], v[1], v[2], b}, {{"cols", T.cols()}, {"lower", lower}, {"unit_diagonal", unit}});
}

class Identity final : public Preconditioner {
 public:
  Var apply(BoundGraph&, const Var& r) const override { return r; }
  std::string name() const override { return "none"; }
};

class Jacobi final : public Preconditioner {
 public:
  explicit Jacobi(const Tensor& d) {
    inv_ = Tensor::empty(d.dtype(), d.shape());
    dispatch_value(d.dtype(), [&](auto z, auto s) {
      using T = decltype(z);
      using S = decltype(s);
      for (int64_t i = 0; i < d.numel(); ++i) {
        T x = widen<T>(d.data<S>()[i]);
        if (x == T(0)) throw InputError("jacobi: row " + std::to_string(i) + " (0-based) has a zero diagonal");
        inv_.data<S>()[i] = narrow<S>(T(1) / x);
      }
    });
  }
  Var apply(BoundGraph& g, const Var& r) const override {
    auto& v = g.bound_by[this];
    if (v.empty()) v = {g.bind("M.inv_diag", inv_)};
    return r * v[0];
  }
  std::string name() const override { return "jacobi"; }

 private:
  Tensor inv_;
};

// ILU(0): L (unit, strictly lower) and U (upper with diagonal) on A's sparsity pattern; the
// apply is two triangular solves. L and U are stored apart, each holding only the entries its
// solve reads: a solve streams its whole matrix, so one CSR of both would have each solve read
// every row twice over (memory-bound: 22.6 + 29.0 ms against 35.9 for PETSc's MatSolve at
// 128^3, docs/benchmarks.md).
class Ilu0 final : public Preconditioner {
 public:
  explicit Ilu0(const CsrOperator& A) {
    dispatch_value(A.dtype(), [&](auto z, auto s) {
      using T = decltype(z);
      using S = decltype(s);
      HostCsr<T> a = to_host<T, S>(A);
      std::vector<int64_t> pos(size_t(a.cols), -1);
      for (int64_t i = 0; i < a.rows; ++i) {
        for (int64_t k = a.rp[size_t(i)]; k < a.rp[size_t(i) + 1]; ++k) pos[size_t(a.ci[size_t(k)])] = k;
        for (int64_t kk = a.rp[size_t(i)]; kk < a.rp[size_t(i) + 1]; ++kk) {
          int64_t k = a.ci[size_t(kk)];
          if (k >= i) break;
          int64_t dk = diag_pos(a, k);
          if (dk < 0 || a.v[size_t(dk)] == T(0))
            throw InputError("ilu0: zero pivot at row " + std::to_string(k) + " (0-based)");
          a.v[size_t(kk)] /= a.v[size_t(dk)];
          for (int64_t jj = dk + 1; jj < a.rp[size_t(k) + 1]; ++jj) {
            int64_t p = pos[size_t(a.ci[size_t(jj)])];
            if (p >= 0) a.v[size_t(p)] -= a.v[size_t(kk)] * a.v[size_t(jj)];
          }
        }
        for (int64_t k = a.rp[size_t(i)]; k < a.rp[size_t(i) + 1]; ++k) pos[size_t(a.ci[size_t(k)])] = -1;
        int64_t d = diag_pos(a, i);
        if (d < 0 || a.v[size_t(d)] == T(0)) throw InputError("ilu0: zero pivot at row " + std::to_string(i) + " (0-based)");
      }
      l_ = to_operator<S>(triangle(a, true, true), A.row_ptr().dtype(), A.dtype());
      u_ = to_operator<S>(triangle(a, false), A.row_ptr().dtype(), A.dtype());
    });
  }
  Var apply(BoundGraph& g, const Var& r) const override {
    return trsv(g, *u_, trsv(g, *l_, r, true, true), false, false);
  }
  std::string name() const override { return "ilu0"; }

 private:
  std::unique_ptr<CsrOperator> l_, u_;
};

// IC(0): A ≈ L L^H on the pattern of A's lower triangle.
class Ic0 final : public Preconditioner {
 public:
  explicit Ic0(const CsrOperator& A) {
    dispatch_value(A.dtype(), [&](auto z, auto s) {
      using T = decltype(z);
      using S = decltype(s);
      HostCsr<T> l = triangle(to_host<T, S>(A), true);
      std::vector<int64_t> pos(size_t(l.cols), -1);
      for (int64_t i = 0; i < l.rows; ++i) {
        for (int64_t k = l.rp[size_t(i)]; k < l.rp[size_t(i) + 1]; ++k) pos[size_t(l.ci[size_t(k)])] = k;
        int64_t d = diag_pos(l, i);
        if (d < 0) throw InputError("ic0: row " + std::to_string(i) + " (0-based) has no diagonal entry");
        for (int64_t kk = l.rp[size_t(i)]; kk < d; ++kk) {
          int64_t k = l.ci[size_t(kk)];
          T s = l.v[size_t(kk)];
          int64_t dk = diag_pos(l, k);
          for (int64_t jj = l.rp[size_t(k)]; jj < dk; ++jj) {
            int64_t p = pos[size_t(l.ci[size_t(jj)])];
            if (p >= 0 && p < kk) s -= l.v[size_t(p)] * conj_of(l.v[size_t(jj)]);
          }
          l.v[size_t(kk)] = s / l.v[size_t(dk)];
        }
        double diag = real_of(l.v[size_t(d)]);
        for (int64_t kk = l.rp[size_t(i)]; kk < d; ++kk) diag -= abs2(l.v[size_t(kk)]);
        if (!(diag > 0))
          throw InputError("ic0: breakdown at row " + std::to_string(i) + " (0-based; the matrix is not positive definite enough)");
        l.v[size_t(d)] = T(std::sqrt(diag));
        for (int64_t k = l.rp[size_t(i)]; k < l.rp[size_t(i) + 1]; ++k) pos[size_t(l.ci[size_t(k)])] = -1;
      }
      l_ = to_operator<S>(l, A.row_ptr().dtype(), A.dtype());
      lh_ = to_operator<S>(conj_transpose(l), A.row_ptr().dtype(), A.dtype());
    });
  }
  Var apply(BoundGraph& g, const Var& r) const override {
    return trsv(g, *lh_, trsv(g, *l_, r, true, false), false, false);
  }
  std::string name() const override { return "ic0"; }

 private:
  std::unique_ptr<CsrOperator> l_, lh_;
};

// SSOR(omega): M = (D + wL) D^{-1} (D + wU) / (w (2 - w)).
class Ssor final : public Preconditioner {
 public:
  Ssor(const CsrOperator& A, double omega) : omega_(omega) {
    if (!(omega > 0 && omega < 2)) throw InputError("ssor: omega must be in (0, 2), got " + std::to_string(omega));
    dispatch_value(A.dtype(), [&](auto z, auto s) {
      using T = decltype(z);
      using S = decltype(s);
      HostCsr<T> a = to_host<T, S>(A);
      std::vector<T> diag(size_t(a.rows));
      for (int64_t r = 0; r < a.rows; ++r) {
        int64_t d = diag_pos(a, r);
        if (d < 0 || a.v[size_t(d)] == T(0)) throw InputError("ssor: row " + std::to_string(r) + " (0-based) has a zero diagonal");
        diag[size_t(r)] = a.v[size_t(d)];
      }
      // D + wL and D + wU: scale the off-diagonal entries by omega.
      HostCsr<T> lo = triangle(a, true), up = triangle(a, false);
      for (auto* t : {&lo, &up})
        for (int64_t r = 0; r < t->rows; ++r)
          for (int64_t k = t->rp[size_t(r)]; k < t->rp[size_t(r) + 1]; ++k)
            if (t->ci[size_t(k)] != r) t->v[size_t(k)] *= T(omega);
      lower_ = to_operator<S>(lo, A.row_ptr().dtype(), A.dtype());
      upper_ = to_operator<S>(up, A.row_ptr().dtype(), A.dtype());
      diag_ = Tensor::empty(A.dtype(), {a.rows});
      for (int64_t r = 0; r < a.rows; ++r) diag_.data<S>()[r] = narrow<S>(diag[size_t(r)] * T(omega * (2 - omega)));
    });
  }
  Var apply(BoundGraph& g, const Var& r) const override {
    auto& v = g.bound_by[this];
    if (v.empty()) v = {g.bind("M.scaled_diag", diag_)};
    return trsv(g, *upper_, trsv(g, *lower_, r, true, false) * v[0], false, false);
  }
  std::string name() const override { return "ssor"; }

 private:
  double omega_;
  std::unique_ptr<CsrOperator> lower_, upper_;
  Tensor diag_;
};

}  // namespace

std::unique_ptr<Preconditioner> make_preconditioner(const std::string& name, const CsrOperator& A, double omega) {
  if (A.rows() != A.cols()) throw InputError("preconditioner '" + name + "' needs a square matrix");
  if (name == "none") return std::make_unique<Identity>();
  if (name == "jacobi") return std::make_unique<Jacobi>(A.diagonal());
  if (name == "ilu0") return std::make_unique<Ilu0>(A);
  if (name == "ic0") return std::make_unique<Ic0>(A);
  if (name == "ssor") return std::make_unique<Ssor>(A, omega);
  throw InputError("unknown preconditioner '" + name + "' (expected none, jacobi, ilu0, ic0 or ssor)");
}

std::unique_ptr<Preconditioner> make_operator_preconditioner(const std::string& name, const LinearOperator& A) {
  if (A.rows() != A.cols()) throw InputError("preconditioner '" + name + "' needs a square operator");
  if (name == "none") return std::make_unique<Identity>();
  if (name == "jacobi") {
    Tensor d = A.diagonal();
    if (!d.defined()) throw InputError("jacobi: the operator (" + A.describe() + ") has no diagonal");
    return std::make_unique<Jacobi>(d.is_host() ? d : d.to(host_allocator()));
  }
  throw InputError("preconditioner '" + name + "' needs the matrix's entries; an operator given only by its product (" +
                   A.describe() + ") takes none or jacobi");
}

}  // namespace rlx::sparse
