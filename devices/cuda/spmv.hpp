// The cuda device's own CSR SpMV (spmv.cu), used for f32/f64 values instead of cuSPARSE.
// Two kernels, both accumulating in double and rounding once on store:
//  - vector (what the device runs; spmv_choice() picks its knobs from the mean row length):
//    a group of L lanes per row (1 to 32), coalesced loads of each row's values and
//    columns, x through the read-only cache, a shuffle reduction inside the group;
//  - split (a knob, for rows of very uneven length): each warp takes 256 consecutive
//    nonzeros whatever rows they belong to, so long and short rows cost the same per
//    nonzero; rows spanning chunks are completed by a second kernel from per-chunk
//    partial sums in a fixed order (deterministic). On the benchmark's power-law rows
//    (1 to 1000 per row) it was 2-5 % behind a warp per row, so it is not the default.
#pragma once
#include "core/tensor.hpp"

namespace rlx::cuda {

// What the device runs (spmv_choice) and tuning experiments (rlx-bench cuda --only sweep).
struct SpmvTuning {
  int kernel = 0;            // 0: spmv_choice()'s, 1: vector, 2: split, 3: slab (experiment)
  int lanes = 0;             // vector kernel: lanes per row (0: spmv_choice()'s)
  int unroll = 1;            // vector kernel: nonzeros per lane per trip (1 or 2)
  bool stream_hint = false;  // load the matrix evict-first (ld.global.cs), keeping x cached
  int carveout = -2;         // vector kernel: set its preferred shared-memory carveout to this
                             // % (-1: back to CUDA's default; -2: leave it as it is)
  // kernel 3, the slab experiment (spmv.cu; written after the last GPU run, not yet run on
  // a GPU, never chosen by the device): columns cut into slabs of slab_cols, swept slab by
  // slab so the x being gathered fits L1. Needs the columns of each row sorted; at most 64
  // slabs (else the vector kernel runs). slab_reuse: keep the slab offsets of the last
  // matrix with the same arrays (timing only: the structure must not have changed).
  long long slab_cols = 32768;
  bool slab_reuse = false;
};

// y = alpha * A x (+ beta * y0 when y0 is given). row_ptr/col_idx i32 or i64 (same dtype),
// values/x/y0/y f32 or f64 (same dtype); every input contiguous; y preallocated.
void spmv_csr_native(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, const Tensor& x,
                     const Tensor* y0, double alpha, double beta, Tensor& y, const SpmvTuning& tuning = {});
// The kernel and knobs the device uses for a matrix of this shape (from the mean row length).
SpmvTuning spmv_choice(int64_t rows, int64_t nnz);

}  // namespace rlx::cuda
