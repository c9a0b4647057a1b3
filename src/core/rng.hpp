// Counter-based random numbers: element i of a draw with seed s depends only on (s, i),
// so every device produces bit-identical values in any order or thread split.
#pragma once
#include <cmath>
#include <cstdint>

namespace rlx {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t rng_bits(uint64_t seed, uint64_t i) { return splitmix64(splitmix64(seed) ^ (i * 0xd1b54a32d192ed03ull)); }
// A draw with a key input (a step counter a training step carries on the device) uses this
// seed, so each key gives an independent stream and the same key the same numbers everywhere.
inline uint64_t rng_keyed_seed(uint64_t seed, int64_t key) { return seed ^ splitmix64(uint64_t(key)); }
// Uniform in [0, 1) with 53 random bits.
inline double rng_unit(uint64_t seed, uint64_t i) { return double(rng_bits(seed, i) >> 11) * 0x1.0p-53; }
// Standard normal by Box-Muller on two independent counters (2i, 2i+1).
inline double rng_std_normal(uint64_t seed, uint64_t i) {
  double u1 = 1.0 - rng_unit(seed, 2 * i);  // (0, 1]
  double u2 = rng_unit(seed, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace rlx
