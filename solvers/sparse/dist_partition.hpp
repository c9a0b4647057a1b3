// Partitioning a matrix that is already distributed, without any rank holding the whole of
// it (partition.hpp's METIS and Scotch need the whole graph on one rank):
//
//   auto A = read_matrix_market_distributed(comm, "A.mtx");    // contiguous, read in parallel
//   auto B = repartition(A, "ptscotch");                      // PT-Scotch, then rows moved
//
// ptscotch  PT-Scotch's parallel k-way partition (SCOTCH_dgraphPart, Debian's
//           libptscotch-dev) of the symmetrised graph of A (an edge i-j for every stored
//           off-diagonal a_ij or a_ji), each rank giving the edges of its own rows; then
//           DistCsrMatrix::redistribute moves each row to its rank, renumbered so that each
//           rank's rows are a contiguous block, and the user's row numbers are kept to bring
//           vectors back to the user's order (user_rows(), gather_vector).
// Optional at build time (have_ptscotch(), partition.hpp); it needs MPI. Seeded: the same
// partition on every run with the same number of ranks. Collective; every rank throws the
// same InputError.
#pragma once
#include <string>
#include <vector>

#include "solvers/sparse/dist_csr.hpp"

namespace rlx::sparse {

// Each of this rank's rows' new rank (local_rows() entries). With one rank, all 0; with
// fewer rows than ranks, global row i to rank i (no PT-Scotch call, so these two answer in a
// build without it too). Otherwise InputError without PT-Scotch, when the graph does not fit
// its indices (SCOTCH_Num), or when it fails.
std::vector<int64_t> ptscotch_parts(const DistCsrMatrix& A);
// A partitioned as `kind` says: "contiguous" gives A back as it is; "ptscotch" partitions
// and redistributes it. Other names: InputError naming the choices (the serial
// partitioners take the whole matrix: make_partition).
DistCsrMatrix repartition(const DistCsrMatrix& A, const std::string& kind);
// Whether `kind` partitions a distributed matrix (repartition) rather than a whole one.
bool is_parallel_partitioner(const std::string& kind);

}  // namespace rlx::sparse
