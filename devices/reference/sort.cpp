// sort: std::stable_sort of each row's positions with a comparison written straight from
// the op's definition (src/ir/ops/sort.cpp), on values loaded into the int64/double domain.
// It never uses the bit keys of core/sort_key.hpp, so it checks them.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "core/error.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

// a before b in ascending order: NaN is the largest value, -0 == +0 (a < b says so).
bool ascending_less(int64_t a, int64_t b) { return a < b; }
bool ascending_less(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

void sort_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& x = in[0];
  const int ax = normalize_axis(n.attrs.get_int("axis"), x.rank());
  const bool descending = n.attrs.get_bool("descending");
  const int64_t len = x.shape()[size_t(ax)];
  // One visit per row (the axis held at 0): first[0] is the row's first element in x,
  // first[1] in the contiguous outputs.
  Shape rows = x.shape();
  rows[size_t(ax)] = 1;
  const std::vector<int64_t> out_strides = contiguous_strides(x.shape());
  const int64_t xs = x.strides()[size_t(ax)], os = out_strides[size_t(ax)];
  visit_domain(x.dtype(), [&](auto zero) {
    using C = decltype(zero);
    if constexpr (std::is_same_v<C, cd>) {
      throw InternalError("reference: sort of c64");
    } else {
      std::vector<C> v(static_cast<size_t>(len));
      std::vector<int64_t> perm(static_cast<size_t>(len));
      for_each_offset(rows, {x.strides(), out_strides}, [&](int64_t, const int64_t* first) {
        for (int64_t j = 0; j < len; ++j) v[size_t(j)] = load<C>(x, first[0] + j * xs);
        std::iota(perm.begin(), perm.end(), int64_t(0));
        std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
          return descending ? ascending_less(v[size_t(b)], v[size_t(a)]) : ascending_less(v[size_t(a)], v[size_t(b)]);
        });
        for (int64_t j = 0; j < len; ++j) {
          copy_element(x, first[0] + perm[size_t(j)] * xs, out[0], first[1] + j * os);
          store(out[1], first[1] + j * os, perm[size_t(j)]);
        }
      });
    }
  });
}

}  // namespace

void add_sort_kernels(KernelTable& t) { t.add({"sort", kRealNumeric, 0, sort_kernel, {}}); }

}  // namespace rlx::reference
