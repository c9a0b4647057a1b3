// Shared by the fuzz targets: what counts as a finding besides a crash or a sanitizer report.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rlx::fuzz {

// A broken promise (a round trip that does not come back, a non-rlx exception): abort, so
// libFuzzer saves the input as a crash.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "rlx fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace rlx::fuzz

// Every target: rlx::Error is the expected outcome of bad input; any other exception is a
// finding (the CLI would report it as exit 1 "internal error").
#define RLX_FUZZ_GUARD(...)                                                                    \
  try {                                                                                        \
    __VA_ARGS__                                                                                \
  } catch (const rlx::Error&) {                                                                \
  } catch (const std::exception& e) {                                                          \
    rlx::fuzz::finding(std::string("exception that is not an rlx::Error: ") + e.what());     \
  }
