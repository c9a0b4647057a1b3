// Byte-level BPE, the tokenizer of Qwen2/Qwen3, Llama 3 and GPT-2 checkpoints, read from the
// model's Hugging Face tokenizer.json and giving the ids the reference implementation
// (Hugging Face `tokenizers`) gives:
//   1. added tokens written in the text (<|im_start|>, <think>, ...) are matched first, the
//      longest at the leftmost position, and become their ids (those the file marks
//      `normalized` in a second pass over what the first left, as the reference does);
//   2. the rest is normalised when the file says so (NFC, Qwen's files);
//   3. split by the pre-tokenizer's pattern into pieces: Qwen2/Qwen3's, Llama 3's (digits in
//      runs of up to three) or GPT-2's;
//   4. each piece's UTF-8 bytes as the byte-level alphabet's symbols (a byte, a symbol), then
//      merged by the merges' ranks, the lowest first (with ignore_merges, Llama 3's, a piece
//      that is itself a token is that token).
// No special tokens are added (the reference's add_special_tokens=false): a chat template or
// a beginning-of-text token is the caller's.
//
//   auto tok = nn::BpeTokenizer::from_file("Qwen3-0.6B/tokenizer.json");
//   std::vector<int64_t> ids = tok.encode("Hello, world!");
//   std::string text = tok.decode(ids);
//
// The file is untrusted: what the tokenizer does not implement (another model type or
// normaliser, a pattern other than the three, dropout, byte fallback, added tokens that strip
// or match single words) is an InputError naming the file and the field, never a silently
// different tokenization; so are malformed fields, ids out of range, duplicate tokens and
// merges of tokens the vocabulary lacks. The Unicode data (classes of the patterns, NFC) is
// read from the reference implementation (bpe_unicode_tables.cpp, gen_bpe_unicode_tables.py).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlx::io {
class GgufFile;
}

namespace rlx::nn {

class BpeTokenizer {
 public:
  enum class Pattern { Gpt2, Qwen2, Llama3 };

  static BpeTokenizer from_file(const std::string& path);
  // The same from the file's text; `source` names it in messages.
  static BpeTokenizer from_json(std::string_view text, const std::string& source);
  // The tokenizer a GGUF file carries in llama.cpp's keys (tokenizer.ggml.model "gpt2"):
  // tokens by id, their types (control and user-defined ones are the added tokens, special
  // and not; unused ones name no token), merges, and the pre-tokenizer's name —
  // tokenizer.ggml.pre "qwen2" (with the NFC of Qwen's tokenizer.json files, which the GGUF
  // file does not record), "llama-bpe" (Llama 3's, ignore_merges) or "gpt-2". Other models
  // and names are InputErrors naming the file and the key.
  static BpeTokenizer from_gguf(const io::GgufFile& f);

  // Steps 1-4. InputError for a text that is not UTF-8 or of 2 GiB or more.
  std::vector<int64_t> encode(std::string_view text) const;
  // Steps 1-3: the pieces (added tokens among them), UTF-8.
  std::vector<std::string> pieces(std::string_view text) const;
  // The ids' text: their bytes joined, invalid UTF-8 (a sequence cut between two ids)
  // replaced by U+FFFD as the reference does; special added tokens left out when
  // skip_special. InputError for an id that names no token.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const;

  // One more than the largest id.
  int64_t vocab_size() const { return int64_t(tokens_.size()); }
  // Whether an id names a token (ids may leave gaps), and whether that token is an added one.
  bool has_token(int64_t id) const { return id >= 0 && id < vocab_size() && is_token_[size_t(id)]; }
  bool is_added(int64_t id) const;
  // The id of a token (a vocabulary entry or an added token) as the file writes it; -1 when
  // there is none.
  int64_t id(std::string_view token) const;
  Pattern pattern() const { return pattern_; }
  bool normalizes_nfc() const { return nfc_; }

 private:
  friend struct BpeLoader;
  struct Merge {
    int32_t rank, merged;
  };
  // The added tokens of one pass as a byte trie: the longest one starting at a position in
  // at most the longest token's length of steps.
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> node
    std::vector<int64_t> id = {-1};               // by node: the token ending there, or -1
    void insert(const std::string& token, int64_t token_id);
    // (length, id) of the longest token at text[i...]; (0, -1) when none.
    std::pair<size_t, int64_t> longest(std::string_view text, size_t i) const;
  };
  struct Piece {
    std::string text;
    int64_t added = -1;  // the added token's id, or -1 for text
  };
  std::vector<Piece> split(std::string_view text) const;
  void split_added(std::string_view text, const Trie& trie, const Trie* next, std::vector<Piece>& out) const;
  void encode_piece(const std::string& bytes, std::vector<int64_t>& out) const;
  void split_text(std::string_view text, std::vector<Piece>& out) const;

  std::vector<std::string> tokens_;  // by id ("" where no token has the id)
  std::vector<char> is_token_, special_;
  std::unordered_map<std::string, int64_t> vocab_;          // the model's vocabulary
  std::unordered_map<std::string, int64_t> added_ids_;      // the added tokens
  std::unordered_map<uint64_t, Merge> merges_;              // (left << 32 | right) -> rank, result
  Trie raw_, normalized_;                                   // the added tokens of the two passes
  std::array<int32_t, 256> byte_id_{};                      // each byte's symbol's id
  std::array<char32_t, 256> byte_char_{};                   // each byte's symbol
  std::unordered_map<char32_t, unsigned char> char_byte_;   // and back
  Pattern pattern_ = Pattern::Qwen2;
  bool nfc_ = false, ignore_merges_ = false;
};

}  // namespace rlx::nn
