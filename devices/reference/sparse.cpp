// Sparse CSR kernels (spmv_csr, spmm_csr, sptrsv_csr): row by row, accumulating in
// double or complex<double>, rounding once on store. Unlike the fast devices, the oracle
// checks the structure it is given (row_ptr monotone from 0 to nnz, columns in range)
// and throws instead of reading out of bounds.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

// CSR arrays read through their strides.
struct Csr {
  const Tensor &rp, &ci, &v;
  int64_t rows, cols, nnz;
  int64_t ptr(int64_t r) const { return load_int(rp, r * rp.strides()[0]); }
  int64_t col(int64_t k) const { return load_int(ci, k * ci.strides()[0]); }
  template <class C>
  C val(int64_t k) const {
    return load<C>(v, k * v.strides()[0]);
  }
};

Csr csr_of(const ir::Node& n, std::span<const Tensor> in) {
  Csr a{in[0], in[1], in[2], in[0].shape()[0] - 1, n.attrs.get_int("cols"), in[2].shape()[0]};
  const std::string op = n.op->name + ": ";
  if (a.ptr(0) != 0) throw InputError(op + "row_ptr[0] is " + std::to_string(a.ptr(0)) + ", not 0");
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t b = a.ptr(r), e = a.ptr(r + 1);
    if (e < b || e > a.nnz)
      throw InputError(op + "row " + std::to_string(r) + ": row_ptr runs from " + std::to_string(b) + " to " +
                       std::to_string(e) + " (nnz " + std::to_string(a.nnz) + ")");
    for (int64_t k = b; k < e; ++k)
      if (a.col(k) < 0 || a.col(k) >= a.cols)
        throw InputError(op + "row " + std::to_string(r) + ": column index " + std::to_string(a.col(k)) +
                         " out of range [0, " + std::to_string(a.cols) + ")");
  }
  if (a.ptr(a.rows) != a.nnz)
    throw InputError(op + "row_ptr ends at " + std::to_string(a.ptr(a.rows)) + ", not at nnz " + std::to_string(a.nnz));
  return a;
}

void spmv_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Csr a = csr_of(n, in);
  const Tensor& x = in[3];
  const bool has_y0 = in.size() == 5;
  const double alpha = n.attrs.get_float("alpha"), beta = n.attrs.get_float("beta");
  visit_domain(a.v.dtype(), [&](auto zero) {
    using C = decltype(zero);
    if constexpr (std::is_same_v<C, int64_t>) {
      throw InternalError("reference: integer spmv_csr");
    } else {
      for (int64_t r = 0; r < a.rows; ++r) {
        C acc(0);
        for (int64_t k = a.ptr(r); k < a.ptr(r + 1); ++k) acc += a.val<C>(k) * load<C>(x, a.col(k) * x.strides()[0]);
        C y = alpha * acc;
        if (has_y0) y += beta * load<C>(in[4], r * in[4].strides()[0]);
        store(out[0], r, y);
      }
    }
  });
}

void spmm_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Csr a = csr_of(n, in);
  const Tensor& b = in[3];
  const int64_t width = b.shape()[1];
  visit_domain(a.v.dtype(), [&](auto zero) {
    using C = decltype(zero);
    if constexpr (std::is_same_v<C, int64_t>) {
      throw InternalError("reference: integer spmm_csr");
    } else {
      for (int64_t r = 0; r < a.rows; ++r)
        for (int64_t j = 0; j < width; ++j) {
          C acc(0);
          for (int64_t k = a.ptr(r); k < a.ptr(r + 1); ++k)
            acc += a.val<C>(k) * load<C>(b, a.col(k) * b.strides()[0] + j * b.strides()[1]);
          store(out[0], r * width + j, acc);
        }
    }
  });
}

