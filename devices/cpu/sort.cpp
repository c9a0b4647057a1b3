// sort on the cpu device: rows in parallel on the thread pool; each row's elements become
// unsigned keys (core/sort_key.hpp: NaNs last, -0 == +0, descending as complemented keys)
// and are sorted together with their positions, ties broken by position, which is the
// stable order. Keys of up to 32 bits are packed with the position into one u64, so the
// sort moves and compares single integers. Rows of 1024 or more go through an LSD radix
// sort (stable, so ties keep their order), shorter ones through std::sort. Values are
// copied bit for bit from x. A row is sorted by one thread.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/sort_key.hpp"
#include "devices/cpu/library.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cpu {
namespace {

// Rows at least this long are radix sorted (LSD, 8-bit digits, stable); shorter ones go
// through std::sort of the keys with the position as tie-break (the same order).
constexpr int64_t kRadixMin = 1024;

// Stable LSD radix sort of a by the key_bits low bits of key(record), 8 bits per pass: the
// counts of every digit in one read of a, then one scatter per digit; a digit that is the
// same for every record is skipped. tmp: scratch of a's size.
template <class R, class Key>
void radix_sort(std::vector<R>& a, std::vector<R>& tmp, int key_bits, Key key) {
  const size_t n = a.size();
  const int passes = (key_bits + 7) / 8;
  std::vector<size_t> count(size_t(passes) * 257, 0);
  for (const R& r : a) {
    const uint64_t k = key(r);
    for (int p = 0; p < passes; ++p) ++count[size_t(p) * 257 + size_t((k >> (8 * p)) & 0xFF) + 1];
  }
  for (int p = 0; p < passes; ++p) {
    size_t* c = count.data() + size_t(p) * 257;
    bool one_bucket = false;
    for (int d = 1; d <= 256; ++d) one_bucket |= c[d] == n;
    if (one_bucket) continue;
    for (int d = 1; d <= 256; ++d) c[d] += c[d - 1];
    const int shift = 8 * p;
    for (const R& r : a) tmp[c[(key(r) >> shift) & 0xFF]++] = r;
    a.swap(tmp);
  }
}

// Sorts rows [r0, r1) of the contiguous x, viewed as [outer, len, inner]: row r starts at
// (r / inner) * len * inner + r % inner, and its elements are `inner` apart.
template <class U>
void sort_rows(const U* x, U* values, int64_t* indices, int64_t r0, int64_t r1, int64_t len, int64_t inner,
               const sort_key::Layout& lay, bool descending) {
  const U inf = U(lay.inf_bits);
  const size_t n = size_t(len);
  const bool pack = sizeof(U) <= 4 && len <= int64_t(UINT32_MAX);
  const bool radix = len >= kRadixMin;
  std::vector<uint64_t> packed(pack ? n : 0), packed_tmp(pack && radix ? n : 0);
  std::vector<std::pair<U, int64_t>> pairs(pack ? 0 : n), pairs_tmp(!pack && radix ? n : 0);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t base = (r / inner) * len * inner + r % inner;
    auto at = [&](int64_t j) { return base + j * inner; };
    auto emit = [&](int64_t j, int64_t from) {
      values[at(j)] = x[at(from)];
      indices[at(j)] = from;
    };
    if (pack) {
      for (int64_t j = 0; j < len; ++j)
        packed[size_t(j)] = uint64_t(sort_key::key<U>(x[at(j)], lay.kind, inf, descending)) << 32 | uint64_t(j);
      if (radix)  // positions are already in order: sorting stably by the key alone is enough
        radix_sort(packed, packed_tmp, int(8 * sizeof(U)), [](uint64_t p) { return p >> 32; });
      else
        std::sort(packed.begin(), packed.end());
      for (int64_t j = 0; j < len; ++j) emit(j, int64_t(packed[size_t(j)] & 0xFFFFFFFFu));
    } else {
      for (int64_t j = 0; j < len; ++j) pairs[size_t(j)] = {sort_key::key<U>(x[at(j)], lay.kind, inf, descending), j};
      if (radix)
        radix_sort(pairs, pairs_tmp, int(8 * sizeof(U)), [](const std::pair<U, int64_t>& p) { return uint64_t(p.first); });
      else
        std::sort(pairs.begin(), pairs.end());
      for (int64_t j = 0; j < len; ++j) emit(j, pairs[size_t(j)].second);
    }
  }
}

template <class U>
void sort_typed(const Tensor& x, int ax, bool descending, std::span<Tensor> out) {
  const Shape& s = x.shape();
  int64_t inner = 1, outer = 1;
  for (size_t d = size_t(ax) + 1; d < s.size(); ++d) inner *= s[d];
  for (size_t d = 0; d < size_t(ax); ++d) outer *= s[d];
  const int64_t len = s[size_t(ax)], rows = outer * inner;
  if (len == 0 || rows == 0) return;
  const sort_key::Layout lay = sort_key::layout_of(x.dtype());
  const U* xp = x.data<U>();
  U* vp = out[0].data<U>();
  int64_t* ip = out[1].data<int64_t>();
  parallel_for(rows, std::max<int64_t>(1, 4096 / len), [&](int64_t r0, int64_t r1) {
    sort_rows<U>(xp, vp, ip, r0, r1, len, inner, lay, descending);
  });
}

Capability sort_supports(const ir::Node& n, const ir::Graph& g) {
  DType t = g.type(n.inputs.at(0)).dtype;
  if (sort_key::layout_of(t).bytes == 0)
    return Capability::no("no " + std::string(dtype_name(t)) + " sort kernel on cpu");
  return Capability::yes();
}

void sort_run(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor x = in[0].contiguous();
  const int ax = normalize_axis(n.attrs.get_int("axis"), x.rank());
  const bool desc = n.attrs.get_bool("descending");
  switch (sort_key::layout_of(x.dtype()).bytes) {
    case 1: return sort_typed<uint8_t>(x, ax, desc, out);
    case 2: return sort_typed<uint16_t>(x, ax, desc, out);
    case 4: return sort_typed<uint32_t>(x, ax, desc, out);
    case 8: return sort_typed<uint64_t>(x, ax, desc, out);
    default: throw InternalError(std::string("cpu sort: given ") + dtype_name(x.dtype()));
  }
}

}  // namespace

void add_sort_kernels(std::vector<LibraryKernel>& t) { t.push_back({"sort", sort_supports, sort_run}); }

}  // namespace rlx::cpu
