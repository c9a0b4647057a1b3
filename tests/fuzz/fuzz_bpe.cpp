// Byte-level BPE tokenizer (nn/models/bpe.hpp): the input up to its first NUL byte is a
// tokenizer.json, read as `rlx generate --prompt` reads a model's; the rest is a text to
// encode. An accepted tokenizer must give ids inside its vocabulary and decode them to valid
// UTF-8, and byte-level BPE loses nothing: where no added token was matched, without a
// normaliser the ids decode to the text itself; with NFC, to text that encodes to the same
// ids again.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/file_bytes.hpp"
#include "nn/models/bpe.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* p = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(p, 0, size);
  const size_t json_bytes = nul ? size_t(static_cast<const char*>(nul) - p) : size;
  const std::string_view text = nul ? std::string_view(p + json_bytes + 1, size - json_bytes - 1) : std::string_view();
  RLX_FUZZ_GUARD({
    const nn::BpeTokenizer tok = nn::BpeTokenizer::from_json(std::string_view(p, json_bytes), "tokenizer.json");
    const std::vector<int64_t> ids = tok.encode(text);
    for (int64_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) fuzz::finding("id " + std::to_string(id) + " outside the vocabulary");
    const std::string back = tok.decode(ids);
    if (!io::valid_utf8(back)) fuzz::finding("decode gave invalid UTF-8");
    // (an added token decodes through the byte-level alphabet too, as in the reference, so
    // the text comes back only where none was matched)
    bool added = false;
    for (int64_t id : ids) added = added || tok.is_added(id);
    if (!added && !tok.normalizes_nfc() && back != text) fuzz::finding("the ids do not decode to the text");
    if (!added && tok.normalizes_nfc() && tok.encode(back) != ids) fuzz::finding("the decoded text encodes to other ids");
  })
  return 0;
}
