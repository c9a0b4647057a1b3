// What every rlx-bench sub-command shares: its command line (Args), its machine-readable
// result lines (Result), the error wrapper around its body (run_bench), wall-clock timing and
// medians.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace rlx {
class Device;
}

namespace rlx::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Times consecutive phases: each lap() returns the seconds since the previous one (or since
// construction) and starts the next.
struct Stopwatch {
  Clock::time_point t0 = Clock::now();
  double lap() {
    const Clock::time_point now = Clock::now();
    const double s = std::chrono::duration<double>(now - t0).count();
    t0 = now;
    return s;
  }
};

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
std::vector<std::string> split(const std::string& s);

// The command line of one sub-command. Each option is declared once, with the variable it
// sets, so the usage text, the parser and its errors cannot disagree:
//
//   Args args("rlx-bench spmv", "SpMV y = A x, f64, on ...");
//   args.option("--sizes", "100,200", o.sizes).option("--reps", "N", o.reps, 0);
//   args.parse(argc, argv);
//
// parse() reads argv[1..argc) (argv[0] is the sub-command). --help and -h print the usage on
// stdout and exit 0; an unknown option, a missing value or a value that is not of the
// option's type, range or choices prints the reason and the usage on stderr and exits 2.
class Args {
 public:
  Args(std::string command, std::string about);

  // A value the caller interprets; a std::invalid_argument from it is a bad value.
  Args& option(const std::string& name, const std::string& meta, std::function<void(const std::string&)> set);
  Args& option(const std::string& name, const std::string& meta, int& v, int64_t lo = 0);
  Args& option(const std::string& name, const std::string& meta, int64_t& v, int64_t lo = 0);
  Args& option(const std::string& name, const std::string& meta, double& v);
  // choices empty: any value; the meta text then names what is expected.
  Args& option(const std::string& name, const std::string& meta, std::string& v, std::vector<std::string> choices = {});
  // A comma-separated list (replaces the default); every element one of choices, if given.
  Args& option(const std::string& name, const std::string& meta, std::vector<std::string>& v,
               std::vector<std::string> choices = {});
  Args& option(const std::string& name, const std::string& meta, std::vector<int64_t>& v, int64_t lo = 1);
  Args& option(const std::string& name, const std::string& meta, std::vector<int>& v, int64_t lo = 1);

  void parse(int argc, char** argv);
  bool given(const std::string& name) const;  // after parse(): the option was on the command line
  std::string usage() const;

 private:
  struct Option {
    std::string name, meta;
    std::function<void(const std::string&)> set;
    bool given = false;
  };
  [[noreturn]] void fail(const std::string& why) const;
  std::string command_, about_;
  std::vector<Option> options_;
};

// One machine-readable line per measurement, "RESULT <bench> key=value ...", printed after
// the human-readable lines of the same figure and flushed (scripts grep for them).
class Result {
 public:
  explicit Result(const std::string& bench);
  Result& add(const std::string& key, const std::string& value);
  Result& add(const std::string& key, int64_t value);
  Result& add(const std::string& key, double value, const char* format);  // format: one double, e.g. "%.3f"
  void print() const;

 private:
  std::string line_;
};

// "device <name>: <description>", flushed.
void print_device(Device& d);

// Runs a sub-command's body; an exception is "<command>: <what>" on stderr and exit code 1.
int run_bench(const std::string& command, const std::function<int()>& body);

}  // namespace rlx::bench
