// spmv_tiled on the cuda device: f64 SpMV on the tiled layout of a CSR matrix
// (ir/ops/tiled_layout.hpp describes the layout and why it exists).
//
// Kernel: one block of `warps` warps per row block and column group; the block keeps its
// rows' sums in shared memory and walks its panels in order, copying the next panel of x
// (cp.async) while it multiplies the current one. A warp reads its share in trips of 32
// lanes, one or two nonzeros a lane (U trips' loads issued together), sums runs of equal
// rows by a segmented shuffle scan and adds each run to the row's sum. Every addition
// happens in an order fixed by the layout and the launch: the result is deterministic.
// With more than one column group, a second kernel adds the groups' sums in order (and
// applies alpha, beta).
//
// Measured on the H200 (docs/benchmarks.md): a first design (a block per tile, row
// pointers per tile, a partial sum per row and panel) 0.80-1.13 ms on power-law rows
// against cuSPARSE's 0.556 (latency-bound: 47 % active warps, 22 % of the L2's tag rate);
// this one 0.311-0.316 ms against 0.555-0.565 (two nonzeros per lane, U = 2, the shape of
// sparse::tiled_shape). Pair loads need rc and values 8- and 16-byte aligned; views that
// are not run one nonzero per lane.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace rlx::cuda {

struct TiledArgs {
  int64_t rows = 0, cols = 0;
  int rb = 0, panel = 0, warps = 0;
};

// Bytes of shared memory a block takes: the row sums and two panels of x.
size_t tiled_shared_bytes(int rb, int panel);

// Why this GPU cannot run the layout (shared memory, warps), or "" when it can.
std::string tiled_refusal(const TiledArgs& a);

// y = alpha A x (+ beta y0 when y0 is given): share i64, rc i32 (padded to even), values
// f64 (padded), x, y0 and y f64 device tensors (contiguous). groups: column groups (0: as
// many as fill the GPU once with the row blocks); per_lane 1 or 2; unroll 2 or 4;
// skip_empty: panels without nonzeros in a row block are neither copied nor visited (for
// short, banded rows; measured: Poisson 3.60 -> 1.12 ms, still 8x CSR's time, and 5 %
// slower on power-law rows: not the default). InputError for tensors that do not match the layout or a
// shape this GPU cannot run.
void spmv_tiled_native(const Tensor& share, const Tensor& rc, const Tensor& values, const Tensor& x, const Tensor* y0,
                       double alpha, double beta, Tensor& y, const TiledArgs& a, int groups = 0, int unroll = 2,
                       int per_lane = 2, bool skip_empty = false);

// The tiled layout of a CSR matrix built on the GPU (tile_csr.cu): share i64, rc i32 and
// val f64 (padded) device tensors of the op's shapes, the same arrays as the cpu device
// builds. Reads a few checks back to the host (so not while recording); InputError for
// bad structure, named as the cpu device names it.
void tile_csr_native(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, int64_t cols, int rb,
                     int panel, int warps, Tensor& share, Tensor& rc, Tensor& val);
// Why this device cannot build a layout of nnz nonzeros in `tiles` tiles, or "".
std::string tile_csr_refusal(int64_t nnz, int64_t tiles);

}  // namespace rlx::cuda
