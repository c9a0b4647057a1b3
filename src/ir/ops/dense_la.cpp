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

void lib(OpRegistry& r, const char* name, int nin, std::vector<AttrSpec> attrs, InferFn infer, const char* doc) {
  r.add({.name = name, .level = Level::Lib, .cls = OpClass::Library, .min_inputs = nin, .max_inputs = nin,
         .attrs = std::move(attrs), .infer = std::move(infer), .dtypes = kLapack, .doc = doc});
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
      "getrs: solve A X = B from lu_factor");
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
      "potrs: solve A X = B from the Cholesky factor");
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
      "geqrf + orgqr: reduced QR");
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
      "gesdd/gesvd: thin SVD -> (U, S descending, Vh)");
  // Hermitian eigendecomposition (lower triangle read): ascending eigenvalues w, V columns.
  lib(r, "eigh", 1, {},
      [](const std::vector<TensorType>& in, auto&, auto&) {
        require_square(in[0], "A");
        DType t = in[0].dtype;
        return std::vector<TensorType>{{real_of(t), {in[0].shape[0]}}, in[0]};
      },
      "syevd/heevd: eigenvalues ascending, eigenvectors as columns");
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
