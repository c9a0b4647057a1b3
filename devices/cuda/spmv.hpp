// The cuda device's own CSR SpMV (spmv.cu), used for f32/f64 values instead of cuSPARSE:
// a group of L lanes per row (L the power of two nearest below a third of the mean row
// length, 1 to 32),
// coalesced loads of each row's values and columns, x through the read-only cache,
// accumulation in double, a shuffle reduction inside the group, rounding once on store.
#pragma once
#include "core/tensor.hpp"

namespace rlx::cuda {

// y = alpha * A x (+ beta * y0 when y0 is given). row_ptr/col_idx i32 or i64 (same dtype),
// values/x/y0/y f32 or f64 (same dtype); every input contiguous; y preallocated.
void spmv_csr_native(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, const Tensor& x,
                     const Tensor* y0, double alpha, double beta, Tensor& y, int lanes = 0, int unroll = 1);
// (lanes, unroll: tuning experiments; 0 / 1 are what the device uses. unroll 2 gives each
// lane two nonzeros and two accumulators per trip.)
// The lanes per row spmv_csr_native picks for a matrix of this shape (lanes = 0).
int spmv_lanes(int64_t rows, int64_t nnz);

}  // namespace rlx::cuda
