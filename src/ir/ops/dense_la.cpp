// Dense linear-algebra library primitives (LAPACK on cpu, cuSOLVER on cuda). Matrices
// are row-major [m, n]; batches are not supported yet (rank exactly 2). Each op's VJP is
// beside it (the formulas and their domains: docs/autodiff.md).
#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

const std::vector<DType> kLapack = {DType::F32, DType::F64, DType::C64};

void require_matrix(const TensorType& t, const char* what) {
  if (t.shape.size() != 2) throw InputError(std::string(what) + " must be a matrix, got " + shape_str(t.shape));
  require_dtype(t, kLapack, what);
}
void require_square(const TensorType& t, const char* what) {
  require_matrix(t, what);
  if (t.shape[0] != t.shape[1]) throw InputError(std::string(what) + " must be square, got " + shape_str(t.shape));
}
DType real_of(DType t) { return t == DType::C64 ? DType::F32 : t; }
// The right-hand side: [n] or [n, k] with A's dtype.
void require_rhs(const TensorType& b, const TensorType& a, int64_t n) {
  if (b.dtype != a.dtype) throw InputError("right-hand side dtype differs from the matrix's");
  if (b.shape.empty() || b.shape.size() > 2 || b.shape[0] != n)
    throw InputError("right-hand side must be [" + std::to_string(n) + "] or [" + std::to_string(n) + ", k], got " +
                     shape_str(b.shape));
}

// ---------------------------------------------------------------- pieces of the VJPs
// Written with the front end and the family's own ops (solves with the adjoint factor
// instead of inverses). Matrices are [n, n] unless said; ^H is the conjugate transpose
// (the transpose for real dtypes).

Var mh(const Var& x) { return vjp::cj(transpose(x)); }
// i - j at [i, j], i64.
Var row_minus_col(Graph& g, int64_t m, int64_t n) {
  return iota(g, {m, n}, 0, DType::I64) - iota(g, {m, n}, 1, DType::I64);
}
// x on and below the k-th diagonal (j - i <= k), zeros elsewhere; triu: on and above it.
Var tril(const Var& x, int64_t k = 0) {
  Graph& g = *x.graph();
  Var keep = ge(row_minus_col(g, x.shape()[0], x.shape()[1]), scalar(g, double(-k), DType::I64));
  return where(keep, x, vjp::zeros_like(x));
}
Var triu(const Var& x, int64_t k = 0) {
  Graph& g = *x.graph();
  Var keep = le(row_minus_col(g, x.shape()[0], x.shape()[1]), scalar(g, double(-k), DType::I64));
  return where(keep, x, vjp::zeros_like(x));
}
Var diagonal_mask(Graph& g, int64_t n) { return eq(iota(g, {n, n}, 0, DType::I64), iota(g, {n, n}, 1, DType::I64)); }
Var eye(Graph& g, int64_t n, DType t) { return where(diagonal_mask(g, n), scalar(g, 1.0, t), scalar(g, 0.0, t)); }
Var as_dtype(const Var& x, DType t) { return x.dtype() == t ? x : cast(x, t); }
// Re x in x's dtype.
Var re(const Var& x) { return x.dtype() == DType::C64 ? cast(real(x), DType::C64) : x; }
// The real part of x's diagonal as a matrix (zeros off the diagonal).
Var real_diag(const Var& x) { return where(diagonal_mask(*x.graph(), x.shape()[0]), re(x), vjp::zeros_like(x)); }
// The Hermitian matrix with x's strictly lower triangle and the real part of its diagonal.
Var hermitian_from_lower(const Var& x) {
  Var l = tril(x, -1);
  return l + mh(l) + real_diag(x);
}
// cholesky and eigh read a Hermitian matrix H from A's lower triangle (the real part of the
// diagonal). For G with d L = Re <G, dH>, the cotangent of A: G + G^H below the diagonal,
// Re G on it, zero above, where the op reads nothing.
Var onto_lower(const Var& g) { return tril(g + mh(g), -1) + real_diag(g); }
// A right-hand side [n] as the one column [n, 1]; and back to a shape.
Var column(const Var& b) { return b.rank() == 1 ? reshape(b, {b.shape()[0], 1}) : b; }
Var shaped(const Var& x, const Shape& s) { return x.shape() == s ? x : reshape(x, s); }
// op(T) X = B through the family's triangular solve.
Var trsm(const Var& t, const Var& b, bool lower, bool unit = false) {
  return op("triangular_solve", {t, b}, {{"lower", lower}, {"unit_diagonal", unit}});
}
// diag(v) as [n, n] for v [n].
Var diag_of(const Var& v) {
  const int64_t n = v.shape()[0];
  return eye(*v.graph(), n, v.dtype()) * reshape(v, {1, n});
}
// diag(x) of a square matrix as a vector.
Var diagonal(const Var& x) { return sum(x * eye(*x.graph(), x.shape()[0], x.dtype()), {1}); }
// F_ij = 1 / (d_j - d_i) off the diagonal, 0 on it (d real [n]; cast to t). Infinite where two
// d are equal: the spectral VJPs below are defined for distinct values only.
Var inverse_gaps(const Var& d, DType t) {
  Graph& g = *d.graph();
  const int64_t n = d.shape()[0];
  Var on = diagonal_mask(g, n);
  Var gap = reshape(d, {1, n}) - reshape(d, {n, 1});
  // (the diagonal's 1 keeps 1/0 out of the graph, also of its derivatives)
  Var f = where(on, scalar_like(d, 0.0), recip(where(on, scalar_like(d, 1.0), gap)));
  return as_dtype(f, t);
}

