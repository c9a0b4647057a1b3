// A square sparse matrix distributed by rows over the ranks of a communicator, as PETSc's
// MPIAIJ: rank r owns the contiguous rows [row_starts[r], row_starts[r+1]) and the same
// range of a distributed vector's entries. Its rows are kept as two CSR blocks:
//   diagonal block      columns of its own range, renumbered from 0 (local x entries);
//   off-diagonal block  the other columns (ghosts), renumbered 0..ghosts-1 in ascending
//                       global order; ghost_columns() maps them back.
// The SpMV y = A x is then y = D x_local + O x_ghost, where x_ghost comes from the ranks
// owning those columns through a planned halo exchange (dist::HaloExchange); the operator
// (DistCsrOperator) emits it so the exchange overlaps D's product:
//   halo_begin(x) -> spmv(D, x) -> halo_end -> y += spmv(O, ghosts)
//
//   auto comm = rlx::dist::Communicator::world();
//   auto A = DistCsrMatrix::scatter(comm, rank == 0 ? global : CsrMatrix{});   // or from_local_rows
//   DistCsrOperator op(A);
//   auto M = make_dist_preconditioner("bjacobi", op);
//   auto res = krylov_solve(op, b_local, *M, opts);   // b_local: this rank's rows of b
//
// Building is collective; every rank throws the same InputError for input that is wrong
// as a whole (sizes or dtypes that differ between ranks, rows that do not tile 0..n).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/operator.hpp"
#include "solvers/sparse/partition.hpp"
#include "solvers/sparse/precond.hpp"

namespace rlx::sparse {

// PETSc's default split of n rows over p ranks: n / p each, one more on the first n % p.
std::vector<int64_t> even_row_starts(int64_t n, int p);

class DistCsrMatrix {
 public:
  // Collective. Rank `root` holds the whole square matrix (the others' argument is ignored);
  // row_starts (p + 1 ascending offsets from 0 to n, read on root) sets the partition,
  // by default even_row_starts. Each rank receives its rows.
  static DistCsrMatrix scatter(const dist::Communicator& comm, const CsrMatrix& global, int root = 0,
                               std::vector<int64_t> row_starts = {});
  // Collective. As above, with the rows spread as `partition` says (read on root; its
  // row_starts index the permuted rows, empty: even_row_starts): when it has an order, root
  // permutes the matrix
  // (P A P^T, partition.hpp) before scattering, and each rank keeps the user's number of
  // each of its rows (user_rows()), which the vector functions below use to come back to
  // the user's order.
  static DistCsrMatrix scatter(const dist::Communicator& comm, const CsrMatrix& global, const RowPartition& partition,
                               int root = 0);
  // Collective. Each rank gives its own rows with global column indices: a local.rows() x n
  // matrix, n the global size (the same on every rank). Ranks hold consecutive row blocks in
  // rank order (rank 0 the first); a rank may hold none.
  static DistCsrMatrix from_local_rows(const dist::Communicator& comm, const CsrMatrix& local);
  // Collective. A's rows moved to the ranks `dest` names (dest[i]: the rank taking this
  // rank's row i; dest has local_rows() entries) and renumbered P A P^T so that each rank's
  // rows are again a contiguous block: rank r's new rows are the rows sent to it, ordered by
  // their rank in A and, within a rank, by their row in A (for a contiguous A this is
  // partition_from_parts's order, so a part vector gives the same matrix as the serial
  // scatter). Each row keeps its user's number (user_rows()), and partition_kind() becomes
  // `kind`. No rank holds more than its own rows and the ones it receives: the parallel
  // partitioners (ptscotch_parts) use this to move a matrix each rank read in parallel.
  // An InputError on every rank for a destination outside 0..size()-1 or a dest of the
  // wrong length on any rank.
  static DistCsrMatrix redistribute(const DistCsrMatrix& A, const std::vector<int64_t>& dest, std::string kind);

