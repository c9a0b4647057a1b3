// Matrix multiply for the cpu device.
//
// First use loads OpenBLAS at run time (dlopen "libopenblas.so.0"; it is never linked),
// after pointing OPENBLAS_CORETYPE at the kernels this CPU can run (SkylakeX with
// AVX-512F, Haswell with AVX2) when the variable is unset: Debian's OpenBLAS 0.3.21 does
// not recognise recent Xeons and would otherwise run generic kernels. When OpenBLAS is
// missing, or RLX_CPU_GEMM=builtin, the device's own GEMM runs every product; by default its
// AVX-512 f32 kernels also take the shape classes where they are faster than OpenBLAS (x·Wᵀ of
// 48-256 rows, ...: docs/cpu.md), and RLX_CPU_GEMM=openblas sends every f32 product to OpenBLAS.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace rlx::cpu {

struct BlasInfo {
  bool loaded = false;
  std::string library;   // what was loaded
  std::string corename;  // openblas_get_corename()
  std::string note;      // why the built-in kernels run, or how the core type was chosen
};
const BlasInfo& blas_info();  // loads on first call
// A symbol of the loaded OpenBLAS (its Fortran LAPACK routines: "dgetrf_", ...); nullptr
// when OpenBLAS is not loaded or lacks the symbol.
void* blas_symbol(const char* name);
std::string gemm_description();

// C[M,N] = op(A)[M,K] op(B)[K,N], row-major, leading dimensions in elements.
// op(A) = A^T when ta (A stored [K, M]). Uses OpenBLAS when loaded.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
          int64_t ldb, float* C, int64_t ldc);
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
          int64_t ldb, double* C, int64_t ldc);
// The built-in kernels, always (threaded over the device pool unless called from a task).
void gemm_builtin(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float* C, int64_t ldc);
void gemm_builtin(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
                  int64_t ldb, double* C, int64_t ldc);
// Which micro-kernels the built-in GEMM uses on this CPU.
std::string gemm_builtin_isa();

// out = matmul(a, b) with the op's attributes; a, b may be strided views; batch dims
// broadcast; out is contiguous. f32 and f64. With a bias (one value per column of out, the
// device's matmul epilogue), each thread adds it to the block of out it has just written.
void matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& out,
            const Tensor* bias = nullptr);

// project_out for one column (w [n, 1], h [k, 1]; V [k, n] with unit column stride, rows
// possibly apart): u = w - V^T h, c = V u in one read of V (gemm.cpp). f32 and f64.
void project_out(const Tensor& V, const Tensor& w, const Tensor& h, Tensor& u, Tensor& c);

}  // namespace rlx::cpu
