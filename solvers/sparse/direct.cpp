// Sparse direct solvers through SuiteSparse (UMFPACK, KLU, CHOLMOD). See direct.hpp for
// the conventions (CSR read as the CSC of the transpose, one triangle for CHOLMOD,
// double-precision arithmetic, errors).
//
// Layout of this file:
//   - the library table: every SuiteSparse function used, resolved once by dlopen/dlsym
//   - Structure<I>: the analyzed pattern as SuiteSparse takes it, plus the caller's
//     entry order (identity for sorted, duplicate-free rows: the arrays are used as they are)
//   - one engine per library and (index, real/complex) variant: the RAII owner of the
//     library's common block and symbolic / numeric objects
//   - Factorization<I, Z>: pattern checks, value gathering, right-hand-side layout
//   - the public classes, thin handles on a Factorization
#include "solvers/sparse/direct.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/error.hpp"

#ifdef RLX_HAVE_SUITESPARSE
#include <dlfcn.h>
#include <cholmod.h>
#include <klu.h>
#include <umfpack.h>
#endif

namespace rlx::sparse {

namespace detail {

// What the public classes hold: one analyzed pattern, its numeric factorization (once
// factorized) and the values it was made from.
class DirectFactorization {
 public:
  virtual ~DirectFactorization() = default;
  virtual void factorize(const CsrMatrix& A) = 0;
  virtual void refactorize(const Tensor& values) = 0;
  virtual Tensor solve(const Tensor& b) = 0;
  virtual double rcond() = 0;
  virtual int64_t factor_nnz() = 0;
  int64_t n = 0;
  bool complex = false;
  bool factorized = false;
};

}  // namespace detail

namespace {

using cd = std::complex<double>;
using cld = std::complex<long double>;

// Entry k of a contiguous f32, f64 or c64 tensor, in long double.
cld value_at(const Tensor& t, int64_t k) {
  switch (t.dtype()) {
    case DType::F32: return cld(t.data<float>()[k]);
    case DType::F64: return cld(t.data<double>()[k]);
    case DType::C64: return cld(t.data<c64>()[k].real(), t.data<c64>()[k].imag());
    default: break;
  }
  throw InputError(std::string("expected f32, f64 or c64 values, got ") + dtype_name(t.dtype()));
}

// The factorization behind a handle; a moved-from handle has none.
detail::DirectFactorization& use(const std::unique_ptr<detail::DirectFactorization>& f, const char* who) {
  if (!f) throw InputError(std::string(who) + ": this solver was moved from");
  return *f;
}

}  // namespace

const char* lu_backend_name(LuBackend b) { return b == LuBackend::Klu ? "klu" : "umfpack"; }

std::pair<long double, long double> residual_sums(const CsrMatrix& A, const Tensor& x_in, const Tensor& b_in) {
  Tensor x = host_contiguous(x_in), b = host_contiguous(b_in);
  const bool shapes_ok = x.rank() == b.rank() && x.rank() >= 1 && x.rank() <= 2 && x.shape()[0] == A.cols() &&
                         b.shape()[0] == A.rows() && (x.rank() == 1 || x.shape()[1] == b.shape()[1]);
  if (!shapes_ok)
    throw InputError("residual: A is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", x is " +
                     shape_str(x.shape()) + ", b is " + shape_str(b.shape()) + " (expected x [cols] or [cols, k], b [rows] or [rows, k])");
  Tensor rp = host_contiguous(A.row_ptr()), ci = host_contiguous(A.col_idx()), v = host_contiguous(A.values());
  const int64_t n = A.rows(), k = x.rank() == 2 ? x.shape()[1] : 1;
  long double rn = 0, bn = 0;
  std::vector<cld> acc(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    std::fill(acc.begin(), acc.end(), cld(0));
    for (int64_t e = index_at(rp, r); e < index_at(rp, r + 1); ++e) {
      cld a = value_at(v, e);
      int64_t c = index_at(ci, e);
      for (int64_t j = 0; j < k; ++j) acc[size_t(j)] += a * value_at(x, c * k + j);
    }
    for (int64_t j = 0; j < k; ++j) {
      cld bv = value_at(b, r * k + j);
      rn += std::norm(bv - acc[size_t(j)]);
      bn += std::norm(bv);
    }
  }
  return {rn, bn};
}

double relative_residual(const CsrMatrix& A, const Tensor& x_in, const Tensor& b_in) {
  if (x_in.shape() != b_in.shape() || A.rows() != A.cols())
    throw InputError("relative_residual: A is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", x is " +
                     shape_str(x_in.shape()) + ", b is " + shape_str(b_in.shape()) + " (expected square A and x, b of shape [n] or [n, k])");
  const auto [rn, bn] = residual_sums(A, x_in, b_in);
  return double(bn > 0 ? std::sqrt(rn / bn) : std::sqrt(rn));
}

#ifndef RLX_HAVE_SUITESPARSE

namespace {
[[noreturn]] void no_suitesparse() {
  throw Error(
      "rlx was built without SuiteSparse: the sparse direct solvers (UMFPACK, KLU, CHOLMOD) are unavailable "
      "(install libsuitesparse-dev and reconfigure)");
}
}  // namespace

bool have_suitesparse() { return false; }
std::string suitesparse_version() { return ""; }
void* suitesparse_symbol(const std::string&) { no_suitesparse(); }

SparseLu::SparseLu(const CsrMatrix&, LuBackend) { no_suitesparse(); }
SparseCholesky::SparseCholesky(const CsrMatrix&) { no_suitesparse(); }

#else  // RLX_HAVE_SUITESPARSE

static_assert(std::is_same_v<SuiteSparse_long, int64_t>, "SuiteSparse_long is expected to be int64_t");

bool have_suitesparse() { return true; }
std::string suitesparse_version() {
  return std::to_string(SUITESPARSE_MAIN_VERSION) + "." + std::to_string(SUITESPARSE_SUB_VERSION) + "." +
         std::to_string(SUITESPARSE_SUBSUB_VERSION);
}

namespace {

// ------------------------------------------------------------------ the library table

#define RLX_UMFPACK_VARIANT(X, p)                                                                          \
  X(umfpack_##p##_defaults) X(umfpack_##p##_symbolic) X(umfpack_##p##_numeric) X(umfpack_##p##_wsolve) \
  X(umfpack_##p##_free_symbolic) X(umfpack_##p##_free_numeric) X(umfpack_##p##_get_numeric) X(umfpack_##p##_get_lunz)
#define RLX_UMFPACK_FUNCS(X) \
  RLX_UMFPACK_VARIANT(X, di) RLX_UMFPACK_VARIANT(X, dl) RLX_UMFPACK_VARIANT(X, zi) RLX_UMFPACK_VARIANT(X, zl)
#define RLX_KLU_VARIANT(X, p) X(klu_##p##factor) X(klu_##p##refactor) X(klu_##p##tsolve) X(klu_##p##free_numeric) X(klu_##p##rcond)
#define RLX_KLU_FUNCS(X)                                                                                           \
  X(klu_defaults) X(klu_l_defaults) X(klu_analyze) X(klu_l_analyze) X(klu_free_symbolic) X(klu_l_free_symbolic) \
  RLX_KLU_VARIANT(X, ) RLX_KLU_VARIANT(X, z_) RLX_KLU_VARIANT(X, l_) RLX_KLU_VARIANT(X, zl_)
#define RLX_CHOLMOD_VARIANT(X, p)                                                                              \
  X(cholmod_##p##start) X(cholmod_##p##finish) X(cholmod_##p##analyze) X(cholmod_##p##factorize)              \
  X(cholmod_##p##solve) X(cholmod_##p##free_factor) X(cholmod_##p##free_dense) X(cholmod_##p##rcond)
#define RLX_CHOLMOD_FUNCS(X) RLX_CHOLMOD_VARIANT(X, ) RLX_CHOLMOD_VARIANT(X, l_)

// Every SuiteSparse function the solvers call, typed by the library's own declarations.
struct Lib {
#define RLX_DECLARE(f) decltype(&::f) f = nullptr;
  RLX_UMFPACK_FUNCS(RLX_DECLARE)
  RLX_KLU_FUNCS(RLX_DECLARE)
  RLX_CHOLMOD_FUNCS(RLX_DECLARE)
#undef RLX_DECLARE
  void* handles[3] = {nullptr, nullptr, nullptr};  // umfpack, klu, cholmod; kept for the process's lifetime
};

// Before OpenBLAS (which SuiteSparse loads) initialises, make the same kernel choice the
// cpu device makes in devices/cpu/gemm.cpp, so whichever module loads it first, the
// process gets kernels for this CPU. Nothing to do when the user chose, or when OpenBLAS
// is already loaded (its choice is made).
void prepare_openblas_environment() {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  for (const char* name : {"libopenblas.so.0", "libopenblas.so"})
    if (void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
      dlclose(h);
      return;
    }
#if defined(__x86_64__) && defined(__GNUC__)
  const char* want = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                     : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? "Haswell"
                                                                                          : nullptr;
  if (want) setenv("OPENBLAS_CORETYPE", want, 0);
#endif
}

// The configured library path (RLX_SUITESPARSE_<LIB>, the soname next to the library
// CMake found), then the bare soname through the loader's search path.
void* open_library(const char* configured, std::string& errors) {
  std::string bare = configured;
  if (auto slash = bare.rfind('/'); slash != std::string::npos) bare = bare.substr(slash + 1);
  for (const std::string& name : {std::string(configured), bare}) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name + ": dlopen failed");
  }
  return nullptr;
}

const Lib& lib() {
  static Lib table;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    prepare_openblas_environment();
    const char* paths[3] = {RLX_SUITESPARSE_UMFPACK, RLX_SUITESPARSE_KLU, RLX_SUITESPARSE_CHOLMOD};
    std::string errors;
    for (int k = 0; k < 3; ++k) {
      table.handles[k] = open_library(paths[k], errors);
      if (!table.handles[k]) {
        failure = "SuiteSparse libraries could not be loaded: " + errors;
        return;
      }
    }
    std::string missing;
#define RLX_RESOLVE(f, h)                                                        \
  table.f = reinterpret_cast<decltype(table.f)>(dlsym(table.handles[h], #f)); \
  if (!table.f) missing += std::string(missing.empty() ? "" : ", ") + #f;
#define RLX_RESOLVE_UMF(f) RLX_RESOLVE(f, 0)
#define RLX_RESOLVE_KLU(f) RLX_RESOLVE(f, 1)
#define RLX_RESOLVE_CHOLMOD(f) RLX_RESOLVE(f, 2)
    RLX_UMFPACK_FUNCS(RLX_RESOLVE_UMF)
    RLX_KLU_FUNCS(RLX_RESOLVE_KLU)
    RLX_CHOLMOD_FUNCS(RLX_RESOLVE_CHOLMOD)
#undef RLX_RESOLVE_CHOLMOD
#undef RLX_RESOLVE_KLU
#undef RLX_RESOLVE_UMF
#undef RLX_RESOLVE
    if (!missing.empty()) failure = "the loaded SuiteSparse libraries lack: " + missing;
  });
  if (!failure.empty()) throw Error(failure);
  return table;
}

// ------------------------------------------------------------------ the analyzed pattern

// The pattern SuiteSparse sees, in compressed columns: the CSR arrays of A are the CSC
// arrays of A^T. When A's rows are sorted and duplicate-free they are used as they are
// (map empty: entry k of the caller is entry k here); otherwise each row is sorted and
// merged, and map[k] says where the caller's entry k goes (duplicates are summed).
template <class I>
struct Structure {
  int64_t n = 0;
  int64_t user_nnz = 0;
  std::vector<I> p, i;
  std::vector<int64_t> map;
  std::vector<I> user_rp, user_ci;  // the caller's arrays, kept only when map is used
  int stype = 0;                    // CHOLMOD: +1 reads the CSC's upper triangle (the CSR's lower), -1 the other

  int64_t nnz() const { return int64_t(i.size()); }
  const std::vector<I>& caller_row_ptr() const { return map.empty() ? p : user_rp; }
  const std::vector<I>& caller_col_idx() const { return map.empty() ? i : user_ci; }
};

template <class I>
std::vector<I> copy_index(const Tensor& t) {
  std::vector<I> v(size_t(t.numel()));
  if (dtype_size(t.dtype()) == sizeof(I)) {
    if (!v.empty()) std::memcpy(v.data(), t.raw(), v.size() * sizeof(I));
  } else {
    for (int64_t k = 0; k < t.numel(); ++k) v[size_t(k)] = I(index_at(t, k));
  }
  return v;
}

template <class I>
Structure<I> analyze_pattern(const CsrMatrix& A) {
  Structure<I> s;
  s.n = A.rows();
  s.user_nnz = A.nnz();
  Tensor rp = host_contiguous(A.row_ptr()), ci = host_contiguous(A.col_idx());
  std::vector<I> urp = copy_index<I>(rp), uci = copy_index<I>(ci);
  if (A.sorted_unique()) {
    s.p = std::move(urp);
    s.i = std::move(uci);
  } else {
    s.map.assign(size_t(s.user_nnz), 0);
    s.p.assign(size_t(s.n + 1), 0);
    s.i.reserve(uci.size());
    std::vector<std::pair<I, int64_t>> row;  // (column, caller's entry)
    for (int64_t r = 0; r < s.n; ++r) {
      row.clear();
      for (int64_t e = int64_t(urp[size_t(r)]); e < int64_t(urp[size_t(r + 1)]); ++e) row.push_back({uci[size_t(e)], e});
      std::sort(row.begin(), row.end());
      for (size_t q = 0; q < row.size(); ++q) {
        if (q == 0 || row[q].first != row[q - 1].first) s.i.push_back(row[q].first);
        s.map[size_t(row[q].second)] = int64_t(s.i.size()) - 1;
      }
      s.p[size_t(r + 1)] = I(s.i.size());
    }
    s.user_rp = std::move(urp);
    s.user_ci = std::move(uci);
  }
  // CHOLMOD's triangle: the CSR's lower one, unless the matrix has entries only on and above the diagonal.
  bool below = false, above = false;
  for (int64_t r = 0; r < s.n && !below; ++r)
    for (I e = s.p[size_t(r)]; e < s.p[size_t(r + 1)]; ++e) {
      below |= int64_t(s.i[size_t(e)]) < r;
      above |= int64_t(s.i[size_t(e)]) > r;
    }
  s.stype = (!below && above) ? -1 : 1;
  s.i.reserve(1);  // a pattern without entries still hands SuiteSparse a valid pointer
  return s;
}

// ------------------------------------------------------------------ engines

// One library's factorization of one pattern. Values are double arrays: n entries for
// real, 2n interleaved (re, im) for complex; right-hand sides are column-major n x k.
class Engine {
 public:
  virtual ~Engine() = default;
  virtual void factor(const double* ax) = 0;
  virtual void refactor(const double* ax) { factor(ax); }
  virtual void solve(double* x, int64_t k) = 0;  // in place
  virtual double rcond() = 0;
  virtual int64_t factor_nnz() = 0;
};

template <class I>
constexpr bool is64 = std::is_same_v<I, SuiteSparse_long>;

// -------- UMFPACK

std::string umfpack_status(int64_t st) {
  switch (st) {
    case UMFPACK_OK: return "ok";
    case UMFPACK_WARNING_singular_matrix: return "singular matrix";
    case UMFPACK_ERROR_out_of_memory: return "out of memory";
    case UMFPACK_ERROR_invalid_matrix: return "invalid matrix";
    case UMFPACK_ERROR_n_nonpositive: return "n <= 0";
    case UMFPACK_ERROR_different_pattern: return "pattern changed since the symbolic analysis";
    case UMFPACK_ERROR_ordering_failed: return "ordering failed";
    case UMFPACK_ERROR_internal_error: return "internal error";
    default: return "status " + std::to_string(st);
  }
}

[[noreturn]] void umfpack_fail(const char* call, int64_t st) {
  std::string msg = std::string("UMFPACK ") + call + " failed: " + umfpack_status(st);
  if (st == UMFPACK_ERROR_out_of_memory) throw Error(msg);
  if (st == UMFPACK_ERROR_invalid_matrix) throw InputError(msg);
  throw Error(msg);
}

template <class I, bool Z>
class UmfpackEngine final : public Engine {
 public:
  UmfpackEngine(const Structure<I>& s, const double* ax) : s_(s) {
    const Lib& L = lib();
    if constexpr (!is64<I>) {
      if constexpr (Z) L.umfpack_zi_defaults(control_);
      else L.umfpack_di_defaults(control_);
    } else {
      if constexpr (Z) L.umfpack_zl_defaults(control_);
      else L.umfpack_dl_defaults(control_);
    }
    const I n = I(s.n);
    int64_t st;
    if constexpr (!is64<I> && !Z) st = L.umfpack_di_symbolic(n, n, s.p.data(), s.i.data(), ax, &sym_, control_, info_);
    else if constexpr (!is64<I> && Z) st = L.umfpack_zi_symbolic(n, n, s.p.data(), s.i.data(), ax, nullptr, &sym_, control_, info_);
    else if constexpr (!Z) st = L.umfpack_dl_symbolic(n, n, s.p.data(), s.i.data(), ax, &sym_, control_, info_);
    else st = L.umfpack_zl_symbolic(n, n, s.p.data(), s.i.data(), ax, nullptr, &sym_, control_, info_);
    if (st != UMFPACK_OK) {
      free_symbolic();
      umfpack_fail("symbolic analysis", st);
    }
  }
  ~UmfpackEngine() override {
    free_numeric();
    free_symbolic();
  }
  UmfpackEngine(const UmfpackEngine&) = delete;
  UmfpackEngine& operator=(const UmfpackEngine&) = delete;

  void factor(const double* ax) override {
    const Lib& L = lib();
    free_numeric();
    int64_t st;
    if constexpr (!is64<I> && !Z) st = L.umfpack_di_numeric(s_.p.data(), s_.i.data(), ax, sym_, &num_, control_, info_);
    else if constexpr (!is64<I> && Z) st = L.umfpack_zi_numeric(s_.p.data(), s_.i.data(), ax, nullptr, sym_, &num_, control_, info_);
    else if constexpr (!Z) st = L.umfpack_dl_numeric(s_.p.data(), s_.i.data(), ax, sym_, &num_, control_, info_);
    else st = L.umfpack_zl_numeric(s_.p.data(), s_.i.data(), ax, nullptr, sym_, &num_, control_, info_);
    if (st == UMFPACK_WARNING_singular_matrix) {
      std::string msg = singular_message();
      free_numeric();
      throw InputError(msg);
    }
    if (st < 0) {
      free_numeric();
      umfpack_fail("numeric factorization", st);
    }
    ax_ = ax;  // iterative refinement in solve() reads the factorized matrix
  }

  // UMFPACK solves one right-hand side per call; A.'x = b is A x = b for the CSR's A.
  void solve(double* x, int64_t k) override {
    const Lib& L = lib();
    const int64_t n = s_.n, w = Z ? 2 : 1;
    std::vector<I> wi(static_cast<size_t>(n));
    std::vector<double> wd(size_t((Z ? 10 : 5) * n)), b(size_t(w * n));
    for (int64_t j = 0; j < k; ++j) {
      double* xj = x + j * w * n;
      std::copy(xj, xj + w * n, b.begin());
      int64_t st;
      if constexpr (!is64<I> && !Z)
        st = L.umfpack_di_wsolve(UMFPACK_Aat, s_.p.data(), s_.i.data(), ax_, xj, b.data(), num_, control_, info_, wi.data(), wd.data());
      else if constexpr (!is64<I> && Z)
        st = L.umfpack_zi_wsolve(UMFPACK_Aat, s_.p.data(), s_.i.data(), ax_, nullptr, xj, nullptr, b.data(), nullptr, num_, control_,
                                 info_, wi.data(), wd.data());
      else if constexpr (!Z)
        st = L.umfpack_dl_wsolve(UMFPACK_Aat, s_.p.data(), s_.i.data(), ax_, xj, b.data(), num_, control_, info_, wi.data(), wd.data());
      else
        st = L.umfpack_zl_wsolve(UMFPACK_Aat, s_.p.data(), s_.i.data(), ax_, nullptr, xj, nullptr, b.data(), nullptr, num_, control_,
                                 info_, wi.data(), wd.data());
      if (st < 0) umfpack_fail("solve", st);
    }
  }

  double rcond() override { return info_[UMFPACK_RCOND]; }

  int64_t factor_nnz() override {
    const Lib& L = lib();
    I lnz = 0, unz = 0, nr = 0, nc = 0, nzud = 0;
    if constexpr (!is64<I> && !Z) L.umfpack_di_get_lunz(&lnz, &unz, &nr, &nc, &nzud, num_);
    else if constexpr (!is64<I> && Z) L.umfpack_zi_get_lunz(&lnz, &unz, &nr, &nc, &nzud, num_);
    else if constexpr (!Z) L.umfpack_dl_get_lunz(&lnz, &unz, &nr, &nc, &nzud, num_);
    else L.umfpack_zl_get_lunz(&lnz, &unz, &nr, &nc, &nzud, num_);
    return int64_t(lnz) + int64_t(unz) - s_.n;  // lnz counts L's unit diagonal
  }

 private:
  // Where the zero pivot is: U's diagonal and the permutations (P A^T Q = L U, so pivot
  // k sits at row Q[k], column P[k] of the caller's A).
  std::string singular_message() {
    const Lib& L = lib();
    const int64_t n = s_.n;
    std::vector<I> P(static_cast<size_t>(n)), Q(static_cast<size_t>(n));
    std::vector<double> D(size_t((Z ? 2 : 1) * n));
    I recip = 0;
    int64_t st;
    if constexpr (!is64<I> && !Z)
      st = L.umfpack_di_get_numeric(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, P.data(), Q.data(), D.data(), &recip, nullptr, num_);
    else if constexpr (!is64<I> && Z)
      st = L.umfpack_zi_get_numeric(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, P.data(), Q.data(), D.data(),
                                    nullptr, &recip, nullptr, num_);
    else if constexpr (!Z)
      st = L.umfpack_dl_get_numeric(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, P.data(), Q.data(), D.data(), &recip, nullptr, num_);
    else
      st = L.umfpack_zl_get_numeric(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, P.data(), Q.data(), D.data(),
                                    nullptr, &recip, nullptr, num_);
    std::string msg = "singular matrix: UMFPACK's numeric factorization found a zero pivot";
    if (st != UMFPACK_OK) return msg;
    int64_t first = -1, zeros = 0;
    for (int64_t k = 0; k < n; ++k) {
      bool zero = Z ? (D[size_t(2 * k)] == 0 && D[size_t(2 * k + 1)] == 0) : D[size_t(k)] == 0;
      if (zero) {
        ++zeros;
        if (first < 0) first = k;
      }
    }
    if (first < 0) return msg;
    return msg + " at step " + std::to_string(first + 1) + " of " + std::to_string(n) + ", eliminating row " +
           std::to_string(int64_t(Q[size_t(first)])) + " and column " + std::to_string(int64_t(P[size_t(first)])) +
           " of the matrix (0-based; " + std::to_string(zeros) + " zero pivot" + (zeros == 1 ? "" : "s") + " in all)";
  }

  void free_numeric() {
    if (!num_) return;
    const Lib& L = lib();
    if constexpr (!is64<I> && !Z) L.umfpack_di_free_numeric(&num_);
    else if constexpr (!is64<I> && Z) L.umfpack_zi_free_numeric(&num_);
    else if constexpr (!Z) L.umfpack_dl_free_numeric(&num_);
    else L.umfpack_zl_free_numeric(&num_);
    num_ = nullptr;
  }
  void free_symbolic() {
    if (!sym_) return;
    const Lib& L = lib();
    if constexpr (!is64<I> && !Z) L.umfpack_di_free_symbolic(&sym_);
    else if constexpr (!is64<I> && Z) L.umfpack_zi_free_symbolic(&sym_);
    else if constexpr (!Z) L.umfpack_dl_free_symbolic(&sym_);
    else L.umfpack_zl_free_symbolic(&sym_);
    sym_ = nullptr;
  }

  const Structure<I>& s_;
  const double* ax_ = nullptr;
  void* sym_ = nullptr;
  void* num_ = nullptr;
  double control_[UMFPACK_CONTROL] = {};
  double info_[UMFPACK_INFO] = {};
};

// -------- KLU

template <class I>
struct KluTypes {
  using Common = klu_common;
  using Symbolic = klu_symbolic;
  using Numeric = klu_numeric;
};
template <>
struct KluTypes<SuiteSparse_long> {
  using Common = klu_l_common;
  using Symbolic = klu_l_symbolic;
  using Numeric = klu_l_numeric;
};

template <class I, bool Z>
class KluEngine final : public Engine {
  using Common = typename KluTypes<I>::Common;
  using Symbolic = typename KluTypes<I>::Symbolic;
  using Numeric = typename KluTypes<I>::Numeric;

 public:
  explicit KluEngine(const Structure<I>& s) : s_(s) {
    const Lib& L = lib();
    if constexpr (is64<I>) {
      L.klu_l_defaults(&c_);
      sym_ = L.klu_l_analyze(I(s.n), p(), i(), &c_);
    } else {
      L.klu_defaults(&c_);
      sym_ = L.klu_analyze(I(s.n), p(), i(), &c_);
    }
    if (!sym_) fail("klu_analyze");
  }
  ~KluEngine() override {
    free_numeric();
    if (sym_) {
      if constexpr (is64<I>) lib().klu_l_free_symbolic(&sym_, &c_);
      else lib().klu_free_symbolic(&sym_, &c_);
    }
  }
  KluEngine(const KluEngine&) = delete;
  KluEngine& operator=(const KluEngine&) = delete;

  void factor(const double* ax) override {
    const Lib& L = lib();
    free_numeric();
    double* x = const_cast<double*>(ax);  // KLU's prototypes lack const; it only reads
    if constexpr (!is64<I> && !Z) num_ = L.klu_factor(p(), i(), x, sym_, &c_);
    else if constexpr (!is64<I> && Z) num_ = L.klu_z_factor(p(), i(), x, sym_, &c_);
    else if constexpr (!Z) num_ = L.klu_l_factor(p(), i(), x, sym_, &c_);
    else num_ = L.klu_zl_factor(p(), i(), x, sym_, &c_);
    if (!num_) fail("klu_factor");
    full_rcond_ = rcond();
  }

  void refactor(const double* ax) override {
    if (!num_) return factor(ax);
    const Lib& L = lib();
    double* x = const_cast<double*>(ax);
    int64_t ok;
    if constexpr (!is64<I> && !Z) ok = L.klu_refactor(p(), i(), x, sym_, num_, &c_);
    else if constexpr (!is64<I> && Z) ok = L.klu_z_refactor(p(), i(), x, sym_, num_, &c_);
    else if constexpr (!Z) ok = L.klu_l_refactor(p(), i(), x, sym_, num_, &c_);
    else ok = L.klu_zl_refactor(p(), i(), x, sym_, num_, &c_);
    if (!ok && c_.status != KLU_SINGULAR) fail("klu_refactor");
    // A zero pivot or a collapse of the pivots under the old pivot order: pivot afresh.
    if (!ok || !(rcond() >= 1e-8 * full_rcond_)) factor(ax);
  }

  void solve(double* x, int64_t k) override {
    const Lib& L = lib();
    int64_t ok;
    if constexpr (!is64<I> && !Z) ok = L.klu_tsolve(sym_, num_, I(s_.n), I(k), x, &c_);
    else if constexpr (!is64<I> && Z) ok = L.klu_z_tsolve(sym_, num_, I(s_.n), I(k), x, 0, &c_);
    else if constexpr (!Z) ok = L.klu_l_tsolve(sym_, num_, I(s_.n), I(k), x, &c_);
    else ok = L.klu_zl_tsolve(sym_, num_, I(s_.n), I(k), x, 0, &c_);
    if (!ok) fail("klu_tsolve");
  }

  double rcond() override {
    const Lib& L = lib();
    int64_t ok;
    if constexpr (!is64<I> && !Z) ok = L.klu_rcond(sym_, num_, &c_);
    else if constexpr (!is64<I> && Z) ok = L.klu_z_rcond(sym_, num_, &c_);
    else if constexpr (!Z) ok = L.klu_l_rcond(sym_, num_, &c_);
    else ok = L.klu_zl_rcond(sym_, num_, &c_);
    return ok ? c_.rcond : 0.0;
  }

  int64_t factor_nnz() override { return int64_t(num_->lnz) + int64_t(num_->unz) - s_.n + int64_t(num_->nzoff); }

 private:
  I* p() const { return const_cast<I*>(s_.p.data()); }
  I* i() const { return const_cast<I*>(s_.i.data()); }

  [[noreturn]] void fail(const char* call) {
    switch (c_.status) {
      case KLU_SINGULAR:
        // KLU factorizes A^T: its column j is row j of the caller's A.
        throw InputError(std::string("singular matrix: ") + call + " found a zero pivot at step " +
                         std::to_string(int64_t(c_.numerical_rank) + 1) + " of " + std::to_string(s_.n) + ", eliminating row " +
                         std::to_string(int64_t(c_.singular_col)) + " of the matrix (0-based)");
      case KLU_OUT_OF_MEMORY: throw Error(std::string("KLU ") + call + " failed: out of memory");
      case KLU_TOO_LARGE: throw Error(std::string("KLU ") + call + " failed: integer overflow (the problem is too large for this index type)");
      case KLU_INVALID: throw InputError(std::string("KLU ") + call + " failed: invalid matrix");
      default: throw Error(std::string("KLU ") + call + " failed: status " + std::to_string(int64_t(c_.status)));
    }
  }
  void free_numeric() {
    if (!num_) return;
    const Lib& L = lib();
    if constexpr (!is64<I> && !Z) L.klu_free_numeric(&num_, &c_);
    else if constexpr (!is64<I> && Z) L.klu_z_free_numeric(&num_, &c_);
    else if constexpr (!Z) L.klu_l_free_numeric(&num_, &c_);
    else L.klu_zl_free_numeric(&num_, &c_);
    num_ = nullptr;
  }

  const Structure<I>& s_;
  Common c_{};
  Symbolic* sym_ = nullptr;
  Numeric* num_ = nullptr;
  double full_rcond_ = 0;
};

// -------- CHOLMOD

std::string cholmod_status(int st) {
  switch (st) {
    case CHOLMOD_NOT_INSTALLED: return "method not installed";
    case CHOLMOD_OUT_OF_MEMORY: return "out of memory";
    case CHOLMOD_TOO_LARGE: return "integer overflow (the problem is too large for this index type)";
    case CHOLMOD_INVALID: return "invalid input";
    default: return "status " + std::to_string(st);
  }
}

// cholmod_common with its start/finish; the other members are destroyed before it.
template <bool L64>
struct CholmodCommon {
  cholmod_common c{};
  CholmodCommon() {
    if constexpr (L64) lib().cholmod_l_start(&c);
    else lib().cholmod_start(&c);
    c.print = 0;  // failures become exceptions; nothing on stderr
    // Simplicial factorizations as LL' too (the default is LDL', which only stops at a zero
    // pivot and would accept indefinite matrices); supernodal ones are LL' anyway.
    c.final_ll = 1;
  }
  ~CholmodCommon() {
    if constexpr (L64) lib().cholmod_l_finish(&c);
    else lib().cholmod_finish(&c);
  }
  CholmodCommon(const CholmodCommon&) = delete;
  CholmodCommon& operator=(const CholmodCommon&) = delete;
};

template <class I, bool Z>
class CholmodEngine final : public Engine {
 public:
  explicit CholmodEngine(const Structure<I>& s) : s_(s) {
    a_.nrow = a_.ncol = size_t(s.n);
    a_.nzmax = size_t(s.nnz());
    a_.p = const_cast<I*>(s.p.data());
    a_.i = const_cast<I*>(s.i.data());
    a_.stype = s.stype;
    a_.itype = is64<I> ? CHOLMOD_LONG : CHOLMOD_INT;
    a_.xtype = CHOLMOD_PATTERN;
    a_.dtype = CHOLMOD_DOUBLE;
    a_.sorted = 1;
    a_.packed = 1;
    if constexpr (is64<I>) L_ = lib().cholmod_l_analyze(&a_, &cm_.c);
    else L_ = lib().cholmod_analyze(&a_, &cm_.c);
    if (!L_) fail("cholmod_analyze");
    lnz_ = int64_t(cm_.c.lnz);
    a_.xtype = Z ? CHOLMOD_COMPLEX : CHOLMOD_REAL;
  }
  ~CholmodEngine() override {
    if (!L_) return;
    if constexpr (is64<I>) lib().cholmod_l_free_factor(&L_, &cm_.c);
    else lib().cholmod_free_factor(&L_, &cm_.c);
  }
  CholmodEngine(const CholmodEngine&) = delete;
  CholmodEngine& operator=(const CholmodEngine&) = delete;

  void factor(const double* ax) override {
    a_.x = const_cast<double*>(ax);
    int ok;
    if constexpr (is64<I>) ok = lib().cholmod_l_factorize(&a_, L_, &cm_.c);
    else ok = lib().cholmod_factorize(&a_, L_, &cm_.c);
    if (cm_.c.status == CHOLMOD_NOT_POSDEF) {
      const int64_t k = int64_t(L_->minor);
      std::string orig = L_->Perm ? ", column " + std::to_string(int64_t(static_cast<const I*>(L_->Perm)[k])) + " of the matrix" : "";
      throw InputError("matrix is not positive definite: CHOLMOD's factorization failed at column " + std::to_string(k) +
                       " of the permuted matrix" + orig + " (0-based; the permuted matrix's leading minor of order " +
                       std::to_string(k + 1) + " is not positive definite)");
    }
    if (!ok || cm_.c.status < 0) fail("cholmod_factorize");
  }

  void solve(double* x, int64_t k) override {
    cholmod_dense b{};
    b.nrow = size_t(s_.n);
    b.ncol = size_t(k);
    b.nzmax = size_t(s_.n * k);
    b.d = size_t(s_.n);
    b.x = x;
    b.xtype = Z ? CHOLMOD_COMPLEX : CHOLMOD_REAL;
    b.dtype = CHOLMOD_DOUBLE;
    cholmod_dense* r;
    if constexpr (is64<I>) r = lib().cholmod_l_solve(CHOLMOD_A, L_, &b, &cm_.c);
    else r = lib().cholmod_solve(CHOLMOD_A, L_, &b, &cm_.c);
    if (!r) fail("cholmod_solve");
    std::memcpy(x, r->x, size_t(s_.n * k * (Z ? 2 : 1)) * sizeof(double));
    if constexpr (is64<I>) lib().cholmod_l_free_dense(&r, &cm_.c);
    else lib().cholmod_free_dense(&r, &cm_.c);
  }

  double rcond() override {
    if constexpr (is64<I>) return lib().cholmod_l_rcond(L_, &cm_.c);
    else return lib().cholmod_rcond(L_, &cm_.c);
  }
  int64_t factor_nnz() override { return lnz_; }

 private:
  [[noreturn]] void fail(const char* call) {
    std::string msg = std::string("CHOLMOD ") + call + " failed: " + cholmod_status(cm_.c.status);
    if (cm_.c.status == CHOLMOD_INVALID) throw InputError(msg);
    throw Error(msg);
  }

  const Structure<I>& s_;
  CholmodCommon<is64<I>> cm_;
  cholmod_sparse a_{};
  cholmod_factor* L_ = nullptr;
  int64_t lnz_ = 0;
};

// ------------------------------------------------------------------ the factorization

enum class Kind { Umfpack, Klu, Cholmod };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Umfpack: return "SparseLu (UMFPACK)";
    case Kind::Klu: return "SparseLu (KLU)";
    default: return "SparseCholesky (CHOLMOD)";
  }
}

template <class I, bool Z>
class Factorization final : public detail::DirectFactorization {
 public:
  Factorization(const CsrMatrix& A, Kind kind) : kind_(kind), s_(analyze_pattern<I>(A)) {
    n = A.rows();
    complex = Z;
    if (n == 0) return;  // nothing to factorize; solve() returns empty results
    switch (kind) {
      case Kind::Umfpack:
        load_values(host_contiguous(A.values()));  // the symbolic analysis prefers large diagonal entries
        engine_ = std::make_unique<UmfpackEngine<I, Z>>(s_, ax_.data());
        break;
      case Kind::Klu: engine_ = std::make_unique<KluEngine<I, Z>>(s_); break;
      case Kind::Cholmod: engine_ = std::make_unique<CholmodEngine<I, Z>>(s_); break;
    }
  }

