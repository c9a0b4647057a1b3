#include "nn/models/bpe.hpp"

#include <algorithm>
#include <queue>

#include "core/error.hpp"
#include "io/file_bytes.hpp"
#include "io/gguf.hpp"
#include "io/json_text.hpp"
#include "nn/models/bpe_unicode_tables.hpp"
#include "nn/models/model_files.hpp"
#include "nn/models/utf8.hpp"

namespace rlx::nn {

namespace {

using detail::append_utf8;
using detail::BpeCharClass;
using Json = nlohmann::json;

// The patterns as tokenizer.json files write them (after JSON unescaping).
constexpr std::string_view kQwen2Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kLlama3Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kGpt2Pattern = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

// A file holds at most this many tokens and ids below it (Qwen's hold 151,669).
constexpr int64_t kMaxTokens = int64_t(1) << 24;
constexpr size_t kMaxFileBytes = size_t(256) << 20;
// Added tokens: how many, and how long each (matching walks at most this many bytes at a
// position). Real files hold tens to a few thousand of a few dozen bytes.
constexpr size_t kMaxAdded = size_t(1) << 16;
constexpr size_t kMaxAddedBytes = 1024;

// ---------------------------------------------------------------- Unicode

BpeCharClass class_of(char32_t cp) {
  const auto* end = detail::kBpeCharRanges + detail::kBpeCharRangeCount;
  const auto* r = std::upper_bound(detail::kBpeCharRanges, end, cp, [](char32_t c, const detail::BpeCharRange& x) { return c < x.lo; });
  return r == detail::kBpeCharRanges || cp > (r - 1)->hi ? BpeCharClass::Other : (r - 1)->cls;
}

int combining_class(char32_t cp) {
  const auto* end = detail::kCombiningRanges + detail::kCombiningRangeCount;
  const auto* r =
      std::upper_bound(detail::kCombiningRanges, end, cp, [](char32_t c, const detail::CombiningRange& x) { return c < x.lo; });
  return r == detail::kCombiningRanges || cp > (r - 1)->hi ? 0 : (r - 1)->ccc;
}

constexpr char32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr char32_t kHangulCount = 11172, kHangulVCount = 21, kHangulTCount = 28;

// The canonical composition of a + b, or 0 (Hangul by arithmetic, Unicode 3.12).
char32_t compose(char32_t a, char32_t b) {
  if (a >= kHangulL && a < kHangulL + 19 && b >= kHangulV && b < kHangulV + kHangulVCount)
    return kHangulS + ((a - kHangulL) * kHangulVCount + (b - kHangulV)) * kHangulTCount;
  if (a >= kHangulS && a < kHangulS + kHangulCount && (a - kHangulS) % kHangulTCount == 0 && b > kHangulT &&
      b < kHangulT + kHangulTCount)
    return a + (b - kHangulT);
  const auto* end = detail::kCompositions + detail::kCompositionCount;
  const auto* c = std::lower_bound(detail::kCompositions, end, std::pair{a, b}, [](const detail::Composition& x, const auto& k) {
    return x.first < k.first || (x.first == k.first && x.second < k.second);
  });
  return c != end && c->first == a && c->second == b ? c->composite : 0;
}

// NFC: full canonical decomposition, the marks of each run ordered by combining class
// (stably), then canonical composition of each mark with the last starter it is not
// blocked from. Text below U+0300 is its own NFC.
std::u32string nfc(const std::u32string& s) {
  if (std::all_of(s.begin(), s.end(), [](char32_t c) { return c < 0x300; })) return s;
  std::u32string d;
  d.reserve(s.size() + 8);
  for (char32_t cp : s) {
    if (cp >= kHangulS && cp < kHangulS + kHangulCount) {
      const char32_t i = cp - kHangulS;
      d += kHangulL + i / (kHangulVCount * kHangulTCount);
      d += kHangulV + (i % (kHangulVCount * kHangulTCount)) / kHangulTCount;
      if (i % kHangulTCount) d += kHangulT + i % kHangulTCount;
      continue;
    }
    const auto* end = detail::kNfdEntries + detail::kNfdEntryCount;
    const auto* e = std::lower_bound(detail::kNfdEntries, end, cp, [](const detail::NfdEntry& x, char32_t c) { return x.cp < c; });
    if (e != end && e->cp == cp) d.append(detail::kNfdCodePoints + e->offset, e->count);
    else d += cp;
  }
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + std::ptrdiff_t(i), d.begin() + std::ptrdiff_t(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  std::u32string out;
  out.reserve(d.size());
  std::ptrdiff_t starter = -1;
  int last = 0;
  for (char32_t cp : d) {
    const int c = combining_class(cp);
    if (starter >= 0 && (last < c || (last == 0 && std::ptrdiff_t(out.size()) - 1 == starter))) {
      if (const char32_t k = compose(out[size_t(starter)], cp)) {
        out[size_t(starter)] = k;
        continue;
      }
    }
    if (c == 0) starter = std::ptrdiff_t(out.size());
    last = c;
    out += cp;
  }
  return out;
}

// ---------------------------------------------------------------- the patterns

bool is(const std::u32string& s, size_t i, BpeCharClass c) { return i < s.size() && class_of(s[i]) == c; }
bool is_crlf(char32_t c) { return c == U'\r' || c == U'\n'; }

// Where the pattern's match starting at i ends (the first alternative that matches wins, as
// in the reference's regex engine). Every code point starts some match, so pieces tile the
// text.
size_t match_end(const std::u32string& s, size_t i, BpeTokenizer::Pattern p) {
  using P = BpeTokenizer::Pattern;
  const size_t n = s.size();
  // 's 't 're 've 'm 'll 'd: case-insensitive in Qwen2's and Llama 3's (where U+017F, long
  // s, folds to s as the reference's case folding has it).
  if (s[i] == U'\'' && i + 1 < n) {
    auto lower = [&](char32_t c) -> char32_t {
      if (p == P::Gpt2) return c;
      if (c == 0x17F) return U's';
      return c >= U'A' && c <= U'Z' ? c + 32 : c;
    };
    const char32_t a = lower(s[i + 1]), b = i + 2 < n ? lower(s[i + 2]) : 0;
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return i + 3;
  }
  auto run = [&](size_t j, BpeCharClass c) {
    while (j < n && class_of(s[j]) == c) ++j;
    return j;
  };
  if (p == P::Gpt2) {
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
    for (BpeCharClass c : {BpeCharClass::Letter, BpeCharClass::Number, BpeCharClass::Other}) {
      if (s[i] == U' ' && is(s, i + 1, c)) return run(i + 1, c);
      if (class_of(s[i]) == c) return run(i, c);
    }
  } else {
    // [^\r\n\p{L}\p{N}]?\p{L}+
    const BpeCharClass k = class_of(s[i]);
    if (k == BpeCharClass::Letter) return run(i, k);
    if (k != BpeCharClass::Number && !is_crlf(s[i]) && is(s, i + 1, BpeCharClass::Letter)) return run(i + 1, BpeCharClass::Letter);
    // \p{N} (Qwen2) or \p{N}{1,3} (Llama 3)
    if (k == BpeCharClass::Number) {
      const size_t most = p == P::Qwen2 ? 1 : 3;
      size_t j = i + 1;
      while (j < n && j - i < most && class_of(s[j]) == BpeCharClass::Number) ++j;
      return j;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t j = s[i] == U' ' && is(s, i + 1, BpeCharClass::Other) ? i + 1 : k == BpeCharClass::Other ? i : n;
    if (j < n) {
      j = run(j, BpeCharClass::Other);
      while (j < n && is_crlf(s[j])) ++j;
      return j;
    }
    // \s*[\r\n]+: the whitespace up to its last line break
    const size_t e = run(i, BpeCharClass::Space);
    for (size_t q = e; q > i; --q)
      if (is_crlf(s[q - 1])) return q;
  }
  // \s+(?!\S) then \s+: a run of whitespace, less its last character when a non-space
  // follows and the run has more than one.
  const size_t e = run(i, BpeCharClass::Space);
  if (e == n || e - i < 2) return e;
  return e - 1;
}

// ---------------------------------------------------------------- reading the file

std::string at(const std::string& source, const std::string& where) { return source + ": " + where; }

const Json& member(const Json& o, const char* key, const std::string& source, const std::string& where) {
  if (!o.is_object() || !o.contains(key)) throw InputError(at(source, where + " has no \"" + key + "\""));
  return o.at(key);
}

// A flag that must have the value this tokenizer implements; an absent one has the value the
// reference gives it (`absent`).
void require_flag(const Json& o, const char* key, bool want, const std::string& source, const std::string& where,
                  const std::string& why, bool absent = false) {
  bool value = absent;
  if (o.contains(key) && !o.at(key).is_null()) {
    const Json& v = o.at(key);
    if (!v.is_boolean()) throw InputError(at(source, where + "." + key + " must be true or false, got " + io::describe_json(v)));
    value = v.get<bool>();
  }
  if (value != want)
    throw InputError(at(source, where + "." + key + " is " + (value ? "true" : "false") +
                                (o.contains(key) ? "" : " (absent: the reference's default)") + ": " + why));
}

// An id as the file gives it, refused (naming it as written) outside [0, kMaxTokens).
int64_t token_id(const Json& v, const std::string& source, const std::string& where) {
  if (!v.is_number_integer()) throw InputError(at(source, where + " must be an integer id, got " + io::describe_json(v)));
  if ((v.is_number_unsigned() && v.get<uint64_t>() >= uint64_t(kMaxTokens)) || v.get<int64_t>() < 0 ||
      v.get<int64_t>() >= kMaxTokens)
    throw InputError(at(source, where + ": the id " + v.dump() + " is outside [0, " + std::to_string(kMaxTokens) + ")"));
  return v.get<int64_t>();
}

std::string type_of(const Json& o, const std::string& source, const std::string& where) {
  const Json& t = member(o, "type", source, where);
  if (!t.is_string()) throw InputError(at(source, where + ".type must be a string, got " + io::describe_json(t)));
  return t.get<std::string>();
}

// The byte-level alphabet: printable bytes stand for themselves, the others (controls,
// space, DEL, the C1 range, NBSP and the soft hyphen) for U+0100 onward in byte order.
std::array<char32_t, 256> byte_level_alphabet() {
  std::array<char32_t, 256> a{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    a[size_t(b)] = self ? char32_t(b) : next++;
  }
  return a;
}

// Bytes as UTF-8 text, each maximal invalid subsequence replaced by U+FFFD (what the
// reference's lossy conversion does).
std::string utf8_lossy(const std::string& b) {
  std::string out;
  out.reserve(b.size());
  size_t i = 0;
  while (i < b.size()) {
    const auto c = static_cast<unsigned char>(b[i]);
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    size_t k = 1;
    for (; len > 1 && k < size_t(len) && i + k < b.size(); ++k) {
      const auto x = static_cast<unsigned char>(b[i + k]);
      if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) break;
    }
    if (len > 0 && k == size_t(len)) {
      out.append(b, i, k);
    } else {
      out += "\xEF\xBF\xBD";
      if (len == 0) k = 1;
    }
    i += k;
  }
  return out;
}

}  // namespace

struct BpeLoader {
  static BpeTokenizer build(const nlohmann::json& j, const std::string& source, bool reference_numbering);
};

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  const auto bytes = io::FileBytes::map(path, "a tokenizer.json file");
  if (bytes->size() > kMaxFileBytes)
    throw InputError(path + ": " + std::to_string(bytes->size()) + " bytes, more than a tokenizer file holds (256 MiB)");
  return from_json(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), path);
}

