// The tiled layout of a CSR matrix (tiled.hpp): building it, its host product and the
// operator that emits spmv_tiled.
#include "solvers/sparse/tiled.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

namespace rlx::sparse {

TiledCsr tile_csr(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, int64_t rows, int64_t cols,
                  int rb, int panel, int warps, Device* device) {
  if (rows < 0 || cols < 0 || row_ptr.rank() != 1 || row_ptr.numel() != rows + 1)
    throw InputError("tile_csr: row_ptr has " + std::to_string(row_ptr.numel()) + " entries for " +
                     std::to_string(rows) + " rows");
  // (The op checks the rest: dtypes, shape limits, then the structure while it builds.)
  Device& d = device ? *device : DeviceRegistry::get().runnable_at("cpu");
  ir::Graph g;
  std::vector<Var> out = op_multi("tile_csr",
                                  {input(g, "row_ptr", row_ptr.dtype(), row_ptr.shape()),
                                   input(g, "col_idx", col_idx.dtype(), col_idx.shape()),
                                   input(g, "values", values.dtype(), values.shape())},
                                  {{"cols", cols}, {"rb", int64_t(rb)}, {"panel", int64_t(panel)}, {"warps", int64_t(warps)}});
  output(g, out);
  const Program prog = compile(g, d);
  std::vector<Tensor> arrays = Executor(prog, d).run({row_ptr, col_idx, values});
  TiledCsr t;
  t.rows = rows, t.cols = cols, t.nnz = col_idx.numel(), t.rb = rb, t.panel = panel, t.warps = warps;
  t.row_blocks = ir::tiled_row_blocks(rows, rb);
  t.panels = ir::tiled_panels(cols, panel);
  t.share_tensor = arrays[0], t.rc_tensor = arrays[1], t.val_tensor = arrays[2];
  if (t.share_tensor.is_host()) {  // views for the host (the arrays live where they were built)
    t.share = {t.share_tensor.data<int64_t>(), size_t(t.share_tensor.numel())};
    t.rc = {reinterpret_cast<uint32_t*>(t.rc_tensor.data<int32_t>()), size_t(t.nnz)};
    t.val = {t.val_tensor.data<double>(), size_t(t.nnz)};
  }
  return t;
}

void tiled_product_host(const TiledCsr& t, const double* x, double* y) {
  if (t.share.empty()) throw InputError("tiled_product_host: the layout is not on the host (built on another device)");
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

std::vector<Tensor> tiled_tensors(const TiledCsr& t) { return {t.share_tensor, t.rc_tensor, t.val_tensor}; }

Var spmv_tiled(const std::vector<Var>& arrays, const TiledCsr& t, const Var& x, SrcLoc loc) {
  if (arrays.size() != 3) throw InputError("spmv_tiled: the layout is three arrays (share, rc, values)");
  return rlx::op("spmv_tiled", {arrays[0], arrays[1], arrays[2], x},
                 {{"rows", t.rows}, {"cols", t.cols}, {"rb", int64_t(t.rb)}, {"panel", int64_t(t.panel)},
                  {"warps", int64_t(t.warps)}},
                 loc);
}

SpmvChoice choose_spmv(const CsrMatrix& A, const Device::Geometry& geo) {
  const double per_row = A.rows() > 0 ? double(A.nnz()) / double(A.rows()) : 0.0;
  char rows[96];
  std::snprintf(rows, sizeof rows, "%.1f nonzeros per row", per_row);
  if (A.value_type() != DType::F64)
    return {false, std::string("csr: ") + dtype_name(A.value_type()) + " values (the tiled layout is f64)"};
  if (geo.multiprocessors <= 0) return {false, "csr: not a GPU (the tiled layout is for GPUs)"};
  if (per_row < kTiledRowLength)
    return {false, "csr: " + std::string(rows) + " (tiled from " + std::to_string(int(kTiledRowLength)) + ")"};
  return {true, "tiled: " + std::string(rows) + " on a GPU (tiled from " + std::to_string(int(kTiledRowLength)) + ")"};
}

TiledOperator::TiledOperator(const CsrOperator& A, TiledShape shape, Device* device) : csr_(A) {
  if (A.dtype() != DType::F64) throw InputError(std::string("tiled layout: f64 matrices only, not ") + dtype_name(A.dtype()));
  const auto t0 = std::chrono::steady_clock::now();
  layout_ = tile_csr(A.row_ptr(), A.col_idx(), A.values(), A.rows(), A.cols(), shape.rb, shape.panel, shape.warps, device);
  if (device) device->synchronize();  // (the build's time, not its launch's)
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

OperatorChoice operator_for(const CsrOperator& A, Device& device, const std::string& mode) {
  if (mode != "csr" && mode != "tiled" && mode != "auto")
    throw InputError("the spmv mode (--spmv) must be auto, csr or tiled, not '" + mode + "'");
  const Device::Geometry geo = device.geometry();
  OperatorChoice c;
  bool tiled = mode == "tiled";
  if (mode == "auto") {
    const SpmvChoice s = choose_spmv(A.matrix(), geo);
    tiled = s.tiled, c.why = s.why;
  } else {
    c.why = mode + ": as asked";
  }
  if (!tiled) return c;
  const bool own = geo.multiprocessors > 0 && geo.shared_bytes_per_block > 0;
  const int sms = own ? geo.multiprocessors : ir::kTiledDefaultMultiprocessors;
  const int64_t smem = own ? geo.shared_bytes_per_block : ir::kTiledDefaultSharedBytes;
  try {
    c.op = std::make_unique<TiledOperator>(A, tiled_shape(A.rows(), sms, smem), &device);
  } catch (const Error& e) {  // auto: CSR where this device cannot build the layout (size, memory)
    if (mode != "auto") throw;
    c.why = "csr: the tiled layout was chosen but cannot be built on " + device.name() + ": " + e.what();
    return c;
  }
  char b[256];
  std::snprintf(b, sizeof b, "laid out on %s in %.3f s, for %d multiprocessors and %lld bytes of shared memory per block: %s",
                device.name().c_str(), c.op->build_seconds(), sms, (long long)smem, own ? "this GPU's" : "an H200's");
  c.layout = b;
  return c;
}

}  // namespace rlx::sparse