  void factorize(const CsrMatrix& A) override {
    check_pattern(A);
    load_values(host_contiguous(A.values()));
    numeric(false);
  }

  void refactorize(const Tensor& values) override {
    Tensor v = host_contiguous(values);
    if (v.rank() != 1 || v.numel() != s_.user_nnz)
      throw InputError(std::string(kind_name(kind_)) + "::refactorize: expected values of shape [" + std::to_string(s_.user_nnz) +
                       "] (the analyzed matrix's nonzeros), got " + shape_str(v.shape()));
    load_values(v);
    numeric(true);
  }

  Tensor solve(const Tensor& b_in) override {
    const std::string who = std::string(kind_name(kind_)) + "::solve";
    if (!factorized) throw InputError(who + ": the matrix is not factorized (call factorize() first, or after it failed)");
    Tensor b = host_contiguous(b_in);
    const DType bt = b.dtype();
    if (bt != DType::F32 && bt != DType::F64 && bt != DType::C64)
      throw InputError(who + ": the right-hand side must be f32, f64 or c64, got " + dtype_name(bt));
    if (b.rank() < 1 || b.rank() > 2 || b.shape()[0] != n)
      throw InputError(who + ": the right-hand side must be [" + std::to_string(n) + "] or [" + std::to_string(n) + ", k], got " +
                       shape_str(b.shape()));
    const bool bz = bt == DType::C64;
    const DType out = (Z || bz) ? DType::C64 : (value_type_ == DType::F64 || bt == DType::F64) ? DType::F64 : DType::F32;
    const int64_t k = b.rank() == 2 ? b.shape()[1] : 1;
    Tensor x = Tensor::empty(out, b.shape());
    if (n == 0 || k == 0) return x;
    // Column-major work array in the factorization's arithmetic; a complex b against a
    // real factorization is solved as 2k real columns (real parts, then imaginary parts).
    const int64_t cols = (!Z && bz) ? 2 * k : k;
    std::vector<double> w(size_t(n * cols * (Z ? 2 : 1)));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) {
        cld v = value_at(b, r * k + j);
        if constexpr (Z) {
          w[size_t(2 * (j * n + r))] = double(v.real());
          w[size_t(2 * (j * n + r) + 1)] = double(v.imag());
        } else {
          w[size_t(j * n + r)] = double(v.real());
          if (bz) w[size_t((k + j) * n + r)] = double(v.imag());
        }
      }
    engine_->solve(w.data(), cols);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) {
        double re, im = 0;
        if constexpr (Z) {
          re = w[size_t(2 * (j * n + r))];
          im = w[size_t(2 * (j * n + r) + 1)];
        } else {
          re = w[size_t(j * n + r)];
          if (bz) im = w[size_t((k + j) * n + r)];
        }
        const int64_t e = r * k + j;
        if (out == DType::C64) x.data<c64>()[e] = c64(float(re), float(im));
        else if (out == DType::F64) x.data<double>()[e] = re;
        else x.data<float>()[e] = float(re);
      }
    return x;
  }