BpeTokenizer BpeTokenizer::from_json(std::string_view text, const std::string& source) {
  const Json j = model_files::parse_config(text, source);
  if (!j.is_object()) throw InputError(at(source, "expected a JSON object, got " + io::describe_json(j)));
  return BpeLoader::build(j, source, true);
}

// The tokenizer of a tokenizer.json tree (a file's, or one made from a GGUF file's keys);
// `reference_numbering`: added tokens must carry the ids the reference would give them.
BpeTokenizer BpeLoader::build(const nlohmann::json& j, const std::string& source, bool reference_numbering) {
  BpeTokenizer t;

  // The model: byte-level BPE without the options that change what it does.
  const Json& model = member(j, "model", source, "the file");
  if (!model.is_object()) throw InputError(at(source, "model must be an object, got " + io::describe_json(model)));
  if (model.contains("type") && type_of(model, source, "model") != "BPE")
    throw InputError(at(source, "model.type is '" + model.at("type").get<std::string>() + "': only BPE is read"));
  if (model.contains("dropout") && !model.at("dropout").is_null())
    throw InputError(at(source, "model.dropout is set: BPE dropout draws merges at random, which inference does not"));
  require_flag(model, "byte_fallback", false, source, "model", "byte fallback is not implemented (byte-level BPE needs none)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(k) && !model.at(k).is_null() && !(model.at(k).is_string() && model.at(k).get<std::string>().empty()))
      throw InputError(at(source, std::string("model.") + k + " is set: byte-level BPE files have none, it is not implemented"));
  if (model.contains("ignore_merges") && !model.at("ignore_merges").is_null()) {
    if (!model.at("ignore_merges").is_boolean())
      throw InputError(at(source, "model.ignore_merges must be true or false, got " + io::describe_json(model.at("ignore_merges"))));
    t.ignore_merges_ = model.at("ignore_merges").get<bool>();
  }

  // The vocabulary: token -> id, ids unique and bounded.
  const Json& vocab = member(model, "vocab", source, "model");
  if (!vocab.is_object()) throw InputError(at(source, "model.vocab must be an object, got " + io::describe_json(vocab)));
  if (int64_t(vocab.size()) > kMaxTokens)
    throw InputError(at(source, "model.vocab holds " + std::to_string(vocab.size()) + " tokens, more than " + std::to_string(kMaxTokens)));
  // Tokens by id: ids may leave gaps, but not so many that a small file claims a large table.
  auto reserve_ids = [&t, &source](int64_t largest, int64_t tokens) {
    if (largest >= 2 * tokens + 1024)
      throw InputError(at(source, "the ids are sparse: the largest is " + std::to_string(largest) + " for " + std::to_string(tokens) +
                                  " tokens"));
    if (size_t(largest) >= t.tokens_.size()) {
      t.tokens_.resize(size_t(largest) + 1);
      t.is_token_.resize(size_t(largest) + 1, 0);
      t.special_.resize(size_t(largest) + 1, 0);
    }
  };
  auto place = [&t, &source](const std::string& token, int64_t id, const std::string& where) {
    if (token.empty()) throw InputError(at(source, where + ": an empty token"));
    if (t.is_token_[size_t(id)] && t.tokens_[size_t(id)] != token)
      throw InputError(at(source, where + ": the id " + std::to_string(id) + " is given to " + io::shown(token) + " and to " +
                                  io::shown(t.tokens_[size_t(id)])));
    t.tokens_[size_t(id)] = token;
    t.is_token_[size_t(id)] = 1;
  };
  std::unordered_map<std::string, int64_t>& model_vocab = t.vocab_;
  model_vocab.reserve(vocab.size());
  {
    std::vector<std::pair<std::string, int64_t>> entries;
    entries.reserve(vocab.size());
    int64_t largest = -1;
    for (const auto& [token, v] : vocab.items()) {
      entries.emplace_back(token, token_id(v, source, "model.vocab[" + io::shown(token) + "]"));
      largest = std::max(largest, entries.back().second);
    }
    reserve_ids(largest, int64_t(entries.size()));
    for (const auto& [token, id] : entries) {
      place(token, id, "model.vocab");
      model_vocab.emplace(token, id);
    }
  }

  // Every byte's symbol must be a token: byte-level BPE encodes any text from them.
  t.byte_char_ = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(sym, t.byte_char_[size_t(b)]);
    auto it = model_vocab.find(sym);
    if (it == model_vocab.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw InputError(at(source, std::string("model.vocab lacks the byte-level symbol of byte ") + hex + " (" + io::shown(sym) +
                                  "): not a byte-level BPE vocabulary"));
    }
    t.byte_id_[size_t(b)] = int32_t(it->second);
    t.char_byte_.emplace(t.byte_char_[size_t(b)], static_cast<unsigned char>(b));
  }

  // The merges, in rank order: "left right" strings or [left, right] pairs.
  const Json& merges = member(model, "merges", source, "model");
  if (!merges.is_array()) throw InputError(at(source, "model.merges must be an array, got " + io::describe_json(merges)));
  if (int64_t(merges.size()) > kMaxTokens)
    throw InputError(at(source, "model.merges holds " + std::to_string(merges.size()) + " merges, more than " + std::to_string(kMaxTokens)));
  t.merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const Json& m = merges[r];
    const std::string where = "model.merges[" + std::to_string(r) + "]";
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw InputError(at(source, where + " is " + io::shown(s) + ": expected two tokens separated by one space"));
      left = s.substr(0, sp), right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      throw InputError(at(source, where + " must be a \"left right\" string or a [left, right] pair, got " + io::describe_json(m)));
    }
    const auto a = model_vocab.find(left), b = model_vocab.find(right), c = model_vocab.find(left + right);
    if (a == model_vocab.end() || b == model_vocab.end() || c == model_vocab.end())
      throw InputError(at(source, where + ": " + io::shown(a == model_vocab.end() ? left : b == model_vocab.end() ? right : left + right) +
                                  " is not in the vocabulary"));
    const uint64_t key = uint64_t(a->second) << 32 | uint64_t(b->second);
    if (!t.merges_.emplace(key, BpeTokenizer::Merge{int32_t(r), int32_t(c->second)}).second)
      throw InputError(at(source, where + " repeats the merge " + io::shown(left + " " + right) + " of rank " +
                                  std::to_string(t.merges_.at(key).rank)));
  }

  // The normaliser: none or NFC (alone or as a sequence's only step).
  if (j.contains("normalizer") && !j.at("normalizer").is_null()) {
    const Json* n = &j.at("normalizer");
    if (type_of(*n, source, "normalizer") == "Sequence") {
      const Json& steps = member(*n, "normalizers", source, "normalizer");
      if (!steps.is_array() || steps.size() > 1)
        throw InputError(at(source, "normalizer: a Sequence of " + io::describe_json(steps) + ", only none or NFC is implemented"));
      n = steps.empty() ? nullptr : &steps[0];
    }
    if (n) {
      const std::string type = type_of(*n, source, "normalizer");
      if (type != "NFC") throw InputError(at(source, "normalizer " + type + " is not implemented (none or NFC is)"));
      t.nfc_ = true;
    }
  }

  // The pre-tokenizer: ByteLevel with GPT-2's pattern, or a Split by a known pattern then
  // ByteLevel without its own.
  const Json& pre = member(j, "pre_tokenizer", source, "the file");
  auto byte_level = [&](const Json& b, bool regex, const std::string& where) {
    if (type_of(b, source, where) != "ByteLevel") throw InputError(at(source, where + " must be ByteLevel"));
    require_flag(b, "add_prefix_space", false, source, where, "a prefix space is not implemented", true);
    require_flag(b, "use_regex", regex, source, where,
                 regex ? "a ByteLevel alone must split by its pattern" : "splitting again after the Split is not implemented", true);
  };
  if (pre.is_object() && pre.contains("type") && pre.at("type") == "ByteLevel") {
    byte_level(pre, true, "pre_tokenizer");
    t.pattern_ = BpeTokenizer::Pattern::Gpt2;
  } else {
    if (type_of(pre, source, "pre_tokenizer") != "Sequence")
      throw InputError(at(source, "pre_tokenizer " + type_of(pre, source, "pre_tokenizer") +
                                  " is not implemented (ByteLevel, or a Sequence of Split and ByteLevel, is)"));
    const Json& steps = member(pre, "pretokenizers", source, "pre_tokenizer");
    if (!steps.is_array() || steps.size() != 2)
      throw InputError(at(source, "pre_tokenizer.pretokenizers must be [Split, ByteLevel], got " + io::describe_json(steps)));
    const Json& split = steps[0];
    if (type_of(split, source, "pre_tokenizer.pretokenizers[0]") != "Split")
      throw InputError(at(source, "pre_tokenizer.pretokenizers[0] must be a Split"));
    const Json& pat = member(split, "pattern", source, "the Split");
    const Json* regex = pat.is_object() && pat.contains("Regex") ? &pat.at("Regex") : nullptr;
    if (!regex || !regex->is_string()) throw InputError(at(source, "the Split's pattern must be {\"Regex\": ...}"));
    const std::string r = regex->get<std::string>();
    if (r == kQwen2Pattern) t.pattern_ = BpeTokenizer::Pattern::Qwen2;
    else if (r == kLlama3Pattern) t.pattern_ = BpeTokenizer::Pattern::Llama3;
    else if (r == kGpt2Pattern) t.pattern_ = BpeTokenizer::Pattern::Gpt2;
    else
      throw InputError(at(source, "the Split's pattern " + io::shown(r) +
                                  " is not one of the implemented ones (Qwen2/Qwen3's, Llama 3's, GPT-2's)"));
    const Json& behavior = member(split, "behavior", source, "the Split");
    if (behavior != "Isolated") throw InputError(at(source, "the Split's behavior must be Isolated, got " + io::describe_json(behavior)));
    require_flag(split, "invert", false, source, "the Split", "an inverted Split is not implemented");
    byte_level(steps[1], false, "pre_tokenizer.pretokenizers[1]");
  }
  if (const Json& d = member(j, "decoder", source, "the file"); !d.is_object() || type_of(d, source, "decoder") != "ByteLevel")
    throw InputError(at(source, "decoder must be ByteLevel"));
  for (const char* k : {"truncation", "padding"})
    if (j.contains(k) && !j.at(k).is_null())
      throw InputError(at(source, std::string(k) + " is set: encoding with it is not implemented (it changes the ids)"));

  // Added tokens: matched whole in the raw text, those the file marks normalized after the
  // others (the reference's two passes), each at most kMaxAddedBytes long.
  if (j.contains("added_tokens") && !j.at("added_tokens").is_null()) {
    const Json& added = j.at("added_tokens");
    if (!added.is_array()) throw InputError(at(source, "added_tokens must be an array, got " + io::describe_json(added)));
    if (added.size() > kMaxAdded)
      throw InputError(at(source, "added_tokens holds " + std::to_string(added.size()) + " tokens, more than " + std::to_string(kMaxAdded)));
    int64_t largest = -1;
    for (size_t k = 0; k < added.size(); ++k)
      if (added[k].is_object() && added[k].contains("id"))
        largest = std::max(largest, token_id(added[k].at("id"), source, "added_tokens[" + std::to_string(k) + "].id"));
    reserve_ids(std::max<int64_t>(largest, int64_t(t.tokens_.size()) - 1), int64_t(model_vocab.size() + added.size()));
    // The reference numbers an added token the vocabulary lacks itself (after the vocabulary,
    // or after the largest added id); a file that numbers it otherwise would tokenize
    // differently here and there, so it is refused.
    int64_t largest_added = -1;
    const int64_t vocab_count = int64_t(model_vocab.size());
    for (size_t k = 0; k < added.size(); ++k) {
      const Json& a = added[k];
      const std::string where = "added_tokens[" + std::to_string(k) + "]";
      const Json& content = member(a, "content", source, where);
      if (!content.is_string()) throw InputError(at(source, where + ".content must be a string, got " + io::describe_json(content)));
      const int64_t i = token_id(member(a, "id", source, where), source, where + ".id");
      const std::string c = content.get<std::string>();
      if (c.size() > kMaxAddedBytes)
        throw InputError(at(source, where + ": " + std::to_string(c.size()) + " bytes, more than an added token's " +
                                    std::to_string(kMaxAddedBytes)));
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        require_flag(a, flag, false, source, where, std::string(flag) + " is not implemented");
      // (the reference's default: special tokens are matched in the raw text, others after
      // normalisation)
      bool special = false;
      if (a.contains("special") && a.at("special").is_boolean()) special = a.at("special").get<bool>();
      bool normalized = !special;
      if (a.contains("normalized") && a.at("normalized").is_boolean()) normalized = a.at("normalized").get<bool>();
      if (t.nfc_ && normalized)
        throw InputError(at(source, where + ".normalized is true: an added token matched after NFC is not implemented"));
      if (auto v = model_vocab.find(c); v != model_vocab.end()) {
        if (v->second != i)
          throw InputError(at(source, where + ": " + io::shown(c) + " has the id " + std::to_string(i) + " here and " +
                                      std::to_string(v->second) + " in the vocabulary"));
      } else if (const int64_t expected = largest_added < 0 || largest_added < vocab_count ? vocab_count : largest_added + 1;
                 reference_numbering && i != expected) {
        throw InputError(at(source, where + ": " + io::shown(c) + " has the id " + std::to_string(i) + ", where the reference numbers it " +
                                    std::to_string(expected) + " (after the vocabulary and the added tokens before it)"));
      }
      if (t.added_ids_.count(c)) throw InputError(at(source, where + ": " + io::shown(c) + " is added twice"));
      largest_added = std::max(largest_added, i);
      place(c, i, where);
      t.special_[size_t(i)] = special ? 1 : 0;
      t.added_ids_[c] = i;
      (normalized ? t.normalized_ : t.raw_).insert(c, i);
    }
  }
  return t;
}

