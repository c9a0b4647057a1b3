// Movement kernels: permute, broadcast_to, slice, concat, pad, gather, scatter_add,
// update_slice.
// All but pad's fill and scatter_add's sums copy elements bit for bit through a
// strided view of the input.
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "devices/reference/access.hpp"
#include "runtime/standard_kernels.hpp"

namespace rlx::reference {
namespace {

// Copies a strided view of src (shape `shape`, `strides`, starting `base` elements into
// src) into the contiguous region of dst given by dst_strides starting at dst_base.
void copy_view(const Tensor& src, const Shape& shape, const std::vector<int64_t>& strides, int64_t base,
               const Tensor& dst, const std::vector<int64_t>& dst_strides, int64_t dst_base) {
  for_each_offset(shape, {strides, dst_strides},
                  [&](int64_t, const int64_t* o) { copy_element(src, base + o[0], dst, dst_base + o[1]); });
}

void copy_view(const Tensor& src, const std::vector<int64_t>& strides, int64_t base, const Tensor& dst) {
  copy_view(src, dst.shape(), strides, base, dst, contiguous_strides(dst.shape()), 0);
}

void permute_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const auto& perm = n.attrs.get_ints("perm");
  std::vector<int64_t> st(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) st[j] = in[0].strides()[size_t(perm[j])];
  copy_view(in[0], st, 0, out[0]);
}

void broadcast_kernel(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  copy_view(in[0], broadcast_strides(in[0], out[0].shape()), 0, out[0]);
}

void slice_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const auto& starts = n.attrs.get_ints("starts");
  const std::vector<int64_t> steps = slice_steps(n.attrs.get_ints("steps"), out[0].shape());
  int64_t base = 0;
  std::vector<int64_t> st(size_t(x.rank()));
  for (size_t d = 0; d < st.size(); ++d) {
    base += starts[d] * x.strides()[d];
    st[d] = steps[d] * x.strides()[d];
  }
  copy_view(x, st, base, out[0]);
}

void concat_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& y = out[0];
  const size_t ax = size_t(normalize_axis(n.attrs.get_int("axis"), y.rank()));
  const std::vector<int64_t> ys = contiguous_strides(y.shape());
  int64_t at = 0;  // where the next operand starts along the axis
  for (const Tensor& x : in) {
    copy_view(x, x.shape(), x.strides(), 0, y, ys, at * ys[ax]);
    at += x.shape()[ax];
  }
}

void pad_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &x = in[0], &y = out[0];
  const double value = n.attrs.get_float("value");
  for (int64_t i = 0; i < y.numel(); ++i) store_real(y, i, value);
  const auto& low = n.attrs.get_ints("low");
  const std::vector<int64_t> ys = contiguous_strides(y.shape());
  int64_t base = 0;
  for (size_t d = 0; d < ys.size(); ++d) base += low[d] * ys[d];
  copy_view(x, x.shape(), x.strides(), 0, y, ys, base);
}

// The strides that split an index of gather's output (x[:axis] + idx + x[axis+1:]) into
// an offset into x (strides xs; the axis itself left out) and an offset into idx.
struct GatherStrides {
  std::vector<int64_t> x, idx;
};

GatherStrides gather_strides(const std::vector<int64_t>& xs, const Tensor& idx, size_t ax) {
  GatherStrides g;
  for (size_t d = 0; d < ax; ++d) {
    g.x.push_back(xs[d]);
    g.idx.push_back(0);
  }
  for (size_t d = 0; d < size_t(idx.rank()); ++d) {
    g.x.push_back(0);
    g.idx.push_back(idx.strides()[d]);
  }
  for (size_t d = ax + 1; d < xs.size(); ++d) {
    g.x.push_back(xs[d]);
    g.idx.push_back(0);
  }
  return g;
}

