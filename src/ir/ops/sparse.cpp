// Sparse library primitives over CSR matrices given as three tensors: row_ptr [rows+1]
// and col_idx [nnz] (both i32 or both i64) and values [nnz]. The column count is an
// attribute (it cannot be read off the arrays). Kernels trust the structure: building
// a CsrMatrix (solvers/sparse) validates it once. VJPs with respect to the values and the
// dense operands; row_ptr, col_idx and the tiled layout's index arrays are indices. One L1 op,
// cg_csr: a conjugate-gradient solve whose body is a while loop of spmv_csr and L2 ops, and
// whose VJP is the adjoint solve, so grad never differentiates the loop.
#include <algorithm>
#include <cstdint>

#include "core/checked.hpp"
#include "ir/ops/vjp.hpp"
#include "ir/ops/tiled_layout.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

const std::vector<DType> kSparseValues = {DType::F32, DType::F64, DType::C64};

// Checks the CSR triple (inputs 0..2) and returns the row count.
int64_t check_csr(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType &rp = in[0], &ci = in[1], &v = in[2];
  if (rp.dtype != DType::I32 && rp.dtype != DType::I64)
    throw InputError(std::string("row_ptr must be i32 or i64, got ") + dtype_name(rp.dtype));
  if (ci.dtype != rp.dtype)
    throw InputError(std::string("col_idx dtype ") + dtype_name(ci.dtype) + " differs from row_ptr's " +
                     dtype_name(rp.dtype));
  if (rp.shape.size() != 1 || rp.shape[0] < 1) throw InputError("row_ptr must be [rows+1], got " + shape_str(rp.shape));
  if (ci.shape.size() != 1 || v.shape != ci.shape)
    throw InputError("col_idx and values must both be [nnz], got " + shape_str(ci.shape) + " and " + shape_str(v.shape));
  require_dtype(v, kSparseValues, "values");
  if (a.get_int("cols") < 0) throw InputError("cols must be >= 0");
  return rp.shape[0] - 1;
}

// ---------------------------------------------------------------- pieces of the VJPs
// The cotangents of a sparse product are sparse too: the values' cotangent is read at each
// stored entry (row(k), col(k)), and the transposed product is a scatter_add over columns.

// Index i64 [n] (rows, columns, shares) from integer arrays, for gather and scatter_add.
Var i64(const Var& x) { return x.dtype() == DType::I64 ? x : cast(x, DType::I64); }

// Which segment of `starts` (ascending, starts[0] = 0; row_ptr, or the tiled layout's share)
// each of n positions lies in: the number of starts[1..] at or before it, i.e. a 1 added
// at every segment start and summed up (empty segments add at the same place). i64 [n].
Var segment_of(const Var& starts, int64_t n) {
  Graph& g = *starts.graph();
  const int64_t segments = starts.shape()[0] - 1;
  if (segments <= 1 || n == 0) return broadcast_to(scalar(g, 0.0, DType::I64), {n});
  Var inner = i64(slice(starts, {1}, {segments}));  // may equal n (empty segments at the end)
  Var marks = scatter_add(broadcast_to(scalar(g, 0.0, DType::I64), {n + 1}), inner,
                          broadcast_to(scalar(g, 1.0, DType::I64), {segments - 1}), 0);
  return slice(cumsum(marks, 0), {0}, {n});
}

// The CSR matrix's conjugate transpose as CSR arrays (i64 indices): its entries ordered by
// column (a stable sort keeps the rows ascending within each), the rows they came from as
// columns, and per column the count of entries before it.
std::vector<Var> csr_conj_transpose(const Var& col_idx, const Var& rows, const Var& values, int64_t cols) {
  Graph& g = *values.graph();
  const int64_t nnz = values.shape()[0];
  Var order = argsort(i64(col_idx), 0);
  Var counts = scatter_add(broadcast_to(scalar(g, 0.0, DType::I64), {cols + 1}), i64(col_idx) + scalar(g, 1.0, DType::I64),
                           broadcast_to(scalar(g, 1.0, DType::I64), {nnz}), 0);
  return {cumsum(counts, 0), gather(rows, order, 0), gather(vjp::cj(values), order, 0)};
}

// ---------------------------------------------------------------- conjugate gradients

