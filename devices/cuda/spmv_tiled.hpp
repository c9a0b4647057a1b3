// An experiment (rlx-bench cuda --only sweep), not a path the device takes: f64 SpMV on a
// CSR matrix laid out again, once, in tiles of `rb` rows by `panel` columns, so that a
// tile's x gathers read its panel of x from shared memory instead of from L2.
//
// Why: on the H200, CSR SpMV with scattered columns is bound by L2 tag requests, one per x
// gather (power-law rows: 72 M of cuSPARSE's 85 M; docs/benchmarks.md), and no kernel
// reading the CSR arrays in their order can make fewer. With the panel in shared memory
// the L2 sees the matrix's lines, one coalesced copy of each panel per tile and the
// partial sums. What it costs: the layout is built on the host (a second copy of the
// matrix, columns as 16-bit offsets in the panel), each tile writes a partial sum for every
// row of its block (panels x rows doubles, summed in panel order by a second kernel:
// deterministic), and row pointers per tile (panels x rows), so it pays only where rows
// have many nonzeros per panel (mean row length well above cols / panel).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"

namespace rlx::cuda {

// The layout, on the host. Tiles are numbered row block by row block, panels in order.
struct TiledCsr {
  int64_t rows = 0, cols = 0, nnz = 0;
  int rb = 0, panel = 0;
  int64_t row_blocks = 0, panels = 0;
  std::vector<int64_t> tile_start;  // [tiles + 1]: first nonzero of each tile
  std::vector<int32_t> tile_rows;   // [tiles * (rb + 1)]: each tile's row pointers, from its start
  std::vector<uint16_t> col;        // [nnz]: column - first column of the panel
  std::vector<double> val;          // [nnz]
};

// Builds the layout from host CSR arrays (row_ptr/col_idx i32 or i64, values f64; columns
// in any order within a row). InputError for rb < 1, panel outside 1..65536, other
// dtypes, or row pointers that would take more than 4 entries per nonzero (panels x rows).
TiledCsr tile_csr(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, int64_t rows, int64_t cols,
                  int rb, int panel);

// y = A x from the layout on the host, per tile and then over the panels in order, as the
// device sums (inside a tile row the device's lanes add in another order: agreement is to
// rounding): the reference for the layout and for the kernels.
void tiled_product_host(const TiledCsr& t, const double* x, double* y);

// The layout on the device and its two kernels (tile products into partial sums, then the
// sum over panels), `lanes` (4, 8 or 16) per row of a tile. run(): x and y f64 device
// tensors of cols and rows elements.
class TiledSpmv {
 public:
  explicit TiledSpmv(const TiledCsr& t, int lanes = 8);
  void run(const Tensor& x, Tensor& y) const;

 private:
  int64_t rows_, cols_, row_blocks_, panels_;
  int rb_, panel_, lanes_;
  Tensor tile_start_, tile_rows_, col_, val_, partial_;
};

}  // namespace rlx::cuda