// Forward (lower) or backward (upper) substitution; entries outside the triangle are
// skipped. The diagonal is the sum of the stored (i, i) entries (0 when none).
void sptrsv_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Csr a = csr_of(n, in);
  const Tensor& b = in[3];
  const bool lower = n.attrs.get_bool("lower"), unit = n.attrs.get_bool("unit_diagonal");
  visit_domain(a.v.dtype(), [&](auto zero) {
    using C = decltype(zero);
    if constexpr (std::is_same_v<C, int64_t>) {
      throw InternalError("reference: integer sptrsv_csr");
    } else {
      std::vector<C> x(size_t(a.rows));
      for (int64_t step = 0; step < a.rows; ++step) {
        const int64_t r = lower ? step : a.rows - 1 - step;
        C s = load<C>(b, r * b.strides()[0]), d(0);
        for (int64_t k = a.ptr(r); k < a.ptr(r + 1); ++k) {
          const int64_t c = a.col(k);
          if (c == r)
            d += a.val<C>(k);
          else if (lower ? c < r : c > r)
            s -= a.val<C>(k) * x[size_t(c)];
        }
        x[size_t(r)] = unit ? s : s / d;
      }
      for (int64_t r = 0; r < a.rows; ++r) store(out[0], r, x[size_t(r)]);
    }
  });
}

// spmv_tiled (ir/ops/tiled_layout.hpp): the tiles in order, each row's products summed
// in double over the tiles. The oracle checks the layout first — shares ascending from 0
// to at most the array length; every entry's row and column inside its tile; rows in
// order within a tile and no share starting inside a row (the cuda kernel's warps rely on
// both) — and names what is wrong.
void spmv_tiled_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t rows = n.attrs.get_int("rows"), cols = n.attrs.get_int("cols"), rb = n.attrs.get_int("rb"),
                panel = n.attrs.get_int("panel"), warps = n.attrs.get_int("warps");
  const Tensor &share = in[0], &rc = in[1], &v = in[2], &x = in[3];
  const int64_t panels = std::max<int64_t>(1, (cols + panel - 1) / panel), tiles = (rows + rb - 1) / rb * panels;
  const int64_t length = v.shape()[0];
  auto at = [&](int64_t i) { return load_int(share, i * share.strides()[0]); };
  const std::string op = "spmv_tiled: ";
  if (at(0) != 0) throw InputError(op + "share[0] is " + std::to_string(at(0)) + ", not 0");
  for (int64_t i = 0; i < tiles * warps; ++i)
    if (at(i + 1) < at(i) || at(i + 1) > length)
      throw InputError(op + "share " + std::to_string(i + 1) + " is " + std::to_string(at(i + 1)) + " after " +
                       std::to_string(at(i)) + " (arrays of " + std::to_string(length) + ")");
  std::vector<double> acc(size_t(rows), 0.0);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = t / panels, p = t % panels;
    const int64_t nr = std::min(rb, rows - b * rb), nc = std::min(panel, cols - p * panel);
    const int64_t k0 = at(t * warps), k1 = at((t + 1) * warps);
    auto row = [&](int64_t k) { return int64_t(uint32_t(load_int(rc, k * rc.strides()[0])) >> 16); };
    for (int64_t w = 1; w < warps; ++w)
      if (const int64_t s = at(t * warps + w); s > k0 && s < k1 && row(s) == row(s - 1))
        throw InputError(op + "share " + std::to_string(t * warps + w) + " starts inside row " +
                         std::to_string(row(s)) + " of tile " + std::to_string(t));
    for (int64_t k = k0; k < k1; ++k) {
      const uint32_t q = uint32_t(load_int(rc, k * rc.strides()[0]));
      const int64_t r = q >> 16, c = q & 0xffff;
      if (r >= nr || c >= nc)
        throw InputError(op + "entry " + std::to_string(k) + " of tile " + std::to_string(t) + " is at row " +
                         std::to_string(r) + ", column " + std::to_string(c) + " of a tile of " + std::to_string(nr) +
                         " x " + std::to_string(nc));
      if (k > k0 && r < row(k - 1))
        throw InputError(op + "entry " + std::to_string(k) + " of tile " + std::to_string(t) + " is at row " +
                         std::to_string(r) + ", after row " + std::to_string(row(k - 1)) + " (rows out of order)");
      acc[size_t(b * rb + r)] += load<double>(v, k * v.strides()[0]) * load<double>(x, (p * panel + c) * x.strides()[0]);
    }
  }
  const double alpha = n.attrs.get_float("alpha"), beta = n.attrs.get_float("beta");
  for (int64_t r = 0; r < rows; ++r) {
    double y = alpha * acc[size_t(r)];
    if (in.size() == 5) y += beta * load<double>(in[4], r * in[4].strides()[0]);
    store(out[0], r, y);
  }
}

