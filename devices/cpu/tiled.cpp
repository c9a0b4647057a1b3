// The tiled SpMV layout on the cpu device (ir/ops/tiled_layout.hpp): spmv_tiled, the
// product on the layout, and tile_csr, which builds it from CSR.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/sparse.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cpu {

// spmv_tiled (ir/ops/tiled_layout.hpp): row blocks in parallel (a row block's tiles touch
// only its rows), each row's products summed in double over the tiles in order. The
// layout is trusted, as CSR structure is (the oracle checks it); shares are read as
// tile bounds only.
void run_spmv_tiled(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  const int64_t rows = n.attrs.get_int("rows"), cols = n.attrs.get_int("cols"), rb = n.attrs.get_int("rb"),
                panel = n.attrs.get_int("panel"), warps = n.attrs.get_int("warps");
  const double alpha = n.attrs.get_float("alpha"), beta = n.attrs.get_float("beta");
  const int64_t panels = std::max<int64_t>(1, (cols + panel - 1) / panel), row_blocks = (rows + rb - 1) / rb;
  const int64_t* share = in[0].data<int64_t>();
  const uint32_t* rc = reinterpret_cast<const uint32_t*>(in[1].data<int32_t>());
  const double *v = in[2].data<double>(), *x = in[3].data<double>();
  const double* y0 = in.size() == 5 ? in[4].data<double>() : nullptr;
  double* y = out[0].data<double>();
  const int64_t grain = std::max<int64_t>(1, row_blocks / 64);
  parallel_for(row_blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<double> acc(static_cast<size_t>(rb));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * rb, nr = std::min(rb, rows - r0);
      std::fill(acc.begin(), acc.begin() + nr, 0.0);
      for (int64_t p = 0; p < panels; ++p) {
        const double* xp = x + p * panel;
        const int64_t t = b * panels + p;
        for (int64_t k = share[t * warps]; k < share[(t + 1) * warps]; ++k)
          acc[rc[k] >> 16] += v[k] * xp[rc[k] & 0xffff];
      }
      for (int64_t i = 0; i < nr; ++i) y[r0 + i] = y0 ? alpha * acc[size_t(i)] + beta * y0[r0 + i] : alpha * acc[size_t(i)];
    }
  });
}

