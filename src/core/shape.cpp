#include "core/shape.hpp"

#include "core/error.hpp"

namespace rlx {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast (dimension " +
                       std::to_string(i) + ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    r[i] = da == 1 ? db : da;
  }
  return r;
}

int normalize_axis(int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max(rank, 1))
    throw ShapeError("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return int(a);
}

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

}  // namespace rlx
