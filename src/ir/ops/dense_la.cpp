// Dense linear-algebra library primitives (LAPACK on cpu, cuSOLVER on cuda). Matrices
// are row-major [m, n]; batches are not supported yet (rank exactly 2).
#include "ir/ops/rules.hpp"

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

// The family's example: the op on a symmetric, diagonally dominant 4 x 4 A (and a 4 x 2 B
// for the solves); `use` turns its results into what the example returns (a factor's own
// use, or products free of the sign choices of eigen- and singular vectors).
using Use = std::function<std::vector<Var>(ExampleInputs&, const Var& A, DType t)>;
void lib(OpRegistry& r, const char* name, int nin, std::vector<AttrSpec> attrs, InferFn infer, const char* doc,
         Use use = {}) {
  std::string n = name;
  ExampleFn example = [n, nin, use](ExampleInputs& x, DType t) {
    Var A = example_spd(x, t);
    if (use) return use(x, A, t);
    return nin == 1 ? op_multi(n, {A}) : std::vector<Var>{op(n, {A, x.in(t, {4, 2})})};
  };
  r.add({.name = name, .level = Level::Lib, .cls = OpClass::Library, .min_inputs = nin, .max_inputs = nin,
         .attrs = std::move(attrs), .infer = std::move(infer), .dtypes = kLapack, .doc = doc, .example = example});
}

}  // namespace

void register_dense_la_ops(OpRegistry& r) {
  // P A = L U with partial pivoting; lu holds L (unit, below) and U; pivots are 0-based
  // row swaps in LAPACK order. A singular matrix is an error naming the zero pivot.
  lib(r, "lu_factor", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        return std::vector<TensorType>{in[0], {DType::I32, {in[0].shape[0]}}};
      },
      "getrf: LU factorization with partial pivoting -> (lu, pivots)");
  lib(r, "lu_solve", 3, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "lu");
        if (in[1] != TensorType{DType::I32, {in[0].shape[0]}}) throw InputError("pivots must be i32[n]");
        require_rhs(in[2], in[0], in[0].shape[0]);
        return std::vector<TensorType>{in[2]};
      },
      "getrs: solve A X = B from lu_factor", [](ExampleInputs& x, const Var& A, DType t) {
        std::vector<Var> f = op_multi("lu_factor", {A});
        return std::vector<Var>{op("lu_solve", {f[0], f[1], x.in(t, {4, 2})})};
      });
  // A = L L^H for Hermitian positive definite A (lower triangle read); not positive
  // definite is an error naming the failing leading minor.
  lib(r, "cholesky", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        return std::vector<TensorType>{in[0]};
      },
      "potrf: Cholesky factor L (lower; upper triangle zero)");
  lib(r, "cholesky_solve", 2, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "L");
        require_rhs(in[1], in[0], in[0].shape[0]);
        return std::vector<TensorType>{in[1]};
      },
      "potrs: solve A X = B from the Cholesky factor", [](ExampleInputs& x, const Var& A, DType t) {
        return std::vector<Var>{op("cholesky_solve", {op("cholesky", {A}), x.in(t, {4, 2})})};
      });
  lib(r, "triangular_solve", 2, {{"lower", AttrKind::Bool, false, true}, {"unit_diagonal", AttrKind::Bool, false, false}},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "T");
        require_rhs(in[1], in[0], in[0].shape[0]);
        return std::vector<TensorType>{in[1]};
      },
      "trsm: solve T X = B for triangular T");
  // Reduced QR of A [m, n], m >= n: Q [m, n] with orthonormal columns, R [n, n] upper.
  lib(r, "qr", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_matrix(in[0], "A");
        int64_t m = in[0].shape[0], n = in[0].shape[1];
        if (m < n) throw InputError("qr needs rows >= columns, got " + shape_str(in[0].shape));
        return std::vector<TensorType>{{in[0].dtype, {m, n}}, {in[0].dtype, {n, n}}};
      },
      "geqrf + orgqr: reduced QR", [](ExampleInputs&, const Var& A, DType t) {
        std::vector<Var> qr = op_multi("qr", {A});
        Var rh = t == DType::C64 ? conj(qr[1]) : qr[1];
        return std::vector<Var>{matmul(qr[0], qr[1]), matmul(rh, qr[1], true, false)};  // Q R = A, R^H R = A^H A
      });
  // Least squares min ||A x - b|| for full-rank A [m, n], m >= n.
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
      "gels: least-squares solution");
  // Thin SVD: A [m, n] = U diag(S) Vh, k = min(m, n): U [m, k], S [k] real, Vh [k, n].
  lib(r, "svd", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_matrix(in[0], "A");
        int64_t m = in[0].shape[0], n = in[0].shape[1], k = std::min(m, n);
        DType t = in[0].dtype;
        return std::vector<TensorType>{{t, {m, k}}, {real_of(t), {k}}, {t, {k, n}}};
      },
      "gesdd/gesvd: thin SVD -> (U, S descending, Vh)", [](ExampleInputs&, const Var& A, DType t) {
        std::vector<Var> usv = op_multi("svd", {A});
        Var s = reshape(cast(usv[1], t), {1, 4});
        return std::vector<Var>{usv[1], matmul(usv[0] * s, usv[2])};  // S, and U diag(S) Vh = A
      });
  // Hermitian eigendecomposition (lower triangle read): ascending eigenvalues w, V columns.
  lib(r, "eigh", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        DType t = in[0].dtype;
        return std::vector<TensorType>{{real_of(t), {in[0].shape[0]}}, in[0]};
      },
      "syevd/heevd: eigenvalues ascending, eigenvectors as columns", [](ExampleInputs&, const Var& A, DType t) {
        std::vector<Var> wv = op_multi("eigh", {A});
        Var w = reshape(cast(wv[0], t), {1, 4});
        Var vh = t == DType::C64 ? conj(wv[1]) : wv[1];
        return std::vector<Var>{wv[0], matmul(wv[1] * w, vh, false, true)};  // w, and V diag(w) V^H = A
      });
  // log|det A| and the sign (a unit complex number for c64); det = sign * exp(logabsdet).
  // An exactly singular A gives sign 0 and logabsdet = -inf (NumPy's convention), not an error.
  lib(r, "slogdet", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        return std::vector<TensorType>{{in[0].dtype, {}}, {real_of(in[0].dtype), {}}};
      },
      "sign and log|det| through LU");
}

}  // namespace rlx::ir
