// The tables of BERT's uncased normalisation, generated from the reference implementation
// by gen_bert_unicode_tables.py into bert_unicode_tables.cpp. Internal to the tokenizer.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rlx::nn::detail {

enum class BertCharKind : uint8_t {
  Drop,    // removed: control and unassigned characters, combining marks (accents)
  Space,   // whitespace, which becomes ' '
  Spaced,  // CJK ideographs, each a word of its own
  Punct,   // punctuation, each a word of its own
};

struct BertCharRange {
  char32_t lo, hi;  // inclusive
  BertCharKind kind;
};

// A code point whose accents are stripped or case lowered: its replacement, UTF-8.
struct BertCharMapping {
  char32_t cp;
  const char* utf8;
};

// Sorted by code point, disjoint; code points in no range are kept as they are.
extern const BertCharRange kBertCharRanges[];
extern const size_t kBertCharRangeCount;
// Sorted by code point.
extern const BertCharMapping kBertCharMappings[];
extern const size_t kBertCharMappingCount;

}  // namespace rlx::nn::detail