// As numpy.take: an index in [-extent, extent), negative ones counting from the end.
int64_t checked_index(const ir::Node& n, const Tensor& idx, int64_t off, int64_t extent, size_t ax) {
  int64_t v = load_int(idx, off);
  if (v < -extent || v >= extent)
    throw InputError(n.op->name + ": index " + std::to_string(v) + " is out of range for axis " + std::to_string(ax) +
                     " of extent " + std::to_string(extent) + " (at " + n.loc.str() + ")");
  return v < 0 ? v + extent : v;
}

void gather_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &x = in[0], &idx = in[1];
  const size_t ax = size_t(normalize_axis(n.attrs.get_int("axis"), x.rank()));
  GatherStrides g = gather_strides(x.strides(), idx, ax);
  for_each_offset(out[0].shape(), {g.x, g.idx}, [&](int64_t i, const int64_t* o) {
    int64_t k = checked_index(n, idx, o[1], x.shape()[ax], ax);
    copy_element(x, o[0] + k * x.strides()[ax], out[0], i);
  });
}

void scatter_add_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &x = in[0], &idx = in[1], &upd = in[2], &y = out[0];
  const size_t ax = size_t(normalize_axis(n.attrs.get_int("axis"), x.rank()));
  const std::vector<int64_t> ys = contiguous_strides(y.shape());
  GatherStrides g = gather_strides(ys, idx, ax);  // g.x: offsets into y
  visit_domain(x.dtype(), [&](auto zero) {
    using C = decltype(zero);
    std::vector<C> acc(size_t(y.numel()));
    for_each_offset(x.shape(), {x.strides(), ys},
                    [&](int64_t, const int64_t* o) { acc[size_t(o[1])] = load<C>(x, o[0]); });
    for_each_offset(upd.shape(), {upd.strides(), g.x, g.idx}, [&](int64_t, const int64_t* o) {
      int64_t k = checked_index(n, idx, o[2], y.shape()[ax], ax);
      C& a = acc[size_t(o[1] + k * ys[ax])];
      C v = load<C>(upd, o[0]);
      if constexpr (std::is_same_v<C, int64_t>)
        a = wrap_add(a, v);
      else
        a += v;
    });
    for (size_t i = 0; i < acc.size(); ++i) store(y, int64_t(i), acc[i]);
  });
}

// y = x, then the block at start along the axis. In place (y over x's buffer) the first
// copy writes each element over itself.
void update_slice_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &x = in[0], &block = in[1], &y = out[0];
  const size_t ax = size_t(normalize_axis(n.attrs.get_int("axis"), x.rank()));
  const int64_t start = load_int(in[2], 0), room = x.shape()[ax] - block.shape()[ax];
  if (start < 0 || start > room)
    throw InputError(update_slice_bad_start(start, x.shape()[ax], block.shape()[ax], int(ax)) + " (at " + n.loc.str() +
                     ")");
  const std::vector<int64_t> ys = contiguous_strides(y.shape());
  copy_view(x, x.shape(), x.strides(), 0, y, ys, 0);
  copy_view(block, block.shape(), block.strides(), 0, y, ys, start * ys[ax]);
}

std::string index_dtype(const ir::Node& n, const ir::Graph& g) {
  DType t = g.type(n.inputs.at(1)).dtype;
  return t == DType::I32 || t == DType::I64 ? "" : std::string("indices are ") + dtype_name(t) + ", not i32/i64";
}

}  // namespace

void add_movement_kernels(KernelTable& t) {
  t.add({"permute", kAllButI4, 0, permute_kernel, {}});
  t.add({"broadcast_to", kAllButI4, 0, broadcast_kernel, {}});
  t.add({"slice", kAllButI4, 0, slice_kernel, {}});
  t.add({"concat", kAllButI4, 0, concat_kernel, {}});
  t.add({"pad", kAllButI4, 0, pad_kernel, {}});
  t.add({"gather", kAllButI4, 0, gather_kernel, index_dtype});
  t.add({"scatter_add", kNumeric, 0, scatter_add_kernel, index_dtype});
  t.add({"update_slice", kAllButI4, 0, update_slice_kernel, {}});
}

}  // namespace rlx::reference
