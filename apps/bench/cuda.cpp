// rlx-bench cuda: the cuda device next to the libraries it is measured against, in one
// process, on the same device buffers:
//   copy   device-to-device cudaMemcpyAsync of 1 GiB (bytes read + written): the ceiling
//          for memory-bound kernels;
//   xfer   host <-> device through the device allocator (pinned staging) next to pageable
//          cudaMemcpy, 1 GiB each way, and the latency of a 16-byte readback;
//   fused  gelu(x * a + b), f32, 2^28 elements, one generated kernel: bytes = 4 read + 4 written
//          per element, as a fraction of the copy figure;
//   gemm   C = A B at 8192^3 through rlx (cuBLASLt inside) next to cublasGemmEx called directly
//          with the same types and compute mode (f32 without TF32 -- with TF32 on both sides
//          when RLX_CUDA_TF32=1 --, bf16 and f16 with f32 accumulation); relu(x w + b) as one
//          matmul_epilogue kernel next to the same program compiled without fusion;
//   spmv   y = A x, f64 CSR, i32 indices, through rlx next to cusparseSpMV called directly
//          (CUSPARSE_SPMV_ALG_DEFAULT), on five structures: 3D Poisson 160^3 (4.1 M rows),
//          banded (11 diagonals, 4 M rows), power-law row lengths (log-uniform 1..1000, 0.5 M
//          rows), block diagonal (dense 16 x 16 blocks, 4 M rows), random (16 per row, 4 M rows);
//          on matrices of 64 or more nonzeros per row also spmv_tiled (the tiled layout,
//          built once on the GPU, time printed) next to cuSPARSE after cusparseSpMV_preprocess
//          (its time printed too); --matrix random:32|random:64|random:96|random:128 (not run
//          otherwise): 32-128 random columns per row, ~64 M nonzeros;
//   pcg    PCG-Jacobi on 3D Poisson 128^3, a fixed 200 iterations, time per iteration;
//   cg-long CG-Jacobi on an SPD matrix of long rows (bench::power_law_spd), per iteration with
//          the CSR and the tiled operator, and the tiled layout's build time;
//   replay a 100-op program (bench_replay) run by the executor and replayed as a CUDA graph;
//   sort   sort (values + indices, stable) of f32 [2^24] and of the rows of [4096, 4096].
// --only sweep times tuning variants instead: the fused chain under each code generator
// setting (layout, unroll 1/2/4/8, FMA contraction off/on) and the SpMV kernels at every
// lane width with one or two nonzeros per lane per trip, with and without evict-first
// matrix loads, the split kernel, the carveout, an L2 policy and window for x, grid shapes,
// the tiled layout's shapes and launch options (skip_empty on every matrix), on all five
// matrices. --matrix NAME[,NAME] limits the SpMV benchmarks to those (e.g. for a profiler).
// Each figure is the median of --reps timed runs after 3 warm-up runs, timed with CUDA
// events on the device's stream (rlx) or on the same stream (peers). Every run writes
// fresh random inputs first (not zeros). apps/bench/peers_cuda.py times PyTorch and CuPy.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusparse.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "apps/bench/common.hpp"
#include "apps/bench/matrices.hpp"
#include "core/env.hpp"
#include "devices/cuda/codegen.hpp"
#include "devices/cuda/library.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/spmv.hpp"
#include "devices/cuda/spmv_tiled.hpp"
#include "solvers/sparse/tiled.hpp"
#include "ir/frontend.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/ops.hpp"
#include "solvers/sparse/poisson.hpp"

using namespace rlx;
using namespace rlx::bench;

