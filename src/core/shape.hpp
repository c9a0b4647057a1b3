// Shapes (row-major, int64 extents) and the tensor type of an IR value.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace rlx {

using Shape = std::vector<int64_t>;

// The element count; throws SizeError for a negative extent or a count past 2^62.
int64_t numel(const Shape& s);
std::vector<int64_t> contiguous_strides(const Shape& s);  // in elements
std::string shape_str(const Shape& s);                    // "[2,3]"
// NumPy broadcasting of two shapes; throws ShapeError naming both on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Normalizes a possibly negative axis against rank; throws ShapeError when out of range.
int normalize_axis(int64_t axis, int rank);

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
  std::string str() const;  // "f32[2,3]"
};

}  // namespace rlx
