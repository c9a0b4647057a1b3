// The Unicode data of the byte-level BPE tokenizer, generated from the reference
// implementation by gen_bpe_unicode_tables.py into bpe_unicode_tables.cpp. Internal to bpe.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rlx::nn::detail {

// The classes the pre-tokenizers' patterns name: \p{L}, \p{N} and \s as the reference's
// regex engine sees them; code points in no range are Other.
enum class BpeCharClass : uint8_t { Other, Letter, Number, Space };

struct BpeCharRange {
  char32_t lo, hi;  // inclusive
  BpeCharClass cls;
};

// A code point's full canonical decomposition: kNfdCodePoints[offset .. offset + count).
struct NfdEntry {
  char32_t cp;
  uint32_t offset, count;
};

// A run of code points with one nonzero canonical combining class.
struct CombiningRange {
  char32_t lo, hi;  // inclusive
  uint8_t ccc;
};

// first + second compose canonically to composite (the primary composites, exclusions left out).
struct Composition {
  char32_t first, second, composite;
};

// Each sorted by code point (compositions by first, then second), disjoint.
extern const BpeCharRange kBpeCharRanges[];
extern const size_t kBpeCharRangeCount;
extern const char32_t kNfdCodePoints[];
extern const NfdEntry kNfdEntries[];
extern const size_t kNfdEntryCount;
extern const CombiningRange kCombiningRanges[];
extern const size_t kCombiningRangeCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace rlx::nn::detail
