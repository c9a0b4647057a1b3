// How the rows of a square matrix are spread over the ranks of a distributed solve.
//
//   contiguous  rank r owns the user's rows [row_starts[r], row_starts[r+1]) (PETSc's split);
//   metis       METIS_PartGraphKway on the symmetrised graph of A (an edge i-j for every
//               stored off-diagonal a_ij or a_ji) assigns each row a rank; the matrix is then
//               permuted (P A P^T) so that each rank's rows are a contiguous block of the
//               permuted rows, and the permutation is kept to bring vectors back to the
//               user's order.
//   scotch      the same with Scotch's k-way graph partitioner (SCOTCH_graphPart, Debian's
//               libscotch-dev) in place of METIS.
//
// METIS and Scotch run serially on one rank (Debian ships METIS 5 but not ParMETIS): the rank
// that holds the whole matrix partitions it. Both are optional at build time (have_metis(),
// have_scotch()). A fourth kind, ptscotch, partitions a matrix already distributed, each rank
// giving its own rows' edges (dist_partition.hpp), so no rank ever holds the whole matrix.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "solvers/sparse/csr.hpp"

namespace rlx::sparse {

bool have_metis();
bool have_scotch();
bool have_ptscotch();  // (dist_partition.cpp)
// InputError unless kind is contiguous, or metis / scotch / ptscotch in a build that has it (naming the
// package to install); what make_partition and the CLI's --partition check.
void check_partition_kind(const std::string& kind);

struct RowPartition {
  std::string kind = "contiguous";     // "contiguous", "metis", "scotch", or a caller's own name
  std::vector<int64_t> row_starts;     // p + 1 offsets into the permuted rows
  // order[k]: the user's row at permuted position k (rank r holds positions
  // row_starts[r]..row_starts[r+1]-1). Empty: the identity (no permutation).
  std::vector<int64_t> order;
  int ranks() const { return int(row_starts.size()) - 1; }
};

// PETSc's split, no permutation.
RowPartition contiguous_partition(int64_t n, int p);
// part[i] in [0, p): the rank owning user row i. Rows keep their relative order within a
// rank. Throws InputError for a part out of range.
RowPartition partition_from_parts(const std::vector<int64_t>& part, int p, std::string kind);
// METIS k-way on the symmetrised graph of A (square). Throws InputError when this build has
// no METIS, when the graph does not fit METIS's 32-bit indices, or when METIS fails.
// With p == 1, or a matrix with fewer rows than ranks, no METIS call: p == 1 is the identity,
// and with n < p row i goes to rank i.
RowPartition metis_partition(const CsrMatrix& A, int p);
// Scotch's k-way partition of the same graph (seeded: the same partition on every run), with
// METIS's contract above (InputError without Scotch, in this build, or when Scotch fails).
RowPartition scotch_partition(const CsrMatrix& A, int p);
// "contiguous", "metis" or "scotch"; anything else is an InputError naming the choices
// (ptscotch among them: it partitions a distributed matrix, dist_partition.hpp).
RowPartition make_partition(const std::string& kind, const CsrMatrix& A, int p);

// B = P A P^T with B[k][l] = A[order[k]][order[l]] (order a permutation of 0..n-1).
CsrMatrix permute_symmetric(const CsrMatrix& A, const std::vector<int64_t>& order);
// out[k] = v[order[k]] (user order -> permuted), and its inverse out[order[k]] = v[k].
Tensor permute_rows(const Tensor& v, const std::vector<int64_t>& order);
Tensor unpermute_rows(const Tensor& v, const std::vector<int64_t>& order);

}  // namespace rlx::sparse
