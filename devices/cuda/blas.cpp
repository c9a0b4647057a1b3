// matmul on the cuda device: f16, bf16 and f32 through cuBLASLt (with a bias epilogue
// for the device's MatmulEpilogue kernels), f64 and c64 through cuBLAS;
// and the process's one cuBLAS handle (solver.cpp and sparse.cpp use it too, through the
// declarations at their top).
//
// Layout. rlx matrices are row-major; cuBLAS's are column-major, where a row-major buffer
// reads as the transpose. So C = op(A) op(B) (row-major, ldc = n) is computed as
// C^T = op(B)^T op(A)^T, with cuBLAS's first operand our B. An operand whose last two dims
// are row-major (unit column stride, row stride >= cols) is passed as it is with
// ld = row stride; a column-major view (a transpose: unit row stride, column stride >=
// rows) is passed as it is too, with the transpose flag flipped. Anything else is made
// contiguous first. In the swapped problem our n is cuBLAS's m (the rows of its
// column-major output), so a bias along our last dim is cuBLASLt's per-row bias vector
// (CUBLASLT_EPILOGUE_BIAS: length m, broadcast over the columns and, with batch stride 0,
// over the batch).
//
// Batches. The batch dims broadcast (size-1 and missing dims get stride 0). When every
// operand's batch offset is one stride times the linear batch index (contiguous batches,
// a broadcast operand with stride 0, or any mix) one strided-batched call runs (cuBLASLt:
// the layouts' BATCH_COUNT and STRIDED_BATCH_OFFSET; cuBLAS: cublasGemmStridedBatchedEx);
// otherwise one such call per index of the dims outside the largest range of batch dims
// that does collapse (e.g. [2,1,m,k] @ [3,k,n]: two calls of three).
//
// cuBLASLt algorithms. cublasLtMatmulAlgoGetHeuristic offers candidates per (dtype, compute
// type, transposes, sizes, leading dimensions, batch count and strides, pointer alignments,
// epilogue); the first call of each problem times them and keeps the fastest, for the
// process and in the cache directory (lt_tune). The alignments are those of the actual pointers
// (the heuristic otherwise assumes 256 bytes). Where it finds none, a plain matmul runs
// through cuBLAS and an epilogue kernel runs node by node.
//
// CUDA graphs. Nothing here reads or writes host memory, so a recorded program replays
// it; the cuBLAS handle and cuBLASLt have each their own workspace (allocated once, at
// first use). Operands that must be made contiguous (and a bias at an address cuBLASLt
// may not take) are copied into blocks of the device allocator, which a recording keeps.
//
// Relu is not fused (the schedule's bias+relu form is refused, and so is one an L3 text
// names, which then runs node by node; the bias-only form is taken and the relu runs as a
// generated kernel): rlx's maximum(NaN, 0) is NaN, and
// cuBLASLt does not document what its RELU_BIAS epilogue does with a NaN — a relu that
// turned NaN into 0 would hide a diverging computation.
//
// Precision. f32 computes in full f32 (CUBLAS_COMPUTE_32F: no TF32, the op suite checks to
// 1e-5); RLX_CUDA_TF32=1 in the environment allows TF32 tensor cores for f32
// (CUBLAS_COMPUTE_32F_FAST_TF32). f16 and bf16 accumulate in f32 and round once; f64 in
// f64; c64 in complex f32. Split-K partial sums are kept in the compute type, never in
// f16/bf16 (the handle's math mode for cuBLAS, the reduction-scheme mask for cuBLASLt).
// An epilogue adds the bias (same dtype as the output) to the f32 accumulator and rounds
// once, where the reference rounds the product and then the sum: for f16/bf16 the results
// can differ by one rounding of the output, within the op suite's tolerances (2e-3, 1e-2).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cusolverDn.h>
#include <cusparse.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/cuda/blas.hpp"
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

}  // namespace

bool tf32_allowed() {
  static const bool v = env_choice("RLX_CUDA_TF32", {"0", "1"}) == 1;
  return v;
}

