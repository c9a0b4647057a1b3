// The solver side of the tiled SpMV layout: building it for a CSR matrix, a LinearOperator
// that multiplies by it, and the choice between it and CSR. The layout itself (what the
// ops tile_csr and spmv_tiled write and read, its shape rules, the GPU geometry assumed
// when a device reports none) is src/ir/ops/tiled_layout.hpp.
//
// What it costs: building it, once per matrix (an explicit step, the tile_csr op: 2.3-2.5
// ms for 72 M nonzeros on the H200, 0.26 s on 16 cpu threads), and a second copy of the
// matrix (12 bytes per nonzero, as CSR with 32-bit indices). It pays where rows are long:
// on power-law rows (mean 144 per row) 0.311-0.316 ms against cuSPARSE's 0.555-0.565 for
// the CSR arrays, also after cusparseSpMV_preprocess; tiled/CSR 1.16 at 64 random columns
// per row, 0.72 at 96, 0.57 at 128; on short rows (Poisson, 7 per row) it is several times
// slower than CSR: each block copies every panel of its group, most of them empty (H200,
// docs/benchmarks.md).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ir/frontend.hpp"
#include "ir/ops/tiled_layout.hpp"
#include "runtime/device.hpp"
#include "solvers/sparse/operator.hpp"

namespace rlx::sparse {

// The layout (ir/ops/tiled_layout.hpp) of one matrix: the three arrays of the op (tensors
// on the device that built them) and, when they are on the host, views of them.
struct TiledCsr {
  int64_t rows = 0, cols = 0, nnz = 0;
  int rb = 0, panel = 0, warps = 0;
  int64_t row_blocks = 0, panels = 0;
  Tensor share_tensor, rc_tensor, val_tensor;  // i64 [tiles * warps + 1]; i32 and f64 [nnz padded to even]
  std::span<int64_t> share;  // [tiles * warps + 1]
  std::span<uint32_t> rc;    // [nnz]: row in the block << 16 | column - first column of the panel
  std::span<double> val;     // [nnz]
};

// The layout's attributes (rb, panel, warps) and its shape for a GPU's geometry (an
// H200's by default): ir/ops/tiled_layout.hpp.
using ir::TiledShape;
using ir::tiled_shape;

// Builds the layout from CSR arrays (row_ptr/col_idx i32 or i64, values f64; columns in
// any order within a row) by running the tile_csr op on `device` (the cpu device when
// null; on the cuda device the arrays are built, and stay, on the GPU: the spans are then
// empty). InputError for rb or panel outside 1..65536 (16-bit offsets), warps outside
// 1..32, other dtypes, bad row pointers or columns, or shares that would take more than 4
// entries per nonzero (many panels and few nonzeros). Every device builds the same arrays.
TiledCsr tile_csr(const Tensor& row_ptr, const Tensor& col_idx, const Tensor& values, int64_t rows, int64_t cols,
                  int rb, int panel, int warps = 32, Device* device = nullptr);

// y = A x from the layout on the host, tile by tile in order: the reference for the layout.
void tiled_product_host(const TiledCsr& t, const double* x, double* y);

// The layout's arrays as host tensors: share, rc, values (see above; no copy).
std::vector<Tensor> tiled_tensors(const TiledCsr& t);

// y = A x in a graph, from the three arrays of t's layout (t gives the attributes).
Var spmv_tiled(const std::vector<Var>& arrays, const TiledCsr& t, const Var& x, SrcLoc loc = SrcLoc::current());

// --spmv auto: whether a Krylov solve of A on a device of geometry `geo` should multiply
// by the tiled layout rather than by CSR, and why: f64 values, a GPU (a device that
// reports its multiprocessors), and at least kTiledRowLength nonzeros per row on average;
// CSR otherwise. The threshold is measured (H200, docs/benchmarks.md, random columns, ~64 M
// nonzeros): tiled/CSR time 2.1 at 32 per row, 1.16 at 64, 0.72 at 96, 0.57 at 128 (0.55 on
// the power-law rows, mean 144); the layout's build on the GPU (2-4 ms) is ~15 products.
constexpr double kTiledRowLength = 96;
struct SpmvChoice {
  bool tiled = false;
  std::string why;
};
SpmvChoice choose_spmv(const CsrMatrix& A, const Device::Geometry& geo);

// A CSR matrix (f64) as a tiled operator: the layout is built once, here, and apply emits
// spmv_tiled with its arrays bound once per graph. The diagonal (for Jacobi) is the CSR
// matrix's.
class TiledOperator final : public LinearOperator {
 public:
  // The layout is built on `device` (the cpu device when null) and its arrays stay there.
  TiledOperator(const CsrOperator& A, TiledShape shape, Device* device = nullptr);
  int64_t rows() const override { return layout_.rows; }
  int64_t cols() const override { return layout_.cols; }
  DType dtype() const override { return DType::F64; }
  Var apply(BoundGraph& g, const Var& x) const override;
  Tensor diagonal() const override { return csr_.diagonal(); }  // (from CSR, when asked)
  std::string describe() const override;
  double build_seconds() const { return build_seconds_; }

 private:
  TiledCsr layout_;  // (shape and counts; the arrays moved to arrays_)
  std::vector<Tensor> arrays_;
  CsrOperator csr_;  // (shares A's arrays: for the diagonal)
  double build_seconds_ = 0;
};

// What a Krylov solve of A on `device` should multiply by, for `mode` "csr", "tiled" or
// "auto" (choose_spmv): `op` the tiled operator (built on the device, shaped for its
// geometry, or ir::kTiledDefault*'s, an H200's, where it reports none) or null for CSR; `why` the reason for the
// choice and `layout` (tiled only) where and for what it was laid out. InputError for
// another mode. With "auto", a layout the device cannot build (too many nonzeros for it,
// out of memory) falls back to CSR, the reason in `why`; with "tiled" the error is thrown.
struct OperatorChoice {
  std::unique_ptr<TiledOperator> op;
  std::string why, layout;
};
OperatorChoice operator_for(const CsrOperator& A, Device& device, const std::string& mode);

}  // namespace rlx::sparse
