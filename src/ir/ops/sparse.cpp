// Sparse library primitives over CSR matrices given as three tensors: row_ptr [rows+1]
// and col_idx [nnz] (both i32 or both i64) and values [nnz]. The column count is an
// attribute (it cannot be read off the arrays). Kernels trust the structure: building
// a CsrMatrix (solvers/sparse) validates it once.
#include <algorithm>
#include <cstdint>

#include "core/checked.hpp"
#include "ir/ops/rules.hpp"
#include "ir/ops/tiled_layout.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

const std::vector<DType> kSparseValues = {DType::F32, DType::F64, DType::C64};

// Checks the CSR triple (inputs 0..2) and returns the row count.
int64_t check_csr(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType &rp = in[0], &ci = in[1], &v = in[2];
  if (rp.dtype != DType::I32 && rp.dtype != DType::I64)
    throw InputError(std::string("row_ptr must be i32 or i64, got ") + dtype_name(rp.dtype));
  if (ci.dtype != rp.dtype)
    throw InputError(std::string("col_idx dtype ") + dtype_name(ci.dtype) + " differs from row_ptr's " +
                     dtype_name(rp.dtype));
  if (rp.shape.size() != 1 || rp.shape[0] < 1) throw InputError("row_ptr must be [rows+1], got " + shape_str(rp.shape));
  if (ci.shape.size() != 1 || v.shape != ci.shape)
    throw InputError("col_idx and values must both be [nnz], got " + shape_str(ci.shape) + " and " + shape_str(v.shape));
  require_dtype(v, kSparseValues, "values");
  if (a.get_int("cols") < 0) throw InputError("cols must be >= 0");
  return rp.shape[0] - 1;
}

}  // namespace

int64_t tiled_shares(int64_t rows, int64_t cols, int64_t rb, int64_t panel, int64_t warps, int64_t most_tiles,
                     const std::string& why) {
  if (rb < 1 || rb > kTiledMaxExtent || panel < 1 || panel > kTiledMaxExtent)
    throw InputError("rb and panel must lie in [1, " + std::to_string(kTiledMaxExtent) + "], got " + std::to_string(rb) +
                     " and " + std::to_string(panel));
  if (warps < 1 || warps > kTiledMaxWarps)
    throw InputError("warps must lie in [1, " + std::to_string(kTiledMaxWarps) + "], got " + std::to_string(warps));
  const int64_t row_blocks = tiled_row_blocks(rows, rb), panels = tiled_panels(cols, panel);
  if (row_blocks > 0 && panels > most_tiles / row_blocks)
    throw InputError(std::to_string(row_blocks) + " x " + std::to_string(panels) + " tiles of " + std::to_string(rb) +
                     " x " + std::to_string(panel) + ": too many" + why);
  return row_blocks * panels * warps + 1;
}

TiledShape tiled_shape(int64_t rows, int multiprocessors, int64_t shared_bytes, int groups) {
  if (multiprocessors < 1 || groups < 1 || shared_bytes < 64)
    throw InputError("tiled_shape: " + std::to_string(multiprocessors) + " multiprocessors, " + std::to_string(groups) +
                     " column groups, " + std::to_string(shared_bytes) + " bytes of shared memory");
  // sm / groups row blocks (one block of the kernel per multiprocessor), unless the row
  // sums would leave panels of fewer than 4096 columns; the panels take the rest (two).
  const int64_t words = shared_bytes / 8;
  const int64_t blocks = std::max(1, multiprocessors / groups);
  const int64_t most = std::clamp<int64_t>(words - 2 * 4096, 2, kTiledMaxExtent);
  const int64_t rb = std::clamp<int64_t>((std::max<int64_t>(rows, 1) + blocks - 1) / blocks, 2, most);
  TiledShape s;
  // Rounded up to even (rounding down could leave one more row block than multiprocessors
  // per group), within the limit rounded down to even.
  s.rb = int(std::min((rb + 1) / 2 * 2, most / 2 * 2));
  s.panel = int(std::clamp<int64_t>((words - s.rb) / 2 / 2 * 2, 2, kTiledMaxExtent));
  s.warps = 32;
  return s;
}

