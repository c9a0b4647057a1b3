// The cpu device's kernels beside the fused elementwise executor (fused.hpp): the kernels
// every device shares the signatures of (runtime/standard_kernels.hpp: reductions, scan,
// movement, gather/scatter, sources; reduce.cpp, movement.cpp, source.cpp), and one
// add_*_kernels per library family, each registering into the device's kernel table.
#pragma once
#include <cstdint>

#include "runtime/kernel_table.hpp"
#include "runtime/standard_kernels.hpp"

namespace rlx::cpu {

RLX_DECLARE_STANDARD_KERNELS

// dst[i...] = src[i...] over `shape`, strides in elements, for any element size.
void copy_view(const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides,
               const Shape& shape, size_t esize);

// Library families (devices/cpu/<family>.cpp).
void add_sparse_kernels(KernelTable& t);  // spmv_csr spmm_csr sptrsv_csr spmv_tiled tile_csr
void add_lapack_kernels(KernelTable& t);  // lu_factor ... slogdet
void add_sort_kernels(KernelTable& t);    // sort
void add_optim_kernels(KernelTable& t);   // sgd_update adam_update (optim.cpp)
void add_splat_kernels(KernelTable& t);   // splat_render splat_render_backward
void add_nn_kernels(KernelTable& t);      // layer_norm softmax attention (nn.cpp)

}  // namespace rlx::cpu
