// matmul over packed (ggml-quantized) weights on the cpu device, callable without a graph
// (the op's kernel and rlx-bench qmatmul use it). quant.cpp describes the kernels.
#pragma once
#include <cstdint>

#include "runtime/kernel_table.hpp"

namespace rlx::cpu {

// Whether ggml type `type` has a native kernel here (Q8_0, Q4_0, Q4_K, BF16, F16).
bool matmul_packed_native(uint32_t type);
// y[m, n] = x[m, k] · dequant(w)[n, k]^T, w's rows `row_bytes` apart; threaded over the
// device's pool. InternalError for a type without a native kernel.
void matmul_packed(uint32_t type, const unsigned char* w, int64_t n, int64_t row_bytes, int64_t k, const float* x,
                   int64_t m, float* y);
// y[m, n] = x[m, k] · w[n, k]^T for f32 weights w with rows ldw elements apart, through the
// decode kernel (each weight row read once, threaded over rows): for m <= 16 and k a
// multiple of 64; false (nothing done) otherwise.
bool matmul_small_m_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t ldw, float* y, int64_t n);
// dequantize (every format of core/ggml_blocks.hpp) and matmul_packed into a kernel table.
void add_quant_kernels(KernelTable& t);

}  // namespace rlx::cpu
