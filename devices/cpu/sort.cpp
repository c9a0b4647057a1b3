// sort on the cpu device: rows in parallel on the thread pool; each row's elements become
// unsigned keys (core/sort_key.hpp: NaNs last, -0 == +0, descending as complemented keys)
// and are sorted together with their positions, ties broken by position, which is the
// stable order. Keys of up to 32 bits are packed with the position into one u64, so the
// sort moves and compares single integers. Rows of 1024 or more go through an LSD radix
// sort (stable, so ties keep their order), shorter ones through std::sort. Values are
// rebuilt from the sorted keys (sort_key::bits_of), which is exact but for NaNs and zeros:
// those are copied bit for bit from x (payload and sign kept). Rows run in parallel; with
// fewer rows than threads, each long row (2^16 or more) is sorted by all the threads in
// turn.
#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/sort_key.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cpu {
namespace {

// Rows at least this long are radix sorted (LSD, 8-bit digits, stable); shorter ones go
// through std::sort of the keys with the position as tie-break (the same order).
constexpr int64_t kRadixMin = 1024;
// With fewer rows than threads, rows at least this long are sorted by all the threads.
constexpr int64_t kRowParallelMin = int64_t(1) << 16;

// Stable LSD radix sort of a by the key_bits low bits of key(record), 8 bits per pass: the
// counts of every digit in one read of a, then one scatter per digit; a digit that is the
// same for every record is skipped. tmp: scratch of a's size. One thread.
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

// The same order on nt threads, each taking a contiguous share of the records: per pass
// the threads count their share's digits, then each scatters its share to offsets that
// put thread t's records after thread t-1's (which keeps the sort stable).
template <class R, class Key>
void radix_sort(std::vector<R>& a, std::vector<R>& tmp, int key_bits, Key key, int nt) {
  if (nt <= 1) return radix_sort(a, tmp, key_bits, key);
  const size_t n = a.size();
  auto share = [&](int t) { return n * size_t(t) / size_t(nt); };
  std::vector<size_t> count(size_t(nt) * 256);
  for (int shift = 0; shift < key_bits; shift += 8) {
    std::fill(count.begin(), count.end(), size_t(0));
    ThreadPool::instance().run(nt, [&](int t, int) {
      size_t* c = count.data() + size_t(t) * 256;
      const R* src = a.data();
      const size_t i1 = share(t + 1);
      for (size_t i = share(t); i < i1; ++i) ++c[(key(src[i]) >> shift) & 0xFF];
    });
    // Offsets, digit-major then thread: where thread t's first record of digit d goes.
    size_t at = 0;
    bool one_bucket = false;
    for (int d = 0; d < 256; ++d) {
      size_t total = 0;
      for (int t = 0; t < nt; ++t) total += count[size_t(t) * 256 + size_t(d)];
      one_bucket |= total == n;
      for (int t = 0; t < nt; ++t) {
        const size_t c = count[size_t(t) * 256 + size_t(d)];
        count[size_t(t) * 256 + size_t(d)] = at;
        at += c;
      }
    }
    if (one_bucket) continue;
    ThreadPool::instance().run(nt, [&](int t, int) {
      size_t* off = count.data() + size_t(t) * 256;
      const R* src = a.data();
      R* dst = tmp.data();
      const size_t i1 = share(t + 1);
      for (size_t i = share(t); i < i1; ++i) dst[off[(key(src[i]) >> shift) & 0xFF]++] = src[i];
    });
    a.swap(tmp);
  }
}

// Per-thread buffers, reused from row to row.
template <class U>
struct Buffers {
  std::vector<uint64_t> packed, packed_tmp;
  std::vector<std::pair<U, int64_t>> pairs, pairs_tmp;
};

// Sorts row `r` of the contiguous x, viewed as [outer, len, inner]: the row starts at
// (r / inner) * len * inner + r % inner, and its elements are `inner` apart. nt threads
// work on the row (1 inside a parallel loop over rows).
template <class U>
void sort_row(const U* x, U* values, int64_t* indices, int64_t r, int64_t len, int64_t inner,
              const sort_key::Layout& lay, bool descending, int nt, Buffers<U>& buf) {
  const U inf = U(lay.inf_bits);
  const size_t n = size_t(len);
  const bool pack = sizeof(U) <= 4 && len <= int64_t(UINT32_MAX);
  const bool radix = len >= kRadixMin;
  const int64_t base = (r / inner) * len * inner + r % inner;
  // (By value: the loops below are also handed to the pool, and a by-reference capture
  // would make every store through values/indices a possible write to base or inner.)
  auto at = [base, inner](int64_t j) { return base + j * inner; };
  // A sorted element's value from its key (no random read of x), except NaNs and zeros,
  // whose keys do not say which bits they had: those are copied from x.
  auto value_of = [x, at, kind = lay.kind, descending](U k, int64_t from) {  // (by value, as `at`)
    bool exact = true;
    const U v = sort_key::bits_of<U>(k, kind, descending, exact);
    return exact ? v : x[at(from)];
  };
  // Loops over the row's elements, split over the nt threads.
  auto over = [&](auto&& f) {  // (a template, so the one-thread case inlines)
    if (nt == 1) f(int64_t(0), len);
    else ThreadPool::instance().run(nt, [&](int t, int m) { f(len * t / m, len * (t + 1) / m); });
  };
  // Records of (key, position): fill, sort (stably by key), then write values and indices.
  auto run = [&](auto& p, auto& tmp, auto make, auto key_of, auto pos_of) {
    p.resize(n);
    over([&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) p[size_t(j)] = make(sort_key::key<U>(x[at(j)], lay.kind, inf, descending), j);
    });
    if (radix) {  // positions are already in order: sorting stably by the key alone is enough
      tmp.resize(n);
      radix_sort(p, tmp, int(8 * sizeof(U)), key_of, nt);
    } else {
      std::sort(p.begin(), p.end());
    }
    over([&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t from = pos_of(p[size_t(j)]);
        values[at(j)] = value_of(U(key_of(p[size_t(j)])), from);
        indices[at(j)] = from;
      }
    });
  };
  if (pack)
    run(buf.packed, buf.packed_tmp, [](U k, int64_t j) { return uint64_t(k) << 32 | uint64_t(j); },
        [](uint64_t q) { return q >> 32; }, [](uint64_t q) { return int64_t(q & 0xFFFFFFFFu); });
  else
    run(buf.pairs, buf.pairs_tmp, [](U k, int64_t j) { return std::pair<U, int64_t>{k, j}; },
        [](const std::pair<U, int64_t>& q) { return uint64_t(q.first); },
        [](const std::pair<U, int64_t>& q) { return q.second; });
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
  const int threads = ThreadPool::in_task() ? 1 : num_threads();
  if (rows < threads && len >= kRowParallelMin) {
    // Fewer rows than threads: each row on every thread, one row after another.
    Buffers<U> buf;
    for (int64_t r = 0; r < rows; ++r) sort_row<U>(xp, vp, ip, r, len, inner, lay, descending, threads, buf);
    return;
  }
  parallel_for(rows, std::max<int64_t>(1, 4096 / len), [&](int64_t r0, int64_t r1) {
    Buffers<U> buf;
    for (int64_t r = r0; r < r1; ++r) sort_row<U>(xp, vp, ip, r, len, inner, lay, descending, 1, buf);
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

void add_sort_kernels(KernelTable& t) { t.add(PredicateKernel{"sort", sort_supports, sort_run}); }

}  // namespace rlx::cpu
