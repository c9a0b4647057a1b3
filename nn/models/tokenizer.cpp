#include "nn/models/tokenizer.hpp"

#include <algorithm>
#include <fstream>

#include "core/error.hpp"
#include "io/file_bytes.hpp"
#include "nn/models/bert_unicode_tables.hpp"
#include "nn/models/utf8.hpp"

namespace rlx::nn {

namespace {

using detail::append_utf8;
using detail::BertCharKind;
using detail::decode_utf8;

// The kind of a code point, when it has one (false: kept as it is, split only on whitespace).
bool kind_of(char32_t cp, BertCharKind& kind) {
  const detail::BertCharRange* end = detail::kBertCharRanges + detail::kBertCharRangeCount;
  const detail::BertCharRange* r =
      std::upper_bound(detail::kBertCharRanges, end, cp, [](char32_t c, const detail::BertCharRange& x) { return c < x.lo; });
  if (r == detail::kBertCharRanges || cp > (r - 1)->hi) return false;
  kind = (r - 1)->kind;
  return true;
}

const char* mapping_of(char32_t cp) {
  const detail::BertCharMapping* end = detail::kBertCharMappings + detail::kBertCharMappingCount;
  const detail::BertCharMapping* m = std::lower_bound(
      detail::kBertCharMappings, end, cp, [](const detail::BertCharMapping& x, char32_t c) { return x.cp < c; });
  return m != end && m->cp == cp ? m->utf8 : nullptr;
}

// A code point after normalisation (stripped of accents, lower-cased) appended to `out`.
// Hangul syllables decompose by arithmetic (Unicode 3.12) rather than through the table.
void append_normalised(std::u32string& out, char32_t cp) {
  if (cp >= 0xAC00 && cp < 0xAC00 + 11172) {
    const char32_t s = cp - 0xAC00;
    out += char32_t(0x1100 + s / 588);
    out += char32_t(0x1161 + (s % 588) / 28);
    if (s % 28) out += char32_t(0x11A7 + s % 28);
    return;
  }
  if (const char* m = mapping_of(cp)) {
    out += decode_utf8(m);
    return;
  }
  out += cp;
}

// Steps 2-3 on a piece of text between special tokens: its words appended to `out`.
// (The reference also reorders runs of combining marks by their combining class during NFD;
// every mark with a nonzero class but a handful of spacing ones (musical symbols, Hangul tone
// marks) is then removed as Mn, so the order of what remains only differs for those.)
void split_words(std::string_view text, std::vector<std::string>& out) {
  std::u32string norm;
  for (char32_t cp : decode_utf8(text)) {
    BertCharKind k{};
    if (!kind_of(cp, k)) {
      append_normalised(norm, cp);
      continue;
    }
    switch (k) {
      case BertCharKind::Drop: break;
      case BertCharKind::Space: norm += U' '; break;
      case BertCharKind::Spaced:
        norm += U' ';
        append_normalised(norm, cp);
        norm += U' ';
        break;
      case BertCharKind::Punct: append_normalised(norm, cp); break;
    }
  }
  std::string word;
  auto flush = [&] {
    if (!word.empty()) out.push_back(std::move(word));
    word.clear();
  };
  for (char32_t cp : norm) {
    BertCharKind k{};
    const bool classified = kind_of(cp, k);
    if (cp == U' ') {
      flush();
    } else if (classified && k == BertCharKind::Punct) {
      flush();
      append_utf8(word, cp);
      flush();
    } else {
      append_utf8(word, cp);
    }
  }
  flush();
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(const std::vector<std::string>& vocab, const std::string& source,
                                       TokenizerOptions o)
    : tokens_(vocab), o_(o) {
  if (o.max_length < 2)
    throw InputError("tokenizer: max_length must leave room for [CLS] and [SEP], got " + std::to_string(o.max_length));
  if (o.max_chars_per_word < 1)
    throw InputError("tokenizer: max_chars_per_word must be positive, got " + std::to_string(o.max_chars_per_word));
  ids_.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const std::string& t = vocab[i];
    const std::string where = source + ":" + std::to_string(i + 1);
    if (t.empty()) throw InputError(where + ": an empty token");
    if (!io::valid_utf8(t)) throw InputError(where + ": the token is not valid UTF-8");
    auto [it, fresh] = ids_.emplace(t, int64_t(i));
    if (!fresh)
      throw InputError(where + ": the token '" + t + "' is also on line " + std::to_string(it->second + 1));
  }
  auto need = [&](const char* t) {
    const int64_t k = id(t);
    if (k < 0) throw InputError(source + ": the vocabulary has no " + t + " token");
    specials_.emplace_back(t);
    return k;
  };
  cls_ = need("[CLS]");
  sep_ = need("[SEP]");
  pad_ = need("[PAD]");
  unk_ = need("[UNK]");
  if (id("[MASK]") >= 0) specials_.emplace_back("[MASK]");
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& vocab_path, TokenizerOptions o) {
  std::ifstream f(vocab_path, std::ios::binary);
  if (!f) throw InputError(vocab_path + ": cannot open the vocabulary");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(line);
  }
  if (f.bad()) throw InputError(vocab_path + ": cannot read the vocabulary");
  if (tokens.empty()) throw InputError(vocab_path + ": the vocabulary is empty");
  return WordPieceTokenizer(tokens, vocab_path, o);
}

int64_t WordPieceTokenizer::id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<std::string> WordPieceTokenizer::words(std::string_view text) const {
  std::vector<std::string> out;
  // Special tokens first: at each position the longest one that starts there, else the text
  // up to the next one is ordinary text.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    size_t match = 0;
    for (const std::string& s : specials_)
      if (s.size() > match && text.substr(i, s.size()) == s) match = s.size();
    if (match == 0) {
      ++i;
      continue;
    }
    split_words(text.substr(start, i - start), out);
    out.emplace_back(text.substr(i, match));
    i += match;
    start = i;
  }
  split_words(text.substr(start), out);
  return out;
}