namespace {

bool g_sweep = false;  // --only sweep: tuning variants too (SpMV lanes x unroll, codegen knobs)
std::vector<std::string> g_matrices;  // --matrix NAME[,NAME]: the SpMV benchmarks on those only (e.g. for a profiler)
bool spmv_wanted(const char* label) {
  return g_matrices.empty() || std::find(g_matrices.begin(), g_matrices.end(), label) != g_matrices.end();
}

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median milliseconds of f() over reps runs (after 3 warm-ups), with events on the stream.
double time_ms(int reps, const std::function<void()>& f) {
  cudaStream_t s = cuda::stream();
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    ck(cudaEventRecord(a, s), "record");
    f();
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

Tensor device_random(DType t, Shape s, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor h = Tensor::empty(t, s);
  for (int64_t i = 0; i < h.numel(); ++i) {
    double v = u(g);
    if (t == DType::F32) h.data<float>()[i] = float(v);
    else if (t == DType::F64) h.data<double>()[i] = v;
    else if (t == DType::BF16) h.data<bf16>()[i] = bf16(float(v));
    else if (t == DType::F16) h.data<f16>()[i] = f16(float(v));
  }
  return h.to(cuda::allocator());
}

double bench_copy(int reps) {
  const size_t bytes = size_t(1) << 30;
  cuda::Scratch a(bytes), b(bytes);
  ck(cudaMemsetAsync(a.get(), 1, bytes, cuda::stream()), "memset");
  double ms = time_ms(reps, [&] { ck(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, cuda::stream()), "copy"); });
  double gbs = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
  std::printf("copy    1 GiB device-to-device          %8.3f ms  %7.0f GB/s (read + write)\n", ms, gbs);
  return gbs;
}

// Host <-> device through the device allocator (pinned staging, chunked) next to a plain
// pageable cudaMemcpy of the same host buffer; and the round trip of a 16-byte readback,
// which a Krylov iteration pays once.
void bench_transfers(int reps) {
  Allocator* a = cuda::allocator();
  const size_t bytes = size_t(1) << 30;
  std::vector<char> host(bytes, 1);
  cuda::Scratch dev(bytes);
  auto wall_ms = [&](const std::function<void()>& f) {
    f();
    std::vector<double> t;
    for (int i = 0; i < std::max(3, reps / 4); ++i) {
      auto t0 = Clock::now();
      f();
      t.push_back(1e3 * seconds_since(t0));
    }
    return median(t);
  };
  double h2d = wall_ms([&] { a->copy_from_host(dev.get(), host.data(), bytes); });
  double h2d_plain = wall_ms([&] { ck(cudaMemcpy(dev.get(), host.data(), bytes, cudaMemcpyHostToDevice), "memcpy"); });
  double d2h = wall_ms([&] { a->copy_to_host(host.data(), dev.get(), bytes); });
  double d2h_plain = wall_ms([&] { ck(cudaMemcpy(host.data(), dev.get(), bytes, cudaMemcpyDeviceToHost), "memcpy"); });
  char small[16];
  double rb = wall_ms([&] {
    for (int i = 0; i < 1000; ++i) a->copy_to_host(small, dev.get(), sizeof small);
  });
  double rb_plain = wall_ms([&] {
    for (int i = 0; i < 1000; ++i) ck(cudaMemcpy(small, dev.get(), sizeof small, cudaMemcpyDeviceToHost), "memcpy");
  });
  auto gbs = [&](double ms) { return double(bytes) / (ms * 1e-3) / 1e9; };
  std::printf("xfer    1 GiB host->device rlx %.1f GB/s | pageable cudaMemcpy %.1f GB/s; device->host rlx %.1f | %.1f GB/s\n",
              gbs(h2d), gbs(h2d_plain), gbs(d2h), gbs(d2h_plain));
  std::printf("xfer    16-byte readback: rlx %.1f us | pageable cudaMemcpy %.1f us\n", rb, rb_plain);
}

void bench_fused(int reps, double copy_gbs) {
  Device& d = DeviceRegistry::get().at("cuda");
  const int64_t n = int64_t(1) << 28;
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {n}), a = input(g, "a", DType::F32, {}), b = input(g, "b", DType::F32, {});
  output(g, {gelu(x * a + b)});
  Program p = compile(g, d);
  Executor ex(p, d);
  std::vector<Tensor> in = {device_random(DType::F32, {n}, 1), device_random(DType::F32, {}, 2),
                            device_random(DType::F32, {}, 3)};
  std::vector<Tensor> out = {Tensor::empty(DType::F32, {n}, d.allocator())};
  double ms = time_ms(reps, [&] { ex.enqueue(in, out); });
  double gbs = 8.0 * double(n) / (ms * 1e-3) / 1e9;
  std::printf("fused   gelu(x*a+b) f32 2^28 (%zu kernel%s) %8.3f ms  %7.0f GB/s = %.1f %% of copy\n", p.kernels.size(),
              p.kernels.size() == 1 ? "" : "s", ms, gbs, 100.0 * gbs / copy_gbs);
}

// The fused chain under the code generator's tuning knobs (unroll, FMA contraction).
void sweep_fused(int reps, double copy_gbs) {
  const cuda::CodegenOptions saved = cuda::codegen_options();
  for (bool vector : {false, true})
    for (bool fmad : {false, true})
      for (int unroll : {1, 2, 4, 8}) {
        if (vector && unroll == 1) continue;
        cuda::set_codegen_options({unroll, fmad, vector});
        std::printf("sweep   %s unroll=%d fmad=%d: ", vector ? "vector" : "stride", unroll, int(fmad));
        bench_fused(reps, copy_gbs);
      }
  cuda::set_codegen_options(saved);
}