  double rcond() override {
    require_factorized("rcond");
    return n == 0 ? 1.0 : engine_->rcond();
  }
  int64_t factor_nnz() override {
    require_factorized("factor_nnz");
    return n == 0 ? 0 : engine_->factor_nnz();
  }

 private:
  void require_factorized(const char* what) const {
    if (!factorized) throw InputError(std::string(kind_name(kind_)) + "::" + what + ": the matrix is not factorized");
  }

  void numeric(bool again) {
    factorized = false;
    if (n > 0) {
      if (again) engine_->refactor(ax_.data());
      else engine_->factor(ax_.data());
    }
    factorized = true;
  }

  // A must have the analyzed pattern exactly (index dtypes may differ).
  void check_pattern(const CsrMatrix& A) const {
    const std::string who = std::string(kind_name(kind_)) + "::factorize";
    if (A.rows() != n || A.cols() != n)
      throw InputError(who + ": the matrix is " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) + ", the analyzed one " +
                       std::to_string(n) + " x " + std::to_string(n));
    if (A.nnz() != s_.user_nnz)
      throw InputError(who + ": the matrix has " + std::to_string(A.nnz()) + " stored entries, the analyzed pattern " +
                       std::to_string(s_.user_nnz) + " (the sparsity pattern must not change; analyze the new matrix instead)");
    Tensor rp = host_contiguous(A.row_ptr()), ci = host_contiguous(A.col_idx());
    const std::vector<I>& arp = s_.caller_row_ptr();
    const std::vector<I>& aci = s_.caller_col_idx();
    const bool same_type = dtype_size(A.index_type()) == sizeof(I);
    if (same_type && std::memcmp(rp.raw(), arp.data(), arp.size() * sizeof(I)) == 0 &&
        (aci.empty() || std::memcmp(ci.raw(), aci.data(), aci.size() * sizeof(I)) == 0))
      return;
    for (int64_t r = 0; r < n; ++r) {
      bool differs = index_at(rp, r + 1) != int64_t(arp[size_t(r + 1)]);
      for (int64_t e = int64_t(arp[size_t(r)]); !differs && e < int64_t(arp[size_t(r + 1)]); ++e)
        differs = index_at(ci, e) != int64_t(aci[size_t(e)]);
      if (differs)
        throw InputError(who + ": row " + std::to_string(r) +
                         " of the matrix has other columns than the analyzed pattern (the sparsity pattern must not change; "
                         "analyze the new matrix instead)");
    }
  }

  // The caller's values (in the caller's entry order) as the double array SuiteSparse
  // reads: widened, summed into the canonical positions, conjugated for CHOLMOD.
  void load_values(const Tensor& v) {
    const DType t = v.dtype();
    if (t != DType::F32 && t != DType::F64 && t != DType::C64)
      throw InputError(std::string(kind_name(kind_)) + ": values must be f32, f64 or c64, got " + dtype_name(t));
    if (!Z && t == DType::C64)
      throw InputError(std::string(kind_name(kind_)) +
                       ": complex values for a real factorization (analyze a c64 matrix to factorize complex values)");
    const int64_t nz = s_.nnz(), w = Z ? 2 : 1;
    const bool conj = Z && kind_ == Kind::Cholmod;
    ax_.assign(size_t(w * nz), 0.0);
    ax_.reserve(2);  // a valid pointer also without entries
    auto put = [&](int64_t dst, double re, double im) {
      if constexpr (Z) {
        ax_[size_t(2 * dst)] += re;
        ax_[size_t(2 * dst + 1)] += conj ? -im : im;
      } else {
        ax_[size_t(dst)] += re;
      }
    };
    auto each = [&](auto get) {
      if (s_.map.empty())
        for (int64_t k = 0; k < s_.user_nnz; ++k) get(k, k);
      else
        for (int64_t k = 0; k < s_.user_nnz; ++k) get(k, s_.map[size_t(k)]);
    };
    if (t == DType::F64) {
      const double* p = v.data<double>();
      if (!Z && s_.map.empty()) {
        if (nz > 0) std::memcpy(ax_.data(), p, size_t(nz) * sizeof(double));
      } else {
        each([&](int64_t k, int64_t d) { put(d, p[k], 0); });
      }
    } else if (t == DType::F32) {
      const float* p = v.data<float>();
      each([&](int64_t k, int64_t d) { put(d, double(p[k]), 0); });
    } else {
      const c64* p = v.data<c64>();
      each([&](int64_t k, int64_t d) { put(d, double(p[k].real()), double(p[k].imag())); });
    }
    value_type_ = t;
  }

  Kind kind_;
  Structure<I> s_;
  std::vector<double> ax_;
  DType value_type_ = DType::F64;
  std::unique_ptr<Engine> engine_;  // declared last: destroyed first, while s_ and ax_ still live
};

