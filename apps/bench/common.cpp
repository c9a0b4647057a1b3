#include "apps/bench/common.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "runtime/device.hpp"

namespace rlx::bench {

std::vector<std::string> split(const std::string& s) {
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

namespace {

// The whole of s as an integer in [lo, hi], else std::invalid_argument.
int64_t to_integer(const std::string& s, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) throw std::invalid_argument(s);
  return v;
}

std::string at_least(int64_t lo) { return lo == std::numeric_limits<int64_t>::min() ? "" : " >= " + std::to_string(lo); }

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string r;
  for (const std::string& s : v) r += (r.empty() ? "" : sep) + s;
  return r;
}

}  // namespace

Args::Args(std::string command, std::string about) : command_(std::move(command)), about_(std::move(about)) {}

Args& Args::option(const std::string& name, const std::string& meta, std::function<void(const std::string&)> set) {
  options_.push_back({name, meta, std::move(set)});
  return *this;
}

Args& Args::option(const std::string& name, const std::string& meta, int& v, int64_t lo) {
  return option(name, meta, [this, name, &v, lo](const std::string& s) {
    try {
      v = int(to_integer(s, lo, std::numeric_limits<int>::max()));
    } catch (const std::invalid_argument&) {
      fail(name + " expects an integer" + at_least(lo) + ", got '" + s + "'");
    }
  });
}

Args& Args::option(const std::string& name, const std::string& meta, int64_t& v, int64_t lo) {
  return option(name, meta, [this, name, &v, lo](const std::string& s) {
    try {
      v = to_integer(s, lo, std::numeric_limits<int64_t>::max());
    } catch (const std::invalid_argument&) {
      fail(name + " expects an integer" + at_least(lo) + ", got '" + s + "'");
    }
  });
}

Args& Args::option(const std::string& name, const std::string& meta, double& v) {
  return option(name, meta, [this, name, &v](const std::string& s) {
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || d != d) fail(name + " expects a number, got '" + s + "'");
    v = d;
  });
}

Args& Args::option(const std::string& name, const std::string& meta, std::string& v, std::vector<std::string> choices) {
  return option(name, meta, [this, name, &v, choices](const std::string& s) {
    if (!choices.empty() && std::find(choices.begin(), choices.end(), s) == choices.end())
      fail("unknown value '" + s + "' for " + name + " (" + joined(choices, ", ") + ")");
    v = s;
  });
}

Args& Args::option(const std::string& name, const std::string& meta, std::vector<std::string>& v,
                   std::vector<std::string> choices) {
  return option(name, meta, [this, name, &v, choices](const std::string& s) {
    std::vector<std::string> list = split(s);
    if (list.empty()) fail(name + " expects a comma-separated list, got '" + s + "'");
    for (const std::string& x : list)
      if (!choices.empty() && std::find(choices.begin(), choices.end(), x) == choices.end())
        fail("unknown value '" + x + "' for " + name + " (" + joined(choices, ", ") + ")");
    v = list;
  });
}

Args& Args::option(const std::string& name, const std::string& meta, std::vector<int64_t>& v, int64_t lo) {
  return option(name, meta, [this, name, &v, lo](const std::string& s) {
    std::vector<int64_t> list;
    try {
      for (const std::string& x : split(s)) list.push_back(to_integer(x, lo, std::numeric_limits<int64_t>::max()));
    } catch (const std::invalid_argument&) {
      list.clear();
    }
    if (list.empty()) fail(name + " expects comma-separated integers" + at_least(lo) + ", got '" + s + "'");
    v = list;
  });
}

Args& Args::option(const std::string& name, const std::string& meta, std::vector<int>& v, int64_t lo) {
  return option(name, meta, [this, name, &v, lo](const std::string& s) {
    std::vector<int> list;
    try {
      for (const std::string& x : split(s)) list.push_back(int(to_integer(x, lo, std::numeric_limits<int>::max())));
    } catch (const std::invalid_argument&) {
      list.clear();
    }
    if (list.empty()) fail(name + " expects comma-separated integers" + at_least(lo) + ", got '" + s + "'");
    v = list;
  });
}

void Args::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
    auto o = std::find_if(options_.begin(), options_.end(), [&](const Option& x) { return x.name == a; });
    if (o == options_.end()) fail("unknown option '" + a + "'");
    if (i + 1 >= argc) fail(a + " needs a value");
    const std::string v = argv[++i];
    try {
      o->set(v);
    } catch (const std::invalid_argument&) {
      fail("bad value '" + v + "' for " + a + " (expected " + o->meta + ")");
    }
    o->given = true;
  }
}

bool Args::given(const std::string& name) const {
  return std::any_of(options_.begin(), options_.end(), [&](const Option& o) { return o.name == name && o.given; });
}

// "usage: <command> [--a A] [--b B] ...", wrapped before 100 columns under the first option,
// then the description.
std::string Args::usage() const {
  std::string head = "usage: " + command_, line = head;
  std::string text;
  for (const Option& o : options_) {
    const std::string item = " [" + o.name + " " + o.meta + "]";
    if (line.size() + item.size() > 100 && line.size() > head.size()) {
      text += line + "\n";
      line = std::string(head.size(), ' ');
    }
    line += item;
  }
  text += line + "\n" + about_;
  if (!about_.empty() && about_.back() != '\n') text += "\n";
  return text;
}

void Args::fail(const std::string& why) const {
  std::fprintf(stderr, "%s: %s\n%s", command_.c_str(), why.c_str(), usage().c_str());
  std::exit(2);
}

Result::Result(const std::string& bench) : line_("RESULT " + bench) {}

Result& Result::add(const std::string& key, const std::string& value) {
  line_ += " " + key + "=" + value;
  return *this;
}

Result& Result::add(const std::string& key, int64_t value) { return add(key, std::to_string(value)); }

Result& Result::add(const std::string& key, double value, const char* format) {
  char b[64];
  std::snprintf(b, sizeof b, format, value);
  return add(key, std::string(b));
}

void Result::print() const {
  std::printf("%s\n", line_.c_str());
  std::fflush(stdout);
}

void print_device(Device& d) {
  std::printf("device %s: %s\n", d.name().c_str(), d.description().c_str());
  std::fflush(stdout);
}

int run_bench(const std::string& command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", command.c_str(), e.what());
    return 1;
  }
}

}  // namespace rlx::bench
