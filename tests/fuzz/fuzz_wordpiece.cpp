// WordPiece tokenizer (nn/models/tokenizer.hpp): the input up to its first NUL byte is a
// vocab.txt, read through from_file as `rlx embed` reads a model folder's; the rest is a text
// to encode. An accepted vocabulary must give ids inside it, [CLS] first, [SEP] last, at most
// max_length of them, and the same ids from encode_batch's row.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "nn/models/tokenizer.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::temp_path("vocab.txt");
  const char* p = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(p, 0, size);
  const size_t vocab_bytes = nul ? size_t(static_cast<const char*>(nul) - p) : size;
  const std::string_view text = nul ? std::string_view(p + vocab_bytes + 1, size - vocab_bytes - 1) : std::string_view();
  {
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    o.write(p, std::streamsize(vocab_bytes));
  }
  RLX_FUZZ_GUARD({
    const nn::WordPieceTokenizer tok = nn::WordPieceTokenizer::from_file(path, {.max_length = 64});
    const std::vector<int64_t> ids = tok.encode(text);
    if (ids.size() < 2 || int64_t(ids.size()) > 64) fuzz::finding("ids of length " + std::to_string(ids.size()));
    if (ids.front() != tok.cls_id() || ids.back() != tok.sep_id()) fuzz::finding("ids not framed by [CLS] ... [SEP]");
    for (int64_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) fuzz::finding("id " + std::to_string(id) + " outside the vocabulary");
    const nn::TokenBatch b = tok.encode_batch({std::string(text)});
    for (size_t i = 0; i < ids.size(); ++i)
      if (b.ids.data<int64_t>()[i] != ids[i]) fuzz::finding("encode_batch's row differs from encode");
  })
  return 0;
}
