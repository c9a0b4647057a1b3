// Sparse CSR kernels on the cuda device, through cuSPARSE's generic API: spmv_csr
// (cusparseSpMV for c64; the device's own kernel in spmv.cu for f32/f64), spmm_csr
// (cusparseSpMM, row-major dense operands), sptrsv_csr (cusparseSpSV). f32, f64 and c64
// values; i32 or i64 indices (row_ptr and col_idx alike).
// Strided inputs are made contiguous first; work buffers come from Scratch.
//
// Semantics (the reference device's, devices/reference/sparse.cpp):
//   spmv   y = alpha A x (+ beta y0 when y0 is given). f32 and f64 run the device's own
//          kernel (spmv.cu: accumulates in double, rounds once, as the reference does;
//          RLX_CUDA_SPMV=cusparse sends them to cuSPARSE instead). c64 runs cusparseSpMV:
//          y0 is copied into the output and SpMV runs with beta; without y0 the output is
//          zeroed and beta = 0. CUSPARSE_SPMV_CSR_ALG2: bit-wise deterministic.
//   spmm   C = A B, B [cols, k] row-major (its own row stride when its rows are
//          contiguous), C zeroed then written with beta = 0.
//   sptrsv only the triangle named by `lower` is read, and with unit_diagonal not the
//          diagonal: the CUSPARSE_SPMAT_FILL_MODE and _DIAG_TYPE attributes, which make
//          SpSV ignore the other triangle (NVIDIA's spsv_csr and bicgstab samples solve
//          with a full matrix that way). Rows whose columns are not sorted (the op allows
//          them) are solved through a private copy of the structure with each row sorted;
//          its values are gathered (cusparseGather) from the caller's before every solve.
//          Known differences from the reference, on input the solvers never build: a row
//          without a stored diagonal (the reference divides by 0), duplicate diagonal
//          entries (the reference sums them), an empty matrix without unit_diagonal.
// Arithmetic is in the value type (the reference accumulates in double): results agree
// to rounding.
//
// SpSV analysis cache. Analysis (level scheduling) costs far more than a solve, and a
// Krylov preconditioner solves with the same factor every iteration, so analyses are
// kept, keyed by (row_ptr, col_idx, values pointers, rows, nnz, lower, unit, dtypes);
// the 32 most recently used stay, each with its descriptors and analysis buffer.
// Pointers alone are not identity: the caching allocator hands a freed block to the next
// tensor of its size, and a compiled program may rebind same-shaped parameters in place.
// So on every hit
//   - the values are re-read with cusparseSpSV_updateMatrix (the analysis is numeric,
//     and NVIDIA says updateMatrix makes a new analysis unnecessary), which covers new
//     values in the same buffers, and
//   - the structure is checked against a fingerprint taken at analysis time: 32 evenly
//     spaced entries (and the last) of row_ptr and of col_idx, read back with two strided
//     copies. A mismatch re-analyses. This costs one small device-to-host read (a stream
//     synchronization) per solve; a different sparsity pattern with the same rows and nnz
//     at the same three addresses that also agrees at every sampled position would go
//     unnoticed.
// A miss reads the whole structure back once (to see whether rows are sorted).
// CUDA graphs: spmv and spmm record as they are. sptrsv, while stream() records, uses
// the plan the program's previous (unrecorded) run made, without the fingerprint check
// (no reads to the host while recording), and pins it: never evicted, since the recorded
// solve uses its analysis buffer on every replay. Values are re-read (updateMatrix) in the
// recording too, so replays see new values; a new structure in the same buffers between
// replays is not noticed.
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cusparse.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <atomic>
#include <vector>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/library.hpp"
#include "devices/cuda/spmv.hpp"
#include "devices/cuda/spmv_tiled.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cuda {

namespace {

void check_sparse(cusparseStatus_t s, const char* call) {
  if (s == CUSPARSE_STATUS_SUCCESS) return;
  const std::string& node = current_node();
  throw DeviceError(std::string("cuda: ") + call + ": " + cusparseGetErrorName(s) +
                    (node.empty() ? std::string() : " (node " + node + ")"));
}

// Created on first use, bound to stream(); never destroyed (see blas.cpp).
cusparseHandle_t sparse_handle() {
  static const cusparseHandle_t h = [] {
    cusparseHandle_t x = nullptr;
    check_sparse(cusparseCreate(&x), "cusparseCreate");
    check_sparse(cusparseSetStream(x, stream()), "cusparseSetStream");
    return x;
  }();
  return h;
}

cudaDataType value_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::C64: return CUDA_C_32F;
    default: break;
  }
  throw InternalError(std::string("cuda sparse: no kernel for ") + dtype_name(t) + " values");
}