namespace {

// tile_csr (ir/ops/tiled_layout.hpp): two passes, row blocks in parallel (a row block's
// tiles, entries and shares are its own): nonzeros per tile, then the entries and each
// tile's shares. Share w of a tile of m nonzeros starts at the first row start at or past
// m * w / warps (so a row never spans two warps); row starts are seen as each row's first
// entry in a panel is placed, the rest resolve to the tile's end. On bad structure each
// thread stops at its first error; the lowest row block's is thrown, as a sequential pass
// would.
template <class I>
void tile_csr_typed(const ir::Node& n, const std::vector<Tensor>& in, std::span<Tensor> out) {
  const int64_t rows = in[0].numel() - 1, nnz = in[1].numel(), cols = n.attrs.get_int("cols"),
                rb = n.attrs.get_int("rb"), panel = n.attrs.get_int("panel"), warps = n.attrs.get_int("warps");
  const I* row_ptr = in[0].data<I>();
  const I* col_idx = in[1].data<I>();
  const double* v = in[2].data<double>();
  if (row_ptr[0] != 0) throw InputError("tile_csr: row_ptr starts at " + std::to_string(row_ptr[0]) + ", not 0");
  if (row_ptr[rows] != nnz)
    throw InputError("tile_csr: row_ptr ends at " + std::to_string(row_ptr[rows]) + " for " + std::to_string(nnz) +
                     " nonzeros");
  const int64_t row_blocks = (rows + rb - 1) / rb, panels = std::max<int64_t>(1, (cols + panel - 1) / panel);
  const int64_t tiles = row_blocks * panels;
  const int nt = nnz < (int64_t(1) << 20) ? 1 : int(std::clamp<int64_t>(num_threads(), 1, std::max<int64_t>(row_blocks, 1)));
  auto by_blocks = [&](const std::function<void(int64_t, int64_t)>& f) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(nt));
    ThreadPool::instance().run(nt, [&](int t, int nts) {
      const int64_t per = (row_blocks + nts - 1) / nts, b0 = t * per, b1 = std::min(row_blocks, b0 + per);
      try {
        if (b0 < b1) f(b0, b1);
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
      }
    });
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  };
  // Pass 1: nonzeros per tile (tile_start[i + 1]), then their running sum.
  std::vector<int64_t> tile_start(size_t(tiles) + 1, 0);
  by_blocks([&](int64_t b0, int64_t b1) {
    for (int64_t r = b0 * rb; r < std::min(rows, b1 * rb); ++r) {
      const int64_t b = r / rb, k0 = row_ptr[r], k1 = row_ptr[r + 1];
      if (k0 < 0 || k1 < k0 || k1 > nnz)
        throw InputError("tile_csr: row_ptr not ascending (or past nnz) at row " + std::to_string(r));
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t c = col_idx[k];
        if (c < 0 || c >= cols)
          throw InputError("tile_csr: column " + std::to_string(c) + " of row " + std::to_string(r) + " outside [0, " +
                           std::to_string(cols) + ")");
        ++tile_start[size_t(b * panels + c / panel) + 1];
      }
    }
  });
  for (int64_t i = 0; i < tiles; ++i) tile_start[size_t(i) + 1] += tile_start[size_t(i)];
  // Pass 2: the entries, and each tile's shares.
  int64_t* share = out[0].data<int64_t>();
  uint32_t* rc = reinterpret_cast<uint32_t*>(out[1].data<int32_t>());
  double* val = out[2].data<double>();
  for (int64_t k = nnz; k < out[1].numel(); ++k) rc[k] = 0, val[k] = 0;
  share[tiles * warps] = nnz;
  by_blocks([&](int64_t b0, int64_t b1) {
    std::vector<int64_t> cursor(static_cast<size_t>(panels)), last_row(static_cast<size_t>(panels));
    std::vector<int> next_share(static_cast<size_t>(panels));
    auto resolve = [&](int64_t tile, int64_t p, int64_t upto) {  // shares whose target is <= upto start there
      const int64_t m = tile_start[size_t(tile) + 1] - tile_start[size_t(tile)];
      int& w = next_share[size_t(p)];
      while (w < warps && m * w / warps <= upto) share[tile * warps + w++] = tile_start[size_t(tile)] + upto;
    };
    for (int64_t b = b0; b < b1; ++b) {
      std::fill(cursor.begin(), cursor.end(), 0);
      std::fill(last_row.begin(), last_row.end(), -1);
      std::fill(next_share.begin(), next_share.end(), 0);
      for (int64_t r = b * rb; r < std::min(rows, (b + 1) * rb); ++r)
        for (int64_t k = row_ptr[r]; k < row_ptr[r + 1]; ++k) {
          const int64_t c = col_idx[k], p = c / panel, tile = b * panels + p;
          if (last_row[size_t(p)] != r) resolve(tile, p, cursor[size_t(p)]), last_row[size_t(p)] = r;
          const int64_t pos = tile_start[size_t(tile)] + cursor[size_t(p)]++;
          rc[pos] = uint32_t(r - b * rb) << 16 | uint32_t(c - p * panel);
          val[pos] = v[k];
        }
      for (int64_t p = 0; p < panels; ++p) resolve(b * panels + p, p, cursor[size_t(p)]);
    }
  });
}

}  // namespace

void run_tile_csr(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out) {
  std::vector<Tensor> in = contiguous_inputs(in0);
  if (in[0].dtype() == DType::I32) tile_csr_typed<int32_t>(n, in, out);
  else tile_csr_typed<int64_t>(n, in, out);
}

Capability tile_csr_supported(const ir::Node& n, const ir::Graph& g) {
  const DType index = g.type(n.inputs.at(0)).dtype;
  if (index != DType::I32 && index != DType::I64) return Capability::no("tile_csr on cpu: i32 or i64 indices");
  return Capability::yes();
}

Capability tiled_supported(const ir::Node& n, const ir::Graph& g) {
  if (g.type(n.inputs.at(2)).dtype != DType::F64) return Capability::no("spmv_tiled on cpu: f64 only");
  return Capability::yes();
}

}  // namespace rlx::cpu
