// An experiment (rlx-bench cuda --only sweep), not a path the device takes: f64 SpMV on a
// CSR matrix laid out again, once, in tiles of `rb` rows by `panel` columns, so that x
// gathers read a panel of x from shared memory instead of from L2.
//
// Why: on the H200, CSR SpMV with scattered columns is bound by L2 tag requests, one per x
// gather (power-law rows: 72 M of cuSPARSE's 85 M; docs/benchmarks.md), and no kernel
// reading the CSR arrays in their order can make fewer. With the panel in shared memory
// the L2 sees the matrix's lines and one coalesced copy of each panel per row block.
//
// Layout: tiles numbered row block by row block, panels in order; inside a tile the
// nonzeros by row (columns in the CSR order), each stored as its value and one 32-bit word
// (row in the block << 16 | column in the panel). Each tile is cut, at row boundaries, into
// `warps` shares of about equal nonzeros (one per warp of the kernel's block).
//
// Kernel (second design; the first, a block per tile with row pointers per tile and a
// partial sum per row and panel, measured 0.80–1.13 ms on power-law rows against
// cuSPARSE's 0.556 and is gone — docs/benchmarks.md): one block per row block and column
// group; the block keeps its rows' sums in shared memory and walks its panels in order,
// copying the next panel of x (cp.async) while it multiplies the current one. A warp
// reads its share in trips of 32 lanes, one or two nonzeros a lane (U trips' loads issued
// together), sums runs of equal rows by a segmented shuffle scan and adds each run to the
// row's sum. Every
// addition happens in an order fixed by the layout: the result is deterministic. With more
// than one column group, a second kernel adds the groups' sums in order.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"

namespace rlx::cuda {

// The layout, on the host.
struct TiledCsr {
  int64_t rows = 0, cols = 0, nnz = 0;
  int rb = 0, panel = 0, warps = 0;
  int64_t row_blocks = 0, panels = 0;
  std::vector<int64_t> share;  // [tiles * warps + 1]: first nonzero of each warp's share of each tile
  std::vector<uint32_t> rc;    // [nnz]: row in the block << 16 | column - first column of the panel
  std::vector<double> val;     // [nnz]
};

// Builds the layout from host CSR arrays (row_ptr/col_idx i32 or i64, values f64; columns
// in any order within a row). InputError for rb or panel outside 1..65536 (16-bit
// offsets), warps outside 1..32, other dtypes, bad row pointers or columns, or shares that
// would take more than 4 entries per nonzero (many panels and few nonzeros).
TiledCsr tile_csr(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, int64_t rows, int64_t cols,
                  int rb, int panel, int warps = 32);

// y = A x from the layout on the host, tile by tile in order (the device's lanes add in
// another order inside a share: agreement is to rounding): the reference for the layout
// and for the kernels.
void tiled_product_host(const TiledCsr& t, const double* x, double* y);

// The layout on the device and its kernel: blocks of t.warps warps, one per row block and
// column group (`groups` >= 1 contiguous ranges of panels), `per_lane` (1 or 2) nonzeros
// per lane in a trip of the warp, `unroll` (2 or 4) trips loaded together. run(): x and y
// f64 device tensors of cols and rows elements.
class TiledSpmv {
 public:
  explicit TiledSpmv(const TiledCsr& t, int groups = 1, int unroll = 4, int per_lane = 2);
  void run(const Tensor& x, Tensor& y) const;
  // Bytes of shared memory a block takes: the row sums and two panels of x.
  static size_t shared_bytes(int rb, int panel);

 private:
  int64_t rows_, cols_, row_blocks_, panels_;
  int rb_, panel_, warps_, groups_, unroll_, per_lane_;
  Tensor share_, rc_, val_, partial_;
};

}  // namespace rlx::cuda