void WordPieceTokenizer::add_pieces(const std::string& word, std::vector<std::string>& out) const {
  if (std::find(specials_.begin(), specials_.end(), word) != specials_.end()) {
    out.push_back(word);
    return;
  }
  // Byte offsets of the character boundaries: pieces end only there.
  std::vector<size_t> bounds;
  for (size_t b = 0; b < word.size(); ++b)
    if ((static_cast<unsigned char>(word[b]) & 0xC0) != 0x80) bounds.push_back(b);
  bounds.push_back(word.size());
  const int64_t chars = int64_t(bounds.size()) - 1;
  const std::string unk = tokens_[size_t(unk_)];
  if (chars > o_.max_chars_per_word) {
    out.push_back(unk);
    return;
  }
  std::vector<std::string> pieces;
  std::string candidate;
  size_t at = 0;  // index into bounds
  while (at + 1 < bounds.size()) {
    size_t end = bounds.size() - 1;
    for (; end > at; --end) {
      candidate = at == 0 ? "" : "##";
      candidate.append(word, bounds[at], bounds[end] - bounds[at]);
      if (ids_.count(candidate)) break;
    }
    if (end == at) {  // no piece starts here: the whole word is unknown
      out.push_back(unk);
      return;
    }
    pieces.push_back(candidate);
    at = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (const std::string& w : words(text)) add_pieces(w, out);
  return out;
}

std::vector<int64_t> WordPieceTokenizer::encode(std::string_view text) const {
  const std::vector<std::string> pieces = tokenize(text);
  const size_t keep = std::min(pieces.size(), size_t(o_.max_length - 2));
  std::vector<int64_t> ids{cls_};
  for (size_t i = 0; i < keep; ++i) ids.push_back(ids_.at(pieces[i]));
  ids.push_back(sep_);
  return ids;
}

TokenBatch WordPieceTokenizer::encode_batch(const std::vector<std::string>& texts, int64_t pad_to) const {
  std::vector<std::vector<int64_t>> rows;
  int64_t len = std::max<int64_t>(pad_to, 0);
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      rows.push_back(encode(texts[i]));
    } catch (const InputError& e) {
      throw InputError("text " + std::to_string(i + 1) + " of " + std::to_string(texts.size()) + ": " + e.what());
    }
    len = std::max(len, int64_t(rows.back().size()));
  }
  const int64_t n = int64_t(texts.size());
  TokenBatch b{Tensor::zeros(DType::I64, {n, len}), Tensor::zeros(DType::I64, {n, len}),
               Tensor::zeros(DType::I64, {n, len})};
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<int64_t>& ids = rows[size_t(r)];
    for (int64_t c = 0; c < len; ++c) {
      const bool token = c < int64_t(ids.size());
      b.ids.data<int64_t>()[r * len + c] = token ? ids[size_t(c)] : pad_;
      b.attention_mask.data<int64_t>()[r * len + c] = token ? 1 : 0;
    }
  }
  return b;
}

}  // namespace rlx::nn