BpeTokenizer BpeTokenizer::from_gguf(const io::GgufFile& f) {
  const std::string& src = f.path();
  auto need = [&](const char* key) {
    if (!f.contains_key(key)) throw InputError(src + ": no " + key + " (the file carries no BPE tokenizer)");
  };
  need("tokenizer.ggml.model");
  if (const std::string& m = f.get_string("tokenizer.ggml.model"); m != "gpt2")
    throw InputError(src + ": tokenizer.ggml.model is " + io::shown(m) + ": only \"gpt2\" (byte-level BPE) is read");
  need("tokenizer.ggml.pre");
  const std::string& pre = f.get_string("tokenizer.ggml.pre");
  if (pre != "qwen2" && pre != "llama-bpe" && pre != "gpt-2")
    throw InputError(src + ": tokenizer.ggml.pre is " + io::shown(pre) + ": qwen2, llama-bpe and gpt-2 are implemented");
  need("tokenizer.ggml.tokens");
  need("tokenizer.ggml.merges");
  const std::vector<std::string>& tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (int64_t(tokens.size()) > kMaxTokens)
    throw InputError(src + ": tokenizer.ggml.tokens holds " + std::to_string(tokens.size()) + " tokens, more than " +
                     std::to_string(kMaxTokens));
  std::vector<int64_t> types(tokens.size(), 1);
  if (f.contains_key("tokenizer.ggml.token_type")) {
    types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
      throw InputError(src + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                       std::to_string(tokens.size()) + " tokens");
  }
  // The tree a tokenizer.json would hold: normal tokens (type 1) the vocabulary; control (3)
  // and user-defined (4) ones the added tokens, special and not, matched in the raw text, and
  // in the vocabulary too (one may be a byte symbol or a merge's result); unused ones (5, the
  // padding up to the model's rows, which older converters wrote as user-defined "[PADn]")
  // no token at all. (llama.cpp's converter marks some of Qwen's non-special added tokens,
  // <|fim_prefix|> and the like, as control: decode(ids, true) leaves them out.)
  auto padding = [](const std::string& t) {
    return t.size() > 6 && t.compare(0, 4, "[PAD") == 0 && t.back() == ']' &&
           std::all_of(t.begin() + 4, t.end() - 1, [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  Json vocab = Json::object(), added = Json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string where = src + ": token " + std::to_string(i) + " " + io::shown(tokens[i]);
    if (types[i] == 4 && padding(tokens[i])) continue;
    switch (types[i]) {
      case 1:
      case 3:
      case 4:
        if (vocab.contains(tokens[i])) throw InputError(where + " appears twice");
        vocab[tokens[i]] = int64_t(i);
        if (types[i] != 1)
          added.push_back({{"id", int64_t(i)}, {"content", tokens[i]}, {"special", types[i] == 3}, {"normalized", false}});
        break;
      case 5: break;
      default:
        throw InputError(where + " has the type " + std::to_string(types[i]) + " (a byte-level vocabulary has types 1, 3, 4 and 5)");
    }
  }
  Json j;
  j["model"] = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", f.get_string_array("tokenizer.ggml.merges")},
                {"ignore_merges", pre == "llama-bpe"}};
  j["normalizer"] = pre == "qwen2" ? Json{{"type", "NFC"}} : Json(nullptr);
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", pre == "gpt-2"}};
  if (pre == "gpt-2") {
    j["pre_tokenizer"] = byte_level;
  } else {
    const std::string_view pattern = pre == "qwen2" ? kQwen2Pattern : kLlama3Pattern;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", Json::array({Json{{"type", "Split"},
                                                              {"pattern", {{"Regex", std::string(pattern)}}},
                                                              {"behavior", "Isolated"},
                                                              {"invert", false}},
                                                         byte_level})}};
  }
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = std::move(added);
  return BpeLoader::build(j, src, false);
}

