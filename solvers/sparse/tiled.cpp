// The tiled layout of a CSR matrix (tiled.hpp): building it, its host product, its shape
// for a GPU, and the operator that emits spmv_tiled.
#include "solvers/sparse/tiled.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace rlx::sparse {

TiledCsr tile_csr(const Tensor& row_ptr_in, const Tensor& col_idx_in, const Tensor& values_in, int64_t rows,
                  int64_t cols, int rb, int panel, int warps) {
  if (rb < 1 || rb > 65536) throw InputError("tile_csr: rows per tile " + std::to_string(rb) + " (1 to 65536)");
  if (panel < 1 || panel > 65536)
    throw InputError("tile_csr: columns per panel " + std::to_string(panel) + " (1 to 65536: 16-bit offsets)");
  if (warps < 1 || warps > 32) throw InputError("tile_csr: warps per block " + std::to_string(warps) + " (1 to 32)");
  // (Device-resident or strided arrays are read from contiguous host copies.)
  const Tensor row_ptr = host_contiguous(row_ptr_in), col_idx = host_contiguous(col_idx_in),
               values = host_contiguous(values_in);
  const DType it = row_ptr.dtype();
  if ((it != DType::I32 && it != DType::I64) || col_idx.dtype() != it || values.dtype() != DType::F64)
    throw InputError("tile_csr: row_ptr/col_idx i32 or i64 (the same) and f64 values");
  if (rows < 0 || cols < 0 || row_ptr.numel() != rows + 1)
    throw InputError("tile_csr: row_ptr has " + std::to_string(row_ptr.numel()) + " entries for " +
                     std::to_string(rows) + " rows");
  TiledCsr t;
  t.rows = rows, t.cols = cols, t.rb = rb, t.panel = panel, t.warps = warps;
  if (index_at(row_ptr, 0) != 0) throw InputError("tile_csr: row_ptr starts at " + std::to_string(index_at(row_ptr, 0)) + ", not 0");
  t.nnz = index_at(row_ptr, rows);
  if (t.nnz != col_idx.numel() || t.nnz != values.numel())
    throw InputError("tile_csr: row_ptr ends at " + std::to_string(t.nnz) + " for " +
                     std::to_string(col_idx.numel()) + " columns and " + std::to_string(values.numel()) + " values");
  t.row_blocks = rows / rb + (rows % rb != 0);
  t.panels = std::max<int64_t>(1, cols / panel + (cols % panel != 0));
  // A share start per warp and tile: refuse layouts where they outweigh the matrix (many
  // panels, few nonzeros), before allocating them (and before multiplying: no overflow).
  const int64_t limit = 4 * std::max<int64_t>(t.nnz, 1) + 1024;
  if (t.row_blocks > 0 && t.panels > limit / warps / t.row_blocks)
    throw InputError("tile_csr: " + std::to_string(t.row_blocks) + " x " + std::to_string(t.panels) + " tiles x " +
                     std::to_string(warps) +
                     " shares for " + std::to_string(t.nnz) +
                     " nonzeros (more than 4 per nonzero): rows too short for panels of " + std::to_string(panel) +
                     " columns");
  const int64_t tiles = t.row_blocks * t.panels;
  const double* v = values.data<double>();
  // Both passes run row blocks in parallel: a row block's tiles, entries and shares are its
  // own. On an error each thread stops at its first; the lowest row block's is thrown, as a
  // sequential pass would.
  const int64_t threads = t.nnz < (int64_t(1) << 20)
                              ? 1
                              : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(t.row_blocks, 1));
  auto by_blocks = [&](const std::function<void(int64_t, int64_t)>& f) {
    const int64_t per = (t.row_blocks + threads - 1) / std::max<int64_t>(threads, 1);
    std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    for (int64_t i = 0; i < threads; ++i) {
      const int64_t b0 = i * per, b1 = std::min(t.row_blocks, b0 + per);
      if (b0 >= b1) break;
      auto work = [&, i, b0, b1] {
        try {
          f(b0, b1);
        } catch (...) {
          errors[size_t(i)] = std::current_exception();
        }
      };
      if (threads == 1) work(); else pool.emplace_back(work);
    }
    for (std::thread& th : pool) th.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  };
  // Pass 1: nonzeros per tile (tile_start[i + 1]), then their running sum.
  std::vector<int64_t> tile_start(size_t(tiles) + 1, 0);
  by_blocks([&](int64_t b0, int64_t b1) {
    for (int64_t r = b0 * rb; r < std::min(rows, b1 * rb); ++r) {
      const int64_t b = r / rb, k0 = index_at(row_ptr, r), k1 = index_at(row_ptr, r + 1);
      if (k0 < 0 || k1 < k0 || k1 > t.nnz)
        throw InputError("tile_csr: row_ptr not ascending (or past nnz) at row " + std::to_string(r));
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t c = index_at(col_idx, k);
        if (c < 0 || c >= cols)
          throw InputError("tile_csr: column " + std::to_string(c) + " of row " + std::to_string(r) + " outside [0, " +
                           std::to_string(cols) + ")");
        ++tile_start[size_t(b * t.panels + c / panel) + 1];
      }
    }
  });
  for (int64_t i = 0; i < tiles; ++i) tile_start[size_t(i) + 1] += tile_start[size_t(i)];
  // Pass 2: the entries, and each tile's shares. Share w of a tile of m nonzeros starts at
  // the first row start at or past m * w / warps (so a row never spans two warps); row
  // starts are seen as each row's first entry in a panel is placed, the rest resolve to
  // the tile's end.
  const int64_t padded = (t.nnz + 1) / 2 * 2;  // a pair load may read one entry past the last
  t.share_tensor = Tensor::zeros(DType::I64, {tiles * warps + 1});
  t.rc_tensor = Tensor::empty(DType::I32, {padded});
  t.val_tensor = Tensor::empty(DType::F64, {padded});
  t.share = {t.share_tensor.data<int64_t>(), size_t(tiles * warps + 1)};
  t.rc = {reinterpret_cast<uint32_t*>(t.rc_tensor.data<int32_t>()), size_t(t.nnz)};
  t.val = {t.val_tensor.data<double>(), size_t(t.nnz)};
  if (padded > t.nnz) t.rc_tensor.data<int32_t>()[t.nnz] = 0, t.val_tensor.data<double>()[t.nnz] = 0;
  t.share.back() = t.nnz;
  by_blocks([&](int64_t b0, int64_t b1) {
    std::vector<int64_t> cursor(size_t(t.panels)), last_row(size_t(t.panels));
    std::vector<int> next_share(size_t(t.panels));
    auto resolve = [&](int64_t tile, int64_t p, int64_t upto) {  // shares whose target is <= upto start there
      const int64_t m = tile_start[size_t(tile) + 1] - tile_start[size_t(tile)];
      int& w = next_share[size_t(p)];
      while (w < warps && m * w / warps <= upto) t.share[size_t(tile * warps + w++)] = tile_start[size_t(tile)] + upto;
    };
    for (int64_t b = b0; b < b1; ++b) {
      std::fill(cursor.begin(), cursor.end(), 0);
      std::fill(last_row.begin(), last_row.end(), -1);
      std::fill(next_share.begin(), next_share.end(), 0);
      const int64_t rlast = std::min(rows, (b + 1) * rb);
      for (int64_t r = b * rb; r < rlast; ++r)
        for (int64_t k = index_at(row_ptr, r); k < index_at(row_ptr, r + 1); ++k) {
          const int64_t c = index_at(col_idx, k), p = c / panel, tile = b * t.panels + p;
          if (last_row[size_t(p)] != r) resolve(tile, p, cursor[size_t(p)]), last_row[size_t(p)] = r;
          const int64_t pos = tile_start[size_t(tile)] + cursor[size_t(p)]++;
          t.rc[size_t(pos)] = uint32_t(r - b * rb) << 16 | uint32_t(c - p * panel);
          t.val[size_t(pos)] = v[k];
        }
      for (int64_t p = 0; p < t.panels; ++p) resolve(b * t.panels + p, p, cursor[size_t(p)]);
    }
  });
  return t;
}