cusparseIndexType_t index_type(DType t) {
  if (t == DType::I32) return CUSPARSE_INDEX_32I;
  if (t == DType::I64) return CUSPARSE_INDEX_64I;
  throw InternalError(std::string("cuda sparse: no kernel for ") + dtype_name(t) + " indices");
}

// A scalar in the compute type (real part re, imaginary part 0 for c64).
struct Scalar {
  float f = 0;
  double d = 0;
  cuComplex c = make_cuComplex(0, 0);
  DType t;
  Scalar(DType type, double re) : f(float(re)), d(re), c(make_cuComplex(float(re), 0.0f)), t(type) {}
  const void* get() const {
    return t == DType::F64 ? static_cast<const void*>(&d) : t == DType::C64 ? static_cast<const void*>(&c) : &f;
  }
};

// Descriptor owners (destroyed on every path, errors included).
struct ConstMat {
  cusparseConstSpMatDescr_t d = nullptr;
  ~ConstMat() {
    if (d) cusparseDestroySpMat(d);
  }
};
struct ConstVec {
  cusparseConstDnVecDescr_t d = nullptr;
  ~ConstVec() {
    if (d) cusparseDestroyDnVec(d);
  }
};
struct Vec {
  cusparseDnVecDescr_t d = nullptr;
  ~Vec() {
    if (d) cusparseDestroyDnVec(d);
  }
};
struct ConstDense {
  cusparseConstDnMatDescr_t d = nullptr;
  ~ConstDense() {
    if (d) cusparseDestroyDnMat(d);
  }
};
struct Dense {
  cusparseDnMatDescr_t d = nullptr;
  ~Dense() {
    if (d) cusparseDestroyDnMat(d);
  }
};

// The CSR triple, contiguous.
struct Csr {
  Tensor rp, ci, v;
  int64_t rows = 0, cols = 0, nnz = 0;
  cusparseIndexType_t it = CUSPARSE_INDEX_32I;
  cudaDataType vt = CUDA_R_32F;
};

Csr csr_of(const ir::Node& n, std::span<const Tensor> in) {
  Csr a;
  a.rp = contiguous(in[0]);
  a.ci = contiguous(in[1]);
  a.v = contiguous(in[2]);
  a.rows = a.rp.numel() - 1;
  a.cols = n.attrs.get_int("cols");
  a.nnz = a.v.numel();
  a.it = index_type(a.rp.dtype());
  a.vt = value_type(a.v.dtype());
  return a;
}

void create_const_csr(const Csr& a, ConstMat& m) {
  check_sparse(cusparseCreateConstCsr(&m.d, a.rows, a.cols, a.nnz, a.rp.raw(), a.ci.raw(), a.v.raw(), a.it, a.it,
                                      CUSPARSE_INDEX_BASE_ZERO, a.vt),
               "cusparseCreateConstCsr");
}

// dst (contiguous) = src, any strides.
void copy_into(const Tensor& src, void* dst) {
  if (src.numel() == 0) return;
  if (src.is_contiguous())
    check(cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync");
  else
    copy_strided(src.raw(), view_of(src), dst, dtype_size(src.dtype()));
}

void zero(Tensor& t) {
  if (t.nbytes() > 0) check(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream()), "cudaMemsetAsync");
}

// x *= s for a contiguous vector of n elements (real s).
void scale(DType t, void* x, int64_t n, double s) {
  cublasHandle_t h = cublas_handle();
  const float f = float(s);
  if (t == DType::F64)
    check_cublas(cublasDscal_64(h, n, &s, static_cast<double*>(x), 1), "cublasDscal");
  else if (t == DType::F32)
    check_cublas(cublasSscal_64(h, n, &f, static_cast<float*>(x), 1), "cublasSscal");
  else
    check_cublas(cublasCsscal_64(h, n, &f, static_cast<cuComplex*>(x), 1), "cublasCsscal");
}