int64_t BpeTokenizer::id(std::string_view token) const {
  const std::string k(token);
  if (auto it = added_ids_.find(k); it != added_ids_.end()) return it->second;
  auto it = vocab_.find(k);
  return it == vocab_.end() ? -1 : it->second;
}

bool BpeTokenizer::is_added(int64_t id) const {
  return has_token(id) && added_ids_.count(tokens_[size_t(id)]) && added_ids_.at(tokens_[size_t(id)]) == id;
}

void BpeTokenizer::Trie::insert(const std::string& token, int64_t token_id) {
  int32_t node = 0;
  for (unsigned char b : token) {
    const uint64_t key = uint64_t(node) << 8 | b;
    auto it = edges.find(key);
    if (it == edges.end()) {
      it = edges.emplace(key, int32_t(id.size())).first;
      id.push_back(-1);
    }
    node = it->second;
  }
  id[size_t(node)] = token_id;
}

std::pair<size_t, int64_t> BpeTokenizer::Trie::longest(std::string_view text, size_t i) const {
  std::pair<size_t, int64_t> best{0, -1};
  int32_t node = 0;
  for (size_t k = i; k < text.size(); ++k) {
    auto it = edges.find(uint64_t(node) << 8 | static_cast<unsigned char>(text[k]));
    if (it == edges.end()) break;
    node = it->second;
    if (id[size_t(node)] >= 0) best = {k + 1 - i, id[size_t(node)]};
  }
  return best;
}