DType real_of(DType t) { return t == DType::C64 ? DType::F32 : t; }
// ||v||^2 and Re <u, v> = Re sum conj(u) v as real scalars (v's real dtype).
Var norm2(const Var& v) { return sum(v.dtype() == DType::C64 ? real(v * conj(v)) : v * v); }
Var real_dot(const Var& u, const Var& v) { return sum(u.dtype() == DType::C64 ? real(conj(u) * v) : u * v); }
// A real scalar in the vectors' dtype t (s + 0i for c64).
Var in_dtype(const Var& s, DType t) { return s.dtype() == t ? s : cast(s, t); }

// Conjugate gradients for A x = b, A Hermitian positive definite, as an in-graph while loop
// carrying (row_ptr, col_idx, values, x, r, p, rho = ||r||^2, tol, iterations): the regions
// see only what they carry. The loop stops on the recursively updated residual; the result's
// residual is recomputed from the x returned, so it is the one a caller can trust.
std::vector<Var> cg_body(const std::vector<Var>& in, const Attrs& a) {
  const int64_t n = a.get_int("cols"), max_it = a.get_int("max_it");
  const Var &row_ptr = in[0], &col_idx = in[1], &values = in[2], &b = in[3];
  const DType t = b.dtype();
  const Attrs product{{"cols", n}}, residual{{"cols", n}, {"alpha", -1.0}, {"beta", 1.0}};  // A p; b - A x
  Var x = in.size() == 5 ? in[4] : vjp::zeros_like(b);
  Var r = in.size() == 5 ? op("spmv_csr", {row_ptr, col_idx, values, x, b}, residual) : b;
  Var rho = norm2(r);
  Var tol = maximum(sqrt(norm2(b)) * a.get_float("rtol"), scalar_like(rho, a.get_float("atol")));
  std::vector<Var> v = while_loop(
      {row_ptr, col_idx, values, x, r, r, rho, tol, scalar(*b.graph(), 0.0, DType::I64)},
      [max_it](const std::vector<Var>& c) {
        // (a NaN residual stops the loop: the comparison is false)
        return std::vector<Var>{logical_and(gt(sqrt(c[6]), c[7]), lt(c[8], scalar_like(c[8], double(max_it))))};
      },
      [product, t](const std::vector<Var>& c) {
        const Var &x = c[3], &r = c[4], &p = c[5], &rho = c[6];
        Var ap = op("spmv_csr", {c[0], c[1], c[2], p}, product);
        Var alpha = in_dtype(rho / real_dot(p, ap), t);
        Var r1 = r - alpha * ap, rho1 = norm2(r1);
        return std::vector<Var>{c[0], c[1], c[2], x + alpha * p, r1, r1 + in_dtype(rho1 / rho, t) * p, rho1, c[7],
                                c[8] + scalar_like(c[8], 1.0)};
      });
  return {v[3], v[8], sqrt(norm2(op("spmv_csr", {row_ptr, col_idx, values, v[3], b}, residual)))};
}

// A Hermitian positive definite tridiagonal n x n CSR matrix: fixed row_ptr and col_idx (i32)
// and values gathered in the graph from the diagonal d (its real part, in [4, 6]) and the
// subdiagonal e (each part in [-1, 1]), entry (i, i+1) being conj(e_i). A perturbation of
// either input keeps the matrix Hermitian, and Gershgorin's discs keep it positive definite.
std::vector<Var> example_hpd_tridiagonal(ExampleInputs& x, DType t, int64_t n) {
  std::vector<double> ptr{0}, col, from;
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) col.push_back(double(i - 1)), from.push_back(double(n + i - 1));  // e_{i-1}
    col.push_back(double(i)), from.push_back(double(i));                         // d_i
    if (i + 1 < n) col.push_back(double(i + 1)), from.push_back(double(2 * n - 1 + i));  // conj(e_i)
    ptr.push_back(double(col.size()));
  }
  const auto nnz = int64_t(col.size());
  Var d = x.in(t, {n}, {.lo = 4, .hi = 6}), e = x.in(t, {n - 1}, {.lo = -1, .hi = 1});
  if (t == DType::C64) d = cast(real(d), t);
  Var values = gather(concat({d, e, vjp::cj(e)}, 0), x.fixed(example_tensor(DType::I64, {nnz}, from)), 0);
  return {x.fixed(example_tensor(DType::I32, {n + 1}, ptr)), x.fixed(example_tensor(DType::I32, {nnz}, col)), values};
}

}  // namespace