// ---------------------------------------------------------------- spmv

// RLX_CUDA_SPMV=cusparse runs f32/f64 through cuSPARSE too (for comparison).
bool cusparse_spmv_forced() {
  static const bool v = env_choice("RLX_CUDA_SPMV", {"rlx", "cusparse"}) == 1;
  return v;
}

void run_spmv(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Csr a = csr_of(n, in);
  Tensor& y = out[0];
  const DType t = a.v.dtype();
  const bool has_y0 = in.size() == 5;
  const double alpha = n.attrs.get_float("alpha"), beta = has_y0 ? n.attrs.get_float("beta") : 0.0;
  if (a.rows == 0) return;
  if (t != DType::C64 && !cusparse_spmv_forced()) {  // the device's own kernel (spmv.cu)
    const Tensor x = contiguous(in[3]);
    Tensor y0;
    if (has_y0) y0 = contiguous(in[4]);
    if (has_y0 && y0.raw() == y.raw()) {  // in place (spmv_csr's inplace_input): the kernels' y0 and y are restrict
      Tensor c = Tensor::empty(y0.dtype(), y0.shape(), allocator());
      copy_into(y0, c.raw());
      y0 = c;
    }
    spmv_csr_native(a.rp, a.ci, a.v, x, has_y0 ? &y0 : nullptr, alpha, beta, y);
    return;
  }
  if (!has_y0)
    zero(y);
  else if (in[4].raw() != y.raw())  // (in place, y already holds y0)
    copy_into(in[4], y.raw());
  if (a.nnz == 0 || a.cols == 0) {  // A x = 0: y = beta y0, or 0
    if (has_y0 && beta != 1.0) scale(t, y.raw(), a.rows, beta);
    return;
  }
  const Tensor x = contiguous(in[3]);
  ConstMat A;
  create_const_csr(a, A);
  ConstVec X;
  check_sparse(cusparseCreateConstDnVec(&X.d, a.cols, x.raw(), a.vt), "cusparseCreateConstDnVec");
  Vec Y;
  check_sparse(cusparseCreateDnVec(&Y.d, a.rows, y.raw(), a.vt), "cusparseCreateDnVec");
  const Scalar al(t, alpha), be(t, beta);
  cusparseHandle_t h = sparse_handle();
  size_t bytes = 0;
  cusparseSpMVAlg_t alg = CUSPARSE_SPMV_CSR_ALG2;
  cusparseStatus_t st =
      cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, al.get(), A.d, X.d, be.get(), Y.d, a.vt, alg, &bytes);
  if (st == CUSPARSE_STATUS_NOT_SUPPORTED) {  // should not happen for CSR; the default algorithm then
    alg = CUSPARSE_SPMV_ALG_DEFAULT;
    st = cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, al.get(), A.d, X.d, be.get(), Y.d, a.vt, alg,
                                 &bytes);
  }
  check_sparse(st, "cusparseSpMV_bufferSize");
  Scratch buf(std::max<size_t>(bytes, 1));
  check_sparse(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, al.get(), A.d, X.d, be.get(), Y.d, a.vt, alg,
                            buf.get()),
               "cusparseSpMV");
}

// ---------------------------------------------------------------- spmm

void run_spmm(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Csr a = csr_of(n, in);
  Tensor& c = out[0];
  const DType t = a.v.dtype();
  const int64_t w = c.shape()[1];
  if (a.rows == 0 || w == 0) return;
  zero(c);
  if (a.nnz == 0 || a.cols == 0) return;
  // B [cols, w] row-major: as it is when its rows are contiguous, else a contiguous copy.
  Tensor b = in[3];
  int64_t ldb = std::max<int64_t>(w, 1);
  const bool rows_ok = (w == 1 || b.strides()[1] == 1) && (a.cols == 1 || b.strides()[0] >= std::max<int64_t>(w, 1));
  if (rows_ok) {
    if (a.cols > 1) ldb = b.strides()[0];
  } else {
    b = contiguous(in[3]);
  }
  ConstMat A;
  create_const_csr(a, A);
  ConstDense B;
  check_sparse(cusparseCreateConstDnMat(&B.d, a.cols, w, ldb, b.raw(), a.vt, CUSPARSE_ORDER_ROW),
               "cusparseCreateConstDnMat");
  Dense C;
  check_sparse(cusparseCreateDnMat(&C.d, a.rows, w, w, c.raw(), a.vt, CUSPARSE_ORDER_ROW), "cusparseCreateDnMat");
  const Scalar al(t, 1.0), be(t, 0.0);
  cusparseHandle_t h = sparse_handle();
  size_t bytes = 0;
  check_sparse(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, al.get(),
                                       A.d, B.d, be.get(), C.d, a.vt, CUSPARSE_SPMM_ALG_DEFAULT, &bytes),
               "cusparseSpMM_bufferSize");
  Scratch buf(std::max<size_t>(bytes, 1));
  check_sparse(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, al.get(), A.d, B.d,
                            be.get(), C.d, a.vt, CUSPARSE_SPMM_ALG_DEFAULT, buf.get()),
               "cusparseSpMM");
}

