// A sharded checkpoint's index (model.safetensors.index.json) as the model loaders read it:
// nn/models/model_files.hpp's parse_config then shard_index, as `rlx embed --model DIR` and
// `rlx generate --model DIR` do for a folder without model.safetensors. An index that reads
// names only plain files beside it: no folder separators, no NUL, not "." or "..", not empty.
#include <cstdint>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "nn/models/model_files.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RLX_FUZZ_GUARD({
    const std::string path = "model.safetensors.index.json";
    const auto j = nn::model_files::parse_config(std::string_view(reinterpret_cast<const char*>(data), size), path);
    for (const auto& [name, file] : nn::model_files::shard_index(j, path)) {
      if (file.empty() || file == "." || file == "..") fuzz::finding("an empty, '.' or '..' shard name read");
      if (file.find_first_of(std::string("/\\\0", 3)) != std::string::npos)
        fuzz::finding("a shard name outside the index's folder read");
    }
  })
  return 0;
}
