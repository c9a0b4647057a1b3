// Dense linear algebra on the cuda device through cuSOLVER (its 64-bit generic API where
// there is one) and cuBLAS: f32, f64, c64; square or [m, n] matrices, no batches (the ops'
// rules). Semantics and error messages are the reference device's and the cpu device's
// (devices/reference/dense_la.cpp, devices/cpu/lapack.cpp).
//
// Layout. rlx matrices are row-major; cuSOLVER's are column-major, where a row-major
// buffer reads as the transpose. Per op:
//   lu_factor        getrf on a column-major copy of A (row pivoting of A is column
//                    pivoting of A^T, which LAPACK lacks), then transposed back; pivots
//                    (1-based int64) become 0-based i32 on the host.
//   lu_solve         pivots read back and range-checked on the host, getrs on column-major
//                    copies of lu and B, the solution transposed back.
//   cholesky         potrf('U') on A's row-major buffer: A^T = conj(A) = U^H U, so L = U^T,
//                    which is U's storage read row-major; the other triangle is zeroed by
//                    packing the triangle (trttp), clearing, unpacking (tpttr).
//   cholesky_solve,  T X = B <=> X^T T^T = B^T: trsm from the right on the buffers as they
//   triangular_solve are (X row-major [n, k] is X^T column-major with ld k).
//   qr               geqrf + orgqr/ungqr on a column-major copy; R is the upper triangle.
//   lstsq            geqrf, Q^H b by ormqr/unmqr, R x = (Q^H b)[:n] by trsm.
//   svd              gesvd needs rows >= columns: for m >= n on a column-major copy of A
//                    (U and V^H transposed back); for m < n on A's row-major buffer, which
//                    is A^T: gesvd(A^T) = U' S V'^H gives A = conj(V') S U'^T, so U and Vh are
//                    exactly the buffers gesvd writes as VT and U.
//   eigh             syevd/heevd('L') on a column-major copy (A's lower triangle read);
//                    eigenvalues ascending; eigenvectors transposed back.
//   slogdet          getrf of A's row-major buffer (A^T: the same determinant); the diagonal
//                    and pivots are read back and reduced on the host in double.
//
// Errors. Exact zero pivots and non-positive Cholesky minors are InputErrors with the
// reference's wording: lu_factor, cholesky, svd and eigh read cuSOLVER's info back (a
// stream synchronization); the solves read the n diagonal entries back and check them for
// exact zeros, as the cpu device does; lstsq reads R's diagonal. Library statuses become
// DeviceErrors naming the call.
//
// CUDA graphs (Device::capture). While stream() records, nothing may wait for the device
// or copy to the host: lu_factor, lu_solve and slogdet, whose results pass through the
// host, refuse with an InputError; the others run without their host-side checks (a
// singular or indefinite matrix then gives inf/NaN instead of an error, a non-converged
// svd/eigh goes unreported), and refuse only if cuSOLVER asks for host workspace.
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/library.hpp"
#include "ir/op_registry.hpp"
#include "ir/ops/semantics.hpp"

namespace rlx::cuda {

namespace {

const char* solver_status_name(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_MAPPING_ERROR: return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_ZERO_PIVOT: return "CUSOLVER_STATUS_ZERO_PIVOT";
    case CUSOLVER_STATUS_INVALID_LICENSE: return "CUSOLVER_STATUS_INVALID_LICENSE";
    case CUSOLVER_STATUS_INVALID_WORKSPACE: return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default: break;
  }
  return "CUSOLVER_STATUS_(unknown)";
}

void check_solver(cusolverStatus_t s, const char* call) {
  if (s == CUSOLVER_STATUS_SUCCESS) return;
  const std::string& node = current_node();
  std::string name = solver_status_name(s);
  if (name == "CUSOLVER_STATUS_(unknown)") name = "cusolver status " + std::to_string(int(s));
  throw DeviceError(std::string("cuda: ") + call + ": " + name + (node.empty() ? std::string() : " (node " + node + ")"));
}

struct Solver {
  cusolverDnHandle_t h = nullptr;
  cusolverDnParams_t params = nullptr;  // default algorithms
};

// Created on first use, bound to stream(); never destroyed (see blas.cpp).
const Solver& solver() {
  static const Solver s = [] {
    Solver x;
    check_solver(cusolverDnCreate(&x.h), "cusolverDnCreate");
    check_solver(cusolverDnSetStream(x.h, stream()), "cusolverDnSetStream");
    check_solver(cusolverDnCreateParams(&x.params), "cusolverDnCreateParams");
    return x;
  }();
  return s;
}

bool lapack_dtype(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::C64; }

cudaDataType data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::C64: return CUDA_C_32F;
    default: break;
  }
  throw InternalError(std::string("cuda solver: given ") + dtype_name(t));
}
cudaDataType real_type(DType t) { return t == DType::F64 ? CUDA_R_64F : CUDA_R_32F; }