void bench_gemm(int reps) {
  Device& d = DeviceRegistry::get().at("cuda");
  const int64_t n = 8192;
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate");
  cublasSetStream(h, cuda::stream());
  // RLX_CUDA_TF32=1 (read once per process) lets rlx's f32 matmul use TF32 tensor cores;
  // the peer then computes with CUBLAS_COMPUTE_32F_FAST_TF32 too, and the row says tf32.
  const bool tf32 = env_choice("RLX_CUDA_TF32", {"0", "1"}) == 1;
  const double flop = 2.0 * double(n) * double(n) * double(n);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    ir::Graph g;
    Var A = input(g, "A", t, {n, n}), B = input(g, "B", t, {n, n});
    output(g, {matmul(A, B)});
    Program p = compile(g, d);
    Executor ex(p, d);
    std::vector<Tensor> in = {device_random(t, {n, n}, 4), device_random(t, {n, n}, 5)};
    std::vector<Tensor> out = {Tensor::empty(t, {n, n}, d.allocator())};
    double ms_rlx = time_ms(reps, [&] { ex.enqueue(in, out); });
    const cudaDataType ct = t == DType::F32 ? CUDA_R_32F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const cublasComputeType_t comp = t == DType::F32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    // Row-major C = A B is column-major C^T = B^T A^T.
    double ms_lib = time_ms(reps, [&] {
      cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(n), int(n), &one, in[1].raw(), ct, int(n),
                                      in[0].raw(), ct, int(n), &zero, out[0].raw(), ct, int(n), comp, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmEx");
    });
    const char* label = t == DType::F32 && tf32 ? "tf32" : dtype_name(t);
    std::printf("gemm    %-4s 8192^3   rlx %8.3f ms %6.1f TFLOP/s | cuBLAS %8.3f ms %6.1f TFLOP/s | rlx/cuBLAS time %.3f\n",
                label, ms_rlx, flop / ms_rlx / 1e9, ms_lib, flop / ms_lib / 1e9, ms_rlx / ms_lib);
  }
  cublasDestroy(h);
  // A dense layer, relu(x w + b): the matmul_epilogue kernel (one cublasLtMatmul with
  // RELU_BIAS) against the same program compiled without fusion (the matmul, then the
  // bias add and relu as generated kernels).
  const int64_t m = 8192, k = 4096, nn = 4096;
  for (DType t : {DType::F32, DType::BF16}) {
    ir::Graph g;
    Var x = input(g, "x", t, {m, k}), w = input(g, "w", t, {k, nn}), b = input(g, "b", t, {nn});
    output(g, {relu(matmul(x, w) + b)});
    std::vector<Tensor> in = {device_random(t, {m, k}, 8), device_random(t, {k, nn}, 9), device_random(t, {nn}, 10)};
    std::vector<Tensor> out = {Tensor::empty(t, {m, nn}, d.allocator())};
    double ms[2];
    size_t kernels[2];
    for (int fuse = 1; fuse >= 0; --fuse) {
      CompileOptions o;
      o.fuse = fuse == 1;
      Program p = compile(g, d, o);
      Executor ex(p, d);
      kernels[fuse] = p.kernels.size();
      ms[fuse] = time_ms(reps, [&] { ex.enqueue(in, out); });
    }
    const double f = 2.0 * double(m) * double(k) * double(nn);
    std::printf("gemm    %-4s relu(x w + b) [8192x4096]x[4096x4096]: fused %8.3f ms %6.1f TFLOP/s (%zu kernel) | "
                "unfused %8.3f ms (%zu kernels) | fused/unfused time %.3f\n",
                dtype_name(t), ms[1], f / ms[1] / 1e9, kernels[1], ms[0], kernels[0], ms[1] / ms[0]);
  }
}

// sort (values + i64 indices, stable) of f32 along the last axis: one long row, and many
// rows, under each strategy of sort.cu (library.hpp). Peer: torch.sort(stable=True) in
// peers_cuda.py.
void bench_sort(int reps) {
  Device& d = DeviceRegistry::get().at("cuda");
  const cuda::SortStrategy saved = cuda::sort_strategy();
  for (Shape s : {Shape{int64_t(1) << 24}, Shape{4096, 4096}}) {
    ir::Graph g;
    Var x = input(g, "x", DType::F32, s);
    Sorted r = sort(x);
    output(g, {r.values, r.indices});
    Program p = compile(g, d);
    Executor ex(p, d);
    std::vector<Tensor> in = {device_random(DType::F32, s, 11)};
    std::vector<Tensor> out = {Tensor::empty(DType::F32, s, d.allocator()), Tensor::empty(DType::I64, s, d.allocator())};
    std::string name;
    for (int64_t e : s) name += (name.empty() ? "" : "x") + std::to_string(e);
    for (cuda::SortStrategy st : {cuda::SortStrategy::Auto, cuda::SortStrategy::Segmented, cuda::SortStrategy::Radix}) {
      if (st == cuda::SortStrategy::Auto && s.size() == 1) continue;  // (one long row: Auto is Radix)
      cuda::set_sort_strategy(st);
      const double ms = time_ms(reps, [&] { ex.enqueue(in, out); });
      std::printf("sort    rlx f32 [%s] stable, values + indices, %-9s %8.3f ms  %6.2f G elements/s\n", name.c_str(),
                  cuda::sort_strategy_name(st), ms, double(numel(s)) / (ms * 1e-3) / 1e9);
    }
  }
  cuda::set_sort_strategy(saved);
}