// ---------------------------------------------------------------- sptrsv

struct SpsvKey {
  const void* rp = nullptr;
  const void* ci = nullptr;
  const void* v = nullptr;
  int64_t rows = 0, nnz = 0;
  bool lower = true, unit = false;
  DType index = DType::I32, value = DType::F32;
  bool operator==(const SpsvKey&) const = default;
};

// One analysed matrix: its descriptors, the analysis and its buffer, and the structure
// fingerprint. When every row's columns are sorted the descriptor points at the key's
// arrays; otherwise at private copies with each row's entries sorted by column, whose
// values are gathered from the caller's through `perm` before each solve.
struct SpsvPlan {
  SpsvKey key;
  cusparseSpMatDescr_t mat = nullptr;
  cusparseDnVecDescr_t x = nullptr, y = nullptr;
  cusparseSpSVDescr_t descr = nullptr;
  std::unique_ptr<Scratch> buffer;
  std::vector<unsigned char> fingerprint;
  uint64_t used = 0;
  bool pinned = false;  // used by a recorded CUDA graph: kept for the process's life
  // Unsorted rows only: row_ptr, sorted col_idx, the source position of each sorted
  // entry, and the gathered values.
  std::unique_ptr<Scratch> rp, ci, perm, values;
  cusparseSpVecDescr_t gathered = nullptr;  // (perm, values)
  SpsvPlan() = default;
  SpsvPlan(const SpsvPlan&) = delete;
  SpsvPlan& operator=(const SpsvPlan&) = delete;
  ~SpsvPlan() {
    if (descr) cusparseSpSV_destroyDescr(descr);
    if (x) cusparseDestroyDnVec(x);
    if (y) cusparseDestroyDnVec(y);
    if (mat) cusparseDestroySpMat(mat);
    if (gathered) cusparseDestroySpVec(gathered);
  }
};

constexpr size_t kPlans = 32;    // analyses kept (unpinned)
constexpr int64_t kSamples = 32;  // fingerprint entries per index array (plus the last)

struct SpsvCache {
  std::mutex mu;
  std::vector<std::unique_ptr<SpsvPlan>> plans;
  std::vector<std::unique_ptr<SpsvPlan>> retired;  // pinned plans whose key was reused
  uint64_t clock = 0;
};
// Device blocks freed since the cache last looked: a plan keyed by addresses inside one
// is dropped (another matrix may be allocated there next). Kept apart from the cache's
// lock: freeing happens everywhere, also while the cache itself frees a plan's buffers.
struct FreedBlocks {
  std::mutex mu;
  std::vector<std::pair<uintptr_t, size_t>> blocks;
  bool overflow = false;  // too many to keep: drop every unpinned plan
};
FreedBlocks& freed_blocks() {
  static FreedBlocks* f = new FreedBlocks;
  return *f;
}
std::atomic<int> g_plans_alive{0};

void note_freed(const void* p, size_t bytes) {
  if (g_plans_alive.load(std::memory_order_relaxed) == 0) return;
  FreedBlocks& f = freed_blocks();
  std::lock_guard<std::mutex> lk(f.mu);
  if (f.blocks.size() >= 4096) f.overflow = true;
  else f.blocks.push_back({reinterpret_cast<uintptr_t>(p), bytes});
}

