// Reductions (sum prod max min argmax) and the cumulative scan. Accumulators are
// int64_t (wrapping), double or complex<double>; each result is rounded once on store.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

// The reduced axes of a node's `axes` attribute (empty: all), as a per-axis flag.
std::vector<bool> reduced_axes(const ir::Node& n, int rank) {
  std::vector<bool> red(size_t(rank), false);
  const auto& axes = n.attrs.get_ints("axes");
  if (axes.empty()) red.assign(size_t(rank), true);
  for (int64_t a : axes) red[size_t(normalize_axis(a, rank))] = true;
  return red;
}

// Strides over the input's index space that give the output's linear index: the
// contiguous strides of the keepdims result shape, 0 on reduced axes.
std::vector<int64_t> output_strides(const Shape& in, const std::vector<bool>& red) {
  Shape kept = in;
  for (size_t d = 0; d < in.size(); ++d)
    if (red[d]) kept[d] = 1;
  std::vector<int64_t> st = contiguous_strides(kept);
  for (size_t d = 0; d < in.size(); ++d)
    if (red[d]) st[d] = 0;
  return st;
}

int64_t plus(int64_t a, int64_t b) { return wrap_add(a, b); }
double plus(double a, double b) { return a + b; }
cd plus(cd a, cd b) { return a + b; }
int64_t times(int64_t a, int64_t b) { return wrap_mul(a, b); }
double times(double a, double b) { return a * b; }
cd times(cd a, cd b) { return a * b; }

bool is_nan(int64_t) { return false; }
bool is_nan(double v) { return std::isnan(v); }

// True when v should replace best in a max (greater) or min (!greater) reduction:
// NaN wins and then stays; ties keep the earlier element.
template <class C>
bool replaces(C v, C best, bool greater) {
  if (is_nan(best)) return false;
  if (is_nan(v)) return true;
  return greater ? v > best : v < best;
}

template <class C>
void sum_prod(const Tensor& x, const Tensor& out, const std::vector<bool>& red, bool product) {
  std::vector<C> acc(size_t(out.numel()), product ? C(1) : C(0));
  for_each_offset(x.shape(), {x.strides(), output_strides(x.shape(), red)}, [&](int64_t, const int64_t* o) {
    C v = load<C>(x, o[0]);
    acc[size_t(o[1])] = product ? times(acc[size_t(o[1])], v) : plus(acc[size_t(o[1])], v);
  });
  for (size_t i = 0; i < acc.size(); ++i) store(out, int64_t(i), acc[i]);
}

template <class C>
void max_min(const ir::Node& n, const Tensor& x, const Tensor& out, const std::vector<bool>& red, bool greater) {
  std::vector<C> best(size_t(out.numel()), C(0));
  std::vector<char> seen(best.size(), 0);
  for_each_offset(x.shape(), {x.strides(), output_strides(x.shape(), red)}, [&](int64_t, const int64_t* o) {
    size_t j = size_t(o[1]);
    C v = load<C>(x, o[0]);
    if (!seen[j] || replaces(v, best[j], greater)) best[j] = v;
    seen[j] = 1;
  });
  for (size_t i = 0; i < best.size(); ++i) {
    if (!seen[i])
      throw InputError(n.op->name + " over an empty axis of " + shape_str(x.shape()) + " has no value (at " +
                       n.loc.str() + ")");
    store(out, int64_t(i), best[i]);
  }
}

void reduce_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& x = in[0];
  std::vector<bool> red = reduced_axes(n, x.rank());
  const std::string& op = n.op->name;
  visit_domain(x.dtype(), [&](auto zero) {
    using C = decltype(zero);
    if (op == "sum" || op == "prod") {
      sum_prod<C>(x, out[0], red, op == "prod");
    } else if constexpr (!std::is_same_v<C, cd>) {
      max_min<C>(n, x, out[0], red, op == "max");
    } else {
      throw InternalError("reference: " + op + " of c64");
    }
  });
}

void argmax_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const int ax = normalize_axis(n.attrs.get_int("axis"), x.rank());
  std::vector<bool> red(size_t(x.rank()), false);
  red[size_t(ax)] = true;
  std::vector<int64_t> along(size_t(x.rank()), 0);  // gives the index along the axis
  along[size_t(ax)] = 1;
  visit_domain(x.dtype(), [&](auto zero) {
    using C = decltype(zero);
    if constexpr (std::is_same_v<C, cd>) {
      throw InternalError("reference: argmax of c64");
    } else {
      std::vector<C> best(size_t(out[0].numel()), C(0));
      std::vector<int64_t> arg(best.size(), -1);
      // Row-major order visits each output's elements in increasing axis index, so a
      // strict comparison keeps the first index on ties.
      for_each_offset(x.shape(), {x.strides(), output_strides(x.shape(), red), along}, [&](int64_t, const int64_t* o) {
        size_t j = size_t(o[1]);
        C v = load<C>(x, o[0]);
        if (arg[j] < 0 || replaces(v, best[j], true)) {
          best[j] = v;
          arg[j] = o[2];
        }
      });
      for (size_t i = 0; i < arg.size(); ++i) store_int(out[0], int64_t(i), arg[i]);
    }
  });
}

void cumsum_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  const size_t ax = size_t(normalize_axis(n.attrs.get_int("axis"), x.rank()));
  const bool exclusive = n.attrs.get_bool("exclusive"), reverse = n.attrs.get_bool("reverse");
  const int64_t len = x.shape()[ax];
  const std::vector<int64_t> ys = contiguous_strides(y.shape());
  Shape lines = x.shape();
  lines[ax] = 1;
  visit_domain(x.dtype(), [&](auto zero) {
    using C = decltype(zero);
    for_each_offset(lines, {x.strides(), ys}, [&](int64_t, const int64_t* o) {
      C acc(0);
      for (int64_t k = 0; k < len; ++k) {
        int64_t p = reverse ? len - 1 - k : k;
        C v = load<C>(x, o[0] + p * x.strides()[ax]);
        if (!exclusive) acc = plus(acc, v);
        store(y, o[1] + p * ys[ax], acc);
        if (exclusive) acc = plus(acc, v);
      }
    });
  });
}

}  // namespace

void add_reduce_kernels(KernelTable& t) {
  t.add({"sum", kNumeric, 0, reduce_kernel, {}});
  t.add({"prod", kNumeric, 0, reduce_kernel, {}});
  t.add({"max", kRealNumeric, 0, reduce_kernel, {}});
  t.add({"min", kRealNumeric, 0, reduce_kernel, {}});
  t.add({"argmax", kRealNumeric, 0, argmax_kernel, {}});
  t.add({"cumsum", kNumeric, 0, cumsum_kernel, {}});
}

}  // namespace rlx::reference