// tile_csr (ir/ops/tiled_layout.hpp): the layout built the plain way — each tile's
// entries gathered in CSR order, then each share's start found by walking forward from
// its target (m * w / warps) to the next row start.
void tile_csr_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t rows = in[0].shape()[0] - 1, nnz = in[1].shape()[0], cols = n.attrs.get_int("cols"),
                rb = n.attrs.get_int("rb"), panel = n.attrs.get_int("panel"), warps = n.attrs.get_int("warps");
  const int64_t panels = std::max<int64_t>(1, (cols + panel - 1) / panel), tiles = (rows + rb - 1) / rb * panels;
  auto ptr = [&](int64_t r) { return load_int(in[0], r * in[0].strides()[0]); };
  const std::string op = "tile_csr: ";
  if (ptr(0) != 0) throw InputError(op + "row_ptr starts at " + std::to_string(ptr(0)) + ", not 0");
  if (ptr(rows) != nnz)
    throw InputError(op + "row_ptr ends at " + std::to_string(ptr(rows)) + " for " + std::to_string(nnz) + " nonzeros");
  std::vector<std::vector<std::pair<uint32_t, double>>> tile(static_cast<size_t>(tiles));
  for (int64_t r = 0; r < rows; ++r) {
    if (ptr(r + 1) < ptr(r) || ptr(r + 1) > nnz)
      throw InputError(op + "row_ptr not ascending (or past nnz) at row " + std::to_string(r));
    for (int64_t k = ptr(r); k < ptr(r + 1); ++k) {
      const int64_t c = load_int(in[1], k * in[1].strides()[0]);
      if (c < 0 || c >= cols)
        throw InputError(op + "column " + std::to_string(c) + " of row " + std::to_string(r) + " outside [0, " +
                         std::to_string(cols) + ")");
      const int64_t b = r / rb, p = c / panel;
      tile[size_t(b * panels + p)].push_back(
          {uint32_t(r - b * rb) << 16 | uint32_t(c - p * panel), load<double>(in[2], k * in[2].strides()[0])});
    }
  }
  int64_t pos = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const auto& e = tile[size_t(t)];
    const int64_t m = int64_t(e.size());
    for (int64_t w = 0; w < warps; ++w) {
      int64_t s = m * w / warps;
      while (s > 0 && s < m && e[size_t(s)].first >> 16 == e[size_t(s - 1)].first >> 16) ++s;
      store(out[0], t * warps + w, int64_t(pos + s));
    }
    for (const auto& [word, v] : e) store(out[1], pos, int64_t(int32_t(word))), store(out[2], pos++, v);
  }
  store(out[0], tiles * warps, nnz);
  for (int64_t k = nnz; k < out[1].shape()[0]; ++k) store(out[1], k, int64_t(0)), store(out[2], k, 0.0);
}

constexpr DTypeSet kSparseValues = bit(DType::F32) | bit(DType::F64) | bit(DType::C64);

}  // namespace

void add_sparse_kernels(KernelTable& t) {
  t.add({"spmv_csr", kSparseValues, 2, spmv_kernel, {}});
  t.add({"spmm_csr", kSparseValues, 2, spmm_kernel, {}});
  t.add({"sptrsv_csr", kSparseValues, 2, sptrsv_kernel, {}});
  t.add({"spmv_tiled", bit(DType::F64), 2, spmv_tiled_kernel, {}});
  t.add({"tile_csr", bit(DType::F64), 2, tile_csr_kernel, {}});
}

}  // namespace rlx::reference
