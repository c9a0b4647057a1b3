// The host's physical memory, for refusing a matrix that cannot fit before allocating it
// (a Matrix Market size line, poisson3d:N): a clear InputError instead of an allocation
// failure or the kernel's OOM killer half-way through.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace rlx::sparse {

// Physical memory in bytes; 0 when the system does not say.
inline int64_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

// "1.5 GiB"
inline std::string gib(int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.4g GiB", double(bytes) / double(int64_t(1) << 30));
  return s;
}

// Empty when `bytes` fits in the host's memory, else "X GiB, more than this machine's
// Y GiB of memory".
inline std::string exceeds_host_memory(int64_t bytes) {
  const int64_t cap = host_memory_bytes();
  if (cap <= 0 || bytes <= cap) return {};
  return gib(bytes) + ", more than this machine's " + gib(cap) + " of memory";
}

}  // namespace rlx::sparse
