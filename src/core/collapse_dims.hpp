#pragma once
// Merging the dimensions of a strided walk, shared by the devices' strided copies and
// elementwise launches.
#include <cstdint>
#include <vector>

namespace rlx {

// The fewest dimensions a strided walk over `rank` extents (sh) by several operands (each
// strides[k], rank entries, in elements) needs: extents of 1 dropped, and a dimension merged
// into the one inside it wherever every operand steps across the pair as across one
// (strides[k][d] == strides[k][d + 1] * sh[d + 1]). Rewrites the first entries of sh and of
// each strides[k] in place and returns the new rank (0 when every extent is 1). A causal
// mask [T, S] broadcast over scores [B, H, T, S] (strides 0, 0, S, 1) walks as [B*H, T*S].
inline int collapse_dims(int rank, int64_t* sh, const std::vector<int64_t*>& strides) {
  int r = 0;
  for (int i = 0; i < rank; ++i) {
    const int64_t e = sh[i];
    if (e == 1) continue;
    bool merge = r > 0;
    for (int64_t* st : strides) merge = merge && st[r - 1] == st[i] * e;
    if (merge) {
      sh[r - 1] *= e;
      for (int64_t* st : strides) st[r - 1] = st[i];
    } else {
      sh[r] = e;
      for (int64_t* st : strides) st[r] = st[i];
      ++r;
    }
  }
  return r;
}

}  // namespace rlx
