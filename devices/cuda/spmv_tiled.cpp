// The tiled SpMV experiment's host side: building the layout and the reference product
// (spmv_tiled.hpp). The kernels are in spmv_tiled.cu.
#include "devices/cuda/spmv_tiled.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace rlx::cuda {

TiledCsr tile_csr(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, int64_t rows, int64_t cols,
                  int rb, int panel) {
  if (rb < 1) throw InputError("tile_csr: rows per tile " + std::to_string(rb) + " (1 or more)");
  if (panel < 1 || panel > 65536)
    throw InputError("tile_csr: columns per panel " + std::to_string(panel) + " (1 to 65536: 16-bit offsets)");
  const DType it = row_ptr.dtype();
  if ((it != DType::I32 && it != DType::I64) || col_idx.dtype() != it || values.dtype() != DType::F64)
    throw InputError("tile_csr: row_ptr/col_idx i32 or i64 (the same) and f64 values");
  if (rows < 0 || cols < 0 || row_ptr.numel() != rows + 1)
    throw InputError("tile_csr: row_ptr has " + std::to_string(row_ptr.numel()) + " entries for " +
                     std::to_string(rows) + " rows");
  auto at = [&](const Tensor& t, int64_t i) {
    return it == DType::I32 ? int64_t(t.data<int32_t>()[i]) : t.data<int64_t>()[i];
  };
  TiledCsr t;
  t.rows = rows, t.cols = cols, t.rb = rb, t.panel = panel;
  if (at(row_ptr, 0) != 0) throw InputError("tile_csr: row_ptr starts at " + std::to_string(at(row_ptr, 0)) + ", not 0");
  t.nnz = at(row_ptr, rows);
  if (t.nnz != col_idx.numel() || t.nnz != values.numel())
    throw InputError("tile_csr: row_ptr ends at " + std::to_string(t.nnz) + " for " +
                     std::to_string(col_idx.numel()) + " columns and " + std::to_string(values.numel()) + " values");
  t.row_blocks = (rows + rb - 1) / rb;
  t.panels = std::max<int64_t>(1, (cols + panel - 1) / panel);
  const int64_t tiles = t.row_blocks * t.panels;
  // Row pointers are stored for every row of every tile: refuse layouts where they
  // outweigh the matrix (rows with few nonzeros per panel), before allocating them.
  const int64_t limit = 4 * std::max<int64_t>(t.nnz, 1) + 1024;
  if (tiles > limit / (int64_t(rb) + 1))
    throw InputError("tile_csr: " + std::to_string(tiles) + " tiles x " + std::to_string(int64_t(rb) + 1) +
                     " row pointers for " + std::to_string(t.nnz) +
                     " nonzeros (more than 4 per nonzero): rows too short for panels of " + std::to_string(panel) +
                     " columns, or too many rows per tile");
  const double* v = values.data<double>();
  // Pass 1: nonzeros per tile.
  t.tile_start.assign(size_t(tiles) + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / rb, k0 = at(row_ptr, r), k1 = at(row_ptr, r + 1);
    if (k0 < 0 || k1 < k0 || k1 > t.nnz) throw InputError("tile_csr: row_ptr not ascending at row " + std::to_string(r));
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t c = at(col_idx, k);
      if (c < 0 || c >= cols)
        throw InputError("tile_csr: column " + std::to_string(c) + " of row " + std::to_string(r) + " outside [0, " +
                         std::to_string(cols) + ")");
      ++t.tile_start[size_t(b * t.panels + c / panel) + 1];
    }
  }
  for (int64_t i = 0; i < tiles; ++i) {
    // (The kernel's offsets inside a tile are 32-bit and step up to 8 past the end.)
    if (t.tile_start[size_t(i) + 1] > INT32_MAX - 8)
      throw InputError("tile_csr: a tile of " + std::to_string(t.tile_start[size_t(i) + 1]) +
                       " nonzeros (at most 2^31 - 9; use fewer rows per tile)");
    t.tile_start[size_t(i) + 1] += t.tile_start[size_t(i)];
  }
  // Pass 2: entries and each tile's row pointers (one cursor per panel of the row block).
  t.tile_rows.assign(size_t(tiles) * (size_t(rb) + 1), 0);
  t.col.resize(size_t(t.nnz));
  t.val.resize(size_t(t.nnz));
  std::vector<int32_t> cursor(size_t(t.panels));
  for (int64_t b = 0; b < t.row_blocks; ++b) {
    std::fill(cursor.begin(), cursor.end(), 0);
    const int64_t rlast = std::min(rows, (b + 1) * rb);
    for (int64_t r = b * rb; r < rlast; ++r) {
      for (int64_t k = at(row_ptr, r); k < at(row_ptr, r + 1); ++k) {
        const int64_t c = at(col_idx, k), p = c / panel, tile = b * t.panels + p;
        const int64_t pos = t.tile_start[size_t(tile)] + cursor[size_t(p)]++;
        t.col[size_t(pos)] = uint16_t(c - p * panel);
        t.val[size_t(pos)] = v[k];
      }
      const int64_t li = r - b * rb;
      for (int64_t p = 0; p < t.panels; ++p)
        t.tile_rows[size_t((b * t.panels + p) * (int64_t(rb) + 1) + li + 1)] = cursor[size_t(p)];
    }
    // Rows past the end of the last block: empty (their pointers repeat the tile's end).
    for (int64_t li = rlast - b * rb; li < rb; ++li)
      for (int64_t p = 0; p < t.panels; ++p)
        t.tile_rows[size_t((b * t.panels + p) * (int64_t(rb) + 1) + li + 1)] = cursor[size_t(p)];
  }
  return t;
}

void tiled_product_host(const TiledCsr& t, const double* x, double* y) {
  std::vector<double> partial(size_t(t.panels) * size_t(t.rows), 0.0);
  for (int64_t b = 0; b < t.row_blocks; ++b)
    for (int64_t p = 0; p < t.panels; ++p) {
      const int64_t tile = b * t.panels + p, base = t.tile_start[size_t(tile)];
      const int32_t* lr = t.tile_rows.data() + tile * (int64_t(t.rb) + 1);
      const int64_t r0 = b * t.rb, n = std::min<int64_t>(t.rb, t.rows - r0);
      for (int64_t i = 0; i < n; ++i) {
        double s = 0;
        for (int64_t k = base + lr[i]; k < base + lr[i + 1]; ++k)
          s += t.val[size_t(k)] * x[p * t.panel + t.col[size_t(k)]];
        partial[size_t(p * t.rows + r0 + i)] = s;
      }
    }
  for (int64_t r = 0; r < t.rows; ++r) {
    double s = 0;
    for (int64_t p = 0; p < t.panels; ++p) s += partial[size_t(p * t.rows + r)];
    y[r] = s;
  }
}

}  // namespace rlx::cuda
