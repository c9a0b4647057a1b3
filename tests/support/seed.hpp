// The random seed of a test run: RLX_TEST_SEED when set, else a fresh one; printed once
// with the suite's name so that a failing run can be repeated exactly.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace rlx::test {

inline uint64_t run_seed(const char* suite) {
  static const uint64_t s = [suite] {
    const char* e = std::getenv("RLX_TEST_SEED");
    uint64_t v = e ? std::strtoull(e, nullptr, 10) : uint64_t(std::random_device{}());
    std::printf("%s: seed=%llu (RLX_TEST_SEED=%llu repeats this run)\n", suite, (unsigned long long)v,
                (unsigned long long)v);
    return v;
  }();
  return s;
}

}  // namespace rlx::test