SpsvCache& spsv_cache() {
  static SpsvCache* c = [] {
    on_device_free(note_freed);
    return new SpsvCache;  // never destroyed: plans hold CUDA resources
  }();
  return *c;
}

// Drops the plans whose matrix arrays lived in blocks freed since the last call (pinned
// plans, which a recorded graph uses, are retired instead). Called with the cache locked.
void drop_plans_on_freed_blocks(SpsvCache& cache) {
  std::vector<std::pair<uintptr_t, size_t>> freed;
  bool all = false;
  {
    FreedBlocks& f = freed_blocks();
    std::lock_guard<std::mutex> lk(f.mu);
    freed.swap(f.blocks);
    all = f.overflow;
    f.overflow = false;
  }
  if (freed.empty() && !all) return;
  auto inside = [&](const void* q) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(q);
    for (auto& [b, n] : freed)
      if (a >= b && a < b + n) return true;
    return false;
  };
  for (auto it = cache.plans.begin(); it != cache.plans.end();) {
    const SpsvKey& k = (*it)->key;
    if (all || inside(k.rp) || inside(k.ci) || inside(k.v)) {
      if ((*it)->pinned) cache.retired.push_back(std::move(*it));
      it = cache.plans.erase(it);
    } else {
      ++it;
    }
  }
  g_plans_alive.store(int(cache.plans.size()), std::memory_order_relaxed);
}

// Appends kSamples evenly spaced entries of p[0, len) and its last entry to `out`.
void sample(const void* p, int64_t len, size_t es, std::vector<unsigned char>& out) {
  if (len <= 0) return;
  const int64_t count = std::min(len, kSamples), step = len / count;
  const size_t at = out.size();
  out.resize(at + size_t(count + 1) * es);
  const char* src = static_cast<const char*>(p);
  if (uint64_t(step) * es <= (uint64_t(1) << 30)) {
    check(cudaMemcpy2DAsync(out.data() + at, es, src, size_t(step) * es, es, size_t(count), cudaMemcpyDeviceToHost,
                            stream()),
          "sptrsv_csr: cudaMemcpy2DAsync (fingerprint)");
  } else {
    for (int64_t i = 0; i < count; ++i)
      check(cudaMemcpyAsync(out.data() + at + size_t(i) * es, src + size_t(i * step) * es, es, cudaMemcpyDeviceToHost,
                            stream()),
            "sptrsv_csr: cudaMemcpyAsync (fingerprint)");
  }
  check(cudaMemcpyAsync(out.data() + at + size_t(count) * es, src + size_t(len - 1) * es, es, cudaMemcpyDeviceToHost,
                        stream()),
        "sptrsv_csr: cudaMemcpyAsync (fingerprint)");
}

std::vector<unsigned char> fingerprint(const Csr& a) {
  std::vector<unsigned char> f;
  const size_t es = dtype_size(a.rp.dtype());
  sample(a.rp.raw(), a.rows + 1, es, f);
  sample(a.ci.raw(), a.nnz, es, f);
  check(cudaStreamSynchronize(stream()), "sptrsv_csr: cudaStreamSynchronize (fingerprint)");
  return f;
}

// An index array (i32 or i64) read back to the host as int64.
std::vector<int64_t> read_indices(const Tensor& t) {
  const int64_t n = t.numel();
  std::vector<int64_t> r(static_cast<size_t>(n));
  if (n == 0) return r;
  if (t.dtype() == DType::I64) {
    check(cudaMemcpyAsync(r.data(), t.raw(), size_t(n) * sizeof(int64_t), cudaMemcpyDeviceToHost, stream()),
          "sptrsv_csr: cudaMemcpyAsync (structure)");
    check(cudaStreamSynchronize(stream()), "sptrsv_csr: cudaStreamSynchronize (structure)");
  } else {
    std::vector<int32_t> v(static_cast<size_t>(n));
    check(cudaMemcpyAsync(v.data(), t.raw(), size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream()),
          "sptrsv_csr: cudaMemcpyAsync (structure)");
    check(cudaStreamSynchronize(stream()), "sptrsv_csr: cudaStreamSynchronize (structure)");
    std::copy(v.begin(), v.end(), r.begin());
  }
  return r;
}

