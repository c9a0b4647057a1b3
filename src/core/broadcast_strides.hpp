#pragma once
// The strides a kernel walks a broadcasting operand with, shared by the devices' attention
// kernels (an operand's leading dimensions against the scores').
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/shape.hpp"

namespace rlx {

// The element strides of a contiguous tensor of shape s walked as `full` dimensions, s
// right-aligned against them: 0 where s has 1 or lacks the dimension (it broadcasts).
inline std::vector<int64_t> broadcast_strides(const Shape& s, size_t full) {
  std::vector<int64_t> stride(full, 0);
  int64_t st = 1;
  for (size_t i = s.size(); i-- > 0;) {
    stride[full - s.size() + i] = s[i] == 1 ? 0 : st;
    st *= s[i];
  }
  return stride;
}

}  // namespace rlx
