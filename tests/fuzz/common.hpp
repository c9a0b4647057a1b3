// Shared by the fuzz targets: what counts as a finding besides a crash or a sanitizer report.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace rlx::fuzz {

// A broken promise (a round trip that does not come back, a non-rlx exception): abort, so
// libFuzzer saves the input as a crash.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "rlx fuzz finding: %s\n", what.c_str());
  std::abort();
}

// A file name of this process for a target's round trips: in /dev/shm when it is writable
// (no disk traffic), else $TMPDIR or /tmp. Removed at exit.
inline std::string temp_path(const std::string& stem) {
  static std::vector<std::string> made;
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp ? tmp : "/tmp");
  made.push_back(dir + "/rlx-fuzz-" + stem + "." + std::to_string(getpid()));
  if (made.size() == 1)
    std::atexit([] {
      for (const std::string& p : made) std::remove(p.c_str());
    });
  return made.back();
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