// A device copy of host int64 indices in dtype `index`.
std::unique_ptr<Scratch> upload_indices(const std::vector<int64_t>& v, DType index) {
  const size_t es = dtype_size(index);
  auto s = std::make_unique<Scratch>(std::max<size_t>(v.size() * es, 1));
  if (v.empty()) return s;
  // From pageable memory: staged before the call returns, so the host copy may go.
  if (index == DType::I64) {
    check(cudaMemcpyAsync(s->get(), v.data(), v.size() * es, cudaMemcpyHostToDevice, stream()),
          "sptrsv_csr: cudaMemcpyAsync (sorted structure)");
  } else {
    std::vector<int32_t> n(v.begin(), v.end());
    check(cudaMemcpyAsync(s->get(), n.data(), n.size() * es, cudaMemcpyHostToDevice, stream()),
          "sptrsv_csr: cudaMemcpyAsync (sorted structure)");
  }
  return s;
}

// Unsorted rows: private sorted structure and the gather of values into it.
void sort_rows(const Csr& a, SpsvPlan& p, const void*& rp, const void*& ci, void*& v) {
  const std::vector<int64_t> ptr = read_indices(a.rp), col = read_indices(a.ci);
  bool sorted = true;
  for (int64_t r = 0; r < a.rows && sorted; ++r)
    for (int64_t k = ptr[size_t(r)] + 1; k < ptr[size_t(r + 1)]; ++k)
      if (col[size_t(k)] < col[size_t(k - 1)]) {
        sorted = false;
        break;
      }
  if (sorted) return;
  std::vector<int64_t> perm(col.size()), scol(col.size());
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t b = ptr[size_t(r)], e = ptr[size_t(r + 1)];
    for (int64_t k = b; k < e; ++k) perm[size_t(k)] = k;
    std::stable_sort(perm.begin() + b, perm.begin() + e,
                     [&](int64_t x, int64_t y) { return col[size_t(x)] < col[size_t(y)]; });
    for (int64_t k = b; k < e; ++k) scol[size_t(k)] = col[size_t(perm[size_t(k)])];
  }
  const DType index = a.rp.dtype();
  p.rp = upload_indices(ptr, index);
  p.ci = upload_indices(scol, index);
  p.perm = upload_indices(perm, index);
  p.values = std::make_unique<Scratch>(std::max<size_t>(size_t(a.nnz) * dtype_size(a.v.dtype()), 1));
  check_sparse(cusparseCreateSpVec(&p.gathered, a.nnz, a.nnz, p.perm->get(), p.values->get(), a.it,
                                   CUSPARSE_INDEX_BASE_ZERO, a.vt),
               "cusparseCreateSpVec");
  rp = p.rp->get();
  ci = p.ci->get();
  v = p.values->get();
}

// Unsorted rows: the caller's values, permuted into the plan's sorted order.
void gather_values(const Csr& a, SpsvPlan& p) {
  if (!p.gathered) return;
  ConstVec src;
  check_sparse(cusparseCreateConstDnVec(&src.d, a.nnz, a.v.raw(), a.vt), "cusparseCreateConstDnVec");
  check_sparse(cusparseGather(sparse_handle(), src.d, p.gathered), "cusparseGather");
}