std::unique_ptr<detail::DirectFactorization> make_factorization(const CsrMatrix& A, Kind kind) {
  const std::string who = kind_name(kind);
  if (A.rows() != A.cols())
    throw InputError(who + ": the matrix must be square, got " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()));
  const DType v = A.value_type();
  if (v != DType::F32 && v != DType::F64 && v != DType::C64)
    throw InputError(who + ": values must be f32, f64 or c64, got " + dtype_name(v));
  lib();  // fail early when the libraries cannot be loaded
  const bool z = v == DType::C64;
  if (A.index_type() == DType::I64) {
    if (z) return std::make_unique<Factorization<SuiteSparse_long, true>>(A, kind);
    return std::make_unique<Factorization<SuiteSparse_long, false>>(A, kind);
  }
  if (z) return std::make_unique<Factorization<int, true>>(A, kind);
  return std::make_unique<Factorization<int, false>>(A, kind);
}

}  // namespace

void* suitesparse_symbol(const std::string& name) {
  const Lib& L = lib();
  for (void* h : L.handles)
    if (void* f = dlsym(h, name.c_str())) return f;
  throw InputError("no SuiteSparse function named '" + name + "' in the loaded UMFPACK, KLU and CHOLMOD libraries");
}

SparseLu::SparseLu(const CsrMatrix& A, LuBackend backend)
    : f_(make_factorization(A, backend == LuBackend::Klu ? Kind::Klu : Kind::Umfpack)), backend_(backend) {}
