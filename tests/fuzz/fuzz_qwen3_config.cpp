// Qwen3's config.json reader (nn/models/qwen3.hpp: Qwen3Config::from_text, the checks
// from_file makes on the file's text), as `rlx generate --model DIR` reads a model folder.
// A configuration that reads must describe a model the decoder can be built for: sizes in
// their ranges, key/value heads dividing the heads, an even head_dim, finite positive eps
// and rope_theta.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "nn/models/qwen3.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RLX_FUZZ_GUARD({
    const nn::Qwen3Config c =
        nn::Qwen3Config::from_text(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    if (c.vocab_size < 1 || c.hidden_size < 1 || c.intermediate_size < 1 || c.num_layers < 1 || c.num_heads < 1 ||
        c.num_kv_heads < 1 || c.max_positions < 1)
      fuzz::finding("a size below 1 read without an error");
    if (c.num_heads % c.num_kv_heads) fuzz::finding("key/value heads that do not divide the heads");
    if (c.head_dim < 2 || c.head_dim % 2) fuzz::finding("an odd or tiny head_dim");
    if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1) || !(c.rope_theta > 1) || !std::isfinite(c.rope_theta))
      fuzz::finding("rms_norm_eps or rope_theta out of range");
  })
  return 0;
}