// P^T x for lu_factor's pivots (P A = L U): the row swaps undone. The permutation comes out of
// lu_solve itself, exactly: with the factor I it applies P alone, so P [0, 1, ..., n-1] lists
// for each row i of P A the row of A it came from, and P^T x scatters x's rows back there.
Var unpivot(const Var& pivots, const Var& x, DType t) {
  Graph& g = *x.graph();
  const int64_t n = pivots.shape()[0];
  Var order = iota(g, {n}, 0, t == DType::C64 ? DType::F32 : t);
  if (t == DType::C64) order = cast(order, t);
  Var from = op("lu_solve", {eye(g, n, t), pivots, order});
  Var rows = cast(t == DType::C64 ? real(from) : from, DType::I64);
  return scatter_add(vjp::zeros_like(x), rows, x, 0);
}

// The family's example: the op on a symmetric, diagonally dominant 4 x 4 A (example_spd; and a
// 4 x 2 B for the solves), or `use`'s: a factor's own use, or products free of the sign choices
// of eigen- and singular vectors.
using Use = std::function<std::vector<Var>(ExampleInputs&, DType t)>;
void lib(OpRegistry& r, const char* name, int nin, std::vector<AttrSpec> attrs, InferFn infer, const char* doc,
         Use use, VjpFn vjp, std::vector<int> nondiff = {}) {
  std::string n = name;
  ExampleFn example = [n, nin, use](ExampleInputs& x, DType t) {
    if (use) return use(x, t);
    Var A = example_spd(x, t);
    return nin == 1 ? op_multi(n, {A}) : std::vector<Var>{op(n, {A, x.in(t, {4, 2})})};
  };
  r.add({.name = name, .level = Level::Lib, .cls = OpClass::Library, .min_inputs = nin, .max_inputs = nin,
         .attrs = std::move(attrs), .infer = std::move(infer), .vjp = std::move(vjp),
         .nondiff_inputs = std::move(nondiff), .dtypes = kLapack, .doc = doc, .example = example});
}

// A 4 x 4 whose LU factorization swaps rows at its first two steps, with clear margins in
// every pivot choice (the rows of the family's A in reverse): pivots 3, 2, 2, 3.
Var example_pivoting(ExampleInputs& in, DType t) {
  return in.fixed(example_tensor(t, {4, 4}, {0, 0.25, 2, 8, 0.5, -1, 7, 2, 1, 5, -1, 0.25, 6, 1, 0.5, 0}));
}
// diag(1, 2, ..., k) as t: a spectral function V diag(c) V^H that, unlike V diag(w) V^H = A,
// depends on the eigen- or singular vectors, yet not on their signs or phases.
Var example_weights(ExampleInputs& in, DType t, int64_t k) {
  std::vector<double> c;
  for (int64_t i = 0; i < k; ++i) c.push_back(double(i + 1));
  return constant(in.graph(), example_tensor(t, {1, k}, c));
}

}  // namespace