// Creates the descriptors and runs the analysis for `key`.
std::unique_ptr<SpsvPlan> analyse(const Csr& a, const SpsvKey& key, const void* b, void* x, const Scalar& one,
                                  std::vector<unsigned char> print) {
  auto p = std::make_unique<SpsvPlan>();
  p->key = key;
  p->fingerprint = std::move(print);
  const void* rp = a.rp.raw();
  const void* ci = a.ci.raw();
  void* v = const_cast<void*>(a.v.raw());
  sort_rows(a, *p, rp, ci, v);
  gather_values(a, *p);
  check_sparse(cusparseCreateCsr(&p->mat, a.rows, a.cols, a.nnz, const_cast<void*>(rp), const_cast<void*>(ci), v, a.it,
                                 a.it, CUSPARSE_INDEX_BASE_ZERO, a.vt),
               "cusparseCreateCsr");
  cusparseFillMode_t fill = key.lower ? CUSPARSE_FILL_MODE_LOWER : CUSPARSE_FILL_MODE_UPPER;
  cusparseDiagType_t diag = key.unit ? CUSPARSE_DIAG_TYPE_UNIT : CUSPARSE_DIAG_TYPE_NON_UNIT;
  check_sparse(cusparseSpMatSetAttribute(p->mat, CUSPARSE_SPMAT_FILL_MODE, &fill, sizeof(fill)),
               "cusparseSpMatSetAttribute (fill mode)");
  check_sparse(cusparseSpMatSetAttribute(p->mat, CUSPARSE_SPMAT_DIAG_TYPE, &diag, sizeof(diag)),
               "cusparseSpMatSetAttribute (diagonal type)");
  check_sparse(cusparseCreateDnVec(&p->x, a.rows, const_cast<void*>(b), a.vt), "cusparseCreateDnVec");
  check_sparse(cusparseCreateDnVec(&p->y, a.rows, x, a.vt), "cusparseCreateDnVec");
  check_sparse(cusparseSpSV_createDescr(&p->descr), "cusparseSpSV_createDescr");
  cusparseHandle_t h = sparse_handle();
  size_t bytes = 0;
  check_sparse(cusparseSpSV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, one.get(), p->mat, p->x, p->y, a.vt,
                                       CUSPARSE_SPSV_ALG_DEFAULT, p->descr, &bytes),
               "cusparseSpSV_bufferSize");
  p->buffer = std::make_unique<Scratch>(std::max<size_t>(bytes, 1));
  check_sparse(cusparseSpSV_analysis(h, CUSPARSE_OPERATION_NON_TRANSPOSE, one.get(), p->mat, p->x, p->y, a.vt,
                                     CUSPARSE_SPSV_ALG_DEFAULT, p->descr, p->buffer->get()),
               "cusparseSpSV_analysis");
  return p;
}

void run_sptrsv(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Csr a = csr_of(n, in);
  Tensor& x = out[0];
  const DType t = a.v.dtype();
  const bool lower = n.attrs.get_bool("lower"), unit = n.attrs.get_bool("unit_diagonal");
  if (a.rows == 0) return;
  const Tensor b = contiguous(in[3]);
  if (a.nnz == 0 && unit) {  // T = I
    copy_into(b, x.raw());
    return;
  }
  const SpsvKey key{a.rp.raw(), a.ci.raw(), a.v.raw(), a.rows, a.nnz, lower, unit, a.rp.dtype(), t};
  const Scalar one(t, 1.0);
  cusparseHandle_t h = sparse_handle();
  SpsvCache& cache = spsv_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  drop_plans_on_freed_blocks(cache);
  // While a CUDA graph records, nothing may read back to the host: the plan made by the
  // program's earlier run is trusted without its fingerprint, and pinned (the graph's
  // kernels use its analysis buffer on every replay).
  const bool recording = capturing();
  SpsvPlan* plan = nullptr;
  for (auto it = cache.plans.begin(); it != cache.plans.end(); ++it)
    if ((*it)->key == key) {
      if (recording || (*it)->fingerprint == fingerprint(a)) {
        plan = it->get();
        // The values may have changed in place: re-read them (no new analysis needed).
        gather_values(a, *plan);
        void* values = plan->values ? plan->values->get() : const_cast<void*>(a.v.raw());
        check_sparse(cusparseSpSV_updateMatrix(h, plan->descr, values, CUSPARSE_SPSV_UPDATE_GENERAL),
                     "cusparseSpSV_updateMatrix");
        check_sparse(cusparseDnVecSetValues(plan->x, const_cast<void*>(b.raw())), "cusparseDnVecSetValues");
        check_sparse(cusparseDnVecSetValues(plan->y, x.raw()), "cusparseDnVecSetValues");
      } else {
        // The same buffers now hold another structure.
        if ((*it)->pinned) cache.retired.push_back(std::move(*it));
        cache.plans.erase(it);
      }
      break;
    }
  if (!plan) {
    if (recording)
      throw InputError("sptrsv_csr on cuda: a matrix not analysed by an earlier run cannot be analysed while a "
                       "CUDA graph is being recorded");
    std::unique_ptr<SpsvPlan> p = analyse(a, key, b.raw(), x.raw(), one, fingerprint(a));
    if (cache.plans.size() >= kPlans) {  // evict the least recently used unpinned plan
      auto lru = cache.plans.end();
      for (auto it = cache.plans.begin(); it != cache.plans.end(); ++it)
        if (!(*it)->pinned && (lru == cache.plans.end() || (*it)->used < (*lru)->used)) lru = it;
      if (lru != cache.plans.end()) cache.plans.erase(lru);
    }
    cache.plans.push_back(std::move(p));
    plan = cache.plans.back().get();
    g_plans_alive.store(int(cache.plans.size()), std::memory_order_relaxed);
  }
  if (recording) plan->pinned = true;
  plan->used = ++cache.clock;
  check_sparse(cusparseSpSV_solve(h, CUSPARSE_OPERATION_NON_TRANSPOSE, one.get(), plan->mat, plan->x, plan->y, a.vt,
                                  CUSPARSE_SPSV_ALG_DEFAULT, plan->descr),
               "cusparseSpSV_solve");
}

