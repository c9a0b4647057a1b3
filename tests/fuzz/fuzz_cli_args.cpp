// The rlx command line's option parsing (apps/rlx/args.hpp): the input is split into
// arguments at NUL and newline bytes, and parsed as `rlx <args>` with each sub-command's
// option lists (copied from apps/rlx/main.cpp: keep them in step), then read the way the
// sub-commands read it (integers and numbers with their ranges, policy and device names).
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "apps/rlx/args.hpp"
#include "common.hpp"
#include "core/error.hpp"
#include "dispatch/report.hpp"
#include "runtime/device.hpp"

using namespace rlx;
using namespace rlx::cli;

namespace {

struct Command {
  const char* name;
  std::vector<std::string> valued, boolean;
};

const std::vector<Command>& commands() {
  static const std::vector<Command> c = {
      {"ops", {}, {"json"}},
      {"compile", {"device", "policy", "emit", "deny", "shape"}, {"explain", "json"}},
      {"run", {"device", "policy", "deny", "input", "output"}, {}},
      {"demo", {"device", "policy"}, {}},
      {"gen", {"dim", "n", "out", "shuffle"}, {}},
      {"solve",
       {"rhs", "method", "pc", "rtol", "atol", "max-it", "restart", "omega", "device", "policy", "out", "seed", "spmv",
        "partition", "orthog"},
       {"monitor", "explain"}},
      {"splat render", {"camera", "view", "device", "background", "out", "depth", "alpha"}, {}},
      {"splat fit",
       {"images", "cameras", "init", "count", "iters", "lr", "device", "background", "seed", "report-every", "snapshots",
        "snapshot-every", "out", "densify-from", "densify-until", "densify-every", "grad-threshold",
        "opacity-reset-every"},
       {"densify"}},
      {"embed", {"model", "device", "out", "max-length"}, {"explain"}},
      {"tokenize", {"model", "tokenizer", "decode"}, {"skip-special"}},
      {"generate",
       {"model", "prompt-ids", "prompt", "prompts", "tokenizer", "stop", "system", "max-new", "batch", "device", "weights", "temperature",
        "top-k", "top-p", "seed"},
       {"explain", "chat", "no-think"}},
  };
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words = {"rlx"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    char ch = char(data[i]);
    if (ch == '\0' || ch == '\n') {
      words.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (size) words.push_back(cur);
  if (words.size() < 2) return 0;
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int argc = int(words.size());
  for (const Command& c : commands()) {
    RLX_FUZZ_GUARD({
      Args a(argc, argv.data(), 2, c.valued, c.boolean);
      for (const std::string& k : c.valued) {
        (void)a.get(k, "");
        // (the ranges of apps/rlx/solve.cpp)
        if (k == "dim") (void)a.integer(k, 2, 2, 3);
        if (k == "n" || k == "seed") (void)a.integer(k, 1, k == "n" ? 1 : 0, INT64_MAX);
        if (k == "max-it" || k == "restart") (void)a.integer(k, 1, k == "restart" ? 1 : 0, INT_MAX);
        if (k == "rtol" || k == "atol") (void)a.number(k, 0.0, 0, HUGE_VAL);
        if (k == "omega") (void)a.number(k, 1.0, 0, 2, /*open=*/true);
        if (k == "policy") (void)policy_from_name(a.get(k, "prefer-native"));
        if (k == "device") (void)DeviceRegistry::get().at(a.get(k, "cpu"));
        // (the ranges of apps/rlx/splat.cpp)
        if (k == "view" || k == "seed" || k == "report-every" || k == "snapshot-every") (void)a.integer(k, 0, 0, INT64_MAX);
        if (k == "iters" || k == "count") (void)a.integer(k, 1, 1, 100'000'000);
        if (k == "lr") (void)a.number(k, 0.01, 0, 1, /*open=*/true);
        if (k == "densify-from" || k == "densify-until" || k == "opacity-reset-every") (void)a.integer(k, 0, 0, INT64_MAX);
        if (k == "densify-every") (void)a.integer(k, 1, 1, INT64_MAX);
        if (k == "grad-threshold") (void)a.number(k, 0.0002, 0, HUGE_VAL);
        if (k == "background") (void)a.numbers(k, {0, 0, 0}, 0, 1);
        // (the ranges of apps/rlx/generate.cpp)
        if (k == "prompt-ids") (void)a.id_list(k, INT64_MAX);
        if (k == "decode") (void)a.id_list(k, int64_t(1) << 30);
        if (k == "stop" && a.get(k, "auto") != "auto" && a.get(k, "") != "none") (void)a.id_list(k, int64_t(1) << 30);
        if (k == "max-new") (void)a.integer(k, 16, 1, int64_t(1) << 24);
        if (k == "batch") (void)a.integer(k, 1, 1, 4096);
        if (k == "top-k") (void)a.integer(k, 0, 0, int64_t(1) << 30);
        if (k == "temperature") (void)a.number(k, 0.0, 0.0, 1e6);
        if (k == "top-p") (void)a.number(k, 1.0, 0.0, 1.0);
      }
      for (const std::string& k : c.boolean) (void)a.flag(k);
    })
  }
  return 0;
}
