// The cuda device's own CSR SpMV (spmv.cu), used for f32/f64 values instead of cuSPARSE.
// Three kernels, all accumulating in double and rounding once on store; spmv_choice()
// picks one and its knobs from the mean row length:
//  - vector (rows of fewer than 64 nonzeros on average): a group of L lanes per row (1 to
//    32), coalesced loads of each row's values and columns, x through the read-only cache,
//    a shuffle reduction inside the group; rows of 12 or more nonzeros on average one
//    group per row (no grid cap);
//  - packed: a warp per R consecutive rows, their nonzeros read in trips of 32 aligned
//    nonzeros whatever rows they belong to (short rows share lines), summed per row by a
//    segmented shuffle reduction, optionally with the columns loaded a trip before
//    their x gathers. Long rows (64 or more on average) run it with R = 1 and the
//    pipeline one trip deep;
//  - split (a knob, for rows of very uneven length): each warp takes 256 consecutive
//    nonzeros whatever rows they belong to, so long and short rows cost the same per
//    nonzero; rows spanning chunks are completed by a second kernel from per-chunk
//    partial sums in a fixed order (deterministic). On the benchmark's power-law rows
//    (1 to 1000 per row) it was 5-10 % behind the vector kernel, so it is not the default.
#pragma once
#include "core/tensor.hpp"

namespace rlx::cuda {

// What the device runs (spmv_choice) and tuning experiments (rlx-bench cuda --only sweep).
struct SpmvTuning {
  int kernel = 0;            // 0: spmv_choice()'s, 1: vector, 2: split, 3: packed
  int lanes = 0;             // vector kernel: lanes per row (0: spmv_choice()'s)
  int unroll = 1;            // vector kernel: nonzeros per lane per trip (1 or 2)
  bool stream_hint = false;  // load the matrix evict-first (ld.global.cs), keeping x cached
  int carveout = -2;         // vector kernel: set its preferred shared-memory carveout to this
                             // % (-1: back to CUDA's default; -2: leave it as it is)
  // Experiments (rlx-bench cuda --only sweep), vector kernel: x loaded with an L2
  // evict-last policy (f64 only), the grid cap in blocks per multiprocessor (0: one group
  // per row, no cap) and threads per block (64, 128 or 256).
  bool x_evict_last = false;
  int blocks_per_sm = 64;
  int threads = 256;
  bool aligned = false;  // vector kernel: each row's trips start at a multiple of the lanes
  bool persist_x = false;  // vector kernel: x in a persisting L2 access-policy window on the
                           // stream (persist_in_l2), left open: reset_l2_persistence() ends it
  int rows_per_warp = 8;   // packed kernel: consecutive rows per warp (1 to 31); it also
                           // takes threads (128 or 256) and
  bool pipeline = false;   // packed kernel: columns loaded a trip before their x gathers
};

// y = alpha * A x (+ beta * y0 when y0 is given). row_ptr/col_idx i32 or i64 (same dtype),
// values/x/y0/y f32 or f64 (same dtype); every input contiguous; y preallocated.
void spmv_csr_native(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, const Tensor& x,
                     const Tensor* y0, double alpha, double beta, Tensor& y, const SpmvTuning& tuning = {});
// The kernel and knobs the device uses for a matrix of this shape (from the mean row length).
SpmvTuning spmv_choice(int64_t rows, int64_t nnz);

// The persist_x experiment: later kernels on the device's stream keep [base, base + bytes)
// (as much as the device allows) in a persisting part of L2, until reset_l2_persistence()
// closes the window, waits for the stream and releases the lines and the set-aside. A
// second call for the same range does nothing; neither may run while a graph is recorded.
void persist_in_l2(const void* base, size_t bytes);
void reset_l2_persistence();

}  // namespace rlx::cuda