void bench_spmv_one(int reps, const std::string& label, const sparse::CsrMatrix& A) {
  Device& d = DeviceRegistry::get().at("cuda");
  Program p = spmv_program(A, d);
  Executor ex(p, d);
  std::vector<Tensor> in;
  for (const Tensor& t : A.arrays()) in.push_back(t.to(d.allocator()));
  in.push_back(device_random(DType::F64, {A.cols()}, 6));
  std::vector<Tensor> out = {Tensor::empty(DType::F64, {A.rows()}, d.allocator())};
  double ms_rlx = time_ms(reps, [&] { ex.enqueue(in, out); });

  cusparseHandle_t h;
  if (cusparseCreate(&h) != CUSPARSE_STATUS_SUCCESS) throw std::runtime_error("cusparseCreate");
  cusparseSetStream(h, cuda::stream());
  const cusparseIndexType_t it = in[0].dtype() == DType::I64 ? CUSPARSE_INDEX_64I : CUSPARSE_INDEX_32I;
  cusparseSpMatDescr_t mat;
  cusparseDnVecDescr_t vx, vy;
  cusparseCreateCsr(&mat, A.rows(), A.cols(), A.nnz(), in[0].raw(), in[1].raw(), in[2].raw(), it, it,
                    CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F);
  cusparseCreateDnVec(&vx, A.cols(), in[3].raw(), CUDA_R_64F);
  cusparseCreateDnVec(&vy, A.rows(), out[0].raw(), CUDA_R_64F);
  const double one = 1.0, zero = 0.0;
  size_t ws = 0;
  cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, mat, vx, &zero, vy, CUDA_R_64F,
                          CUSPARSE_SPMV_ALG_DEFAULT, &ws);
  cuda::Scratch buf(ws + 1);
  auto lib_spmv = [&] {
    cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, mat, vx, &zero, vy, CUDA_R_64F, CUSPARSE_SPMV_ALG_DEFAULT,
                 buf.get());
  };
  double ms_lib = time_ms(reps, lib_spmv);
  // cuSPARSE's own prepare-once path, the peer of the tiled layout below (long rows only):
  // cusparseSpMV_preprocess once, then the same call (the buffer must stay). 0: refused.
  const bool long_rows = A.nnz() >= 64 * A.rows();
  double ms_lib_pre = 0, ms_preprocess = 0;
  if (long_rows) {
    cudaStreamSynchronize(cuda::stream());
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = cusparseSpMV_preprocess(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, mat, vx, &zero, vy, CUDA_R_64F,
                                            CUSPARSE_SPMV_ALG_DEFAULT, buf.get()) == CUSPARSE_STATUS_SUCCESS;
    cudaStreamSynchronize(cuda::stream());
    ms_preprocess = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ok) ms_lib_pre = time_ms(reps, lib_spmv);
  }
  // The rlx kernels under their tuning knobs (the device runs spmv_choice(); the others
  // are for tuning that choice): vector kernel by lanes per row
  // (x2: two nonzeros per lane per trip), the split kernel, each also with the matrix
  // loaded evict-first (h).
  std::string lanes_line;
  auto variant = [&](const char* name, cuda::SpmvTuning t) {
    double ms = time_ms(reps, [&] { cuda::spmv_csr_native(in[0], in[1], in[2], in[3], nullptr, 1.0, 0.0, out[0], t); });
    if (t.persist_x) cuda::reset_l2_persistence();
    char b[64];
    std::snprintf(b, sizeof b, " %s%s:%.3f", name, t.stream_hint ? "h" : "", ms);
    lanes_line += b;
  };
  for (bool hint : g_sweep ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
    for (int unroll : g_sweep ? std::vector<int>{1, 2} : std::vector<int>{1})
      for (int l : g_sweep ? std::vector<int>{1, 2, 4, 8, 16, 32} : std::vector<int>{2, 4, 8, 16, 32})
        variant((std::to_string(l) + (unroll == 2 ? "x2" : "")).c_str(), {1, l, unroll, hint});
    variant("split", {2, 0, 1, hint});
  }
  // The vector kernel's experiments start from the device's choice where that is the
  // vector kernel ("default/..."), else from the vector kernel's best setting for long rows:
  // a warp per row, evict-first, no grid cap, aligned trips ("vector32/...").
  const cuda::SpmvTuning choice = cuda::spmv_choice(A.rows(), A.nnz());
  cuda::SpmvTuning vec = choice;
  if (choice.kernel != 1) {
    vec = cuda::SpmvTuning{};
    vec.kernel = 1, vec.lanes = 32, vec.stream_hint = true, vec.blocks_per_sm = 0, vec.aligned = true;
  }
  const std::string base = choice.kernel == 1 ? "default" : "vector32";
  if (g_sweep) {  // experiments: x in L2, grid shape, aligned trips, the packed kernel (spmv.hpp)
    auto with = [&](const std::string& name, auto&& change) {
      cuda::SpmvTuning t = vec;
      change(t);
      variant(name.c_str(), t);
    };
    // The packed kernel: R rows per warp, blocks of 128/256, with and without the load
    // pipeline (pipe).
    for (int R : {1, 2, 8})
      for (int threads : {128, 256})
        for (bool pipe : {false, true})
          with("packed" + std::to_string(R) + "/t" + std::to_string(threads) + (pipe ? "/pipe" : ""),
               [R, threads, pipe](cuda::SpmvTuning& t) {
                 t = cuda::SpmvTuning{};
                 t.kernel = 3, t.rows_per_warp = R, t.stream_hint = true, t.pipeline = pipe, t.threads = threads;
               });
    with(base + "/x-evict-last", [](cuda::SpmvTuning& t) { t.x_evict_last = true; });
    with(base + "/persist-x", [](cuda::SpmvTuning& t) { t.persist_x = true; });
    with(base + "/nocap", [](cuda::SpmvTuning& t) { t.blocks_per_sm = 0; });
    with(base + "/cap64", [](cuda::SpmvTuning& t) { t.blocks_per_sm = 64; });
    with(base + "/nocap/t64", [](cuda::SpmvTuning& t) { t.blocks_per_sm = 0, t.threads = 64; });
    with(base + "/nocap/t128", [](cuda::SpmvTuning& t) { t.blocks_per_sm = 0, t.threads = 128; });
    with(base + "/cap16", [](cuda::SpmvTuning& t) { t.blocks_per_sm = 16; });
    with(base + "/aligned", [](cuda::SpmvTuning& t) { t.aligned = true; });
    with(base + "/aligned/nocap", [](cuda::SpmvTuning& t) { t.aligned = true, t.blocks_per_sm = 0; });
    with(base + "/aligned/cap64", [](cuda::SpmvTuning& t) { t.aligned = true, t.blocks_per_sm = 64; });
    with(base + "/aligned/nocap/t128", [](cuda::SpmvTuning& t) { t.aligned = true, t.blocks_per_sm = 0, t.threads = 128; });
  }
  // The tiled layout (solvers/sparse/tiled.hpp, devices/cuda/spmv_tiled.hpp), for long rows:
  // a block per row block (rb rows) and column group, panels of x in shared memory, E
  // nonzeros per lane, U trips loaded together. Each result is checked on the host against
  // the CSR product on the same x: largest |error| / sum |terms| over the rows (MISMATCH
  // above 1e-12, NaN included); the build time (on the GPU) is printed.
  struct TiledRun {
    double ms = 0, err = 0, build_s = 0;
  };
  std::vector<double> ref, mag;
  sparse::TiledShape built{0, 0, 0};  // the layout last built (on the device: arrays)
  std::vector<Tensor> arrays;
  double built_s = 0;
  auto time_tiled = [&](sparse::TiledShape shape, int groups, int unroll, int per_lane, bool skip = false) {
    const std::vector<Tensor> host = A.arrays();
    if (ref.empty()) {
      const Tensor hx = in[3].to(host_allocator());
      ref.assign(size_t(A.rows()), 0.0), mag.assign(size_t(A.rows()), 0.0);
      const int32_t* rp = host[0].data<int32_t>();
      const int32_t* ci = host[1].data<int32_t>();
      const double* v = host[2].data<double>();
      for (int64_t r = 0; r < A.rows(); ++r)
        for (int32_t k = rp[r]; k < rp[r + 1]; ++k) {
          const double p = v[k] * hx.data<double>()[ci[k]];
          ref[size_t(r)] += p, mag[size_t(r)] += std::fabs(p);
        }
    }
    TiledRun run;
    if (shape.rb != built.rb || shape.panel != built.panel || shape.warps != built.warps) {  // (else reuse it)
      // Built on the GPU from the CSR arrays already there (the tile_csr op, tile_csr.cu).
      const auto t0 = std::chrono::steady_clock::now();
      arrays = sparse::tiled_tensors(
          sparse::tile_csr(in[0], in[1], in[2], A.rows(), A.cols(), shape.rb, shape.panel, shape.warps, &d));
      d.synchronize();
      built_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      built = shape;
    }
    run.build_s = built_s;
    const cuda::TiledArgs args{A.rows(), A.cols(), shape.rb, shape.panel, shape.warps};
    Tensor y = Tensor::empty(DType::F64, {A.rows()}, d.allocator());
    run.ms = time_ms(reps, [&] {
      cuda::spmv_tiled_native(arrays[0], arrays[1], arrays[2], in[3], nullptr, 1.0, 0.0, y, args, groups, unroll,
                              per_lane, skip);
    });
    const Tensor hy = y.to(host_allocator());
    for (int64_t r = 0; r < A.rows(); ++r) {
      const double e = std::fabs(hy.data<double>()[r] - ref[size_t(r)]) / (mag[size_t(r)] + 1e-300);
      run.err = std::isnan(e) ? INFINITY : std::max(run.err, e);
      if (std::isnan(e)) break;
    }
    return run;
  };
  int optin = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  if (g_sweep && long_rows) {
    struct Shape {
      int groups, unroll, per_lane;
      sparse::TiledShape fixed{0, 0, 32};  // rb 0: sized to the GPU
    };
    // Sized to the GPU (sparse::tiled_shape for `groups` column groups: sm_count / groups
    // row blocks, panels as wide as the rest of the shared memory allows), then a fixed one.
    for (Shape sh : {Shape{3, 4, 1}, Shape{3, 2, 1}, Shape{3, 2, 2}, Shape{3, 4, 2}, Shape{4, 2, 2}, Shape{2, 2, 2},
                     Shape{6, 2, 2}, Shape{3, 2, 2, {12288, 8192, 32}}}) {
      const sparse::TiledShape shape =
          sh.fixed.rb ? sh.fixed : sparse::tiled_shape(A.rows(), cuda::sm_count(), optin, sh.groups);
      const TiledRun r = time_tiled(shape, sh.groups, sh.unroll, sh.per_lane);
      char b[160];
      std::snprintf(b, sizeof b, " tiled/rb%d/p%d/g%d/u%d/e%d:%.3f(err %.1e%s, built in %.1f ms)", shape.rb,
                    shape.panel, sh.groups, sh.unroll, sh.per_lane, r.ms, r.err, r.err <= 1e-12 ? "" : " MISMATCH",
                    r.build_s * 1e3);
      lanes_line += b;
    }
  }
  if (g_sweep)  // on every matrix: the default launch, and with empty panels skipped
    for (bool skip : {false, true}) {
      const TiledRun r = time_tiled(sparse::tiled_shape(A.rows(), cuda::sm_count(), optin), 0, 2, 2, skip);
      char b[160];
      std::snprintf(b, sizeof b, " tiled/default%s:%.3f(err %.1e%s, built in %.1f ms)", skip ? "/skip" : "", r.ms,
                    r.err, r.err <= 1e-12 ? "" : " MISMATCH", r.build_s * 1e3);
      lanes_line += b;
    }
  // What spmv_tiled runs by default (the shape of sparse::tiled_shape, groups to fill the GPU).
  TiledRun tiled_default;
  if (long_rows) tiled_default = time_tiled(sparse::tiled_shape(A.rows(), cuda::sm_count(), optin), 0, 2, 2);
  if (g_sweep)
    for (int carve : {0, 100, -1}) {  // the most L1, the most shared memory, CUDA's default again
      cuda::SpmvTuning t = vec;
      t.carveout = carve;
      variant((base + "/carveout" + std::to_string(carve)).c_str(), t);
    }
  const cuda::SpmvTuning& c = choice;
  const std::string chosen = c.kernel == 3 ? "packed" + std::to_string(c.rows_per_warp) + (c.pipeline ? "/pipe" : "")
                                           : std::to_string(c.lanes) + (c.unroll == 2 ? "x2" : "");
  std::printf("spmv    %-14s rlx kernels (ms):%s (device default %s%s)\n", label.c_str(), lanes_line.c_str(), chosen.c_str(),
              c.stream_hint ? "h" : "");

  cusparseDestroySpMat(mat);
  cusparseDestroyDnVec(vx);
  cusparseDestroyDnVec(vy);
  cusparseDestroy(h);
  const size_t ib = dtype_size(in[0].dtype());
  const double bytes = double(A.nnz()) * (8 + ib) + double(A.rows() + 1) * ib + 8.0 * double(A.cols() + A.rows());
  std::printf("spmv    f64 %-14s (%8lld rows, %9lld nnz) rlx %7.3f ms %6.0f GB/s | cuSPARSE %7.3f ms %6.0f GB/s | rlx/cuSPARSE time %.3f\n",
              label.c_str(), (long long)A.rows(), (long long)A.nnz(), ms_rlx, bytes / ms_rlx / 1e6, ms_lib,
              bytes / ms_lib / 1e6, ms_rlx / ms_lib);
  if (long_rows)
    std::printf("spmv    f64 %-14s tiled layout (spmv_tiled; laid out once, on the GPU, in %.1f ms) rlx %7.3f ms | "
                "cuSPARSE (CSR) %7.3f ms, after cusparseSpMV_preprocess (%.1f ms) %7.3f ms | rlx tiled/cuSPARSE time %.3f, "
                "/preprocessed %.3f (err %.1e%s)\n",
                label.c_str(), tiled_default.build_s * 1e3, tiled_default.ms, ms_lib, ms_preprocess, ms_lib_pre,
                tiled_default.ms / ms_lib,
                ms_lib_pre > 0 ? tiled_default.ms / ms_lib_pre : 0.0, tiled_default.err,
                tiled_default.err <= 1e-12 ? "" : " MISMATCH");
}