  const dist::Communicator& communicator() const { return comm_; }
  int64_t global_rows() const { return row_starts_.back(); }
  int64_t local_rows() const { return diag_.rows(); }
  int64_t first_row() const { return row_starts_[size_t(comm_.rank())]; }
  const std::vector<int64_t>& row_starts() const { return row_starts_; }
  DType value_type() const { return diag_.value_type(); }
  const CsrMatrix& diagonal_block() const { return diag_; }
  const CsrMatrix& off_diagonal_block() const { return offd_; }
  const std::vector<int64_t>& ghost_columns() const { return ghosts_; }
  const dist::HaloExchange& halo() const { return *halo_; }
  // Bytes this rank sends plus receives in one SpMV's halo exchange.
  int64_t halo_bytes() const;
  // This rank's rows with global column indices (both blocks merged, columns ascending).
  CsrMatrix local_rows_global() const;
  // "contiguous", "metis", or the name a RowPartition gave; the same on every rank.
  const std::string& partition_kind() const { return partition_kind_; }
  // Whether the rows were permuted (the same on every rank), and the user's row number of
  // each of this rank's rows (first_row() + i when not permuted).
  bool permuted() const { return permuted_; }
  std::vector<int64_t> user_rows() const;

 private:
  DistCsrMatrix(const dist::Communicator& comm, std::vector<int64_t> starts, const CsrMatrix& local);
  dist::Communicator comm_;
  std::vector<int64_t> row_starts_;
  CsrMatrix diag_, offd_;
  std::vector<int64_t> ghosts_;
  std::shared_ptr<dist::HaloExchange> halo_;
  std::string partition_kind_ = "contiguous";
  bool permuted_ = false;
  std::vector<int64_t> user_rows_;  // when permuted_
};

// A distributed CSR matrix as the Krylov solvers' operator: vectors are this rank's rows,
// products overlap the halo exchange with the diagonal block's product, and the solvers'
// dot products become all_reduce over communicator().
class DistCsrOperator final : public LinearOperator {
 public:
  explicit DistCsrOperator(DistCsrMatrix A);
  int64_t rows() const override { return A_.local_rows(); }
  int64_t cols() const override { return A_.local_rows(); }
  DType dtype() const override { return A_.value_type(); }
  Var apply(BoundGraph& g, const Var& x) const override;
  Tensor diagonal() const override { return diag_.diagonal(); }
  std::string describe() const override;
  const dist::Communicator* communicator() const override { return &A_.communicator(); }
  const DistCsrMatrix& matrix() const { return A_; }
  const CsrOperator& diagonal_block() const { return diag_; }

 private:
  DistCsrMatrix A_;
  CsrOperator diag_, offd_;
};

// Preconditioners for a distributed matrix: "none", "jacobi" (the local diagonal), and
// block Jacobi — each rank's diagonal block preconditioned on its own, without
// communication, as PETSc's default in parallel: "bjacobi" (ILU(0) per block, PETSc's
// default sub-preconditioner), "bjacobi-ic0" (IC(0) per block). On one rank block Jacobi is
// ILU(0) / IC(0) of the whole matrix.
std::unique_ptr<Preconditioner> make_dist_preconditioner(const std::string& name, const DistCsrOperator& A);

// Rows [row_starts[r], row_starts[r+1]) of a global vector on rank `root`, to each rank
// (collective); and back: every rank's part gathered on every rank in row order.
Tensor scatter_vector(const dist::Communicator& comm, const Tensor& global, const std::vector<int64_t>& row_starts,
                      int root = 0);
Tensor gather_vector(const dist::Communicator& comm, const Tensor& local, const std::vector<int64_t>& row_starts);
// The same in the user's order for a matrix's partition (collective): a vector in the
// user's row order on root, to each rank's rows of A; and each rank's rows of A back to the
// whole vector in the user's order on every rank. Without a permutation these are the two
// above with A.row_starts().
Tensor scatter_vector(const Tensor& global, const DistCsrMatrix& A, int root = 0);
Tensor gather_vector(const Tensor& local, const DistCsrMatrix& A);
// Every rank's user_rows(), concatenated in rank order: the user's row at each permuted
// position (collective; empty when A is not permuted).
std::vector<int64_t> user_order(const DistCsrMatrix& A);
// ||b - A x|| / ||b|| over all ranks (x and b: this rank's rows of A), accumulated on the
// host in long double as sparse::relative_residual; the same on every rank (collective).
double relative_residual(const DistCsrMatrix& A, const Tensor& x_local, const Tensor& b_local);

}  // namespace rlx::sparse
