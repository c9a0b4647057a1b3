// The tiled layout of a CSR matrix: what the ops tile_csr (CSR -> the layout) and
// spmv_tiled (y = A x from it) write and read (declared in sparse.cpp; every device runs
// both). The solver-side API (building it, TiledOperator, the choice between it and CSR)
// is solvers/sparse/tiled.hpp.
//
// What it is for: f64 SpMV on a GPU. Tiles of `rb` rows by `panel` columns, so that the x
// gathers read a panel of x from shared memory instead of from L2: on the H200, CSR SpMV
// with scattered columns is bound by L2 tag requests, one per x gather, and no kernel
// reading the CSR arrays in their order can make fewer (power-law rows: 72 M of cuSPARSE's
// 85 M requests); with the panel in shared memory the L2 sees the matrix's lines and one
// copy of each panel per row block (docs/benchmarks.md; what it costs and where it pays:
// solvers/sparse/tiled.hpp).
//
// Layout: tiles numbered row block by row block, panels in order (tile = row block *
// panels + panel); inside a tile the nonzeros by row (columns in the CSR order), each
// stored as its value and one 32-bit word (row in the block << 16 | column in the panel).
// Each tile is cut, at row boundaries, into `warps` shares of about equal nonzeros, one per
// warp of the kernel's block (shares may be empty). share[tile * warps + w] is the first
// nonzero of share w of a tile; the last entry is nnz. The arrays as tensors: share i64
// [tiles * warps + 1], rc i32 (the words' bits) and values f64, both padded with zeros to
// an even length (a pair load may read one entry past the last nonzero).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace rlx::ir {

// rb and panel lie in [1, kTiledMaxExtent] (16-bit offsets in the words), warps in
// [1, kTiledMaxWarps] (the warps of one block).
constexpr int64_t kTiledMaxExtent = 65536;
constexpr int64_t kTiledMaxWarps = 32;

// The layout's attributes: rows per tile, columns per tile, shares per tile.
struct TiledShape {
  int rb = 0, panel = 0, warps = 32;
};

constexpr int64_t tiled_row_blocks(int64_t rows, int64_t rb) { return rows / rb + (rows % rb != 0); }
constexpr int64_t tiled_panels(int64_t cols, int64_t panel) {
  return std::max<int64_t>(1, cols / panel + (cols % panel != 0));
}
// The length of rc and values for nnz nonzeros (even).
constexpr int64_t tiled_padded(int64_t nnz) { return (nnz + 1) / 2 * 2; }

// The share count, row_blocks * panels * warps + 1, after checking the shape (InputError
// for rb, panel or warps out of range) and that the tiles stay within `most_tiles` (an
// InputError ending in `why` otherwise).
int64_t tiled_shares(int64_t rows, int64_t cols, int64_t rb, int64_t panel, int64_t warps, int64_t most_tiles,
                     const std::string& why = "");

// The GPU geometry a layout is shaped for when the device reports none (Device::Geometry
// zeros, e.g. a layout built on the cpu device): an H200's, 132 multiprocessors and
// 232448 bytes of shared memory per block (opted in).
constexpr int kTiledDefaultMultiprocessors = 132;
constexpr int64_t kTiledDefaultSharedBytes = 232448;

// The shape for a GPU of `multiprocessors` and `shared_bytes` of shared memory per block:
// multiprocessors / groups row blocks, so that the kernel's blocks (one per row block and
// column group, one per multiprocessor) fill the GPU once, and panels as wide as the rest of
// the shared memory allows (two, double-buffered). The device picks the column groups to
// match (row blocks x groups ~ multiprocessors). InputError for a geometry below one
// multiprocessor, one group or 64 bytes.
TiledShape tiled_shape(int64_t rows, int multiprocessors = kTiledDefaultMultiprocessors,
                       int64_t shared_bytes = kTiledDefaultSharedBytes, int groups = 4);

}  // namespace rlx::ir
