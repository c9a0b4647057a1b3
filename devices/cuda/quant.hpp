// Packed (ggml-quantized) weights on the cuda device: quant.cu describes the kernels.
#pragma once
#include "runtime/kernel_table.hpp"

namespace rlx::cuda {

void add_quant_kernels(KernelTable& t);  // quant.cu: dequantize (every format), matmul_packed (Q8_0 Q4_0 Q4_K BF16 F16)

}  // namespace rlx::cuda
