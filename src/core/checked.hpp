// Size arithmetic that cannot wrap. Every product of extents, byte count, offset and
// triangle count computed from input (a type in the text IR, a .npy header, a Matrix
// Market size line, a memory plan) goes through these: an impossible size becomes an
// InputError naming what was being sized, never a small number that later indexes out
// of a buffer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace rlx {

// The largest element count or byte count rlx accepts for one tensor: 2^62. Keeping a
// margin below 2^63 lets callers add a few offsets or multiply by an element size of up
// to 2 without overflowing, and no machine holds that much memory.
inline constexpr int64_t kMaxElements = int64_t(1) << 62;

class SizeError : public InputError {
 public:
  using InputError::InputError;
};

namespace checked_detail {
[[noreturn]] inline void overflow(std::string_view what, const char* op, int64_t a, int64_t b) {
  throw SizeError(std::string(what) + ": " + std::to_string(a) + " " + op + " " + std::to_string(b) +
                  " is larger than rlx accepts (2^62)");
}
}  // namespace checked_detail

// a * b for non-negative a, b; throws SizeError naming `what` past kMaxElements.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (a < 0 || b < 0) throw SizeError(std::string(what) + ": negative size " + std::to_string(a < 0 ? a : b));
  if (__builtin_mul_overflow(a, b, &r) || r > kMaxElements) checked_detail::overflow(what, "*", a, b);
  return r;
}

// a + b for non-negative a, b; throws SizeError naming `what` past kMaxElements.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (a < 0 || b < 0) throw SizeError(std::string(what) + ": negative size " + std::to_string(a < 0 ? a : b));
  if (__builtin_add_overflow(a, b, &r) || r > kMaxElements) checked_detail::overflow(what, "+", a, b);
  return r;
}

// a * b for non-negative a, b, clamped to kMaxElements: for strides of empty tensors,
// which are compared but never used to address memory.
inline int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) || r > kMaxElements ? kMaxElements : r;
}

// A size read as unsigned (a file's 64-bit length field) as a checked int64.
inline int64_t checked_size(uint64_t v, std::string_view what) {
  if (v > uint64_t(kMaxElements))
    throw SizeError(std::string(what) + ": " + std::to_string(v) + " is larger than rlx accepts (2^62)");
  return int64_t(v);
}

}  // namespace rlx
