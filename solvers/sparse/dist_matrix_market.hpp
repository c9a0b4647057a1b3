// A Matrix Market file read by every rank of a communicator at once, no rank ever holding
// the whole matrix:
//   1. rank 0 reads the banner and size line and tells every rank the header and where the
//      entries begin;
//   2. each rank reads its share of the bytes after the size line, split at line boundaries
//      (a line belongs to the rank whose byte range holds its first byte), and parses those
//      lines with the serial reader's own line parser (parse_matrix_market_entries), line
//      numbers counted exactly (an exclusive scan of the ranks' line counts);
//   3. the ranks agree that the entries add up to the size line's count, mirror symmetric
//      entries, and an all-to-all sends each entry to the rank owning its row (PETSc's
//      contiguous split, even_row_starts);
//   4. each rank assembles its rows (duplicates summed, as the serial reader does) into the
//      distributed CSR (DistCsrMatrix::from_local_rows).
// Coordinate files of real, integer or pattern values, general, symmetric or skew-symmetric,
// are read so, into f64. Array and complex files are read by rank 0 and scattered (info
// says which). Any error on any rank (a file one rank cannot open, a malformed line, a
// wrong entry count) is a dist::CollectiveError on every rank at the same point, naming the
// file and line ("rank R: file:line: ..."), so no rank waits on the others.
#pragma once
#include <string>

#include "dist/communicator.hpp"
#include "solvers/sparse/dist_csr.hpp"
#include "solvers/sparse/matrix_market.hpp"

namespace rlx::sparse {

struct DistReadInfo {
  MmHeader header;
  bool parallel = false;     // every rank read its share; false: rank 0 read the file
  int64_t bytes_read = 0;    // by this rank
  int64_t entries_read = 0;  // parsed by this rank (before mirroring)
};

// Collective.
DistCsrMatrix read_matrix_market_distributed(const dist::Communicator& comm, const std::string& path,
                                             DistReadInfo* info = nullptr);

}  // namespace rlx::sparse