void tiled_product_host(const TiledCsr& t, const double* x, double* y) {
  std::fill(y, y + t.rows, 0.0);
  const int64_t tiles = t.row_blocks * t.panels;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t b = tile / t.panels, p = tile % t.panels;
    const int64_t k1 = tile + 1 < tiles ? t.share[size_t((tile + 1) * t.warps)] : t.nnz;
    for (int64_t k = t.share[size_t(tile * t.warps)]; k < k1; ++k) {
      const uint32_t q = t.rc[size_t(k)];
      y[b * t.rb + (q >> 16)] += t.val[size_t(k)] * x[p * t.panel + (q & 0xffff)];
    }
  }
}

TiledShape tiled_shape(int64_t rows, int multiprocessors, int64_t shared_bytes, int groups) {
  if (multiprocessors < 1 || groups < 1 || shared_bytes < 64)
    throw InputError("tiled_shape: " + std::to_string(multiprocessors) + " multiprocessors, " + std::to_string(groups) +
                     " column groups, " + std::to_string(shared_bytes) + " bytes of shared memory");
  // sm / groups row blocks (one block of the kernel per multiprocessor), unless the row
  // sums would leave panels of fewer than 4096 columns; the panels take the rest (two).
  const int64_t words = shared_bytes / 8;
  const int64_t blocks = std::max(1, multiprocessors / groups);
  const int64_t most = std::clamp<int64_t>(words - 2 * 4096, 2, 65536);
  const int64_t rb = std::clamp<int64_t>((std::max<int64_t>(rows, 1) + blocks - 1) / blocks, 2, most);
  TiledShape s;
  // Rounded up to even (rounding down could leave one more row block than multiprocessors
  // per group), within the limit rounded down to even.
  s.rb = int(std::min((rb + 1) / 2 * 2, most / 2 * 2));
  s.panel = int(std::clamp<int64_t>((words - s.rb) / 2 / 2 * 2, 2, 65536));
  s.warps = 32;
  return s;
}