// ---------------------------------------------------------------- errors


// Ops whose results need the host (pivots converted there, a determinant reduced there)
// cannot be recorded into a CUDA graph.
void refuse_capture(const char* op, const char* why) {
  if (capturing())
    throw InputError(std::string(op) + " on cuda cannot be recorded into a CUDA graph for replay: " + why);
}

void check_info(int info, const char* routine) {
  if (info < 0)
    throw InternalError(std::string("cuda cusolver: ") + routine + " rejected argument " + std::to_string(-info));
}

// ---------------------------------------------------------------- memory

size_t at_least_1(size_t n) { return std::max<size_t>(n, 1); }

// A routine's device and host workspaces. The host part may be in use until the work
// queued with it has run, so it is released only after a synchronization.
class Workspace {
 public:
  Workspace(size_t dev_bytes, size_t host_bytes)
      : dev_(at_least_1(dev_bytes)), host_(at_least_1(host_bytes)), host_bytes_(host_bytes) {
    if (host_bytes_ > 0 && capturing())
      throw InputError("cuda: " + current_node() +
                       ": cannot be recorded into a CUDA graph for replay (cuSOLVER asks for host workspace)");
  }
  ~Workspace() {
    if (host_bytes_ > 0) cudaStreamSynchronize(stream());
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* dev() const { return dev_.get(); }
  void* host() { return host_.data(); }

 private:
  Scratch dev_;
  std::vector<unsigned char> host_;
  size_t host_bytes_;
};

void d2h(void* host, const void* dev, size_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync (to host)");
}
// From pageable memory: staged before the call returns, so `host` may go right after.
void h2d(void* dev, const void* host, size_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (to device)");
}
void sync() { check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

int read_info(const Scratch& info) {
  int v = 0;
  d2h(&v, info.get(), sizeof(int));
  sync();
  return v;
}

int64_t rhs_cols(const Tensor& b) { return b.rank() == 2 ? b.shape()[1] : 1; }

// dst = t (a matrix, or a vector as one column) in column-major order with ld = rows:
// the row-major buffer of t^T.
void to_col_major(const Tensor& t, void* dst) {
  if (t.numel() == 0) return;
  const size_t es = dtype_size(t.dtype());
  View v;
  if (t.rank() == 1) {
    if (t.is_contiguous()) {
      check(cudaMemcpyAsync(dst, t.raw(), t.nbytes(), cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync");
      return;
    }
    v.rank = 1;
    v.shape[0] = t.shape()[0];
    v.strides[0] = t.strides()[0];
  } else {
    v.rank = 2;
    v.shape[0] = t.shape()[1];
    v.shape[1] = t.shape()[0];
    v.strides[0] = t.strides()[1];
    v.strides[1] = t.strides()[0];
  }
  copy_strided(t.raw(), v, dst, es);
}

// dst = t, contiguous row-major.
void to_row_major(const Tensor& t, void* dst) {
  if (t.numel() == 0) return;
  if (t.is_contiguous())
    check(cudaMemcpyAsync(dst, t.raw(), t.nbytes(), cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync");
  else
    copy_strided(t.raw(), view_of(t), dst, dtype_size(t.dtype()));
}

// dst (row-major [r, c]) = the column-major r x c matrix at src with leading dimension ld.
void col_to_row(const void* src, int64_t r, int64_t c, int64_t ld, void* dst, size_t es) {
  if (r == 0 || c == 0) return;
  View v;
  v.rank = 2;
  v.shape[0] = r;
  v.shape[1] = c;
  v.strides[0] = 1;
  v.strides[1] = ld;
  copy_strided(src, v, dst, es);
}

// A read-only row-major matrix as it is (unit column stride, row stride >= cols), else a
// contiguous copy; ld is the row stride.
struct RowMajor {
  Tensor keep;
  const void* p = nullptr;
  int64_t ld = 1;
};
RowMajor row_major(const Tensor& t) {
  RowMajor m;
  const int64_t r = t.shape()[0], c = t.shape()[1];
  if ((c == 1 || t.strides()[1] == 1) && (r == 1 || t.strides()[0] >= std::max<int64_t>(c, 1))) {
    m.keep = t;
    m.ld = r == 1 ? std::max<int64_t>(c, 1) : t.strides()[0];
  } else {
    m.keep = contiguous(t);
    m.ld = std::max<int64_t>(c, 1);
  }
  m.p = m.keep.raw();
  return m;
}

bool is_zero(DType t, const unsigned char* p) {
  if (t == DType::F64) {
    double v;
    std::memcpy(&v, p, sizeof v);
    return v == 0;
  }
  if (t == DType::F32) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v == 0;
  }
  c64 v;
  std::memcpy(&v, p, sizeof v);
  return v == c64(0);
}

// The n diagonal entries of the matrix at p (ld elements between rows or columns), read
// back to the host.
std::vector<unsigned char> read_diagonal(DType t, const void* p, int64_t ld, int64_t n) {
  const size_t es = dtype_size(t);
  std::vector<unsigned char> d(size_t(n) * es);
  if (n > 0)
    check(cudaMemcpy2DAsync(d.data(), es, p, size_t(ld + 1) * es, es, size_t(n), cudaMemcpyDeviceToHost, stream()),
          "cudaMemcpy2DAsync (diagonal)");
  sync();
  return d;
}

// 0-based index of the first exactly zero diagonal entry, or -1.
int64_t first_zero_diagonal(DType t, const void* p, int64_t ld, int64_t n) {
  const std::vector<unsigned char> d = read_diagonal(t, p, ld, n);
  const size_t es = dtype_size(t);
  for (int64_t i = 0; i < n; ++i)
    if (is_zero(t, d.data() + size_t(i) * es)) return i;
  return -1;
}

// ---------------------------------------------------------------- typed cuBLAS / legacy cuSOLVER

// B = op(A)^-1 B (side left) or B op(A)^-1 (side right), column-major.
void trsm(DType t, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t op, cublasDiagType_t diag, int64_t m,
          int64_t n, const void* a, int64_t lda, void* b, int64_t ldb) {
  cublasHandle_t h = cublas_handle();
  switch (t) {
    case DType::F32: {
      const float one = 1;
      check_cublas(cublasStrsm_64(h, side, uplo, op, diag, m, n, &one, static_cast<const float*>(a), lda,
                                  static_cast<float*>(b), ldb),
                   "cublasStrsm");
      return;
    }
    case DType::F64: {
      const double one = 1;
      check_cublas(cublasDtrsm_64(h, side, uplo, op, diag, m, n, &one, static_cast<const double*>(a), lda,
                                  static_cast<double*>(b), ldb),
                   "cublasDtrsm");
      return;
    }
    case DType::C64: {
      const cuComplex one = make_cuComplex(1, 0);
      check_cublas(cublasCtrsm_64(h, side, uplo, op, diag, m, n, &one, static_cast<const cuComplex*>(a), lda,
                                  static_cast<cuComplex*>(b), ldb),
                   "cublasCtrsm");
      return;
    }
    default: break;
  }
  throw InternalError(std::string("cuda trsm: given ") + dtype_name(t));
}

// Zeroes the column-major n x n matrix a (ld n) outside its `uplo` triangle (diagonal
// kept), in place: pack the triangle, clear, unpack.
void keep_triangle(DType t, cublasFillMode_t uplo, int64_t n, void* a) {
  if (n == 0) return;
  const size_t es = dtype_size(t);
  Scratch packed(size_t(n) * size_t(n + 1) / 2 * es);
  cublasHandle_t h = cublas_handle();
  const int ni = int(n);
  switch (t) {
    case DType::F32:
      check_cublas(cublasStrttp(h, uplo, ni, static_cast<const float*>(a), ni, packed.as<float>()), "cublasStrttp");
      break;
    case DType::F64:
      check_cublas(cublasDtrttp(h, uplo, ni, static_cast<const double*>(a), ni, packed.as<double>()), "cublasDtrttp");
      break;
    case DType::C64:
      check_cublas(cublasCtrttp(h, uplo, ni, static_cast<const cuComplex*>(a), ni, packed.as<cuComplex>()),
                   "cublasCtrttp");
      break;
    default: throw InternalError(std::string("cuda trttp: given ") + dtype_name(t));
  }
  check(cudaMemsetAsync(a, 0, size_t(n) * size_t(n) * es, stream()), "cudaMemsetAsync");
  switch (t) {
    case DType::F32:
      check_cublas(cublasStpttr(h, uplo, ni, packed.as<float>(), static_cast<float*>(a), ni), "cublasStpttr");
      break;
    case DType::F64:
      check_cublas(cublasDtpttr(h, uplo, ni, packed.as<double>(), static_cast<double*>(a), ni), "cublasDtpttr");
      break;
    default:
      check_cublas(cublasCtpttr(h, uplo, ni, packed.as<cuComplex>(), static_cast<cuComplex*>(a), ni), "cublasCtpttr");
      break;
  }
}

// A = the first n columns of Q from geqrf's reflectors (A column-major m x n, ld lda).
void orgqr(DType t, int64_t m, int64_t n, void* a, int64_t lda, const void* tau, int* info) {
  cusolverDnHandle_t h = solver().h;
  const int mi = int(m), ni = int(n), li = int(lda);
  int lwork = 0;
  switch (t) {
    case DType::F32: {
      float* A = static_cast<float*>(a);
      const float* T = static_cast<const float*>(tau);
      check_solver(cusolverDnSorgqr_bufferSize(h, mi, ni, ni, A, li, T, &lwork), "cusolverDnSorgqr_bufferSize");
      Scratch work(at_least_1(size_t(lwork) * sizeof(float)));
      check_solver(cusolverDnSorgqr(h, mi, ni, ni, A, li, T, work.as<float>(), lwork, info), "cusolverDnSorgqr");
      return;
    }
    case DType::F64: {
      double* A = static_cast<double*>(a);
      const double* T = static_cast<const double*>(tau);
      check_solver(cusolverDnDorgqr_bufferSize(h, mi, ni, ni, A, li, T, &lwork), "cusolverDnDorgqr_bufferSize");
      Scratch work(at_least_1(size_t(lwork) * sizeof(double)));
      check_solver(cusolverDnDorgqr(h, mi, ni, ni, A, li, T, work.as<double>(), lwork, info), "cusolverDnDorgqr");
      return;
    }
    case DType::C64: {
      cuComplex* A = static_cast<cuComplex*>(a);
      const cuComplex* T = static_cast<const cuComplex*>(tau);
      check_solver(cusolverDnCungqr_bufferSize(h, mi, ni, ni, A, li, T, &lwork), "cusolverDnCungqr_bufferSize");
      Scratch work(at_least_1(size_t(lwork) * sizeof(cuComplex)));
      check_solver(cusolverDnCungqr(h, mi, ni, ni, A, li, T, work.as<cuComplex>(), lwork, info), "cusolverDnCungqr");
      return;
    }
    default: break;
  }
  throw InternalError(std::string("cuda orgqr: given ") + dtype_name(t));
}

// C = Q^H C for Q from geqrf's k reflectors in A (column-major m x k, ld lda); C is m x nc.
void apply_qh(DType t, int64_t m, int64_t nc, int64_t k, const void* a, int64_t lda, const void* tau, void* c,
              int64_t ldc, int* info) {
  cusolverDnHandle_t h = solver().h;
  const int mi = int(m), ni = int(nc), ki = int(k), la = int(lda), lc = int(ldc);
  int lwork = 0;
  switch (t) {
    case DType::F32: {
      const float* A = static_cast<const float*>(a);
      const float* T = static_cast<const float*>(tau);
      float* C = static_cast<float*>(c);
      check_solver(cusolverDnSormqr_bufferSize(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, mi, ni, ki, A, la, T, C, lc, &lwork),
                   "cusolverDnSormqr_bufferSize");
      Scratch work(at_least_1(size_t(lwork) * sizeof(float)));
      check_solver(cusolverDnSormqr(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, mi, ni, ki, A, la, T, C, lc, work.as<float>(),
                                    lwork, info),
                   "cusolverDnSormqr");
      return;
    }
    case DType::F64: {
      const double* A = static_cast<const double*>(a);
      const double* T = static_cast<const double*>(tau);
      double* C = static_cast<double*>(c);
      check_solver(cusolverDnDormqr_bufferSize(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, mi, ni, ki, A, la, T, C, lc, &lwork),
                   "cusolverDnDormqr_bufferSize");
      Scratch work(at_least_1(size_t(lwork) * sizeof(double)));
      check_solver(cusolverDnDormqr(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, mi, ni, ki, A, la, T, C, lc, work.as<double>(),
                                    lwork, info),
                   "cusolverDnDormqr");
      return;
    }
    case DType::C64: {
      const cuComplex* A = static_cast<const cuComplex*>(a);
      const cuComplex* T = static_cast<const cuComplex*>(tau);
      cuComplex* C = static_cast<cuComplex*>(c);
      check_solver(cusolverDnCunmqr_bufferSize(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_C, mi, ni, ki, A, la, T, C, lc, &lwork),
                   "cusolverDnCunmqr_bufferSize");
      Scratch work(at_least_1(size_t(lwork) * sizeof(cuComplex)));
      check_solver(cusolverDnCunmqr(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_C, mi, ni, ki, A, la, T, C, lc,
                                    work.as<cuComplex>(), lwork, info),
                   "cusolverDnCunmqr");
      return;
    }
    default: break;
  }
  throw InternalError(std::string("cuda ormqr: given ") + dtype_name(t));
}

// LU of the column-major n x n matrix a in place (1-based pivots into ipiv, info on the
// device).
void getrf(DType t, int64_t n, void* a, int64_t* ipiv, const Scratch& info) {
  const Solver& s = solver();
  const cudaDataType dt = data_type(t);
  size_t db = 0, hb = 0;
  check_solver(cusolverDnXgetrf_bufferSize(s.h, s.params, n, n, dt, a, n, dt, &db, &hb), "cusolverDnXgetrf_bufferSize");
  Workspace ws(db, hb);
  check_solver(cusolverDnXgetrf(s.h, s.params, n, n, dt, a, n, ipiv, dt, ws.dev(), db, ws.host(), hb, info.as<int>()),
               "cusolverDnXgetrf");
}

// ---------------------------------------------------------------- kernels

void lu_factor(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& a = in[0];
  const DType t = a.dtype();
  const size_t es = dtype_size(t);
  const int64_t n = a.shape()[0];
  if (n == 0) return;
  refuse_capture("lu_factor", "its pivots are converted on the host");
  Scratch w(size_t(n * n) * es);
  to_col_major(a, w.get());
  Scratch ipiv(size_t(n) * sizeof(int64_t)), info(sizeof(int));
  getrf(t, n, w.get(), ipiv.as<int64_t>(), info);
  std::vector<int64_t> piv(static_cast<size_t>(n));
  d2h(piv.data(), ipiv.get(), piv.size() * sizeof(int64_t));
  const int inf = read_info(info);
  check_info(inf, "getrf");
  if (inf > 0) ir::throw_singular("lu_factor", "U", inf - 1);
  col_to_row(w.get(), n, n, n, out[0].raw(), es);
  std::vector<int32_t> p32(static_cast<size_t>(n));
  for (size_t i = 0; i < p32.size(); ++i) p32[i] = int32_t(piv[i] - 1);
  h2d(out[1].raw(), p32.data(), p32.size() * sizeof(int32_t));
}

void lu_solve(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &lu = in[0], &b = in[2];
  const DType t = lu.dtype();
  const size_t es = dtype_size(t);
  const int64_t n = lu.shape()[0], k = rhs_cols(b);
  if (n == 0) return;
  refuse_capture("lu_solve", "its pivots are checked and converted on the host");
  std::vector<int32_t> piv(static_cast<size_t>(n));
  {
    const Tensor pc = contiguous(in[1]);
    d2h(piv.data(), pc.raw(), piv.size() * sizeof(int32_t));
    sync();
  }
  std::vector<int64_t> ipiv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = piv[size_t(i)];
    if (p < 0 || p >= n)
      throw InputError("lu_solve: pivots[" + std::to_string(i) + "] = " + std::to_string(p) + " is outside [0, " +
                       std::to_string(n) + ")");
    ipiv[size_t(i)] = p + 1;
  }
  Scratch w(size_t(n * n) * es);
  to_col_major(lu, w.get());
  if (const int64_t z = first_zero_diagonal(t, w.get(), n, n); z >= 0) ir::throw_singular("lu_solve", "U", z);
  if (k == 0) return;
  Scratch bc(size_t(n * k) * es), dpiv(size_t(n) * sizeof(int64_t)), info(sizeof(int));
  to_col_major(b, bc.get());
  h2d(dpiv.get(), ipiv.data(), ipiv.size() * sizeof(int64_t));
  const Solver& s = solver();
  const cudaDataType dt = data_type(t);
  // getrs's info only reports invalid arguments (not read back: no synchronization).
  check_solver(cusolverDnXgetrs(s.h, s.params, CUBLAS_OP_N, n, k, dt, w.get(), n, dpiv.as<int64_t>(), dt, bc.get(), n,
                                info.as<int>()),
               "cusolverDnXgetrs");
  col_to_row(bc.get(), n, k, n, out[0].raw(), es);
}

void cholesky(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& a = in[0];
  const DType t = a.dtype();
  const int64_t n = a.shape()[0];
  if (n == 0) return;
  void* l = out[0].raw();
  to_row_major(a, l);  // read column-major: A^T, whose upper triangle is A's lower
  const Solver& s = solver();
  const cudaDataType dt = data_type(t);
  Scratch info(sizeof(int));
  size_t db = 0, hb = 0;
  check_solver(cusolverDnXpotrf_bufferSize(s.h, s.params, CUBLAS_FILL_MODE_UPPER, n, dt, l, n, dt, &db, &hb),
               "cusolverDnXpotrf_bufferSize");
  {
    Workspace ws(db, hb);
    check_solver(cusolverDnXpotrf(s.h, s.params, CUBLAS_FILL_MODE_UPPER, n, dt, l, n, dt, ws.dev(), db, ws.host(), hb,
                                  info.as<int>()),
                 "cusolverDnXpotrf");
  }
  // (Recording a CUDA graph: info cannot be read back; a matrix that is not positive
  // definite then leaves NaN or garbage instead of an error.)
  const int inf = capturing() ? 0 : read_info(info);
  check_info(inf, "potrf");
  if (inf > 0)
    throw InputError("cholesky: the leading minor of order " + std::to_string(inf) + " is not positive definite");
  keep_triangle(t, CUBLAS_FILL_MODE_UPPER, n, l);  // column-major upper = row-major lower
}

// X op(M) = B in place for the column-major n x n matrix M (a row-major buffer read as it
// is); X is row-major [n, k], i.e. X^T column-major with ld k.
void trsm_right(DType t, cublasFillMode_t uplo, cublasOperation_t op, cublasDiagType_t diag, int64_t n, int64_t k,
                const RowMajor& m, void* x) {
  trsm(t, CUBLAS_SIDE_RIGHT, uplo, op, diag, k, n, m.p, m.ld, x, std::max<int64_t>(k, 1));
}

void cholesky_solve(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &l = in[0], &b = in[1];
  const DType t = l.dtype();
  const int64_t n = l.shape()[0], k = rhs_cols(b);
  void* x = out[0].raw();
  to_row_major(b, x);
  if (n == 0 || k == 0) return;
  const RowMajor m = row_major(l);
  if (!capturing())
    if (const int64_t z = first_zero_diagonal(t, m.p, m.ld, n); z >= 0) ir::throw_singular("cholesky_solve", "L", z);
  trsm_right(t, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, k, m, x);  // L Y = B
  trsm_right(t, CUBLAS_FILL_MODE_UPPER, t == DType::C64 ? CUBLAS_OP_C : CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, n, k, m,
             x);  // L^H X = Y
}

void triangular_solve(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &tm = in[0], &b = in[1];
  const DType t = tm.dtype();
  const int64_t n = tm.shape()[0], k = rhs_cols(b);
  const bool lower = node.attrs.get_bool("lower"), unit = node.attrs.get_bool("unit_diagonal");
  void* x = out[0].raw();
  to_row_major(b, x);
  if (n == 0 || k == 0) return;
  const RowMajor m = row_major(tm);
  if (!unit && !capturing())
    if (const int64_t z = first_zero_diagonal(t, m.p, m.ld, n); z >= 0) ir::throw_singular("triangular_solve", "T", z);
  // The buffer read column-major is T^T: lower T is upper there.
  trsm_right(t, lower ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
             unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT, n, k, m, x);
}

// geqrf of the column-major m x n matrix w (ld m) in place; tau gets n reflector scalars.
void geqrf(DType t, int64_t m, int64_t n, void* w, void* tau, const Scratch& info) {
  const Solver& s = solver();
  const cudaDataType dt = data_type(t);
  size_t db = 0, hb = 0;
  check_solver(cusolverDnXgeqrf_bufferSize(s.h, s.params, m, n, dt, w, m, dt, tau, dt, &db, &hb),
               "cusolverDnXgeqrf_bufferSize");
  Workspace ws(db, hb);
  check_solver(cusolverDnXgeqrf(s.h, s.params, m, n, dt, w, m, dt, tau, dt, ws.dev(), db, ws.host(), hb, info.as<int>()),
               "cusolverDnXgeqrf");
}

void qr(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& a = in[0];
  const DType t = a.dtype();
  const size_t es = dtype_size(t);
  const int64_t m = a.shape()[0], n = a.shape()[1];
  if (n == 0) return;
  Scratch w(size_t(m * n) * es), tau(size_t(n) * es), info(sizeof(int));
  to_col_major(a, w.get());
  geqrf(t, m, n, w.get(), tau.get(), info);  // info: invalid arguments only
  // R: the top n x n block row-major, then its strictly lower part (strictly upper when
  // read column-major) cleared.
  col_to_row(w.get(), n, n, m, out[1].raw(), es);
  keep_triangle(t, CUBLAS_FILL_MODE_LOWER, n, out[1].raw());
  orgqr(t, m, n, w.get(), m, tau.get(), info.as<int>());
  col_to_row(w.get(), m, n, m, out[0].raw(), es);
}

void lstsq(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &a = in[0], &b = in[1];
  const DType t = a.dtype();
  const size_t es = dtype_size(t);
  const int64_t m = a.shape()[0], n = a.shape()[1], k = rhs_cols(b);
  if (n == 0 || k == 0) return;
  Scratch w(size_t(m * n) * es), tau(size_t(n) * es), info(sizeof(int));
  to_col_major(a, w.get());
  geqrf(t, m, n, w.get(), tau.get(), info);
  if (!capturing())
    if (const int64_t z = first_zero_diagonal(t, w.get(), m, n); z >= 0) ir::throw_rank_deficient(z + 1);
  Scratch bc(size_t(m * k) * es);
  to_col_major(b, bc.get());
  apply_qh(t, m, k, n, w.get(), m, tau.get(), bc.get(), m, info.as<int>());
  trsm(t, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, k, w.get(), m, bc.get(), m);
  col_to_row(bc.get(), n, k, m, out[0].raw(), es);
}

// gesvd('S', 'S') of the column-major m x n matrix a (m >= n, ld m, destroyed).
void gesvd(DType t, int64_t m, int64_t n, void* a, void* s_out, void* u, int64_t ldu, void* vt, int64_t ldvt) {
  const Solver& s = solver();
  const cudaDataType dt = data_type(t), rt = real_type(t);
  Scratch info(sizeof(int));
  size_t db = 0, hb = 0;
  check_solver(cusolverDnXgesvd_bufferSize(s.h, s.params, 'S', 'S', m, n, dt, a, m, rt, s_out, dt, u, ldu, dt, vt, ldvt,
                                           dt, &db, &hb),
               "cusolverDnXgesvd_bufferSize");
  {
    Workspace ws(db, hb);
    check_solver(cusolverDnXgesvd(s.h, s.params, 'S', 'S', m, n, dt, a, m, rt, s_out, dt, u, ldu, dt, vt, ldvt, dt,
                                  ws.dev(), db, ws.host(), hb, info.as<int>()),
                 "cusolverDnXgesvd");
  }
  const int inf = capturing() ? 0 : read_info(info);
  check_info(inf, "gesvd");
  if (inf > 0) throw InputError("svd: cuSOLVER gesvd did not converge (info " + std::to_string(inf) + ")");
}

void svd(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& a = in[0];
  const DType t = a.dtype();
  const size_t es = dtype_size(t);
  const int64_t m = a.shape()[0], n = a.shape()[1], k = std::min(m, n);
  if (k == 0) return;
  Scratch w(size_t(m * n) * es);
  if (m >= n) {
    to_col_major(a, w.get());
    Scratch u(size_t(m * k) * es), vt(size_t(k * n) * es);
    gesvd(t, m, n, w.get(), out[1].raw(), u.get(), m, vt.get(), k);
    col_to_row(u.get(), m, k, m, out[0].raw(), es);
    col_to_row(vt.get(), k, n, k, out[2].raw(), es);
  } else {
    to_row_major(a, w.get());  // A^T column-major [n, m], n > m
    gesvd(t, n, m, w.get(), out[1].raw(), out[2].raw(), n, out[0].raw(), k);
  }
}

void eigh(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& a = in[0];
  const DType t = a.dtype();
  const size_t es = dtype_size(t);
  const int64_t n = a.shape()[0];
  if (n == 0) return;
  Scratch w(size_t(n * n) * es), info(sizeof(int));
  to_col_major(a, w.get());  // A itself, column-major: its lower triangle is read
  const Solver& s = solver();
  const cudaDataType dt = data_type(t), rt = real_type(t);
  void* evals = out[0].raw();
  size_t db = 0, hb = 0;
  check_solver(cusolverDnXsyevd_bufferSize(s.h, s.params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, dt,
                                           w.get(), n, rt, evals, dt, &db, &hb),
               "cusolverDnXsyevd_bufferSize");
  {
    Workspace ws(db, hb);
    check_solver(cusolverDnXsyevd(s.h, s.params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, dt, w.get(), n, rt,
                                  evals, dt, ws.dev(), db, ws.host(), hb, info.as<int>()),
                 "cusolverDnXsyevd");
  }
  const int inf = capturing() ? 0 : read_info(info);
  check_info(inf, "syevd");
  if (inf > 0) throw InputError("eigh: cuSOLVER syevd/heevd did not converge (info " + std::to_string(inf) + ")");
  col_to_row(w.get(), n, n, n, out[1].raw(), es);
}

void slogdet(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& a = in[0];
  const DType t = a.dtype();
  const size_t es = dtype_size(t);
  const int64_t n = a.shape()[0];
  refuse_capture("slogdet", "the determinant is reduced on the host");
  std::complex<double> sg(1);
  double la = 0;
  bool zero = false;
  if (n > 0) {
    Scratch w(size_t(n * n) * es), ipiv(size_t(n) * sizeof(int64_t)), info(sizeof(int));
    to_row_major(a, w.get());  // A^T column-major: the same determinant
    getrf(t, n, w.get(), ipiv.as<int64_t>(), info);
    std::vector<int64_t> piv(static_cast<size_t>(n));
    d2h(piv.data(), ipiv.get(), piv.size() * sizeof(int64_t));
    const int inf = read_info(info);
    check_info(inf, "getrf");
    zero = inf > 0;
    if (!zero) {
      // Accumulate in double (complex<double>), round once, as the cpu device does.
      const std::vector<unsigned char> d = read_diagonal(t, w.get(), n, n);
      for (int64_t i = 0; i < n; ++i) {
        const unsigned char* p = d.data() + size_t(i) * es;
        std::complex<double> u;
        if (t == DType::F64) {
          double v;
          std::memcpy(&v, p, sizeof v);
          u = v;
        } else if (t == DType::F32) {
          float v;
          std::memcpy(&v, p, sizeof v);
          u = double(v);
        } else {
          c64 v;
          std::memcpy(&v, p, sizeof v);
          u = std::complex<double>(v.real(), v.imag());
        }
        const double mag = std::abs(u);
        if (t == DType::C64)
          sg *= u / mag;
        else
          sg *= u.real() < 0 ? -1.0 : 1.0;
        if (piv[size_t(i)] != i + 1) sg = -sg;
        la += std::log(mag);
      }
    }
  }
  if (zero) {
    sg = 0;
    la = -std::numeric_limits<double>::infinity();
  }
  if (t == DType::F64) {
    const double s = sg.real();
    h2d(out[0].raw(), &s, sizeof s);
    h2d(out[1].raw(), &la, sizeof la);
  } else {
    const float l = float(la);
    if (t == DType::F32) {
      const float s = float(sg.real());
      h2d(out[0].raw(), &s, sizeof s);
    } else {
      const c64 s(float(sg.real()), float(sg.imag()));
      h2d(out[0].raw(), &s, sizeof s);
    }
    h2d(out[1].raw(), &l, sizeof l);
  }
}

// ---------------------------------------------------------------- registration

Capability solver_supports(const ir::Node& n, const ir::Graph& g) {
  const DType t = g.type(n.inputs.at(0)).dtype;
  if (!lapack_dtype(t))
    return Capability::no("no " + std::string(dtype_name(t)) + " " + n.op->name + " kernel on cuda (cuSOLVER: f32 f64 c64)");
  // Some entry points (orgqr, ormqr, trttp/tpttr) take 32-bit sizes and may index a whole
  // matrix with them: every operand and result must have fewer than 2^31 elements.
  auto fits = [](const Shape& s) {
    int64_t count = 1;
    for (int64_t d : s) {
      if (d > INT_MAX) return false;
      count *= d;
      if (count > INT_MAX) return false;
    }
    return true;
  };
  for (const ir::Value& v : n.inputs)
    if (!fits(g.type(v).shape)) return Capability::no("matrix too large for cuSOLVER's 32-bit sizes (" + g.type(v).str() + ")");
  for (const TensorType& r : n.outputs)
    if (!fits(r.shape)) return Capability::no("result too large for cuSOLVER's 32-bit sizes (" + r.str() + ")");
  return Capability::yes();
}

using RunFn = void (*)(const ir::Node&, std::span<const Tensor>, std::span<Tensor>);

}  // namespace

void add_solver_kernels(KernelTable& t) {
  auto add = [&](const char* op, RunFn f) { t.add(PredicateKernel{op, solver_supports, f}); };
  add("lu_factor", lu_factor);
  add("lu_solve", lu_solve);
  add("cholesky", cholesky);
  add("cholesky_solve", cholesky_solve);
  add("triangular_solve", triangular_solve);
  add("qr", qr);
  add("lstsq", lstsq);
  add("svd", svd);
  add("eigh", eigh);
  add("slogdet", slogdet);
}

}  // namespace rlx::cuda