// The five test matrices by name (rlx-bench cuda --matrix takes these names).
struct SpmvCase {
  const char* name;
  std::function<sparse::CsrMatrix()> make;
  bool extra = false;  // run only when named by --matrix
};

// k uniformly random columns in each of `rows` rows (columns seeded by k, values by `seed`).
sparse::CsrMatrix random_rows(int64_t rows, int k, uint64_t seed) {
  std::mt19937_64 g{uint64_t(k)};
  return make_csr(rows, rows, [&](int64_t, std::vector<int32_t>& c) {
    for (int i = 0; i < k; ++i) c.push_back(int32_t(g() % uint64_t(rows)));
  }, seed);
}

const std::vector<SpmvCase>& spmv_cases() {
  static const int64_t n = 4'000'000, m = 500'000;
  static const std::vector<SpmvCase> cases = {
      {"poisson3d:160", [] { return sparse::poisson3d(160); }},
      // banded: 11 diagonals (offsets -5..5)
      {"banded:11", [] {
         return make_csr(n, n, [&](int64_t r, std::vector<int32_t>& c) {
           for (int64_t o = -5; o <= 5; ++o)
             if (r + o >= 0 && r + o < n) c.push_back(int32_t(r + o));
         }, 11);
       }},
      // power-law rows: lengths log-uniform in [1, 1000], random columns
      {"power-law", [] { return bench::power_law_csr(m); }},
      // block diagonal: dense 16 x 16 blocks
      {"block:16", [] {
         return make_csr(n, n, [&](int64_t r, std::vector<int32_t>& c) {
           int64_t b = r / 16 * 16;
           for (int64_t k = 0; k < 16; ++k) c.push_back(int32_t(b + k));
         }, 14);
       }},
      // random: 16 uniformly random columns per row
      {"random:16", [] { return random_rows(n, 16, 15); }},
      // longer random rows, ~64 M nonzeros each (where the tiled layout starts to pay)
      {"random:32", [] { return random_rows(2'000'000, 32, 32); }, true},
      {"random:64", [] { return random_rows(1'000'000, 64, 64); }, true},
      {"random:96", [] { return random_rows(666'667, 96, 96); }, true},
      {"random:128", [] { return random_rows(500'000, 128, 128); }, true},
  };
  return cases;
}

void bench_spmv(int reps) {
  for (const SpmvCase& c : spmv_cases())
    if (c.extra ? !g_matrices.empty() && spmv_wanted(c.name) : spmv_wanted(c.name)) bench_spmv_one(reps, c.name, c.make());
}

// Seconds per iteration of CG (Jacobi) on the cuda device for A x = ones, from the
// difference between solves of iters/10 and iters iterations (setup excluded: compile,
// uploads), the median of 3; after a warm-up solve that compiles and caches the kernels.
double cg_per_iteration(const sparse::LinearOperator& A, const sparse::Preconditioner& M, int iters) {
  Tensor b = Tensor::empty(DType::F64, {A.rows()});
  for (int64_t i = 0; i < A.rows(); ++i) b.data<double>()[i] = 1.0;
  sparse::KrylovOptions o;
  o.method = "cg";
  o.rtol = 0;  // run the fixed number of iterations (stopped only by a breakdown)
  o.device = "cuda";
  auto solve = [&](int it) {
    o.max_it = it;
    auto t0 = Clock::now();
    auto r = sparse::krylov_solve(A, b, M, o);
    if (r.iterations != it) throw std::runtime_error("cg stopped early");
    return seconds_since(t0);
  };
  solve(iters / 10);
  std::vector<double> per_it;
  for (int r = 0; r < 3; ++r) {
    double s = solve(iters / 10), l = solve(iters);
    per_it.push_back((l - s) / (iters - iters / 10));
  }
  return median(per_it);
}

void bench_pcg(int64_t grid, int iters) {
  sparse::CsrMatrix A = sparse::poisson3d(grid);
  sparse::CsrOperator op(A);
  auto M = sparse::make_preconditioner("jacobi", op);
  std::printf("pcg     jacobi poisson3d:%lld: %.3f ms per iteration (from %d- and %d-iteration solves)\n",
              (long long)grid, 1e3 * cg_per_iteration(op, *M, iters), iters / 10, iters);
}

// CG (Jacobi) on an SPD matrix with long rows (bench::power_law_spd: 250000 rows, ~290
// nonzeros a row): time per iteration with the CSR operator (spmv_csr) and with the tiled
// one (spmv_tiled), and what the tiled layout costs to build on the GPU (TiledOperator
// from the host CSR arrays, to its end): the iterations after which it has paid for itself.
void bench_cg_long(int iters) {
  const sparse::CsrMatrix A = bench::power_law_spd(250000);
  Device& d = DeviceRegistry::get().at("cuda");
  sparse::CsrOperator op(A);
  auto M = sparse::make_preconditioner("jacobi", op);
  int optin = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  // The build starts from the host arrays, so it includes copying them to the GPU, which a
  // CSR solve pays as well (its setup binds them to the device): timed on its own too.
  std::vector<double> build, copy;
  std::unique_ptr<sparse::TiledOperator> tiled;
  for (int r = 0; r < 3; ++r) {
    d.synchronize();
    auto t0 = Clock::now();
    tiled = std::make_unique<sparse::TiledOperator>(op, sparse::tiled_shape(A.rows(), cuda::sm_count(), optin), &d);
    build.push_back(seconds_since(t0));
    t0 = Clock::now();
    for (const Tensor& t : A.arrays()) t.to(d.allocator());
    d.synchronize();
    copy.push_back(seconds_since(t0));
  }
  const double csr = cg_per_iteration(op, *M, iters), tile = cg_per_iteration(*tiled, *M, iters);
  const double built = median(build), copied = median(copy);
  std::printf("cg      jacobi power-law-spd (%lld rows, %lld nnz): per iteration CSR %.3f ms | tiled %.3f ms "
              "(tiled/CSR %.3f); tiled operator built in %.1f ms from the host CSR arrays, of which copying them to "
              "the GPU (a CSR solve's setup does too) %.1f ms: the layout pays after %.0f iterations\n",
              (long long)A.rows(), (long long)A.nnz(), 1e3 * csr, 1e3 * tile, tile / csr, 1e3 * built, 1e3 * copied,
              csr > tile ? std::max(built - copied, 0.0) / (csr - tile) : INFINITY);
}

// A 100-op program: 20 rounds of y = tanh(y W_i + b_i) * 0.5 + y on [256, 256] f32 (five
// ops a round: matmul, add, tanh, mul, add). rlx runs it as 20 cuBLAS calls + 20 fused
// kernels; timed as a plain executor run and as a replay of its recorded CUDA graph.
void bench_replay(int reps) {
  Device& d = DeviceRegistry::get().at("cuda");
  const int64_t m = 256;
  const int rounds = 20;
  ir::Graph g;
  Var y = input(g, "x", DType::F32, {m, m});
  std::vector<Tensor> in = {device_random(DType::F32, {m, m}, 7)};
  for (int i = 0; i < rounds; ++i) {
    Var w = input(g, "w" + std::to_string(i), DType::F32, {m, m}), b = input(g, "b" + std::to_string(i), DType::F32, {m});
    in.push_back(device_random(DType::F32, {m, m}, 100 + uint64_t(i)));
    in.push_back(device_random(DType::F32, {m}, 200 + uint64_t(i)));
    y = tanh(matmul(y, w) + b) * 0.5 + y;
  }
  output(g, {y});
  Program p = compile(g, d);
  Executor ex(p, d);
  std::vector<Tensor> out = {Tensor::empty(DType::F32, {m, m}, d.allocator())};
  double ms_run = time_ms(reps, [&] { ex.enqueue(in, out); });
  std::unique_ptr<Replay> r = ex.capture(in, out);
  double ms_graph = time_ms(reps, [&] { r->launch(); });
  std::printf("replay  100-op program (%zu kernels): executor run %.3f ms | CUDA graph replay %.3f ms\n", p.kernels.size(),
              ms_run, ms_graph);
}

}  // namespace

int bench_cuda(int argc, char** argv) {
  int reps = 20;
  std::string only;
  std::vector<std::string> matrices;
  for (const SpmvCase& c : spmv_cases()) matrices.push_back(c.name);
  Args args("rlx-bench cuda",
            "The cuda device next to cuBLAS and cuSPARSE called directly (the header of apps/bench/cuda.cpp\n"
            "says what each section measures); --matrix limits the SpMV benchmarks to those matrices.\n");
  args.option("--reps", "N", reps, 1)
      .option("--only", "copy|xfer|fused|gemm|spmv|pcg|cg-long|replay|sort|sweep", only,
              {"copy", "xfer", "fused", "gemm", "spmv", "pcg", "cg-long", "replay", "sort", "sweep"})
      .option("--matrix", "NAME[,NAME]", g_matrices, matrices);
  args.parse(argc, argv);
  Device& d = DeviceRegistry::get().at("cuda");
  if (std::string why = d.unavailable(); !why.empty()) {
    std::fprintf(stderr, "rlx-bench cuda: %s\n", why.c_str());
    return 2;
  }
  std::printf("device: %s\n", d.description().c_str());
  return run_bench("rlx-bench cuda", [&] {
    double copy = bench_copy(reps);
    if (only == "sweep") {
      g_sweep = true;
      sweep_fused(reps, copy);
      bench_spmv(reps);
      return 0;
    }
    if (only.empty() || only == "xfer") bench_transfers(reps);
    if (only.empty() || only == "fused") bench_fused(reps, copy);
    if (only.empty() || only == "gemm") bench_gemm(std::max(5, reps / 4));
    if (only.empty() || only == "spmv") bench_spmv(reps);
    if (only.empty() || only == "pcg") bench_pcg(128, 200);
    // (The residual falls ~10x an iteration there and CG's inner products ~100x: past ~150
    // iterations they underflow and CG stops on a breakdown; 100 stays clear of that.)
    if (only.empty() || only == "cg-long") bench_cg_long(100);
    if (only.empty() || only == "replay") bench_replay(reps);
    if (only.empty() || only == "sort") bench_sort(reps);
    return 0;
  });
}
