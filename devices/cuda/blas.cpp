// matmul on the cuda device through cuBLAS, and the process's one cuBLAS handle (solver.cpp
// and sparse.cpp use it too, through the declarations at their top).
//
// Layout. rlx matrices are row-major; cuBLAS's are column-major, where a row-major buffer
// reads as the transpose. So C = op(A) op(B) (row-major, ldc = n) is computed as
// C^T = op(B)^T op(A)^T, with cuBLAS's first operand our B. An operand whose last two dims
// are row-major (unit column stride, row stride >= cols) is passed as it is with
// ld = row stride; a column-major view (a transpose: unit row stride, column stride >=
// rows) is passed as it is too, with the transpose flag flipped. Anything else is made
// contiguous first.
//
// Batches. The batch dims broadcast (size-1 and missing dims get stride 0). When every
// operand's batch offset is one stride times the linear batch index (contiguous batches,
// a broadcast operand with stride 0, or any mix) one cublasGemmStridedBatchedEx runs;
// otherwise one such call per index of the dims outside the largest range of batch dims
// that does collapse (e.g. [2,1,m,k] @ [3,k,n]: two calls of three).
//
// CUDA graphs. Nothing here reads or writes host memory, so a recorded program replays
// it; the handle has its own workspace (set once), so cuBLAS allocates nothing while a
// graph is being recorded.
//
// Precision. f32 computes in full f32 (CUBLAS_COMPUTE_32F: no TF32, the op suite checks to
// 1e-5); RLX_CUDA_TF32=1 in the environment allows TF32 tensor cores for f32. f16 and bf16
// accumulate in f32 and round once; f64 in f64; c64 in complex f32. Split-K reductions
// in reduced precision are disallowed on the handle.
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cusolverDn.h>
#include <cusparse.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/library.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cuda {

void check_cublas(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const std::string& node = current_node();
  throw DeviceError(std::string("cuda: ") + call + ": " + cublasGetStatusName(s) +
                    (node.empty() ? std::string() : " (node " + node + ")"));
}

// Created on first use, bound to stream(), with its own workspace (32 MiB, what cuBLAS
// asks for on Hopper), so that no call allocates while a CUDA graph is being recorded.
// Never destroyed (it would outlive the CUDA runtime at process exit).
cublasHandle_t cublas_handle() {
  static const cublasHandle_t h = [] {
    constexpr size_t kWorkspace = size_t(32) << 20;
    cublasHandle_t x = nullptr;
    check_cublas(cublasCreate(&x), "cublasCreate");
    check_cublas(cublasSetStream(x, stream()), "cublasSetStream");  // (resets the workspace: set it after)
    void* ws = nullptr;
    check(cudaMalloc(&ws, kWorkspace), "cudaMalloc (cuBLAS workspace, 32 MiB)");
    check_cublas(cublasSetWorkspace(x, ws, kWorkspace), "cublasSetWorkspace");
    check_cublas(cublasSetMathMode(x, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION), "cublasSetMathMode");
    return x;
  }();
  return h;
}

namespace {

bool matmul_dtype(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16 || t == DType::C64;
}

cudaDataType cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::C64: return CUDA_C_32F;
    default: break;
  }
  throw InternalError(std::string("cuda matmul: no cuBLAS type for ") + dtype_name(t));
}

bool tf32_allowed() {
  static const bool v = [] {
    const char* e = std::getenv("RLX_CUDA_TF32");
    return e && std::strcmp(e, "1") == 0;
  }();
  return v;
}

// One operand as cuBLAS takes it: the matrix (last two dims, stored [r, c]) at ptr with
// leading dimension ld, column-major when it is a transposed view; batch strides
// broadcast to the output's batch shape.
struct Operand {
  Tensor keep;  // a contiguous copy, when one was needed
  const char* base = nullptr;
  bool col_major = false;
  int64_t ld = 1;
  std::vector<int64_t> batch;  // element strides per output batch dim
};

