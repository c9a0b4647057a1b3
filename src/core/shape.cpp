#include "core/shape.hpp"

#include "core/checked.hpp"
#include "core/error.hpp"

namespace rlx {

int64_t numel(const Shape& s) {
  for (int64_t d : s) {
    if (d < 0) throw SizeError("shape " + shape_str(s) + ": negative extent " + std::to_string(d));
    if (d == 0) return 0;  // [0, 2^40, 2^40] is empty, not an overflow
  }
  // Called on every kernel launch: the message is only built when the count overflows.
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
      n = 1;
      for (int64_t e : s) n = checked_mul(n, e, "element count of shape " + shape_str(s));
    }
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  numel(s);  // checks the extents: no product below can wrap unless the tensor is empty
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc = saturating_mul(acc, s[i]);  // [0, 2^40, 2^40]: strides of an empty tensor are never used
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
