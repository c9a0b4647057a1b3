// The cuda device's matmul-epilogue kernels (blas.cpp): a matmul with its bias add (and
// relu) as one cuBLASLt call with CUBLASLT_EPILOGUE_BIAS / RELU_BIAS.
#pragma once
#include <span>

#include "runtime/device.hpp"

namespace rlx::cuda {

// Whether the device takes e as one kernel: a bias only (no relu), f16, bf16 and f32
// (cuBLASLt's dtypes here).
bool takes_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g);
// in: the matmul's operands, the bias[, the zero]. Returns false, having done nothing,
// for a relu epilogue (an L3 text may name one) or where cuBLASLt has no algorithm for it
// (the caller then runs the nodes one by one).
bool run_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g, std::span<const Tensor> in, Tensor& out);

}  // namespace rlx::cuda