// ---------------------------------------------------------------- registration

Capability csr_supported(const ir::Node& n, const ir::Graph& g) {
  const DType index = g.type(n.inputs.at(0)).dtype, value = g.type(n.inputs.at(2)).dtype;
  if (index != DType::I32 && index != DType::I64)
    return Capability::no("no " + std::string(dtype_name(index)) + "-indexed " + n.op->name + " kernel on cuda");
  if (g.type(n.inputs.at(1)).dtype != index)
    return Capability::no(n.op->name + " on cuda needs row_ptr and col_idx of one index dtype");
  if (value != DType::F32 && value != DType::F64 && value != DType::C64)
    return Capability::no("no " + std::string(dtype_name(value)) + " " + n.op->name + " kernel on cuda (cuSPARSE: f32 f64 c64)");
  return Capability::yes();
}

// spmv_tiled: the device's own kernel (spmv_tiled.cu).
TiledArgs tiled_args(const ir::Node& n) {
  return {n.attrs.get_int("rows"), n.attrs.get_int("cols"), int(n.attrs.get_int("rb")), int(n.attrs.get_int("panel")),
          int(n.attrs.get_int("warps"))};
}

void run_spmv_tiled(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const bool has_y0 = in.size() == 5;
  std::vector<Tensor> c;
  for (const Tensor& t : in) c.push_back(contiguous(t));
  spmv_tiled_native(c[0], c[1], c[2], c[3], has_y0 ? &c[4] : nullptr, n.attrs.get_float("alpha"),
                    has_y0 ? n.attrs.get_float("beta") : 0.0, out[0], tiled_args(n));
}

Capability tiled_supported(const ir::Node& n, const ir::Graph& g) {
  if (g.type(n.inputs.at(2)).dtype != DType::F64) return Capability::no("spmv_tiled on cuda: f64 only");
  const std::string why = tiled_refusal(tiled_args(n));
  return why.empty() ? Capability::yes() : Capability::no(why);
}

// tile_csr: built on the device (tile_csr.cu).
void run_tile_csr(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  if (capturing()) throw InputError("tile_csr reads its checks back to the host: it cannot be recorded for replay");
  tile_csr_native(contiguous(in[0]), contiguous(in[1]), contiguous(in[2]), n.attrs.get_int("cols"),
                  int(n.attrs.get_int("rb")), int(n.attrs.get_int("panel")), int(n.attrs.get_int("warps")), out[0],
                  out[1], out[2]);
}

Capability tile_csr_supported(const ir::Node& n, const ir::Graph& g) {
  const DType index = g.type(n.inputs.at(0)).dtype;
  if (index != DType::I32 && index != DType::I64) return Capability::no("tile_csr on cuda: i32 or i64 indices");
  const int64_t rows = g.type(n.inputs.at(0)).shape[0] - 1, cols = n.attrs.get_int("cols"),
                rb = n.attrs.get_int("rb"), panel = n.attrs.get_int("panel");
  const std::string why = tile_csr_refusal(g.type(n.inputs.at(1)).shape[0],
                                           (rows + rb - 1) / rb * std::max<int64_t>(1, (cols + panel - 1) / panel));
  return why.empty() ? Capability::yes() : Capability::no(why);
}

}  // namespace

void add_sparse_kernels(KernelTable& t) {
  add_sparse_family(t, {csr_supported, tiled_supported, tile_csr_supported, run_spmv, run_spmm, run_sptrsv, run_spmv_tiled,
                        run_tile_csr});
}

}  // namespace rlx::cuda