void register_dense_la_ops(OpRegistry& r) {
  using V = std::vector<Var>;
  // P A = L U with partial pivoting; lu holds L (unit, below) and U; pivots are 0-based
  // row swaps in LAPACK order. A singular matrix is an error naming the zero pivot.
  // VJP (the pivots fixed, as they are away from ties): with gL, gU the cotangent's strictly
  // lower and upper parts, dA = P^T L^-H (tril(L^H gL, -1) + triu(gU U^H)) U^-H.
  lib(r, "lu_factor", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        return std::vector<TensorType>{in[0], {DType::I32, {in[0].shape[0]}}};
      },
      "getrf: LU factorization with partial pivoting -> (lu, pivots)",
      [](ExampleInputs& x, DType t) { return op_multi("lu_factor", {example_pivoting(x, t)}); },
      [](const V& in, const V& out, const V& g, const Attrs&) {
        const Var &lu = out[0], &glu = g[0];
        Var l = tril(lu, -1), u = triu(lu);
        Var gl = tril(glu, -1), gu = triu(glu);
        Var inner = tril(matmul(vjp::cj(l), gl, true, false) + gl, -1) + triu(matmul(gu, vjp::cj(u), false, true));
        Var left = trsm(mh(lu), inner, false, true);  // L^-H inner
        Var both = mh(trsm(lu, mh(left), false));      // (U^-1 left^H)^H = left U^-H
        return V{unpivot(out[1], both, in[0].dtype())};
      });
  // VJP: with W = L^-H U^-H g (= P A^-H g), dB = P^T W, and for lu's two triangles
  // dU = -triu(U^-H g X^H), dL = -tril(W (U X)^H, -1).
  lib(r, "lu_solve", 3, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "lu");
        if (in[1] != TensorType{DType::I32, {in[0].shape[0]}}) throw InputError("pivots must be i32[n]");
        require_rhs(in[2], in[0], in[0].shape[0]);
        return std::vector<TensorType>{in[2]};
      },
      "getrs: solve A X = B from lu_factor", [](ExampleInputs& x, DType t) {
        std::vector<Var> f = op_multi("lu_factor", {example_pivoting(x, t)});
        return std::vector<Var>{op("lu_solve", {f[0], f[1], x.in(t, {4, 2})}),
                                op("lu_solve", {f[0], f[1], x.in(t, {4})})};
      },
      [](const V& in, const V& out, const V& g, const Attrs&) {
        const Var& lu = in[0];
        Var gx = column(g[0]), xs = column(out[0]);
        Var z = trsm(mh(lu), gx, true);        // U^-H g
        Var w = trsm(mh(lu), z, false, true);  // L^-H U^-H g
        Var ux = matmul(triu(lu), xs);
        Var glu = -(triu(matmul(z, vjp::cj(xs), false, true)) + tril(matmul(w, vjp::cj(ux), false, true), -1));
        return V{glu, Var(), shaped(unpivot(in[1], w, lu.dtype()), in[2].shape())};
      },
      {1});
  // A = L L^H for Hermitian positive definite A (lower triangle read); not positive
  // definite is an error naming the failing leading minor.
  // VJP (Murray 2016): with K the Hermitian matrix of L^H gL's lower triangle (real diagonal),
  // S = L^-H K L^-1 is twice the gradient with respect to the Hermitian A; A's cotangent is
  // then S below the diagonal, Re S / 2 on it and zero above, which is not read.
  lib(r, "cholesky", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        return std::vector<TensorType>{in[0]};
      },
      "potrf: Cholesky factor L (lower; upper triangle zero)", {},
      [](const V&, const V& out, const V& g, const Attrs&) {
        const Var& l = out[0];
        Var k = hermitian_from_lower(matmul(vjp::cj(l), g[0], true, false));
        Var left = trsm(mh(l), k, false);     // L^-H K
        Var s = mh(trsm(mh(l), mh(left), false));  // L^-H K L^-1
        return V{tril(s, -1) + real_diag(s) * 0.5};
      });
  // VJP: dB = A^-1 g through the same factor; dL = -tril((dB X^H + X dB^H) L) (L's whole
  // lower triangle is read, its diagonal as given).
  lib(r, "cholesky_solve", 2, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "L");
        require_rhs(in[1], in[0], in[0].shape[0]);
        return std::vector<TensorType>{in[1]};
      },
      "potrs: solve A X = B from the Cholesky factor", [](ExampleInputs& x, DType t) {
        Var A = example_spd(x, t);
        Var l = op("cholesky", {A});
        return std::vector<Var>{op("cholesky_solve", {l, x.in(t, {4, 2})}), op("cholesky_solve", {l, x.in(t, {4})})};
      },
      [](const V& in, const V& out, const V& g, const Attrs&) {
        Var gb = op("cholesky_solve", {in[0], g[0]});
        Var y = matmul(column(gb), vjp::cj(column(out[0])), false, true);
        return V{-tril(matmul(y + mh(y), tril(in[0]))), gb};
      });
  // VJP: dB = T^-H g (a triangular solve with T^H, the other triangle); dT = -dB X^H on the
  // entries the solve reads (its triangle; without the diagonal when unit_diagonal).
  lib(r, "triangular_solve", 2, {{"lower", AttrKind::Bool, false, true}, {"unit_diagonal", AttrKind::Bool, false, false}},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "T");
        require_rhs(in[1], in[0], in[0].shape[0]);
        return std::vector<TensorType>{in[1]};
      },
      "trsm: solve T X = B for triangular T", [](ExampleInputs& x, DType t) {
        Var A = example_spd(x, t);
        return std::vector<Var>{trsm(A, x.in(t, {4, 2}), true), trsm(A, x.in(t, {4}), false, true)};
      },
      [](const V& in, const V& out, const V& g, const Attrs& a) {
        const bool lower = a.get_bool("lower"), unit = a.get_bool("unit_diagonal");
        Var gb = trsm(mh(in[0]), g[0], !lower, unit);
        Var gt = -matmul(column(gb), vjp::cj(column(out[0])), false, true);
        return V{lower ? tril(gt, unit ? -1 : 0) : triu(gt, unit ? 1 : 0), gb};
      });
  // Reduced QR of A [m, n], m >= n: Q [m, n] with orthonormal columns, R [n, n] upper.
  // VJP (full column rank): M = R gR^H - gQ^H Q, N the Hermitian matrix of M's lower triangle
  // (real diagonal), dA = (gQ + Q N) R^-H. It holds for R with a real diagonal of either sign
  // (the reference's is >= 0; LAPACK's may be negative), i.e. for every device's convention.
  lib(r, "qr", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_matrix(in[0], "A");
        int64_t m = in[0].shape[0], n = in[0].shape[1];
        if (m < n) throw InputError("qr needs rows >= columns, got " + shape_str(in[0].shape));
        return std::vector<TensorType>{{in[0].dtype, {m, n}}, {in[0].dtype, {n, n}}};
      },
      "geqrf + orgqr: reduced QR", [](ExampleInputs& x, DType t) {
        Var A = example_spd(x, t);
        std::vector<Var> r;
        for (const Var& a : {A, slice(A, {0, 0}, {4, 3})}) {  // square and tall
          std::vector<Var> qr = op_multi("qr", {a});
          const int64_t n = a.shape()[1];
          Var c = example_weights(x, t, n), rh = vjp::cj(qr[1]);
          // Q R = A, R^H R = A^H A, and sign- and phase-free functions of Q and R apart
          r.push_back(matmul(qr[0], qr[1]));
          r.push_back(matmul(rh, qr[1], true, false));
          r.push_back(matmul(qr[0] * c, vjp::cj(qr[0]), false, true));
          r.push_back(matmul(rh, qr[1] * reshape(c, {n, 1}), true, false));
        }
        return r;
      },
      [](const V&, const V& out, const V& g, const Attrs&) {
        const Var &q = out[0], &rr = out[1];
        Var m = matmul(rr, vjp::cj(g[1]), false, true) - matmul(vjp::cj(g[0]), q, true, false);
        Var x = g[0] + matmul(q, hermitian_from_lower(m));
        return V{mh(trsm(rr, mh(x), false))};
      });
  // Least squares min ||A x - b|| for full-rank A [m, n], m >= n.
  // VJP: with z = (A^H A)^-1 g (two triangular solves with A's R) and the residual
  // r = b - A x: db = A z, dA = r z^H - A z x^H.
  lib(r, "lstsq", 2, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_matrix(in[0], "A");
        int64_t m = in[0].shape[0], n = in[0].shape[1];
        if (m < n) throw InputError("lstsq needs rows >= columns, got " + shape_str(in[0].shape));
        require_rhs(in[1], in[0], m);
        Shape s = in[1].shape;
        s[0] = n;
        return std::vector<TensorType>{{in[0].dtype, s}};
      },
      "gels: least-squares solution", [](ExampleInputs& x, DType t) {
        Var A = example_spd(x, t);
        Var tall = slice(A, {0, 0}, {4, 3});  // b outside A's range: a nonzero residual
        return std::vector<Var>{op("lstsq", {tall, x.in(t, {4, 2})}), op("lstsq", {tall, x.in(t, {4})}),
                                op("lstsq", {A, x.in(t, {4, 2})})};
      },
      [](const V& in, const V& out, const V& g, const Attrs&) {
        const Var& a = in[0];
        Var b = column(in[1]), xs = column(out[0]);
        std::vector<Var> qr = op_multi("qr", {a});
        Var z1 = trsm(mh(qr[1]), column(g[0]), true);  // R^-H g
        Var z = trsm(qr[1], z1, false);                // R^-1 R^-H g
        Var gb = matmul(qr[0], z1);                    // Q R z = A z
        Var res = b - matmul(a, xs);
        Var ga = matmul(res, vjp::cj(z), false, true) - matmul(gb, vjp::cj(xs), false, true);
        return V{ga, shaped(gb, in[1].shape())};
      });
  // Thin SVD: A [m, n] = U diag(S) Vh, k = min(m, n): U [m, k], S [k] real, Vh [k, n].
  // VJP (distinct singular values, and nonzero ones where m != n or A is complex; the loss
  // must not depend on the singular vectors' signs or phases): with Ut = U^H gU, Vt = V^H gV,
  // F_ij = 1 / (s_j^2 - s_i^2), J = F o (Ut - Ut^H), K = F o (Vt - Vt^H),
  // dA = U (J S + S K + diag(gS + i Im diag(Ut) / S)) Vh + (I - U U^H) gU S^-1 Vh
  //      + U S^-1 gV^H (I - V V^H).
  lib(r, "svd", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_matrix(in[0], "A");
        int64_t m = in[0].shape[0], n = in[0].shape[1], k = std::min(m, n);
        DType t = in[0].dtype;
        return std::vector<TensorType>{{t, {m, k}}, {real_of(t), {k}}, {t, {k, n}}};
      },
      "gesdd/gesvd: thin SVD -> (U, S descending, Vh); gradient for distinct singular values", [](ExampleInputs& x, DType t) {
        Var A = example_spd(x, t);
        std::vector<Var> r;
        for (const Var& a : {A, slice(A, {0, 0}, {4, 3}), slice(A, {1, 0}, {4, 4})}) {  // square, tall, wide
          std::vector<Var> usv = op_multi("svd", {a});
          const int64_t k = usv[1].shape()[0];
          Var s = reshape(cast(usv[1], t), {1, k});
          // S, U diag(S) Vh = A, and U diag(1, 2, ...) Vh, which depends on the vectors
          r.push_back(usv[1]);
          r.push_back(matmul(usv[0] * s, usv[2]));
          r.push_back(matmul(usv[0] * example_weights(x, t, k), usv[2]));
        }
        return r;
      },
      [](const V& in, const V& out, const V& g, const Attrs&) {
        const DType t = in[0].dtype();
        const int64_t m = in[0].shape()[0], n = in[0].shape()[1], k = std::min(m, n);
        const Var &u = out[0], &vh = out[2], &gu = g[0], &gvh = g[2];
        Var st = as_dtype(out[1], t);
        Var s_row = reshape(st, {1, k}), s_col = reshape(st, {k, 1});
        Var ut = matmul(vjp::cj(u), gu, true, false);
        Var vt = matmul(vh, mh(gvh));  // V^H gV
        Var f = inverse_gaps(out[1] * out[1], t);
        Var mid = (f * (ut - mh(ut))) * s_row + s_col * (f * (vt - mh(vt)));
        Var d = as_dtype(g[1], t);
        if (t == DType::C64)
          d = d + make_complex(vjp::zeros_like(out[1]), imag(diagonal(ut)) / out[1]);
        mid = mid + diag_of(d);
        Var ga = matmul(matmul(u, mid), vh);
        if (m > k) ga = ga + matmul((gu - matmul(u, ut)) / s_row, vh);
        if (n > k) ga = ga + matmul(u, (gvh - matmul(mh(vt), vh)) / s_col);
        return V{ga};
      });
  // Hermitian eigendecomposition (lower triangle read): ascending eigenvalues w, V columns.
  // VJP (Giles 2008; distinct eigenvalues, a loss free of the eigenvectors' signs or
  // phases): G = V (diag(gw) + F o (V^H gV)) V^H with F_ij = 1 / (w_j - w_i), taken onto the
  // lower triangle the op reads.
  lib(r, "eigh", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        DType t = in[0].dtype;
        return std::vector<TensorType>{{real_of(t), {in[0].shape[0]}}, in[0]};
      },
      "syevd/heevd: eigenvalues ascending, eigenvectors as columns; gradient for distinct eigenvalues", [](ExampleInputs& x, DType t) {
        Var A = example_spd(x, t);
        std::vector<Var> wv = op_multi("eigh", {A});
        Var w = reshape(cast(wv[0], t), {1, 4});
        Var vh = vjp::cj(wv[1]);
        // w, V diag(w) V^H = A, and V diag(1, 2, 3, 4) V^H, which depends on the vectors
        return std::vector<Var>{wv[0], matmul(wv[1] * w, vh, false, true),
                                matmul(wv[1] * example_weights(x, t, 4), vh, false, true)};
      },
      [](const V& in, const V& out, const V& g, const Attrs&) {
        const DType t = in[0].dtype();
        const Var& v = out[1];
        Var inner = inverse_gaps(out[0], t) * matmul(vjp::cj(v), g[1], true, false) + diag_of(as_dtype(g[0], t));
        return V{onto_lower(matmul(matmul(v, inner), vjp::cj(v), false, true))};
      });
  // log|det A| and the sign (a unit complex number for c64); det = sign * exp(logabsdet).
  // An exactly singular A gives sign 0 and logabsdet = -inf (NumPy's convention), not an error.
  // VJP: dA = c A^-H with c = g_logabsdet - i Im(conj(g_sign) sign) (c = g_logabsdet for
  // real A, whose sign is piecewise constant), A^-1 from A's LU, which the backward computes
  // again (a singular A, where the gradient does not exist, then fails in lu_factor).
  lib(r, "slogdet", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        return std::vector<TensorType>{{in[0].dtype, {}}, {real_of(in[0].dtype), {}}};
      },
      "sign and log|det| through LU",
      [](ExampleInputs& x, DType t) {
        Var A = example_spd(x, t);
        std::vector<Var> r = op_multi("slogdet", {A});
        for (const Var& v : op_multi("slogdet", {example_pivoting(x, t)})) r.push_back(v);
        return r;
      },
      [](const V& in, const V& out, const V& g, const Attrs&) {
        const Var& a = in[0];
        const DType t = a.dtype();
        Var c = g[1];
        if (t == DType::C64) c = make_complex(c, -imag(conj(g[0]) * out[0]));
        std::vector<Var> f = op_multi("lu_factor", {a});
        Var inv = op("lu_solve", {f[0], f[1], eye(*a.graph(), a.shape()[0], t)});
        return V{c * mh(inv)};
      });
}

}  // namespace rlx::ir
