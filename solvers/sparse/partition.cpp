#include "solvers/sparse/partition.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.hpp"

#ifdef RLX_HAVE_METIS
#include <metis.h>
#endif
#ifdef RLX_HAVE_SCOTCH
#include <cstdint>
#include <cstdio>
#include <scotch.h>
#endif

namespace rlx::sparse {

namespace {


// The bytes of one leading-axis row of t.
size_t row_bytes(const Tensor& t) {
  int64_t per = 1;
  for (int d = 1; d < t.rank(); ++d) per *= t.shape()[size_t(d)];
  return dtype_storage_bytes(t.dtype(), per);
}

void check_order(const std::vector<int64_t>& order, int64_t n, const char* who) {
  if (int64_t(order.size()) != n)
    throw InputError(std::string(who) + ": the permutation has " + std::to_string(order.size()) + " entries, expected " +
                     std::to_string(n));
  std::vector<char> seen(size_t(n), 0);
  for (int64_t o : order) {
    if (o < 0 || o >= n || seen[size_t(o)])
      throw InputError(std::string(who) + ": not a permutation of 0.." + std::to_string(n - 1) + " (entry " +
                       std::to_string(o) + ")");
    seen[size_t(o)] = 1;
  }
}

}  // namespace

#ifdef RLX_HAVE_METIS
bool have_metis() { return true; }
#else
bool have_metis() { return false; }
#endif
#ifdef RLX_HAVE_SCOTCH
bool have_scotch() { return true; }
#else
bool have_scotch() { return false; }
#endif

void check_partition_kind(const std::string& kind) {
  if (kind != "contiguous" && kind != "metis" && kind != "scotch" && kind != "ptscotch")
    throw InputError("--partition " + kind + ": expected contiguous, metis, scotch or ptscotch");
  if (kind == "metis" && !have_metis())
    throw InputError("--partition metis: this rlx was built without METIS (install libmetis-dev and reconfigure)");
  if (kind == "scotch" && !have_scotch())
    throw InputError("--partition scotch: this rlx was built without Scotch (install libscotch-dev and reconfigure)");
  if (kind == "ptscotch" && !have_ptscotch())
    throw InputError("--partition ptscotch: this rlx was built without PT-Scotch (install libptscotch-dev and reconfigure; "
                     "it needs MPI)");
}

RowPartition contiguous_partition(int64_t n, int p) {
  RowPartition r;
  r.row_starts.assign(size_t(p) + 1, 0);
  for (int k = 0; k < p; ++k) r.row_starts[size_t(k) + 1] = r.row_starts[size_t(k)] + n / p + (k < n % p ? 1 : 0);
  return r;
}

RowPartition partition_from_parts(const std::vector<int64_t>& part, int p, std::string kind) {
  RowPartition r;
  r.kind = std::move(kind);
  r.row_starts.assign(size_t(p) + 1, 0);
  for (size_t i = 0; i < part.size(); ++i) {
    if (part[i] < 0 || part[i] >= p)
      throw InputError("partition: row " + std::to_string(i) + " is given rank " + std::to_string(part[i]) + ", outside 0.." +
                       std::to_string(p - 1));
    ++r.row_starts[size_t(part[i]) + 1];
  }
  for (int k = 0; k < p; ++k) r.row_starts[size_t(k) + 1] += r.row_starts[size_t(k)];
  // Counting sort by rank: stable, so rows keep their relative order within a rank.
  std::vector<int64_t> next(r.row_starts.begin(), r.row_starts.end() - 1);
  r.order.assign(part.size(), 0);
  for (size_t i = 0; i < part.size(); ++i) r.order[size_t(next[size_t(part[i])]++)] = int64_t(i);
  return r;
}

namespace {

// The symmetrised graph of A without self-loops, in CSR form (what METIS and Scotch both
// take): an edge i-j for every stored off-diagonal a_ij or a_ji.
struct Graph {
  std::vector<int64_t> xadj, adjncy;
};

[[maybe_unused]] Graph symmetric_graph(const CsrMatrix& A) {
  const int64_t n = A.rows();
  const std::vector<int64_t> rp = index_vector(A.row_ptr()), ci = index_vector(A.col_idx());
  std::vector<std::vector<int64_t>> adj(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = rp[size_t(r)]; k < rp[size_t(r) + 1]; ++k) {
      const int64_t c = ci[size_t(k)];
      if (c == r) continue;
      adj[size_t(r)].push_back(c);
      adj[size_t(c)].push_back(r);
    }
  Graph g;
  g.xadj.assign(size_t(n) + 1, 0);
  for (int64_t r = 0; r < n; ++r) {
    auto& a = adj[size_t(r)];
    std::sort(a.begin(), a.end());
    a.erase(std::unique(a.begin(), a.end()), a.end());
    g.xadj[size_t(r) + 1] = g.xadj[size_t(r)] + int64_t(a.size());
  }
  g.adjncy.reserve(size_t(g.xadj.back()));
  for (auto& a : adj) {
    g.adjncy.insert(g.adjncy.end(), a.begin(), a.end());
    a = {};
  }
  return g;
}

// The graph's arrays in a partitioner's index type, refused when they do not fit it.
template <class Idx>
std::pair<std::vector<Idx>, std::vector<Idx>> narrowed(const Graph& g, const std::string& kind, const std::string& library) {
  constexpr int64_t kMax = std::numeric_limits<Idx>::max();
  const int64_t n = int64_t(g.xadj.size()) - 1, edges = int64_t(g.adjncy.size());
  if (n > kMax || edges > kMax)
    throw InputError("--partition " + kind + ": the graph (" + std::to_string(n) + " vertices, " + std::to_string(edges) +
                     " directed edges) exceeds " + library + "'s " + std::to_string(sizeof(Idx) * 8) + "-bit indices");
  return {std::vector<Idx>(g.xadj.begin(), g.xadj.end()), std::vector<Idx>(g.adjncy.begin(), g.adjncy.end())};
}

// What every graph partitioner shares: A square; p == 1 the identity; fewer rows than ranks
// row i to rank i; otherwise parts(graph) gives each row its rank.
template <class F>
RowPartition graph_partition(const CsrMatrix& A, int p, const std::string& kind, F&& parts) {
  if (A.rows() != A.cols())
    throw InputError("--partition " + kind + ": the matrix must be square, got " + std::to_string(A.rows()) + "x" +
                     std::to_string(A.cols()));
  const int64_t n = A.rows();
  if (p == 1) {
    RowPartition one = contiguous_partition(n, 1);
    one.kind = kind;
    return one;
  }
  std::vector<int64_t> part(size_t(n), 0);
  if (n < p) {
    for (int64_t i = 0; i < n; ++i) part[size_t(i)] = i;
  } else {
    part = parts(symmetric_graph(A));
  }
  return partition_from_parts(part, p, kind);
}

}  // namespace

RowPartition metis_partition(const CsrMatrix& A, int p) {
#ifndef RLX_HAVE_METIS
  (void)A, (void)p;
  check_partition_kind("metis");  // (throws: no METIS here)
  return {};
#else
  return graph_partition(A, p, "metis", [&](const Graph& g) {
    auto [xadj, adjncy] = narrowed<idx_t>(g, "metis", "METIS");
    const int64_t n = int64_t(xadj.size()) - 1;
    idx_t nv = idx_t(n), ncon = 1, nparts = idx_t(p), objval = 0;
    idx_t options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(options);
    options[METIS_OPTION_SEED] = 1;  // the same partition on every run
    std::vector<idx_t> where(size_t(n), 0);
    const int rc = METIS_PartGraphKway(&nv, &ncon, xadj.data(), adjncy.data(), nullptr, nullptr, nullptr, &nparts, nullptr,
                                       nullptr, options, &objval, where.data());
    if (rc != METIS_OK)
      throw InputError("--partition metis: METIS_PartGraphKway failed (" +
                       std::string(rc == METIS_ERROR_MEMORY ? "out of memory" : rc == METIS_ERROR_INPUT ? "input error" : "error") +
                       ") on " + std::to_string(n) + " rows into " + std::to_string(p) + " parts");
    return std::vector<int64_t>(where.begin(), where.end());
  });
#endif
}

RowPartition scotch_partition(const CsrMatrix& A, int p) {
#ifndef RLX_HAVE_SCOTCH
  (void)A, (void)p;
  check_partition_kind("scotch");  // (throws: no Scotch here)
  return {};
#else
  return graph_partition(A, p, "scotch", [&](const Graph& g) {
    auto [xadj, adjncy] = narrowed<SCOTCH_Num>(g, "scotch", "Scotch");
    const SCOTCH_Num n = SCOTCH_Num(xadj.size()) - 1;
    // Scotch draws random numbers and may run threads: a context of its own with a private
    // generator, fixed seed and Scotch's deterministic mode, so every run (and every call in
    // one process) gives the same partition.
    SCOTCH_Context context;
    SCOTCH_Graph graph, bound;
    SCOTCH_Strat strat;
    if (SCOTCH_contextInit(&context) != 0 || SCOTCH_graphInit(&graph) != 0 || SCOTCH_graphInit(&bound) != 0 ||
        SCOTCH_stratInit(&strat) != 0)
      throw InputError("--partition scotch: Scotch could not initialise (version mismatch between scotch.h and the library?)");
    std::vector<SCOTCH_Num> part(size_t(n), 0);
    const char* step = "SCOTCH_contextRandomClone";
    int rc = SCOTCH_contextRandomClone(&context);
    if (rc == 0) {
      SCOTCH_contextRandomSeed(&context, 1);
      SCOTCH_contextRandomReset(&context);
      step = "SCOTCH_contextOptionSetNum";
      rc = SCOTCH_contextOptionSetNum(&context, SCOTCH_OPTIONNUMDETERMINISTIC, 1);
    }
    if (rc == 0) {
      step = "SCOTCH_graphBuild";
      rc = SCOTCH_graphBuild(&graph, 0, n, xadj.data(), xadj.data() + 1, nullptr, nullptr, SCOTCH_Num(adjncy.size()),
                             adjncy.data(), nullptr);
    }
    if (rc == 0) step = "SCOTCH_contextBindGraph", rc = SCOTCH_contextBindGraph(&context, &graph, &bound);
    // A k-way partition within 3 % of the mean part size (METIS's default imbalance).
    if (rc == 0) rc = SCOTCH_stratGraphMapBuild(&strat, SCOTCH_STRATDEFAULT, SCOTCH_Num(p), 0.03), step = "SCOTCH_stratGraphMapBuild";
    if (rc == 0) rc = SCOTCH_graphPart(&bound, SCOTCH_Num(p), &strat, part.data()), step = "SCOTCH_graphPart";
    SCOTCH_stratExit(&strat);
    SCOTCH_graphExit(&bound);
    SCOTCH_graphExit(&graph);
    SCOTCH_contextExit(&context);
    if (rc != 0)
      throw InputError("--partition scotch: " + std::string(step) + " failed on " + std::to_string(n) + " rows into " +
                       std::to_string(p) + " parts");
    return std::vector<int64_t>(part.begin(), part.end());
  });
#endif
}

RowPartition make_partition(const std::string& kind, const CsrMatrix& A, int p) {
  if (kind == "contiguous") return contiguous_partition(A.rows(), p);
  if (kind == "metis") return metis_partition(A, p);
  if (kind == "scotch") return scotch_partition(A, p);
  // (ptscotch first: the pointer to repartition holds in a build without PT-Scotch too)
  if (kind == "ptscotch")
    throw InputError("--partition ptscotch partitions a distributed matrix in parallel (dist_partition.hpp: repartition), "
                     "not a whole one");
  check_partition_kind(kind);  // (throws: an unknown kind)
  return {};
}

CsrMatrix permute_symmetric(const CsrMatrix& A, const std::vector<int64_t>& order) {
  const int64_t n = A.rows();
  if (A.cols() != n) throw InputError("permute_symmetric: the matrix must be square");
  check_order(order, n, "permute_symmetric");
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) pos[size_t(order[size_t(k)])] = k;
  const std::vector<int64_t> rp = index_vector(A.row_ptr()), ci = index_vector(A.col_idx());
  const Tensor v = host_contiguous(A.values());
  const size_t es = dtype_storage_bytes(v.dtype(), 1);
  std::vector<int64_t> I, J;
  I.reserve(size_t(A.nnz()));
  J.reserve(size_t(A.nnz()));
  Tensor out = Tensor::empty(v.dtype(), {A.nnz()});
  char* ob = static_cast<char*>(out.raw());
  const char* vb = static_cast<const char*>(v.raw());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r = order[size_t(k)];
    for (int64_t e = rp[size_t(r)]; e < rp[size_t(r) + 1]; ++e) {
      std::memcpy(ob + I.size() * es, vb + size_t(e) * es, es);
      I.push_back(k);
      J.push_back(pos[size_t(ci[size_t(e)])]);
    }
  }
  return CsrMatrix::from_coo(n, n, std::move(I), std::move(J), out, A.index_type());
}

namespace {

// Row k of `v` to row order[k] of the result (scatter) or row order[k] of `v` to row k
// (gather).
Tensor move_rows(const Tensor& v_in, const std::vector<int64_t>& order, bool scatter, const char* who) {
  Tensor v = host_contiguous(v_in);
  const int64_t n = v.rank() ? v.shape()[0] : 0;
  check_order(order, n, who);
  Tensor out = Tensor::empty(v.dtype(), v.shape());
  const size_t rb = row_bytes(v);
  char* to = static_cast<char*>(out.raw());
  const char* from = static_cast<const char*>(v.raw());
  for (int64_t k = 0; k < n; ++k) {
    const size_t there = size_t(order[size_t(k)]) * rb, here = size_t(k) * rb;
    std::memcpy(to + (scatter ? there : here), from + (scatter ? here : there), rb);
  }
  return out;
}

}  // namespace

Tensor permute_rows(const Tensor& v, const std::vector<int64_t>& order) { return move_rows(v, order, false, "permute_rows"); }
Tensor unpermute_rows(const Tensor& v, const std::vector<int64_t>& order) { return move_rows(v, order, true, "unpermute_rows"); }

}  // namespace rlx::sparse