int64_t tiled_shares(int64_t rows, int64_t cols, int64_t rb, int64_t panel, int64_t warps, int64_t most_tiles,
                     const std::string& why) {
  if (rb < 1 || rb > kTiledMaxExtent || panel < 1 || panel > kTiledMaxExtent)
    throw InputError("rb and panel must lie in [1, " + std::to_string(kTiledMaxExtent) + "], got " + std::to_string(rb) +
                     " and " + std::to_string(panel));
  if (warps < 1 || warps > kTiledMaxWarps)
    throw InputError("warps must lie in [1, " + std::to_string(kTiledMaxWarps) + "], got " + std::to_string(warps));
  const int64_t row_blocks = tiled_row_blocks(rows, rb), panels = tiled_panels(cols, panel);
  if (row_blocks > 0 && panels > most_tiles / row_blocks)
    throw InputError(std::to_string(row_blocks) + " x " + std::to_string(panels) + " tiles of " + std::to_string(rb) +
                     " x " + std::to_string(panel) + ": too many" + why);
  return row_blocks * panels * warps + 1;
}

TiledShape tiled_shape(int64_t rows, int multiprocessors, int64_t shared_bytes, int groups) {
  if (multiprocessors < 1 || groups < 1 || shared_bytes < 64)
    throw InputError("tiled_shape: " + std::to_string(multiprocessors) + " multiprocessors, " + std::to_string(groups) +
                     " column groups, " + std::to_string(shared_bytes) + " bytes of shared memory");
  // sm / groups row blocks (one block of the kernel per multiprocessor), unless the row
  // sums would leave panels of fewer than 4096 columns; the panels take the rest (two).
  const int64_t words = shared_bytes / 8;
  const int64_t blocks = std::max(1, multiprocessors / groups);
  const int64_t most = std::clamp<int64_t>(words - 2 * 4096, 2, kTiledMaxExtent);
  const int64_t rb = std::clamp<int64_t>((std::max<int64_t>(rows, 1) + blocks - 1) / blocks, 2, most);
  TiledShape s;
  // Rounded up to even (rounding down could leave one more row block than multiprocessors
  // per group), within the limit rounded down to even.
  s.rb = int(std::min((rb + 1) / 2 * 2, most / 2 * 2));
  s.panel = int(std::clamp<int64_t>((words - s.rb) / 2 / 2 * 2, 2, kTiledMaxExtent));
  s.warps = 32;
  return s;
}

