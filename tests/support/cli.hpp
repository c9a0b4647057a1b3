// Running the rlx program from a test: exit code, stdout and stderr, in a scratch folder.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace rlx::test {

struct CliResult {
  int code = -1;
  std::string out, err;
};

// A folder of this process's own under the system temp folder, emptied first: one left by an
// earlier process with the same pid must not hold files a test then finds.
inline std::filesystem::path scratch_dir(const std::string& prefix) {
  std::filesystem::path d = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs `program args` with stdout/stderr captured through files in `dir`.
inline CliResult run_cli(const std::string& program, const std::string& args, const std::filesystem::path& dir) {
  std::filesystem::path o = dir / "stdout.txt", e = dir / "stderr.txt";
  std::string cmd = program + " " + args + " >" + o.string() + " 2>" + e.string();
  int st = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

inline bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace rlx::test
