// Library primitives on the cuda device: matmul through cuBLAS(Lt), the sparse kernels
// through cuSPARSE's generic API, dense factorizations through cuSOLVER, the sort. Each
// family adds its kernels to the device's kernel table (runtime/kernel_table.hpp).
#pragma once
#include <cublas_v2.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/kernel_table.hpp"

namespace rlx::cuda {

// One function per family.
void add_blas_kernels(KernelTable& t);    // blas.cpp: matmul
void add_sparse_kernels(KernelTable& t);  // sparse.cpp: spmv_csr, spmm_csr, sptrsv_csr, spmv_tiled, tile_csr
void add_solver_kernels(KernelTable& t);  // solver.cpp: lu_factor, cholesky, qr, ...
void add_sort_kernels(KernelTable& t);    // sort.cu: sort
void add_optim_kernels(KernelTable& t);   // optim.cu: sgd_update, adam_update
void add_splat_kernels(KernelTable& t);   // splat.cu: splat_render, splat_render_backward
void add_nn_kernels(KernelTable& t);      // nn.cu: layer_norm, softmax, attention
// How sort.cu sorts (its header has the details): Auto (the default) — rows of 65 to 4096
// elements (to 2048 for 64-bit keys) sorted by a thread block each in shared memory, other
// rows by CUB's device-wide radix sort; Radix — always the device-wide sort; Segmented —
// CUB's segmented radix sort, a thread block per row (for comparison). RLX_CUDA_SORT=
// auto|radix|segmented in the environment, or set_sort_strategy(), picks one.
enum class SortStrategy { Auto, Segmented, Radix };
SortStrategy sort_strategy();
void set_sort_strategy(SortStrategy s);
const char* sort_strategy_name(SortStrategy s);  // "auto", "radix", "segmented"

// Lanes per query row in attention's kernel (nn.cu) for heads of up to 64: 1, 2, 4 or 8, or
// 0 — auto, the default — for the fewest that give the call 256 threads per SM.
// RLX_CUDA_ATTENTION_LANES=auto|1|2|4|8 in the environment, or set_attention_lanes(), picks.
int attention_lanes_setting();
void set_attention_lanes(int lanes);
int attention_lanes(int64_t rows);  // the lanes a call with this many query rows gets

// Which f32 kernel runs attention of heads up to 64 wide and at most 128 keys without TF32:
// Auto (the default) takes the register-tiled one (whole keys and values in shared memory)
// when the call has a block of 64 query rows for every SM, else the lane kernel above; Lanes
// and Tile force one (Tile only where the shape allows it). Bf16 opts in to a precision
// below the op's f32 contract: attention of 16 or more query rows on the bf16 tensor cores
// (q, k, v and the softmax weights rounded to bf16, f32 sums; nn.cu), every head size and key
// count. RLX_CUDA_ATTENTION=auto|lanes|tile|bf16 in the environment, or
// set_attention_kernel(), picks.
enum class AttentionKernel { Auto, Lanes, Tile, Bf16 };
AttentionKernel attention_kernel_setting();
void set_attention_kernel(AttentionKernel k);

std::string library_description();

// Shared by the families (blas.cpp defines them): the process's cuBLAS handle, bound to
// stream() with its own workspace; status checking (DeviceError naming the call and the
// node).
cublasHandle_t cublas_handle();
void check_cublas(cublasStatus_t s, const char* call);  // e.g. "cuBLAS 13.0, cuSPARSE 12.6, cuSOLVER 12.0"
// RLX_CUDA_TF32=1 (read once per process): f32 products may use TF32 tensor cores (10-bit
// mantissas in the products, f32 sums), in matmul and in matmul_packed's many-row GEMM.
bool tf32_allowed();
// RLX_CUDA_BF16 (read once per process): matmul_packed over BF16 or F16 weights may round x
// to the weights' 16-bit type and run cuBLAS's tensor-core GEMM with f32 sums — the precision
// a bf16 model computes in under PyTorch. "1": products of more than kHalfGemmRows rows of x
// (a prefill's, a decode step's from batch 9 on; the GEMV of up to 8 rows reads the weights
// at a higher rate than cuBLAS at one row); "all": every product. Unset or "0": the op's f32
// contract. Returns the fewest rows of x that take the tensor cores (0: none).
constexpr int64_t kHalfGemmRows = 8;
int64_t half_gemm_min_rows();

}  // namespace rlx::cuda