int64_t half_gemm_min_rows() {
  static const int64_t v = std::array<int64_t, 3>{0, kHalfGemmRows + 1, 1}[size_t(env_choice("RLX_CUDA_BF16", {"0", "1", "all"}))];
  return v;
}

namespace {

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

bool lt_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// ---------------------------------------------------------------- cuBLASLt

constexpr size_t kLtWorkspace = size_t(32) << 20;

// Created on first use with its workspace (never destroyed, like the cuBLAS handle).
struct Lt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};
const Lt& lt() {
  static const Lt x = [] {
    Lt l;
    check_cublas(cublasLtCreate(&l.handle), "cublasLtCreate");
    check(cudaMalloc(&l.workspace, kLtWorkspace), "cudaMalloc (cuBLASLt workspace, 32 MiB)");
    return l;
  }();
  return x;
}

// The descriptors of one call, destroyed with it.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two (at most 256) that divides the address.
uint32_t alignment(const void* p) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && x % a != 0) a /= 2;
  return a;
}

// One column-major problem as cuBLAS(Lt) sees it: D [m, n] = op_a(A) op_b(B), `count`
// matrices at strides sa, sb, sd (elements); A is our B, B our A (see the top).
struct Gemm {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0, count = 1, sa = 0, sb = 0, sd = 0;
};

// What the epilogue adds: a bias (length m of the column-major problem).
struct Epilogue {
  const void* bias = nullptr;
};

using LtKey = std::array<int64_t, 20>;

// What is known of one problem: the heuristic's candidates (best first) and the one chosen.
struct LtChoice {
  std::vector<cublasLtMatmulAlgo_t> candidates;  // empty: cuBLASLt has none
  cublasLtMatmulAlgo_t chosen{};
  bool tuned = false;  // chosen by timing (here or by an earlier process, from the cache)
};

constexpr int kLtCandidates = 8;

// The algorithms found, by key.
std::mutex lt_mu;
std::map<LtKey, LtChoice> lt_algos;

std::string lt_cache_key(const LtKey& key) {
  static const std::string where = [] {
    cudaDeviceProp p{};
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&p, dev);
    return std::string(p.name) + " cublasLt " + std::to_string(cublasLtGetVersion());
  }();
  std::string k = "gemm ";
  k += where;
  for (int64_t v : key) {
    k += ' ';
    k += std::to_string(v);
  }
  return k;
}