// Whether a [r, c] matrix with strides (s0, s1) is row-major (unit column stride) or
// column-major (unit row stride) with a valid leading dimension. Extent-1 dims may have
// any stride.
bool matrix_layout(int64_t r, int64_t c, int64_t s0, int64_t s1, bool& col_major, int64_t& ld) {
  if ((c == 1 || s1 == 1) && (r == 1 || s0 >= std::max<int64_t>(c, 1))) {
    col_major = false;
    ld = r == 1 ? std::max<int64_t>(c, 1) : s0;
    return true;
  }
  if ((r == 1 || s0 == 1) && (c == 1 || s1 >= std::max<int64_t>(r, 1))) {
    col_major = true;
    ld = c == 1 ? std::max<int64_t>(r, 1) : s1;
    return true;
  }
  return false;
}

Operand operand(const Tensor& t0, const Shape& batch) {
  Operand o;
  o.keep = t0;
  const int rank = t0.rank();
  auto layout_ok = [&](const Tensor& t) {
    const int64_t r = t.shape()[size_t(rank - 2)], c = t.shape()[size_t(rank - 1)];
    return matrix_layout(r, c, t.strides()[size_t(rank - 2)], t.strides()[size_t(rank - 1)], o.col_major, o.ld);
  };
  if (!layout_ok(o.keep)) {
    o.keep = contiguous(t0);
    if (!layout_ok(o.keep)) throw InternalError("cuda matmul: a contiguous operand is not row-major");
  }
  o.base = static_cast<const char*>(o.keep.raw());
  const size_t nb = batch.size(), own = size_t(rank - 2), lead = nb - own;
  o.batch.assign(nb, 0);
  for (size_t d = 0; d < own; ++d)
    if (o.keep.shape()[d] != 1) o.batch[lead + d] = o.keep.strides()[d];
  return o;
}

// The stride s with offset = s * (row-major linear index over dims [lo, hi)) for every
// index of those dims, when there is one.
std::optional<int64_t> uniform_stride(const std::vector<int64_t>& st, const Shape& batch, size_t lo, size_t hi) {
  int64_t s = 0, inner = 1;
  bool found = false;
  for (size_t d = hi; d-- > lo;) {
    if (batch[d] == 1) continue;
    if (!found) {
      s = st[d];
      found = true;
    }
    if (st[d] != s * inner) return std::nullopt;
    inner *= batch[d];
  }
  return s;
}