std::vector<Tensor> tiled_tensors(const TiledCsr& t) { return {t.share_tensor, t.rc_tensor, t.val_tensor}; }

Var spmv_tiled(const std::vector<Var>& arrays, const TiledCsr& t, const Var& x, SrcLoc loc) {
  if (arrays.size() != 3) throw InputError("spmv_tiled: the layout is three arrays (share, rc, values)");
  return rlx::op("spmv_tiled", {arrays[0], arrays[1], arrays[2], x},
                 {{"rows", t.rows}, {"cols", t.cols}, {"rb", int64_t(t.rb)}, {"panel", int64_t(t.panel)},
                  {"warps", int64_t(t.warps)}},
                 loc);
}

TiledOperator::TiledOperator(const CsrOperator& A, TiledShape shape) : diagonal_(A.diagonal()) {
  if (A.dtype() != DType::F64) throw InputError(std::string("tiled layout: f64 matrices only, not ") + dtype_name(A.dtype()));
  const auto t0 = std::chrono::steady_clock::now();
  layout_ = tile_csr(A.row_ptr(), A.col_idx(), A.values(), A.rows(), A.cols(), shape.rb, shape.panel, shape.warps);
  arrays_ = tiled_tensors(layout_);
  build_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The arrays live on in arrays_ (bound to graphs, moved to devices); keep the shape.
  layout_.share_tensor = layout_.rc_tensor = layout_.val_tensor = Tensor();
  layout_.share = {}, layout_.rc = {}, layout_.val = {};
}

Var TiledOperator::apply(BoundGraph& g, const Var& x) const {
  auto& v = g.bound_by[this];
  if (v.empty()) v = {g.bind("A.share", arrays_[0]), g.bind("A.rc", arrays_[1]), g.bind("A.values", arrays_[2])};
  return spmv_tiled(v, layout_, x);
}

std::string TiledOperator::describe() const {
  return "tiled csr " + std::to_string(rows()) + "x" + std::to_string(cols()) + " nnz=" + std::to_string(layout_.nnz) +
         " f64, " + std::to_string(layout_.rb) + " rows x " + std::to_string(layout_.panel) + " columns per tile, " +
         std::to_string(layout_.row_blocks * layout_.panels) + " tiles";
}

}  // namespace rlx::sparse