SparseCholesky::SparseCholesky(const CsrMatrix& A) : f_(make_factorization(A, Kind::Cholmod)) {}

#endif  // RLX_HAVE_SUITESPARSE

// ------------------------------------------------------------------ the public handles

SparseLu::~SparseLu() = default;
SparseLu::SparseLu(SparseLu&&) noexcept = default;
SparseLu& SparseLu::operator=(SparseLu&&) noexcept = default;
void SparseLu::factorize(const CsrMatrix& A) { use(f_, "SparseLu").factorize(A); }
void SparseLu::refactorize(const Tensor& values) { use(f_, "SparseLu").refactorize(values); }
Tensor SparseLu::solve(const Tensor& b) { return use(f_, "SparseLu").solve(b); }
LuBackend SparseLu::backend() const { return backend_; }
int64_t SparseLu::rows() const { return use(f_, "SparseLu").n; }
bool SparseLu::is_complex() const { return use(f_, "SparseLu").complex; }
bool SparseLu::factorized() const { return f_ && f_->factorized; }
double SparseLu::rcond() const { return use(f_, "SparseLu").rcond(); }
int64_t SparseLu::factor_nnz() const { return use(f_, "SparseLu").factor_nnz(); }

SparseCholesky::~SparseCholesky() = default;
SparseCholesky::SparseCholesky(SparseCholesky&&) noexcept = default;
SparseCholesky& SparseCholesky::operator=(SparseCholesky&&) noexcept = default;
void SparseCholesky::factorize(const CsrMatrix& A) { use(f_, "SparseCholesky").factorize(A); }
void SparseCholesky::refactorize(const Tensor& values) { use(f_, "SparseCholesky").refactorize(values); }
Tensor SparseCholesky::solve(const Tensor& b) { return use(f_, "SparseCholesky").solve(b); }
int64_t SparseCholesky::rows() const { return use(f_, "SparseCholesky").n; }
bool SparseCholesky::is_complex() const { return use(f_, "SparseCholesky").complex; }
bool SparseCholesky::factorized() const { return f_ && f_->factorized; }
double SparseCholesky::rcond() const { return use(f_, "SparseCholesky").rcond(); }
int64_t SparseCholesky::factor_nnz() const { return use(f_, "SparseCholesky").factor_nnz(); }

}  // namespace rlx::sparse
