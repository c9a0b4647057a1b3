// Command-line plumbing shared by the rlx sub-commands.
#pragma once
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace rlx::cli {

constexpr int kOk = 0, kBadInput = 2, kLegalize = 3, kNotConverged = 4, kDeviceFailed = 5;

struct UsageError : InputError {
  using InputError::InputError;
};

// Minimal option parser: --flag, --key value, --key=value; positional arguments.
struct Args {
  std::vector<std::string> pos;
  std::multimap<std::string, std::string> opt;
  std::vector<std::string> flags;

  Args(int argc, char** argv, int from, const std::vector<std::string>& valued, const std::vector<std::string>& boolean) {
    for (int i = from; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-o") a = "--out";
      if (a.rfind("--", 0) != 0) {
        pos.push_back(a);
        continue;
      }
      std::string key = a.substr(2), val;
      bool has_eq = false;
      if (auto eq = key.find('='); eq != std::string::npos) {
        val = key.substr(eq + 1);
        key = key.substr(0, eq);
        has_eq = true;
      }
      if (std::find(boolean.begin(), boolean.end(), key) != boolean.end()) {
        if (has_eq) throw UsageError("option --" + key + " takes no value");
        flags.push_back(key);
      } else if (std::find(valued.begin(), valued.end(), key) != valued.end()) {
        if (!has_eq) {
          if (i + 1 >= argc) throw UsageError("option --" + key + " needs a value");
          val = argv[++i];
        }
        // Only --input and --shape name several things; any other option given twice is a
        // mistake that keeping either value would hide.
        if (key != "input" && key != "shape" && opt.count(key)) throw UsageError("option --" + key + " is given twice");
        opt.emplace(key, val);
      } else {
        throw UsageError("unknown option --" + key);
      }
    }
  }
  bool flag(const std::string& k) const { return std::find(flags.begin(), flags.end(), k) != flags.end(); }
  std::string get(const std::string& k, const std::string& def) const {
    auto it = opt.find(k);
    return it == opt.end() ? def : it->second;
  }
  bool has(const std::string& k) const { return opt.count(k) > 0; }
  // --k as a number in [lo, hi] ((lo, hi) when open); NaN, text and values outside are a
  // UsageError naming the option. Absent: def (not checked).
  double number(const std::string& k, double def, double lo, double hi, bool open = false) const {
    if (!has(k)) return def;
    std::string v = get(k, "");
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') throw UsageError("--" + k + " expects a number, got '" + v + "'");
    if (!(open ? d > lo && d < hi : d >= lo && d <= hi))
      throw UsageError("--" + k + " must be in " + (open ? "(" : "[") + bound(lo) + ", " + bound(hi) + (open ? ")" : "]") +
                       ", got '" + v + "'");
    return d;
  }
  // --k as an integer in [lo, hi]; text, values outside (and beyond int64) are a UsageError
  // naming the option, so the caller's narrowing cast (to int, to uint64_t) cannot wrap.
  int64_t integer(const std::string& k, int64_t def, int64_t lo, int64_t hi) const {
    if (!has(k)) return def;
    std::string v = get(k, "");
    char* end = nullptr;
    errno = 0;
    long long d = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') throw UsageError("--" + k + " expects an integer, got '" + v + "'");
    if (errno == ERANGE || d < lo || d > hi)
      throw UsageError("--" + k + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
    return d;
  }
  // --k as `def.size()` comma-separated numbers ("0.1,0.2,1"), each in [lo, hi]; a wrong
  // count, text or a value outside is a UsageError naming the option. Absent: def.
  std::vector<double> numbers(const std::string& k, std::vector<double> def, double lo, double hi) const {
    if (!has(k)) return def;
    const std::string v = get(k, "");
    std::vector<double> r;
    for (size_t i = 0; i <= v.size();) {
      size_t j = v.find(',', i);
      if (j == std::string::npos) j = v.size();
      const std::string part = v.substr(i, j - i);
      char* end = nullptr;
      const double d = std::strtod(part.c_str(), &end);
      if (part.empty() || *end != '\0' || !(d >= lo && d <= hi))
        throw UsageError("--" + k + " expects " + std::to_string(def.size()) + " numbers in [" + bound(lo) + ", " + bound(hi) +
                         "] separated by commas, got '" + v + "'");
      r.push_back(d);
      i = j + 1;
    }
    if (r.size() != def.size())
      throw UsageError("--" + k + " expects " + std::to_string(def.size()) + " numbers separated by commas, got '" + v + "'");
    return r;
  }

  // --k as comma-separated decimal integers in [0, hi] ("1,2,3": token ids); an empty item,
  // a sign, text or a value outside is a UsageError naming the option. Absent: empty.
  std::vector<int64_t> id_list(const std::string& k, int64_t hi) const {
    std::vector<int64_t> r;
    if (!has(k)) return r;
    const std::string v = get(k, "");
    for (size_t i = 0; i <= v.size();) {
      size_t j = v.find(',', i);
      if (j == std::string::npos) j = v.size();
      const std::string part = v.substr(i, j - i);
      char* end = nullptr;
      errno = 0;
      const long long d = std::strtoll(part.c_str(), &end, 10);
      if (part.empty() || *end != '\0' || errno == ERANGE || part[0] < '0' || part[0] > '9' || d > hi)
        throw UsageError("--" + k + " expects integers in [0, " + std::to_string(hi) + "] separated by commas, got '" +
                         v.substr(0, 200) + "'");
      r.push_back(d);
      i = j + 1;
    }
    return r;
  }

 private:
  static std::string bound(double b) {
    if (std::isinf(b)) return b > 0 ? "inf" : "-inf";
    char s[32];
    std::snprintf(s, sizeof s, "%g", b);
    return s;
  }
};


int cmd_gen(const Args& a);
int cmd_solve(const Args& a);
int cmd_train(const Args& a);
// `rlx splat render|fit ...` (apps/rlx/splat.cpp): argv[2] names the sub-command.
int cmd_splat(int argc, char** argv);
int cmd_embed(const Args& a);
int cmd_generate(const Args& a);
int cmd_tokenize(const Args& a);  // (generate.cpp)

}  // namespace rlx::cli
