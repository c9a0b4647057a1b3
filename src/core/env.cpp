#include "core/env.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace rlx {

int env_choice(const char* var, std::initializer_list<const char*> names) {
  const char* e = std::getenv(var);
  if (!e || !*e) return 0;
  int i = 0;
  std::string list;
  for (const char* n : names) {
    if (std::strcmp(e, n) == 0) return i;
    list += (i++ ? ", " : "") + std::string(n);
  }
  throw InputError(std::string(var) + "=" + e + ": expected one of " + list);
}

int64_t env_int(const char* var, int64_t lo, int64_t hi, int64_t fallback) {
  const char* e = std::getenv(var);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(e, &end, 10);
  const bool digits = std::isdigit(static_cast<unsigned char>(e[e[0] == '-' ? 1 : 0])) != 0;  // (no spaces, no '+')
  if (!digits || end == e || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw InputError(std::string(var) + "=" + e + ": expected a whole number from " + std::to_string(lo) + " to " +
                     std::to_string(hi));
  return v;
}

}  // namespace rlx
