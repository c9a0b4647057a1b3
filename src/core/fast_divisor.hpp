#pragma once
// Division of 32-bit unsigned numerators below 2^31 by a divisor fixed at launch time, as a
// multiply-high and a shift: q = (umulhi(n, magic) + n) >> shift. Kernels that split a flat
// index into coordinates divide by every extent for every element; a runtime 64-bit
// division costs some 70 instructions, this three. The host computes the constants once.
#include <cstdint>

namespace rlx {

struct FastDivisor {
  uint32_t magic = 1;
  uint32_t shift = 0;
};

// For 1 <= d <= 2^31: shift = ceil(log2 d), magic = floor(2^32 (2^shift - d) / d) + 1, exact
// for every n < 2^31 (n + umulhi(n, magic) then stays below 2^32).
constexpr FastDivisor fast_divisor(uint32_t d) {
  if (d <= 1) return {};
  uint32_t s = 0;
  while ((uint64_t(1) << s) < d) ++s;
  const uint64_t magic = ((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1;
  return {uint32_t(magic), s};
}

// The device's formula on the host (tests check fast_divisor with it).
constexpr uint32_t fast_divide(uint32_t n, FastDivisor f) {
  return uint32_t(((uint64_t(n) * f.magic >> 32) + n) >> f.shift);
}

}  // namespace rlx
