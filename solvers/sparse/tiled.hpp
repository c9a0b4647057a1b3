// A CSR matrix laid out again, once, for f64 SpMV on a GPU: tiles of `rb` rows by `panel`
// columns, so that the x gathers read a panel of x from shared memory instead of from L2.
// The IR ops are tile_csr (CSR -> the layout) and spmv_tiled (src/ir/ops/sparse.cpp); every
// device runs both.
//
// Why: on the H200, CSR SpMV with scattered columns is bound by L2 tag requests, one per x
// gather, and no kernel reading the CSR arrays in their order can make fewer (power-law
// rows: 72 M of cuSPARSE's 85 M requests; docs/benchmarks.md). With the panel in shared
// memory the L2 sees the matrix's lines and one copy of each panel per row block: on
// power-law rows (mean 144 per row) 0.311-0.316 ms against cuSPARSE's 0.555-0.565 for the
// CSR arrays, also after cusparseSpMV_preprocess (H200, measured in
// docs/benchmarks.md). What it costs: building it, once per matrix (an explicit step, the
// tile_csr op: 2.3-2.5 ms for those 72 M nonzeros on the GPU, 0.26 s on 16 cpu threads), and
// a second copy of the matrix (12 bytes per nonzero, as CSR with 32-bit indices). It pays
// where rows are long (tiled/CSR 1.16 at 64 random columns per row, 0.72 at 96, 0.57 at
// 128); on short rows (Poisson, 7 per row) it is several times slower than CSR: each block
// copies every panel of its group, most of them empty.
//
// Layout: tiles numbered row block by row block, panels in order; inside a tile the
// nonzeros by row (columns in the CSR order), each stored as its value and one 32-bit word
// (row in the block << 16 | column in the panel). Each tile is cut, at row boundaries, into
// `warps` shares of about equal nonzeros, one per warp of the kernel's block (shares may be
// empty). share[tile * warps + w] is the first nonzero of share w of a tile; the last entry
// is nnz. The arrays as tensors (tiled_tensors): share i64 [tiles * warps + 1], rc i32 (the
// words' bits) and values f64, both padded with zeros to an even length.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ir/frontend.hpp"
#include "runtime/device.hpp"
#include "solvers/sparse/operator.hpp"

namespace rlx::sparse {

// The layout: the three arrays of the op (tensors on the device that built them) and, when
// they are on the host, views of them.
struct TiledCsr {
  int64_t rows = 0, cols = 0, nnz = 0;
  int rb = 0, panel = 0, warps = 0;
  int64_t row_blocks = 0, panels = 0;
  Tensor share_tensor, rc_tensor, val_tensor;  // i64 [tiles * warps + 1]; i32 and f64 [nnz padded to even]
  std::span<int64_t> share;  // [tiles * warps + 1]
  std::span<uint32_t> rc;    // [nnz]: row in the block << 16 | column - first column of the panel
  std::span<double> val;     // [nnz]
};

struct TiledShape {
  int rb = 0, panel = 0, warps = 32;
};

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

// The shape for a GPU of `multiprocessors` and `shared_bytes` of shared memory per block
// (the H200: 132 and 232448): multiprocessors / groups row blocks, so that the kernel's
// blocks (one per row block and column group, one per multiprocessor) fill the GPU once,
// and panels as wide as the rest of the shared memory allows (two, double-buffered). The
// device picks the column groups to match (row blocks x groups ~ multiprocessors).
constexpr int kH200Multiprocessors = 132;
constexpr int64_t kH200SharedBytes = 232448;  // per block, opted in
TiledShape tiled_shape(int64_t rows, int multiprocessors = kH200Multiprocessors,
                       int64_t shared_bytes = kH200SharedBytes, int groups = 4);

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
// geometry, or an H200's where it reports none) or null for CSR; `why` the reason for the
// choice and `layout` (tiled only) where and for what it was laid out. InputError for
// another mode. With "auto", a layout the device cannot build (too many nonzeros for it,
// out of memory) falls back to CSR, the reason in `why`; with "tiled" the error is thrown.
struct OperatorChoice {
  std::unique_ptr<TiledOperator> op;
  std::string why, layout;
};
OperatorChoice operator_for(const CsrOperator& A, Device& device, const std::string& mode);

}  // namespace rlx::sparse