void BpeTokenizer::split_text(std::string_view text, std::vector<Piece>& out) const {
  if (text.empty()) return;
  std::u32string s = detail::decode_utf8(text, "BPE tokenizer");
  if (nfc_) s = nfc(s);
  for (size_t i = 0; i < s.size();) {
    const size_t e = match_end(s, i, pattern_);
    Piece piece;
    for (size_t k = i; k < e; ++k) append_utf8(piece.text, s[k]);
    out.push_back(std::move(piece));
    i = e;
  }
}

// One pass of added-token matching: the leftmost position where a token starts, the longest
// one there; what lies between goes to the next pass (the normalized tokens) or, after the
// last, to the pre-tokenizer.
void BpeTokenizer::split_added(std::string_view text, const Trie& trie, const Trie* next, std::vector<Piece>& out) const {
  auto rest = [&](std::string_view part) {
    if (next) split_added(part, *next, nullptr, out);
    else split_text(part, out);
  };
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const auto [len, id] = trie.edges.empty() ? std::pair<size_t, int64_t>{0, -1} : trie.longest(text, i);
    if (len == 0) {
      ++i;
      continue;
    }
    rest(text.substr(start, i - start));
    out.push_back(Piece{std::string(text.substr(i, len)), id});
    i += len;
    start = i;
  }
  rest(text.substr(start));
}