void register_sparse_ops(OpRegistry& r) {
  // y = alpha * A x + beta * y0   (y0 only when given; beta is ignored without it)
  r.add({.name = "spmv_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 5,
         .attrs = {{"cols", AttrKind::Int, true}, {"alpha", AttrKind::Float, false, 1.0}, {"beta", AttrKind::Float, false, 0.0}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           int64_t rows = check_csr(in, a);
           const TensorType& x = in[3];
           if (x.dtype != in[2].dtype) throw InputError("x dtype differs from the matrix values'");
           if (x.shape != Shape{a.get_int("cols")})
             throw InputError("x must be [" + std::to_string(a.get_int("cols")) + "], got " + shape_str(x.shape));
           if (in.size() == 5 && in[4] != TensorType{x.dtype, {rows}})
             throw InputError("y0 must be " + TensorType{x.dtype, {rows}}.str() + ", got " + in[4].str());
           return std::vector<TensorType>{{x.dtype, {rows}}};
         },
         // d values[k] = alpha g[row(k)] conj(x[col(k)]), dx = alpha A^H g (a scatter_add over
         // the columns), dy0 = beta g; row_ptr and col_idx are indices.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs& a) {
           const double alpha = a.get_float("alpha");
           const Var &values = in[2], &x = in[3];
           Var col = i64(in[1]), at_row = gather(g[0], segment_of(in[0], values.shape()[0]), 0);
           Var gv = at_row * vjp::cj(gather(x, col, 0));
           Var gx = scatter_add(vjp::zeros_like(x), col, vjp::cj(values) * at_row, 0);
           if (alpha != 1.0) {
             gv = gv * alpha;
             gx = gx * alpha;
           }
           std::vector<Var> r{Var(), Var(), gv, gx};
           if (in.size() == 5) r.push_back(g[0] * a.get_float("beta"));
           return r;
         },
         .nondiff_inputs = {0, 1},
         .inplace_input = 4,
         .dtypes = kSparseValues, .doc = "CSR sparse matrix times vector: alpha*A*x (+ beta*y0)",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = example_csr(x, t);
           a.push_back(x.in(t, {4}));
           Var y = op("spmv_csr", a, {{"cols", int64_t(4)}});
           a.push_back(x.in(t, {4}));
           return std::vector<Var>{y, op("spmv_csr", a, {{"cols", int64_t(4)}, {"alpha", -0.5}, {"beta", 1.5}})};
         }});
  // C = A B with B dense [cols, k]
  r.add({.name = "spmm_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 4,
         .attrs = {{"cols", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           int64_t rows = check_csr(in, a);
           const TensorType& b = in[3];
           if (b.dtype != in[2].dtype) throw InputError("B dtype differs from the matrix values'");
           if (b.shape.size() != 2 || b.shape[0] != a.get_int("cols"))
             throw InputError("B must be [" + std::to_string(a.get_int("cols")) + ", k], got " + shape_str(b.shape));
           return std::vector<TensorType>{{b.dtype, {rows, b.shape[1]}}};
         },
         // d values[k] = sum_j g[row(k), j] conj(B[col(k), j]), dB = A^H g (a scatter_add of rows).
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs&) {
           const Var &values = in[2], &b = in[3];
           const int64_t nnz = values.shape()[0];
           Var col = i64(in[1]), at_row = gather(g[0], segment_of(in[0], nnz), 0);  // [nnz, k]
           Var gv = sum(at_row * vjp::cj(gather(b, col, 0)), {1});
           Var gb = scatter_add(vjp::zeros_like(b), col, reshape(vjp::cj(values), {nnz, 1}) * at_row, 0);
           return std::vector<Var>{Var(), Var(), gv, gb};
         },
         .nondiff_inputs = {0, 1},
         .dtypes = kSparseValues, .doc = "CSR sparse matrix times dense matrix",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = example_csr(x, t);
           a.push_back(x.in(t, {4, 3}));
           return std::vector<Var>{op("spmm_csr", a, {{"cols", int64_t(4)}})};
         }});
  // Solves T x = b for a triangular CSR matrix T (square). Only the triangle named by
  // `lower` is read; with unit_diagonal the diagonal is taken as 1 and not read.
  r.add({.name = "sptrsv_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 4,
         .attrs = {{"cols", AttrKind::Int, true}, {"lower", AttrKind::Bool, false, true},
                   {"unit_diagonal", AttrKind::Bool, false, false}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           int64_t rows = check_csr(in, a);
           if (rows != a.get_int("cols")) throw InputError("a triangular solve needs a square matrix");
           const TensorType& b = in[3];
           if (b != TensorType{in[2].dtype, {rows}})
             throw InputError("b must be " + TensorType{in[2].dtype, {rows}}.str() + ", got " + b.str());
           return std::vector<TensorType>{b};
         },
         // db = T^-H g: a sparse triangular solve with the conjugate transpose (built from the
         // arrays: entries sorted by column), which reads the other triangle; d values[k] =
         // -db[row(k)] conj(x[col(k)]) for the entries the solve reads, zero for the others.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>& out, const std::vector<Var>& g, const Attrs& a) {
           const bool lower = a.get_bool("lower"), unit = a.get_bool("unit_diagonal");
           const int64_t n = a.get_int("cols");
           const Var& values = in[2];
           Var rows = segment_of(in[0], values.shape()[0]), col = i64(in[1]);
           std::vector<Var> t = csr_conj_transpose(in[1], rows, values, n);
           t.push_back(g[0]);
           Var gb = op("sptrsv_csr", t, {{"cols", n}, {"lower", !lower}, {"unit_diagonal", unit}});
           Var gv = -(gather(gb, rows, 0) * vjp::cj(gather(out[0], col, 0)));
           Var read = lower ? (unit ? lt(col, rows) : le(col, rows)) : (unit ? gt(col, rows) : ge(col, rows));
           return std::vector<Var>{Var(), Var(), where(read, gv, vjp::zeros_like(gv)), gb};
         },
         .nondiff_inputs = {0, 1},
         .dtypes = kSparseValues, .doc = "sparse triangular solve",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = example_csr(x, t, {.lo = 1, .hi = 2});  // a diagonal far from zero
           a.push_back(x.in(t, {4}));
           // the lower triangle; its strict part (unit diagonal); the upper triangle: the diagonal
           return std::vector<Var>{op("sptrsv_csr", a, {{"cols", int64_t(4)}}),
                                   op("sptrsv_csr", a, {{"cols", int64_t(4)}, {"unit_diagonal", true}}),
                                   op("sptrsv_csr", a, {{"cols", int64_t(4)}, {"lower", false}})};
         }});
  // x with A x = b for a Hermitian positive definite A by conjugate gradients (cg_body), from
  // x0 (zero when absent). Results: x, the iterations (i64[]) and the true residual
  // ||b - A x|| (real scalar). The op does not throw when it does not converge (max_it
  // reached, a matrix that is not positive definite: then NaN); the caller reads the residual.
  r.add({.name = "cg_csr", .level = Level::L1, .cls = OpClass::Composite, .min_inputs = 4, .max_inputs = 5,
         .attrs = {{"cols", AttrKind::Int, true}, {"rtol", AttrKind::Float, false, 1e-8},
                   {"atol", AttrKind::Float, false, 0.0}, {"max_it", AttrKind::Int, false, int64_t(10000)}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           const int64_t rows = check_csr(in, a);
           if (rows != a.get_int("cols"))
             throw InputError("conjugate gradients needs a square matrix, got " + std::to_string(rows) + " x " +
                              std::to_string(a.get_int("cols")));
           const TensorType vec{in[2].dtype, {rows}};
           if (in[3] != vec) throw InputError("b must be " + vec.str() + ", got " + in[3].str());
           if (in.size() == 5 && in[4] != vec) throw InputError("x0 must be " + vec.str() + ", got " + in[4].str());
           if (!(a.get_float("rtol") >= 0) || !(a.get_float("atol") >= 0))
             throw InputError("rtol and atol must be >= 0, got " + std::to_string(a.get_float("rtol")) + " and " +
                              std::to_string(a.get_float("atol")));
           if (a.get_int("max_it") < 0) throw InputError("max_it must be >= 0");
           return std::vector<TensorType>{vec, {DType::I64, {}}, {real_of(vec.dtype), {}}};
         },
         .lower = cg_body,
         // The adjoint solve: λ = A^-H g by cg_csr on the conjugate transpose (built from the
         // arrays, as sptrsv_csr's; it equals A for the Hermitian A the op is defined for),
         // db = λ, d values[k] = -λ[row(k)] conj(x[col(k)]): the derivative of x = A^-1 b, which
         // the result is up to the tolerance. So x0 gets zero, and the residual, 0 for that
         // x, carries no gradient (its cotangent is not read); the iterations are integers.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>& out, const std::vector<Var>& g, const Attrs& a) {
           const Var& values = in[2];
           Var rows = segment_of(in[0], values.shape()[0]);
           std::vector<Var> t = csr_conj_transpose(in[1], rows, values, a.get_int("cols"));
           t.push_back(g[0]);
           Var lambda = op_multi("cg_csr", t, a)[0];
           Var gv = -(gather(lambda, rows, 0) * vjp::cj(gather(out[0], i64(in[1]), 0)));
           std::vector<Var> r{Var(), Var(), gv, lambda};
           if (in.size() == 5) r.push_back(vjp::zeros_like(in[4]));
           return r;
         },
         .nondiff_inputs = {0, 1},
         .dtypes = kSparseValues, .doc = "x with A x = b, A Hermitian positive definite (CSR), by conjugate gradients",
         // A 5 x 5 system, from zero and from x0: CG ends in 5 steps up to rounding, far below
         // rtol, so every device and every finite-difference step takes the same steps. x0 is
         // a constant: x depends on it by rounding alone, which a finite difference of its
         // zero gradient would measure (tests/sparse/test_cg.cpp checks that it gets zero).
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = example_hpd_tridiagonal(x, t, 5);
           const Attrs at{{"cols", int64_t(5)}, {"rtol", t == DType::F64 ? 1e-12 : 1e-6}, {"max_it", int64_t(50)}};
           a.push_back(x.in(t, {5}));
           Var from_zero = op_multi("cg_csr", a, at)[0];
           a.push_back(constant(x.graph(), example_tensor(t, {5}, {1, -1, 0.5, 2, -0.25})));
           return std::vector<Var>{from_zero, op_multi("cg_csr", a, at)[0]};
         }});
  // y = alpha * A x + beta * y0 for A in the tiled layout (tiled_layout.hpp):
  // share i64 [row_blocks * panels * warps + 1], rc i32 [n] (row in block << 16 | column
  // in panel), values f64 [n], n even (zero padding past the last nonzero), x f64 [cols].
  r.add({.name = "spmv_tiled", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 5,
         .attrs = {{"rows", AttrKind::Int, true}, {"cols", AttrKind::Int, true}, {"rb", AttrKind::Int, true},
                   {"panel", AttrKind::Int, true}, {"warps", AttrKind::Int, true},
                   {"alpha", AttrKind::Float, false, 1.0}, {"beta", AttrKind::Float, false, 0.0}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           const int64_t rows = a.get_int("rows"), cols = a.get_int("cols"), rb = a.get_int("rb"),
                         panel = a.get_int("panel"), warps = a.get_int("warps");
           if (rows < 0 || cols < 0) throw InputError("rows and cols must be >= 0");
           const int64_t shares = tiled_shares(rows, cols, rb, panel, warps, (INT64_MAX - 1) / warps);
           if (in[0] != TensorType{DType::I64, {shares}})
             throw InputError("share must be i64[" + std::to_string(shares) + "], got " + in[0].str());
           if (in[1].dtype != DType::I32 || in[1].shape.size() != 1 || in[1].shape[0] % 2 != 0)
             throw InputError("rc must be i32[n] with n even, got " + in[1].str());
           if (in[2] != TensorType{DType::F64, in[1].shape})
             throw InputError("values must be " + TensorType{DType::F64, in[1].shape}.str() + ", got " + in[2].str());
           if (in[3] != TensorType{DType::F64, {cols}})
             throw InputError("x must be " + TensorType{DType::F64, {cols}}.str() + ", got " + in[3].str());
           if (in.size() == 5 && in[4] != TensorType{DType::F64, {rows}})
             throw InputError("y0 must be " + TensorType{DType::F64, {rows}}.str() + ", got " + in[4].str());
           return std::vector<TensorType>{{DType::F64, {rows}}};
         },
         // As spmv_csr's, each entry's row and column read off the layout: its share (the
         // segment of share it lies in) gives its tile, the tile its row block and panel, and
         // the word its offsets in the tile. Entries past the last share (the padding) are not
         // read and get zero.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs& a) {
           const double alpha = a.get_float("alpha");
           const int64_t rows = a.get_int("rows"), cols = a.get_int("cols"), rb = a.get_int("rb"),
                         panel = a.get_int("panel"), warps = a.get_int("warps");
           const Var &share = in[0], &values = in[2], &x = in[3];
           const int64_t n = values.shape()[0], shares = share.shape()[0];
           std::vector<Var> r{Var(), Var(), vjp::zeros_like(values), vjp::zeros_like(x)};
           if (in.size() == 5) r.push_back(g[0] * a.get_float("beta"));
           if (n == 0 || rows == 0 || cols == 0) return r;
           Graph& gr = *values.graph();
           auto c = [&](double v) { return scalar(gr, v, DType::I64); };
           Var tile = segment_of(share, n) / c(double(warps));
           Var block = tile / c(double(tiled_panels(cols, panel)));
           Var panel_of = tile - block * c(double(tiled_panels(cols, panel)));
           Var word = cast(in[1], DType::I64);
           word = where(lt(word, c(0)), word + c(4294967296.0), word);  // the 32 bits unsigned
           Var in_row = word / c(65536);
           Var read = lt(iota(gr, {n}, 0, DType::I64), broadcast_to(slice(share, {shares - 1}, {shares}), {n}));
           Var row = where(read, block * c(double(rb)) + in_row, c(0));
           Var col = where(read, panel_of * c(double(panel)) + word - in_row * c(65536), c(0));
           Var zero = vjp::zeros_like(values);
           Var at_row = where(read, gather(g[0], row, 0), zero);
           Var gv = at_row * gather(x, col, 0), gx = scatter_add(vjp::zeros_like(x), col, values * at_row, 0);
           if (alpha != 1.0) {
             gv = gv * alpha;
             gx = gx * alpha;
           }
           r[2] = gv;
           r[3] = gx;
           return r;
         },
         .nondiff_inputs = {0, 1},
         .dtypes = {DType::F64}, .doc = "sparse matrix (tiled layout) times vector: alpha*A*x (+ beta*y0)",
         .example = [](ExampleInputs& x, DType t) {  // 4 x 4 in tiles of 2 x 2, one warp, laid out by tile_csr
           const Attrs shape{{"cols", int64_t(4)}, {"rb", int64_t(2)}, {"panel", int64_t(2)}, {"warps", int64_t(1)}};
           std::vector<Var> layout = op_multi("tile_csr", example_csr(x, t), shape);
           layout.push_back(x.in(t, {4}));
           Attrs a = shape;
           a.set("rows", int64_t(4));
           Var y = op("spmv_tiled", layout, a);
           layout.push_back(x.in(t, {4}));
           a.set("alpha", -0.5);
           a.set("beta", 1.5);
           return std::vector<Var>{y, op("spmv_tiled", layout, a)};
         }});
  // The tiled layout of a CSR matrix (f64 values; tiled_layout.hpp): outputs share,
  // rc and values as spmv_tiled reads them. Tiles of rb rows x panel columns, `warps`
  // shares per tile cut at row boundaries. Every device builds the same arrays, bit for
  // bit; InputError for bad structure (row pointers, columns), found while building.
  r.add({.name = "tile_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 3, .max_inputs = 3,
         .attrs = {{"cols", AttrKind::Int, true}, {"rb", AttrKind::Int, true}, {"panel", AttrKind::Int, true},
                   {"warps", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           const int64_t rows = check_csr(in, a), nnz = in[1].shape[0], warps = a.get_int("warps");
           if (in[2].dtype != DType::F64) throw InputError(std::string("values must be f64, got ") + dtype_name(in[2].dtype));
           // Share starts outweighing the matrix (many panels, few nonzeros) are refused.
           const int64_t most = (checked_mul(std::max<int64_t>(nnz, 1), 4, "tile_csr share bound") + 1024) / std::clamp<int64_t>(warps, 1, kTiledMaxWarps);
           const int64_t shares = tiled_shares(rows, a.get_int("cols"), a.get_int("rb"), a.get_int("panel"), warps, most,
                                                " (share starts would outnumber 4 per nonzero: rows too short for panels this wide)");
           const int64_t padded = tiled_padded(nnz);
           return std::vector<TensorType>{{DType::I64, {shares}}, {DType::I32, {padded}}, {DType::F64, {padded}}};
         },
         // The layout's values are CSR's permuted (and padded with zeros), so their cotangent
         // goes back through the same permutation, read off tile_csr itself: laid out, the
         // values 1, 2, ..., nnz (exact in f64) say where each entry went, 0 for the padding.
         .vjp = [](const std::vector<Var>& in, const std::vector<Var>&, const std::vector<Var>& g, const Attrs& a) {
           const Var& values = in[2];
           const int64_t nnz = values.shape()[0];
           Graph& gr = *values.graph();
           Var label = iota(gr, {nnz}, 0, DType::F64) + scalar(gr, 1.0, DType::F64);
           Var from = cast(op_multi("tile_csr", {in[0], in[1], label}, a)[2], DType::I64);
           Var dest = vjp::zeros(gr, {DType::F64, {nnz + 1}});
           return std::vector<Var>{Var(), Var(), slice(scatter_add(dest, from, g[2], 0), {1}, {nnz + 1})};
         },
         .nondiff_inputs = {0, 1},
         .dtypes = {DType::F64}, .doc = "the tiled layout of a CSR matrix (for spmv_tiled)",
         .example = [](ExampleInputs& x, DType t) {  // 4 x 4 in tiles of 2 x 2, one warp
           return op_multi("tile_csr", example_csr(x, t),
                           {{"cols", int64_t(4)}, {"rb", int64_t(2)}, {"panel", int64_t(2)}, {"warps", int64_t(1)}});
         }});
}

}  // namespace rlx::ir