void register_sparse_ops(OpRegistry& r) {
  // y = alpha * A x + beta * y0   (y0 only when given; beta is ignored without it)
  r.add({.name = "spmv_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 5,
         .attrs = {{"cols", AttrKind::Int, true}, {"alpha", AttrKind::Float, false, 1.0}, {"beta", AttrKind::Float, false, 0.0}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           int64_t rows = check_csr(in, a);
           const TensorType& x = in[3];
           if (x.dtype != in[2].dtype) throw InputError("x dtype differs from the matrix values'");
           if (x.shape != Shape{a.get_int("cols")})
             throw InputError("x must be [" + std::to_string(a.get_int("cols")) + "], got " + shape_str(x.shape));
           if (in.size() == 5 && in[4] != TensorType{x.dtype, {rows}})
             throw InputError("y0 must be " + TensorType{x.dtype, {rows}}.str() + ", got " + in[4].str());
           return std::vector<TensorType>{{x.dtype, {rows}}};
         },
         .dtypes = kSparseValues, .doc = "CSR sparse matrix times vector: alpha*A*x (+ beta*y0)",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = example_csr(x, t);
           a.push_back(x.in(t, {4}));
           return std::vector<Var>{op("spmv_csr", a, {{"cols", int64_t(4)}})};
         }});
  // C = A B with B dense [cols, k]
  r.add({.name = "spmm_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 4,
         .attrs = {{"cols", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           int64_t rows = check_csr(in, a);
           const TensorType& b = in[3];
           if (b.dtype != in[2].dtype) throw InputError("B dtype differs from the matrix values'");
           if (b.shape.size() != 2 || b.shape[0] != a.get_int("cols"))
             throw InputError("B must be [" + std::to_string(a.get_int("cols")) + ", k], got " + shape_str(b.shape));
           return std::vector<TensorType>{{b.dtype, {rows, b.shape[1]}}};
         },
         .dtypes = kSparseValues, .doc = "CSR sparse matrix times dense matrix",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = example_csr(x, t);
           a.push_back(x.in(t, {4, 3}));
           return std::vector<Var>{op("spmm_csr", a, {{"cols", int64_t(4)}})};
         }});
  // Solves T x = b for a triangular CSR matrix T (square). Only the triangle named by
  // `lower` is read; with unit_diagonal the diagonal is taken as 1 and not read.
  r.add({.name = "sptrsv_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 4,
         .attrs = {{"cols", AttrKind::Int, true}, {"lower", AttrKind::Bool, false, true},
                   {"unit_diagonal", AttrKind::Bool, false, false}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           int64_t rows = check_csr(in, a);
           if (rows != a.get_int("cols")) throw InputError("a triangular solve needs a square matrix");
           const TensorType& b = in[3];
           if (b != TensorType{in[2].dtype, {rows}})
             throw InputError("b must be " + TensorType{in[2].dtype, {rows}}.str() + ", got " + b.str());
           return std::vector<TensorType>{b};
         },
         .dtypes = kSparseValues, .doc = "sparse triangular solve",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> a = example_csr(x, t, {.lo = 1, .hi = 2});  // a diagonal far from zero
           a.push_back(x.in(t, {4}));
           return std::vector<Var>{op("sptrsv_csr", a, {{"cols", int64_t(4)}})};
         }});
  // y = alpha * A x + beta * y0 for A in the tiled layout (tiled_layout.hpp):
  // share i64 [row_blocks * panels * warps + 1], rc i32 [n] (row in block << 16 | column
  // in panel), values f64 [n], n even (zero padding past the last nonzero), x f64 [cols].
  r.add({.name = "spmv_tiled", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 4, .max_inputs = 5,
         .attrs = {{"rows", AttrKind::Int, true}, {"cols", AttrKind::Int, true}, {"rb", AttrKind::Int, true},
                   {"panel", AttrKind::Int, true}, {"warps", AttrKind::Int, true},
                   {"alpha", AttrKind::Float, false, 1.0}, {"beta", AttrKind::Float, false, 0.0}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           const int64_t rows = a.get_int("rows"), cols = a.get_int("cols"), rb = a.get_int("rb"),
                         panel = a.get_int("panel"), warps = a.get_int("warps");
           if (rows < 0 || cols < 0) throw InputError("rows and cols must be >= 0");
           const int64_t shares = tiled_shares(rows, cols, rb, panel, warps, (INT64_MAX - 1) / warps);
           if (in[0] != TensorType{DType::I64, {shares}})
             throw InputError("share must be i64[" + std::to_string(shares) + "], got " + in[0].str());
           if (in[1].dtype != DType::I32 || in[1].shape.size() != 1 || in[1].shape[0] % 2 != 0)
             throw InputError("rc must be i32[n] with n even, got " + in[1].str());
           if (in[2] != TensorType{DType::F64, in[1].shape})
             throw InputError("values must be " + TensorType{DType::F64, in[1].shape}.str() + ", got " + in[2].str());
           if (in[3] != TensorType{DType::F64, {cols}})
             throw InputError("x must be " + TensorType{DType::F64, {cols}}.str() + ", got " + in[3].str());
           if (in.size() == 5 && in[4] != TensorType{DType::F64, {rows}})
             throw InputError("y0 must be " + TensorType{DType::F64, {rows}}.str() + ", got " + in[4].str());
           return std::vector<TensorType>{{DType::F64, {rows}}};
         },
         .dtypes = {DType::F64}, .doc = "sparse matrix (tiled layout) times vector: alpha*A*x (+ beta*y0)",
         .example = [](ExampleInputs& x, DType t) {  // 4 x 4 in tiles of 2 x 2, one warp, laid out by tile_csr
           const Attrs shape{{"cols", int64_t(4)}, {"rb", int64_t(2)}, {"panel", int64_t(2)}, {"warps", int64_t(1)}};
           std::vector<Var> layout = op_multi("tile_csr", example_csr(x, t), shape);
           layout.push_back(x.in(t, {4}));
           Attrs a = shape;
           a.set("rows", int64_t(4));
           return std::vector<Var>{op("spmv_tiled", layout, a)};
         }});
  // The tiled layout of a CSR matrix (f64 values; tiled_layout.hpp): outputs share,
  // rc and values as spmv_tiled reads them. Tiles of rb rows x panel columns, `warps`
  // shares per tile cut at row boundaries. Every device builds the same arrays, bit for
  // bit; InputError for bad structure (row pointers, columns), found while building.
  r.add({.name = "tile_csr", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 3, .max_inputs = 3,
         .attrs = {{"cols", AttrKind::Int, true}, {"rb", AttrKind::Int, true}, {"panel", AttrKind::Int, true},
                   {"warps", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           const int64_t rows = check_csr(in, a), nnz = in[1].shape[0], warps = a.get_int("warps");
           if (in[2].dtype != DType::F64) throw InputError(std::string("values must be f64, got ") + dtype_name(in[2].dtype));
           // Share starts outweighing the matrix (many panels, few nonzeros) are refused.
           const int64_t most = (checked_mul(std::max<int64_t>(nnz, 1), 4, "tile_csr share bound") + 1024) / std::clamp<int64_t>(warps, 1, kTiledMaxWarps);
           const int64_t shares = tiled_shares(rows, a.get_int("cols"), a.get_int("rb"), a.get_int("panel"), warps, most,
                                                " (share starts would outnumber 4 per nonzero: rows too short for panels this wide)");
           const int64_t padded = tiled_padded(nnz);
           return std::vector<TensorType>{{DType::I64, {shares}}, {DType::I32, {padded}}, {DType::F64, {padded}}};
         },
         .dtypes = {DType::F64}, .doc = "the tiled layout of a CSR matrix (for spmv_tiled)",
         .example = [](ExampleInputs& x, DType t) {  // 4 x 4 in tiles of 2 x 2, one warp
           return op_multi("tile_csr", example_csr(x, t),
                           {{"cols", int64_t(4)}, {"rb", int64_t(2)}, {"panel", int64_t(2)}, {"warps", int64_t(1)}});
         }});
}

}  // namespace rlx::ir