std::vector<BpeTokenizer::Piece> BpeTokenizer::split(std::string_view text) const {
  if (!io::valid_utf8(text)) detail::decode_utf8(text, "BPE tokenizer");  // (throws, naming the byte)
  if (text.size() >= (size_t(1) << 31))
    throw InputError("BPE tokenizer: a text of " + std::to_string(text.size()) + " bytes (at most 2 GiB - 1 are encoded at once)");
  std::vector<Piece> out;
  split_added(text, raw_, &normalized_, out);
  return out;
}

std::vector<std::string> BpeTokenizer::pieces(std::string_view text) const {
  std::vector<std::string> out;
  for (Piece& p : split(text)) out.push_back(std::move(p.text));
  return out;
}

void BpeTokenizer::encode_piece(const std::string& bytes, std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    std::string sym;
    for (unsigned char b : bytes) append_utf8(sym, byte_char_[b]);
    if (auto it = vocab_.find(sym); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The symbols as a linked list; a heap of candidate merges by (rank, position), each
  // checked against the pair it was made for when it comes up (the reference's order).
  const size_t n = bytes.size();
  std::vector<int32_t> sym(n), prev(n), next(n);
  std::vector<char> live(n, 1);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = byte_id_[static_cast<unsigned char>(bytes[i])];
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank, pos, merged;
  };
  auto later = [](const Candidate& a, const Candidate& b) { return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos); };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  auto consider = [&](int32_t pos) {
    if (pos < 0 || next[size_t(pos)] < 0) return;
    auto it = merges_.find(uint64_t(uint32_t(sym[size_t(pos)])) << 32 | uint32_t(sym[size_t(next[size_t(pos)])]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(int32_t(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t p = size_t(c.pos);
    if (!live[p] || next[p] < 0) continue;
    const size_t q = size_t(next[p]);
    auto it = merges_.find(uint64_t(uint32_t(sym[p])) << 32 | uint32_t(sym[q]));
    if (it == merges_.end() || it->second.merged != c.merged) continue;  // (stale)
    sym[p] = c.merged;
    live[q] = 0;
    next[p] = next[q];
    if (next[q] >= 0) prev[size_t(next[q])] = int32_t(p);
    consider(prev[p]);
    consider(int32_t(p));
  }
  for (size_t i = 0; i < n; ++i)
    if (live[i]) out.push_back(sym[i]);
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> out;
  for (const Piece& p : split(text)) {
    if (p.added >= 0) out.push_back(p.added);
    else encode_piece(p.text, out);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string bytes;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int64_t i = ids[k];
    if (!has_token(i))
      throw InputError("BPE tokenizer: id " + std::to_string(i) + " (position " + std::to_string(k) + ") names no token");
    if (skip_special && special_[size_t(i)]) continue;
    // A token's symbols back to bytes; one with a character outside the byte-level alphabet
    // (an added token's own text) is its UTF-8 as it is, as in the reference.
    const std::string& tok = tokens_[size_t(i)];
    std::string b;
    bool mapped = true;
    for (char32_t cp : detail::decode_utf8(tok, "BPE tokenizer")) {
      auto it = char_byte_.find(cp);
      if (it == char_byte_.end()) {
        mapped = false;
        break;
      }
      b += char(it->second);
    }
    bytes += mapped ? b : tok;
  }
  return utf8_lossy(bytes);
}

}  // namespace rlx::nn
