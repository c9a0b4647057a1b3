// A prompts file (`rlx generate --prompts FILE`) as nn::model_files::prompt_lines reads it. Lines
// that read are non-empty, valid UTF-8, hold no line feed, come with
// increasing line numbers inside the text, at most max_prompts (64 here) of them, and joined
// back they are the text's non-empty lines.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/file_bytes.hpp"
#include "nn/models/model_files.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  RLX_FUZZ_GUARD({
    const auto lines = nn::model_files::prompt_lines(text, "prompts.txt", 64);
    if (lines.empty() || lines.size() > 64) fuzz::finding("prompt_lines gave " + std::to_string(lines.size()) + " lines");
    const int64_t text_lines = int64_t(std::count(text.begin(), text.end(), '\n')) + 1;
    int64_t last = 0;
    for (const auto& [n, line] : lines) {
      if (n <= last || n > text_lines) fuzz::finding("line number " + std::to_string(n) + " out of order or past the text");
      last = n;
      if (line.empty() || line.find('\n') != std::string::npos) fuzz::finding("a line that is empty or holds a line feed");
      if (!io::valid_utf8(line)) fuzz::finding("a line that is not UTF-8");
      if (text.find(line) == std::string_view::npos) fuzz::finding("a line that is not in the text");
    }
  })
  return 0;
}
