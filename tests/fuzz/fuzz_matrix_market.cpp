// Matrix Market reader (solvers/sparse/matrix_market.hpp), in memory: `rlx solve FILE.mtx`
// and `--rhs b.mtx` read through it. A file that reads must also write and read back to
// the same arrays, bit for bit (the reader's and the writer's documented promise).
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
  return 0;
}
