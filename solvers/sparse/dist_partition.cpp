#include "solvers/sparse/dist_partition.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

#ifdef RLX_HAVE_PTSCOTCH
#include <cstdint>
#include <cstdio>

#include "dist/mpi.hpp"
// (ptscotch.h uses MPI_Comm and FILE without including their headers)
#include <ptscotch.h>
#endif

namespace rlx::sparse {

#ifdef RLX_HAVE_PTSCOTCH
bool have_ptscotch() { return true; }
#else
bool have_ptscotch() { return false; }
#endif

bool is_parallel_partitioner(const std::string& kind) { return kind == "ptscotch"; }

namespace {


#ifdef RLX_HAVE_PTSCOTCH
// The symmetrised graph's edges of this rank's rows, without self-loops: the stored
// off-diagonals of its rows, and the mirror of every stored a_ji that names one of its rows
// (a local j gives it directly; another rank's j sends it to this rank). Returns the
// adjacency in CSR form, neighbours ascending, in global numbers. Built by counting, each
// row then sorted on its own: rows are short, a sort of all the edges is not.
std::pair<std::vector<int64_t>, std::vector<int64_t>> symmetric_local_graph(const DistCsrMatrix& A) {
  const dist::Communicator& comm = A.communicator();
  const int64_t first = A.first_row(), mine = A.local_rows();
  const std::vector<int64_t>& starts = A.row_starts();
  const std::vector<int64_t>& ghosts = A.ghost_columns();
  const std::vector<int64_t> drp = index_vector(A.diagonal_block().row_ptr()), dci = index_vector(A.diagonal_block().col_idx());
  const std::vector<int64_t> orp = index_vector(A.off_diagonal_block().row_ptr()),
                             oci = index_vector(A.off_diagonal_block().col_idx());
  // The mirrors of the off-diagonal block's entries, to the ghosts' owners (ghosts ascend,
  // so their owners do too).
  std::vector<int64_t> ghost_owner(ghosts.size());
  for (size_t g = 0; g < ghosts.size(); ++g)
    ghost_owner[g] = int64_t(std::upper_bound(starts.begin(), starts.end(), ghosts[g]) - starts.begin()) - 1;
  std::vector<std::vector<int64_t>> mirror(static_cast<size_t>(comm.size()));
  for (int64_t r = 0; r < mine; ++r)
    for (int64_t k = orp[size_t(r)]; k < orp[size_t(r) + 1]; ++k) {
      const size_t g = size_t(oci[size_t(k)]);
      mirror[size_t(ghost_owner[g])].push_back(ghosts[g]);
      mirror[size_t(ghost_owner[g])].push_back(first + r);
    }
  const std::vector<std::vector<int64_t>> mirrored = comm.all_to_all(mirror);
  mirror = {};
  // Degrees with repeats, then the edges in place, then each row sorted and deduplicated.
  std::vector<int64_t> xadj(size_t(mine) + 1, 0);
  for (int64_t r = 0; r < mine; ++r) {
    xadj[size_t(r) + 1] += orp[size_t(r) + 1] - orp[size_t(r)];
    for (int64_t k = drp[size_t(r)]; k < drp[size_t(r) + 1]; ++k)
      if (const int64_t c = dci[size_t(k)]; c != r) ++xadj[size_t(r) + 1], ++xadj[size_t(c) + 1];
  }
  for (const std::vector<int64_t>& m : mirrored)
    for (size_t k = 0; k + 1 < m.size(); k += 2) ++xadj[size_t(m[k] - first) + 1];
  for (int64_t r = 0; r < mine; ++r) xadj[size_t(r) + 1] += xadj[size_t(r)];
  std::vector<int64_t> adj(size_t(xadj.back())), fill(xadj.begin(), xadj.end() - 1);
  for (int64_t r = 0; r < mine; ++r) {
    for (int64_t k = orp[size_t(r)]; k < orp[size_t(r) + 1]; ++k) adj[size_t(fill[size_t(r)]++)] = ghosts[size_t(oci[size_t(k)])];
    for (int64_t k = drp[size_t(r)]; k < drp[size_t(r) + 1]; ++k)
      if (const int64_t c = dci[size_t(k)]; c != r) {
        adj[size_t(fill[size_t(r)]++)] = first + c;
        adj[size_t(fill[size_t(c)]++)] = first + r;
      }
  }
  for (const std::vector<int64_t>& m : mirrored)
    for (size_t k = 0; k + 1 < m.size(); k += 2) adj[size_t(fill[size_t(m[k] - first)]++)] = m[k + 1];
  int64_t out = 0;
  for (int64_t r = 0; r < mine; ++r) {
    const auto b = adj.begin() + xadj[size_t(r)], e = adj.begin() + xadj[size_t(r) + 1];
    std::sort(b, e);
    const auto u = std::unique(b, e);
    const int64_t kept = int64_t(u - b);
    if (out != xadj[size_t(r)]) std::copy(b, u, adj.begin() + out);  // (out < xadj[r]: moving left)
    xadj[size_t(r)] = out;
    out += kept;
  }
  xadj[size_t(mine)] = out;
  adj.resize(size_t(out));
  return {std::move(xadj), std::move(adj)};
}
#endif

}  // namespace

std::vector<int64_t> ptscotch_parts(const DistCsrMatrix& A) {
  const dist::Communicator& comm = A.communicator();
  const int p = comm.size();
  const int64_t n = A.global_rows(), mine = A.local_rows(), first = A.first_row();
  std::vector<int64_t> part(static_cast<size_t>(mine), 0);
  if (p == 1) return part;
  if (n < p) {
    for (int64_t i = 0; i < mine; ++i) part[size_t(i)] = first + i;
    return part;
  }
#ifndef RLX_HAVE_PTSCOTCH
  throw InputError("--partition ptscotch: this rlx was built without PT-Scotch (install libptscotch-dev and reconfigure)");
#else
  auto [xadj, adj] = symmetric_local_graph(A);
  // PT-Scotch counts vertices and edges of the whole graph in its SCOTCH_Num (32 bits in
  // Debian's build).
  const int64_t edges = comm.all_reduce(int64_t(adj.size()), ReduceOp::Sum);
  constexpr int64_t kMax = std::numeric_limits<SCOTCH_Num>::max();
  if (n > kMax || edges > kMax)
    throw dist::CollectiveError("--partition ptscotch: the graph (" + std::to_string(n) + " vertices, " +
                                std::to_string(edges) + " directed edges) exceeds PT-Scotch's " +
                                std::to_string(sizeof(SCOTCH_Num) * 8) + "-bit indices");
  std::vector<SCOTCH_Num> vert(xadj.begin(), xadj.end()), edge(adj.begin(), adj.end());
  xadj = {}, adj = {};
  // PT-Scotch's calls are collective and agree on failure among themselves; each one's
  // result is still raised on every rank so that no rank goes on alone.
  auto check = [&comm](int rc, const char* step) {
    dist::raise_collectively(comm, rc == 0 ? std::string()
                                           : std::string("--partition ptscotch: ") + step + " failed (PT-Scotch's message above)");
  };
  // PT-Scotch draws random numbers and may run threads: as for the serial Scotch
  // (partition.cpp), a context of its own with a private generator, a fixed seed and
  // Scotch's deterministic mode, so every call with the same ranks gives the same partition.
  SCOTCH_Context context;
  SCOTCH_Dgraph graph, bound;
  SCOTCH_Strat strat;
  // Each object is released once it was made, whichever step fails.
  struct Cleanup {
    SCOTCH_Context* c = nullptr;
    SCOTCH_Strat* s = nullptr;
    SCOTCH_Dgraph *g = nullptr, *b = nullptr;
    ~Cleanup() {
      if (s) SCOTCH_stratExit(s);
      if (b) SCOTCH_dgraphExit(b);
      if (g) SCOTCH_dgraphExit(g);
      if (c) SCOTCH_contextExit(c);
    }
  } cleanup;
  check(SCOTCH_contextInit(&context), "SCOTCH_contextInit");
  cleanup.c = &context;
  check(SCOTCH_stratInit(&strat), "SCOTCH_stratInit");
  cleanup.s = &strat;
  check(SCOTCH_dgraphInit(&graph, dist::mpi_comm(comm)), "SCOTCH_dgraphInit");
  cleanup.g = &graph;
  check(SCOTCH_dgraphInit(&bound, dist::mpi_comm(comm)), "SCOTCH_dgraphInit");
  cleanup.b = &bound;
  check(SCOTCH_contextRandomClone(&context), "SCOTCH_contextRandomClone");
  SCOTCH_contextRandomSeed(&context, 1);
  SCOTCH_contextRandomReset(&context);
  check(SCOTCH_contextOptionSetNum(&context, SCOTCH_OPTIONNUMDETERMINISTIC, 1), "SCOTCH_contextOptionSetNum");
  // One thread, the caller's: PT-Scotch's threads would call MPI themselves, which MPI
  // initialised FUNNELED (the CLI's, and most programs') does not allow.
  check(SCOTCH_contextThreadSpawn(&context, 1, nullptr), "SCOTCH_contextThreadSpawn");
  const SCOTCH_Num local = SCOTCH_Num(mine), local_edges = SCOTCH_Num(edge.size());
  check(SCOTCH_dgraphBuild(&graph, 0, local, local, vert.data(), vert.data() + 1, nullptr, nullptr, local_edges, local_edges,
                           edge.data(), nullptr, nullptr),
        "SCOTCH_dgraphBuild");
  check(SCOTCH_contextBindDgraph(&context, &graph, &bound), "SCOTCH_contextBindDgraph");
  // A k-way partition within 1 % of the mean part size with Scotch's quality strategy:
  // PETSc's defaults for its PT-Scotch partitioning, so the two compare like for like.
  check(SCOTCH_stratDgraphMapBuild(&strat, SCOTCH_STRATQUALITY, SCOTCH_Num(p), SCOTCH_Num(p), 0.01),
        "SCOTCH_stratDgraphMapBuild");
  std::vector<SCOTCH_Num> where(size_t(std::max<int64_t>(mine, 1)), 0);
  check(SCOTCH_dgraphPart(&bound, SCOTCH_Num(p), &strat, where.data()), "SCOTCH_dgraphPart");
  for (int64_t i = 0; i < mine; ++i) part[size_t(i)] = where[size_t(i)];
  return part;
#endif
}

DistCsrMatrix repartition(const DistCsrMatrix& A, const std::string& kind) {
  if (kind == "contiguous") return A;
  if (kind == "ptscotch") return DistCsrMatrix::redistribute(A, ptscotch_parts(A), kind);
  throw InputError("repartition " + kind + ": a distributed matrix is partitioned as contiguous or ptscotch (metis and "
                   "scotch take the whole matrix: make_partition)");
}

}  // namespace rlx::sparse
