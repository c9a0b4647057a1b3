// Small pieces every rlx-bench sub-command uses: wall-clock timing, medians, list options.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The median (the mean of the middle two for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0.0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The median seconds of f() over reps runs, after one warm-up run.
template <class F>
double median_seconds(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const Clock::time_point t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

// "a,b,,c" -> {"a", "b", "c"}
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) r.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return r;
}

inline std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> r;
  for (const std::string& x : split(s)) r.push_back(std::stoll(x));
  return r;
}

}  // namespace rlx::bench
