// Matrix Market reader (solvers/sparse/matrix_market.hpp), in memory: `rlx solve FILE.mtx`
// and `--rhs b.mtx` read through it. A file that reads must also write and read back to
// the same arrays, bit for bit (the reader's and the writer's documented promise).
// The split read that `mpirun rlx solve FILE.mtx` does (dist_matrix_market.hpp: the entries
// cut in two at a line boundary, each part parsed alone with its first line's number) must
// agree with the whole-file read: the same matrix when it reads, and a refusal when it does
// not (an error in a part, or parts whose entry counts do not add up to the size line's).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "solvers/sparse/matrix_market.hpp"

using namespace rlx;
using namespace rlx::sparse;

namespace {

// A valid file may declare hundreds of millions of empty rows, whose row pointers the reader
// allocates (up to the host's memory) and checks one by one. Here the reads are capped
// (ReadOptions::max_bytes) at 16 MiB, about 500,000 rows: far below libFuzzer's 1 GiB
// allocation limit, and a second of work under the sanitizers rather than the 10 s timeout
// (7.3 million empty rows took 11 s), so only allocations and work the cap does not govern
// are findings.
constexpr int64_t kMaxBytes = int64_t(16) << 20;

bool same(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void round_trip(const CsrMatrix& A) {
  std::string text = format_matrix_market(A);
  MatrixMarketFile back;
  try {
    back = parse_matrix_market(text, "round_trip.mtx", ReadOptions{A.value_type(), A.index_type(), Duplicates::Error, kMaxBytes});
  } catch (const rlx::Error& e) {
    fuzz::finding(std::string("a matrix that was read does not read back once written: ") + e.what());
  }
  const CsrMatrix& B = back.matrix;
  if (B.rows() != A.rows() || B.cols() != A.cols() || !same(B.row_ptr(), A.row_ptr()) ||
      !same(B.col_idx(), A.col_idx()) || !same(B.values(), A.values()))
    fuzz::finding("written and read back, the matrix differs");
}

enum class Split { Refused, NotSplit, Read };

// The split read of `text` at the first line boundary at or after byte `cut` of its entries:
// Refused, NotSplit (a kind of file the distributed reader leaves to rank 0), or Read with
// the assembled matrix in `m`.
Split split_read(std::string_view text, size_t cut, CsrMatrix& m) {
  MmDataStart start;
  MmHeader h;
  try {
    h = parse_matrix_market_header(text, "fuzz.mtx", &start);
  } catch (const InputError&) {
    return Split::Refused;
  }
  if (h.format != MmFormat::Coordinate || h.field == MmField::Complex || h.symmetry == MmSymmetry::Hermitian)
    return Split::NotSplit;
  std::string_view data = text.substr(size_t(start.offset));
  size_t at = std::min(cut, data.size());
  while (at > 0 && at < data.size() && data[at - 1] != '\n') ++at;
  const std::string_view first = data.substr(0, at), second = data.substr(at);
  MmEntries e;
  try {
    int64_t count = parse_matrix_market_entries(first, h, "fuzz.mtx", start.line + 1, e);
    const int second_line = start.line + 1 + int(std::count(first.begin(), first.end(), '\n'));
    count += parse_matrix_market_entries(second, h, "fuzz.mtx", second_line, e);
    if (count != h.entries) return Split::Refused;
  } catch (const InputError&) {
    return Split::Refused;
  }
  if (h.rows >= kMaxBytes / 32) return Split::Refused;  // (as the whole read refuses it under kMaxBytes)
  const size_t stored = e.i.size();
  for (size_t k = 0; k < stored; ++k)
    if (h.symmetry != MmSymmetry::General && e.i[k] != e.j[k]) {
      e.i.push_back(e.j[k]), e.j.push_back(e.i[k]);
      e.v.push_back(h.symmetry == MmSymmetry::SkewSymmetric ? -e.v[k] : e.v[k]);
    }
  m = CsrMatrix::from_coo(h.rows, h.cols, e.i, e.j, e.v, DType::F64);
  if (h.field == MmField::Pattern)
    for (int64_t k = 0; k < m.nnz(); ++k) m.values().data<double>()[k] = 1;
  return Split::Read;
}

void check_split(std::string_view text, size_t cut) {
  MatrixMarketFile whole;
  bool whole_ok = true;
  std::string why;
  try {
    whole = parse_matrix_market(text, "fuzz.mtx", ReadOptions{.max_bytes = kMaxBytes});
  } catch (const InputError& e) {
    whole_ok = false;
    why = e.what();
  }
  CsrMatrix parts;
  Split split = Split::Refused;
  try {
    split = split_read(text, cut, parts);
  } catch (const std::bad_alloc&) {
    return;
  }
  if (split == Split::NotSplit) return;
  if (!whole_ok) {
    // (limits of memory the whole read applies and the parts do not)
    if (split == Split::Read && why.find("memory") == std::string::npos && why.find("max_bytes") == std::string::npos &&
        why.find("reserve") == std::string::npos)
      fuzz::finding("the split read accepts a file the whole read refuses: " + why);
    return;
  }
  if (split == Split::Refused) fuzz::finding("the split read refuses a file the whole read accepts");
  const CsrMatrix w = whole.matrix.with_index_type(parts.index_type());
  if (parts.rows() != w.rows() || !same(parts.row_ptr(), w.row_ptr()) || !same(parts.col_idx(), w.col_idx()) ||
      !same(parts.values(), w.values()))
    fuzz::finding("split at byte " + std::to_string(cut) + ", the read differs from the whole read");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  RLX_FUZZ_GUARD({
    MatrixMarketFile f = parse_matrix_market(text, "fuzz.mtx", ReadOptions{.max_bytes = kMaxBytes});
    round_trip(f.matrix);
  })
  // What `rlx solve --rhs b.mtx` asks for: the values as another type, duplicates refused.
  RLX_FUZZ_GUARD({
    parse_matrix_market(text, "fuzz.mtx", ReadOptions{DType::C64, DType::I64, Duplicates::Error, kMaxBytes});
  })
  RLX_FUZZ_GUARD({ check_split(text, size > 0 ? size_t(data[size - 1]) * 7 : 0); })
  return 0;
}