void run_matmul(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
  Tensor& y = out[0];
  const DType t = y.dtype();
  const size_t es = dtype_size(t);
  const int ry = y.rank();
  const int64_t m = y.shape()[size_t(ry - 2)], nn = y.shape()[size_t(ry - 1)];
  const Tensor &a0 = in[0], &b0 = in[1];
  const int64_t k = a0.shape()[size_t(a0.rank() - (ta ? 2 : 1))];
  const Shape batch(y.shape().begin(), y.shape().end() - 2);
  const int64_t count = numel(batch);
  if (m == 0 || nn == 0 || count == 0) return;
  if (k == 0) {  // an empty sum: zeros
    check(cudaMemsetAsync(y.raw(), 0, y.nbytes(), stream()), "matmul: cudaMemsetAsync");
    return;
  }
  const Operand a = operand(a0, batch), b = operand(b0, batch);
  // C^T [nn, m] = op(B)^T op(A)^T, column-major, ldc = nn.
  const cublasOperation_t op_b = (tb != b.col_major) ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = (ta != a.col_major) ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType dt = cuda_type(t);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (t == DType::F64) compute = CUBLAS_COMPUTE_64F;
  else if (t == DType::F32 && tf32_allowed()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  // alpha = 1, beta = 0 in the scale type (f64 for f64, complex f32 for c64, else f32).
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const cuComplex one_c = make_cuComplex(1.0f, 0.0f), zero_c = make_cuComplex(0.0f, 0.0f);
  const void* alpha = t == DType::F64 ? static_cast<const void*>(&one_d)
                      : t == DType::C64 ? static_cast<const void*>(&one_c)
                                        : static_cast<const void*>(&one_f);
  const void* beta = t == DType::F64 ? static_cast<const void*>(&zero_d)
                     : t == DType::C64 ? static_cast<const void*>(&zero_c)
                                       : static_cast<const void*>(&zero_f);
  cublasHandle_t h = cublas_handle();

  // One strided-batched call over the batch dims [lo, hi) that collapse to one stride in
  // every operand (all of them when the strides are regular), looping over the others:
  // the range chosen covers the most batch entries. (No pointer arrays: those would be
  // host memory that a recorded CUDA graph reads again on every replay.)
  const size_t nb = batch.size();
  std::vector<int64_t> ys(nb);
  for (size_t d = nb, run = m * nn; d-- > 0;) {
    ys[d] = run;
    run *= batch[d];
  }
  size_t lo = 0, hi = 0;
  int64_t best = 1, sa = 0, sb = 0, sy = m * nn;
  for (size_t l = 0; l < nb; ++l)
    for (size_t r = l + 1; r <= nb; ++r) {
      int64_t extent = 1;
      for (size_t d = l; d < r; ++d) extent *= batch[d];
      if (extent <= best) continue;
      const auto xa = uniform_stride(a.batch, batch, l, r), xb = uniform_stride(b.batch, batch, l, r),
                 xy = uniform_stride(ys, batch, l, r);
      if (!xa || !xb || !xy) continue;
      best = extent, lo = l, hi = r, sa = *xa, sb = *xb, sy = *xy;
    }
  // One call per index of the other dims (row-major), its offsets from its number.
  for (int64_t call = 0, calls = count / best; call < calls; ++call) {
    int64_t oa = 0, ob = 0, oy = 0, rest = call;
    for (size_t d = nb; d-- > 0;) {
      if (d >= lo && d < hi) continue;
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      oa += i * a.batch[d], ob += i * b.batch[d], oy += i * ys[d];
    }
    check_cublas(cublasGemmStridedBatchedEx_64(h, op_b, op_a, nn, m, k, alpha, b.base + ob * int64_t(es), dt, b.ld, sb,
                                               a.base + oa * int64_t(es), dt, a.ld, sa, beta,
                                               static_cast<char*>(y.raw()) + oy * int64_t(es), dt, nn, sy, best,
                                               compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }
}

Capability matmul_supports(const ir::Node& n, const ir::Graph& g) {
  const TensorType &a = g.type(n.inputs.at(0)), &b = g.type(n.inputs.at(1));
  if (!matmul_dtype(a.dtype) || b.dtype != a.dtype)
    return Capability::no(std::string("no ") + dtype_name(a.dtype) + " matmul on cuda (cuBLAS: f16 bf16 f32 f64 c64)");
  if (a.shape.size() < 2 || b.shape.size() < 2) return Capability::no("matmul operands must have rank >= 2");
  return Capability::yes();
}

std::string version(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

void add_blas_kernels(std::vector<LibraryKernel>& t) { t.push_back({"matmul", matmul_supports, run_matmul}); }

// The versions the process links (library properties need no device), else the headers'.
std::string library_description() {
  auto prop = [](auto get, int fallback_major, int fallback_minor, int fallback_patch) {
    int v[3] = {0, 0, 0};
    const libraryPropertyType p[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
    for (int i = 0; i < 3; ++i)
      if (!get(p[i], &v[i])) return version(fallback_major, fallback_minor, fallback_patch);
    return version(v[0], v[1], v[2]);
  };
  const std::string blas = prop([](libraryPropertyType p, int* v) { return cublasGetProperty(p, v) == CUBLAS_STATUS_SUCCESS; },
                                CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
  const std::string sparse =
      prop([](libraryPropertyType p, int* v) { return cusparseGetProperty(p, v) == CUSPARSE_STATUS_SUCCESS; },
           CUSPARSE_VER_MAJOR, CUSPARSE_VER_MINOR, CUSPARSE_VER_PATCH);
  const std::string solver =
      prop([](libraryPropertyType p, int* v) { return cusolverGetProperty(p, v) == CUSOLVER_STATUS_SUCCESS; },
           CUSOLVER_VER_MAJOR, CUSOLVER_VER_MINOR, CUSOLVER_VER_PATCH);
  return "cuBLAS " + blas + ", cuSPARSE " + sparse + ", cuSOLVER " + solver;
}

}  // namespace rlx::cuda