// The choice for the problem ds describes (key: all it depends on): the heuristic's first
// kLtCandidates algorithms, and the one an earlier process chose by timing where the cache
// holds it and cuBLASLt still accepts it.
LtChoice lt_algo(const LtDescs& ds, const LtKey& key) {
  std::lock_guard<std::mutex> lk(lt_mu);
  if (auto it = lt_algos.find(key); it != lt_algos.end()) return it->second;
  cublasLtMatmulHeuristicResult_t r[kLtCandidates]{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(lt().handle, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, kLtCandidates, r, &found);
  if (s != CUBLAS_STATUS_NOT_SUPPORTED) check_cublas(s, "cublasLtMatmulAlgoGetHeuristic");
  LtChoice c;
  if (s == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i)
      if (r[i].state == CUBLAS_STATUS_SUCCESS) c.candidates.push_back(r[i].algo);
  if (!c.candidates.empty()) c.chosen = c.candidates[0];
  const std::string cached = get_cache_entry(lt_cache_key(key), ".gemm");
  cublasLtMatmulHeuristicResult_t check{};
  if (cached.size() == sizeof(cublasLtMatmulAlgo_t) && !c.candidates.empty()) {
    cublasLtMatmulAlgo_t a{};
    std::memcpy(&a, cached.data(), sizeof a);
    if (cublasLtMatmulAlgoCheck(lt().handle, ds.op, ds.a, ds.b, ds.d, ds.d, &a, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= kLtWorkspace)
      c.chosen = a, c.tuned = true;
  }
  lt_algos.emplace(key, c);
  return c;
}

// An algorithm the heuristic offered and cublasLtMatmul refused: not offered again.
void lt_refused(const LtKey& key) {
  std::lock_guard<std::mutex> lk(lt_mu);
  lt_algos[key] = LtChoice{};
}

void lt_tuned(const LtKey& key, const cublasLtMatmulAlgo_t& algo) {
  {
    std::lock_guard<std::mutex> lk(lt_mu);
    LtChoice& c = lt_algos[key];
    c.chosen = algo;
    c.tuned = true;
  }
  put_cache_entry(lt_cache_key(key), ".gemm", std::string(reinterpret_cast<const char*>(&algo), sizeof algo));
}

// A cuBLASLt plan for g over the calls whose pointers are listed (a, b, d per call), or
// nothing when cuBLASLt cannot take it (sizes past 32 bits, no algorithm).
struct LtPlan {
  LtDescs ds;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // to time, when no choice is known yet
  LtKey key{};
};

// Chooses among the plan's candidates by timing them on the first call's operands (the
// output is written, the inputs only read): the fastest, where it beats the heuristic's
// first by more than 10 % (a margin, so noise does not move the choice). The heuristic
// alone picks badly for some small shapes — a [784,128] weight gradient over a batch of 128
// took 55 us with its first pick on an H200 — and a program replays its GEMMs many times,
// so a few milliseconds once per shape pay for themselves. The choice is kept in the cache
// directory: later processes (a resumed run) take the same algorithms, hence the same
// rounding, without timing again. Not while a graph is being recorded (nothing may wait).
void lt_tune(LtPlan& plan, const std::array<const void*, 3>& call) {
  if (plan.candidates.size() < 2 || capturing()) return;
  const float one = 1.0f, zero = 0.0f;
  void* d = const_cast<void*>(call[2]);
  auto run = [&](const cublasLtMatmulAlgo_t& a) {
    return cublasLtMatmul(lt().handle, plan.ds.op, &one, call[0], plan.ds.a, call[1], plan.ds.b, &zero, d, plan.ds.d, d,
                          plan.ds.d, &a, lt().workspace, kLtWorkspace, stream());
  };
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> ms(plan.candidates.size(), -1.0f);
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    if (run(plan.candidates[i]) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; refused: not a candidate
    float best = -1.0f;
    for (int rep = 0; rep < 3; ++rep) {
      check(cudaEventRecord(e0, stream()), "cudaEventRecord");
      for (int k = 0; k < 4; ++k) run(plan.candidates[i]);
      check(cudaEventRecord(e1, stream()), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "cudaEventSynchronize");
      float t = 0;
      check(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
      if (best < 0 || t < best) best = t;
    }
    ms[i] = best;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  size_t pick = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] >= 0 && (ms[pick] < 0 || ms[i] < 0.9f * ms[pick])) pick = i;
  if (ms[pick] < 0) return;  // none ran: the call below reports cuBLASLt's refusal
  plan.algo = plan.candidates[pick];
  lt_tuned(plan.key, plan.algo);
}
std::unique_ptr<LtPlan> lt_plan(DType t, const Gemm& g, const Epilogue* epi,
                                const std::vector<std::array<const void*, 3>>& calls) {
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.count})
    if (v > INT_MAX) return nullptr;
  const cudaDataType dt = cuda_type(t);
  const cublasComputeType_t compute =
      t == DType::F32 && tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  auto plan = std::make_unique<LtPlan>();
  LtDescs& ds = plan->ds;
  check_cublas(cublasLtMatmulDescCreate(&ds.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  auto set_op = [&](cublasLtMatmulDescAttributes_t a, const void* v, size_t size) {
    check_cublas(cublasLtMatmulDescSetAttribute(ds.op, a, v, size), "cublasLtMatmulDescSetAttribute");
  };
  const int32_t op_a = g.op_a, op_b = g.op_b;
  set_op(CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
  set_op(CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
  const cublasLtEpilogue_t ep = epi ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (epi) {
    const uint32_t epv = ep;
    set_op(CUBLASLT_MATMUL_DESC_EPILOGUE, &epv, sizeof(epv));
    set_op(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi->bias, sizeof(epi->bias));  // (same dtype as D)
  }
  // Stored shapes: A is [m, k] (op N) or [k, m] (op T), B [k, n] or [n, k], D [m, n].
  auto layout = [&](cublasLtMatrixLayout_t& l, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    check_cublas(cublasLtMatrixLayoutCreate(&l, dt, uint64_t(rows), uint64_t(cols), ld), "cublasLtMatrixLayoutCreate");
    if (g.count == 1) return;
    const int32_t count = int32_t(g.count);
    check_cublas(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
                 "cublasLtMatrixLayoutSetAttribute (batch count)");
    check_cublas(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
                 "cublasLtMatrixLayoutSetAttribute (batch stride)");
  };
  const bool ta = g.op_a != CUBLAS_OP_N, tb = g.op_b != CUBLAS_OP_N;
  layout(ds.a, ta ? g.k : g.m, ta ? g.m : g.k, g.lda, g.sa);
  layout(ds.b, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb, g.sb);
  layout(ds.d, g.m, g.n, g.ldd, g.sd);  // C is D (beta = 0)

  // The alignment every call's pointers have.
  uint32_t al[3] = {256, 256, 256};
  for (const auto& c : calls)
    for (int i = 0; i < 3; ++i) al[i] = std::min(al[i], alignment(c[size_t(i)]));
  check_cublas(cublasLtMatmulPreferenceCreate(&ds.pref), "cublasLtMatmulPreferenceCreate");
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t a, const void* v, size_t size) {
    check_cublas(cublasLtMatmulPreferenceSetAttribute(ds.pref, a, v, size), "cublasLtMatmulPreferenceSetAttribute");
  };
  const uint64_t ws = kLtWorkspace;
  // f16/bf16: split-K partial sums in f32 only (not in place in the output, not in the output type).
  const uint32_t schemes = t == DType::F32 ? uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK)
                                           : uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  set_pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof(al[0]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof(al[1]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof(al[2]));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof(al[2]));

  const LtKey key = {int64_t(t), int64_t(compute), int64_t(g.op_a), int64_t(g.op_b), g.m, g.n, g.k, g.lda, g.ldb,
                     g.ldd, g.count, g.sa, g.sb, g.sd, al[0], al[1], al[2], int64_t(ep),
                     epi ? int64_t(alignment(epi->bias)) : 0, 0};
  LtChoice c = lt_algo(ds, key);
  if (c.candidates.empty()) return nullptr;
  plan->algo = c.chosen;
  if (!c.tuned) plan->candidates = std::move(c.candidates);
  plan->key = key;
  return plan;
}

// ---------------------------------------------------------------- matmul

// y = op(a0) op(b0), plus the epilogue when there is one. Returns false (having done
// nothing) only for an epilogue that cuBLASLt has no algorithm for.
bool matmul(const ir::Node& n, const Tensor& a0, const Tensor& b0, Tensor& y, const Epilogue* epi) {
  const bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
  const DType t = y.dtype();
  if (epi && !lt_dtype(t)) return false;  // (an L3 text may name one for f64: run it node by node)
  const size_t es = dtype_size(t);
  const int ry = y.rank();
  const int64_t m = y.shape()[size_t(ry - 2)], nn = y.shape()[size_t(ry - 1)];
  const int64_t k = a0.shape()[size_t(a0.rank() - (ta ? 2 : 1))];
  const Shape batch(y.shape().begin(), y.shape().end() - 2);
  const int64_t count = numel(batch);
  if (m == 0 || nn == 0 || count == 0) return true;
  if (k == 0 && !epi) {  // an empty sum: zeros
    check(cudaMemsetAsync(y.raw(), 0, y.nbytes(), stream()), "matmul: cudaMemsetAsync");
    return true;
  }
  if (k == 0) return false;  // (the bias alone: node by node)
  const Operand a = operand(a0, batch), b = operand(b0, batch);

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
  // One call per index of the other dims (row-major), its pointers from its number:
  // cuBLAS's A (our B), B (our A), D.
  std::vector<std::array<const void*, 3>> calls;
  for (int64_t call = 0, ncalls = count / best; call < ncalls; ++call) {
    int64_t oa = 0, ob = 0, oy = 0, rest = call;
    for (size_t d = nb; d-- > 0;) {
      if (d >= lo && d < hi) continue;
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      oa += i * a.batch[d], ob += i * b.batch[d], oy += i * ys[d];
    }
    calls.push_back({b.base + ob * int64_t(es), a.base + oa * int64_t(es), static_cast<char*>(y.raw()) + oy * int64_t(es)});
  }
  // C^T [nn, m] = op(B)^T op(A)^T, column-major, ldc = nn.
  Gemm g;
  g.op_a = (tb != b.col_major) ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.op_b = (ta != a.col_major) ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = nn, g.n = m, g.k = k, g.lda = b.ld, g.ldb = a.ld, g.ldd = nn, g.count = best, g.sa = sb, g.sb = sa, g.sd = sy;

  if (lt_dtype(t)) {
    if (std::unique_ptr<LtPlan> plan = lt_plan(t, g, epi, calls)) {
      lt_tune(*plan, calls[0]);
      const float one = 1.0f, zero = 0.0f;
      bool refused = false;
      for (size_t i = 0; i < calls.size(); ++i) {
        void* d = const_cast<void*>(calls[i][2]);
        const cublasStatus_t st = cublasLtMatmul(lt().handle, plan->ds.op, &one, calls[i][0], plan->ds.a, calls[i][1],
                                                 plan->ds.b, &zero, d, plan->ds.d, d, plan->ds.d, &plan->algo,
                                                 lt().workspace, kLtWorkspace, stream());
        // Refused before anything ran: as if the heuristic had found nothing.
        if (i == 0 && st == CUBLAS_STATUS_NOT_SUPPORTED) {
          lt_refused(plan->key);
          refused = true;
          break;
        }
        check_cublas(st, "cublasLtMatmul");
      }
      if (!refused) return true;
    }
    if (epi) return false;
  }

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
  for (const auto& c : calls)
    check_cublas(cublasGemmStridedBatchedEx_64(h, g.op_a, g.op_b, g.m, g.n, g.k, alpha, c[0], dt, g.lda, g.sa, c[1], dt,
                                               g.ldb, g.sb, beta, const_cast<void*>(c[2]), dt, g.ldd, g.sd, g.count,
                                               compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  return true;
}

void run_matmul(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  matmul(n, in[0], in[1], out[0], nullptr);
}

Capability matmul_supports(const ir::Node& n, const ir::Graph& g) {
  const TensorType &a = g.type(n.inputs.at(0)), &b = g.type(n.inputs.at(1));
  if (!matmul_dtype(a.dtype) || b.dtype != a.dtype)
    return Capability::no(std::string("no ") + dtype_name(a.dtype) + " matmul on cuda (cuBLASLt: f16 bf16 f32; cuBLAS: f64 c64)");
  if (a.shape.size() < 2 || b.shape.size() < 2) return Capability::no("matmul operands must have rank >= 2");
  return Capability::yes();
}

std::string version(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

void add_blas_kernels(KernelTable& t) { t.add(PredicateKernel{"matmul", matmul_supports, run_matmul}); }

bool takes_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g) {
  const ir::Node& mm = g.nodes.at(size_t(e.matmul));
  // Bias only: see "Relu is not fused" at the top.
  return e.activation == MatmulEpilogue::None && lt_dtype(mm.out().dtype) && !mm.host;
}

bool run_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g, std::span<const Tensor> in, Tensor& out) {
  if (e.activation != MatmulEpilogue::None) return false;  // (node by node: see "Relu is not fused")
  const ir::Node& mm = g.nodes.at(size_t(e.matmul));
  Tensor bias = contiguous(in[2]);  // ([n] or [1, ..., n]: n packed elements)
  // cuBLASLt documents no alignment rule for the bias: give it a fresh, aligned block when
  // it is a view at an odd offset (n elements; a block of the allocator is 512-aligned).
  if (reinterpret_cast<uintptr_t>(bias.raw()) % 16 != 0) bias = bias.to(allocator());
  Epilogue epi;
  epi.bias = bias.raw();
  return matmul(mm, in[0], in[1], out, &epi);
}

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
