#include "solvers/sparse/dist_csr.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "core/error.hpp"
#include "dist/ops.hpp"
#include "solvers/sparse/direct.hpp"
#include "solvers/sparse/ops.hpp"

namespace rlx::sparse {

std::vector<int64_t> even_row_starts(int64_t n, int p) {
  std::vector<int64_t> s(size_t(p) + 1, 0);
  for (int r = 0; r < p; ++r) s[size_t(r) + 1] = s[size_t(r)] + n / p + (r < n % p ? 1 : 0);
  return s;
}

namespace {

// Throws the same InputError on every rank when `mine` differs between ranks (a collective
// check: every rank must call it).
void require_agreement(const dist::Communicator& c, int64_t mine, const std::string& what) {
  const int64_t lo = c.all_reduce(mine, ReduceOp::Min), hi = c.all_reduce(mine, ReduceOp::Max);
  if (lo != hi)
    throw dist::CollectiveError("the ranks disagree on " + what + ": from " + std::to_string(lo) + " to " + std::to_string(hi));
}

Tensor index_tensor(DType t, const std::vector<int64_t>& v) {
  Tensor r = Tensor::empty(t, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::I32) r.data<int32_t>()[i] = int32_t(v[i]);
    else r.data<int64_t>()[i] = v[i];
  }
  return r;
}

std::vector<int64_t> index_vector(const Tensor& t) {
  Tensor h = host_contiguous(t);
  std::vector<int64_t> v(size_t(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) v[size_t(i)] = index_at(h, i);
  return v;
}

}  // namespace

DistCsrMatrix DistCsrMatrix::scatter(const dist::Communicator& comm, const CsrMatrix& global, int root,
                                     std::vector<int64_t> row_starts) {
  const bool me = comm.rank() == root;
  const int p = comm.size();
  // What root checks, every rank learns.
  std::string why;
  if (me && global.rows() != global.cols())
    why = "the matrix must be square, got " + std::to_string(global.rows()) + "x" + std::to_string(global.cols());
  if (me && why.empty() && row_starts.empty()) row_starts = even_row_starts(global.rows(), p);
  if (me && why.empty()) {
    if (row_starts.size() != size_t(p) + 1 || row_starts.front() != 0 || row_starts.back() != global.rows())
      why = "row_starts must hold " + std::to_string(p + 1) + " offsets from 0 to " + std::to_string(global.rows());
    for (size_t r = 1; why.empty() && r < row_starts.size(); ++r)
      if (row_starts[r] < row_starts[r - 1]) why = "row_starts must not decrease (at rank " + std::to_string(r - 1) + ")";
  }
  dist::raise_collectively(comm, why);
  // Sizes, dtype and partition from root.
  std::vector<int64_t> head(size_t(p) + 3, 0);
  if (me) {
    head[0] = int64_t(global.value_type());
    head[1] = global.rows();
    for (size_t r = 0; r <= size_t(p); ++r) head[r + 2] = row_starts[r];
  }
  comm.broadcast(head.data(), int64_t(head.size()), DType::I64, root);
  const DType vt = DType(head[0]);
  const int64_t n = head[1];
  std::vector<int64_t> starts(head.begin() + 2, head.end());
  const int64_t r0 = starts[size_t(comm.rank())], r1 = starts[size_t(comm.rank()) + 1], mine = r1 - r0;

  // Root sends each rank its row lengths, columns and values.
  std::vector<int64_t> rp_all, ci_all, len_counts, nnz_counts;
  Tensor values_all;
  if (me) {
    rp_all = index_vector(global.row_ptr());
    ci_all = index_vector(global.col_idx());
    values_all = host_contiguous(global.values());
    for (int r = 0; r < p; ++r) {
      len_counts.push_back(starts[size_t(r) + 1] - starts[size_t(r)]);
      nnz_counts.push_back(rp_all[size_t(starts[size_t(r) + 1])] - rp_all[size_t(starts[size_t(r)])]);
    }
  }
  std::vector<int64_t> lengths(static_cast<size_t>(mine));
  std::vector<int64_t> all_lengths;
  if (me) {
    all_lengths.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) all_lengths[size_t(i)] = rp_all[size_t(i) + 1] - rp_all[size_t(i)];
  }
  comm.scatter_v(all_lengths.data(), len_counts, DType::I64, lengths.data(), mine, root);
  std::vector<int64_t> rp(size_t(mine) + 1, 0);
  for (int64_t i = 0; i < mine; ++i) rp[size_t(i) + 1] = rp[size_t(i)] + lengths[size_t(i)];
  const int64_t nnz = rp.back();
  std::vector<int64_t> ci(static_cast<size_t>(nnz));
  comm.scatter_v(ci_all.data(), nnz_counts, DType::I64, ci.data(), nnz, root);
  Tensor v = Tensor::empty(vt, {nnz});
  comm.scatter_v(me ? values_all.raw() : nullptr, nnz_counts, vt, v.raw(), nnz, root);
  const DType it = index_type_for(mine, n, nnz);
  CsrMatrix local(mine, n, index_tensor(it, rp), index_tensor(it, ci), v);
  return DistCsrMatrix(comm, std::move(starts), local);
}

DistCsrMatrix DistCsrMatrix::scatter(const dist::Communicator& comm, const CsrMatrix& global, const RowPartition& partition,
                                     int root) {
  const bool me = comm.rank() == root;
  std::string why;
  CsrMatrix permuted;
  if (me) {
    try {
      if (!partition.row_starts.empty() && partition.ranks() != comm.size())
        why = "the partition is for " + std::to_string(partition.ranks()) + " ranks, the communicator has " +
              std::to_string(comm.size());
      else if (!partition.order.empty())
        permuted = permute_symmetric(global, partition.order);
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  dist::raise_collectively(comm, why);
  int64_t has_order = me && !partition.order.empty() ? 1 : 0;
  comm.broadcast(&has_order, 1, DType::I64, root);
  DistCsrMatrix A = scatter(comm, has_order ? permuted : global, root, me ? partition.row_starts : std::vector<int64_t>{});
  A.partition_kind_ = dist::broadcast_string(comm, partition.kind, root);
  if (has_order) {
    A.permuted_ = true;
    A.user_rows_.resize(size_t(A.local_rows()));
    std::vector<int64_t> counts;
    for (int r = 0; r < comm.size(); ++r) counts.push_back(A.row_starts_[size_t(r) + 1] - A.row_starts_[size_t(r)]);
    comm.scatter_v(me ? partition.order.data() : nullptr, counts, DType::I64, A.user_rows_.data(), A.local_rows(), root);
  }
  return A;
}

DistCsrMatrix DistCsrMatrix::from_local_rows(const dist::Communicator& comm, const CsrMatrix& local) {
  require_agreement(comm, local.cols(), "the global size (columns of each rank's rows)");
  require_agreement(comm, int64_t(local.value_type()), "the value dtype");
  std::vector<int64_t> counts = comm.all_gather_counts(local.rows());
  std::vector<int64_t> starts(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) starts[r + 1] = starts[r] + counts[r];
  if (starts.back() != local.cols())
    throw dist::CollectiveError("the ranks hold " + std::to_string(starts.back()) + " rows in all, the matrix has " +
                     std::to_string(local.cols()) + " columns: a distributed matrix must be square");
  return DistCsrMatrix(comm, std::move(starts), local);
}

DistCsrMatrix::DistCsrMatrix(const dist::Communicator& comm, std::vector<int64_t> starts, const CsrMatrix& local)
    : comm_(comm), row_starts_(std::move(starts)) {
  const int64_t first = first_row(), mine = local.rows(), end = first + mine;
  const std::vector<int64_t> rp = index_vector(local.row_ptr()), ci = index_vector(local.col_idx());
  const Tensor vals = host_contiguous(local.values());
  const DType vt = vals.dtype();
  const size_t es = dtype_storage_bytes(vt, 1);
  // Ghosts: the columns outside [first, end), ascending and unique.
  for (int64_t c : ci)
    if (c < first || c >= end) ghosts_.push_back(c);
  std::sort(ghosts_.begin(), ghosts_.end());
  ghosts_.erase(std::unique(ghosts_.begin(), ghosts_.end()), ghosts_.end());
  // Split each row in stored order (sorted rows stay sorted in both blocks).
  std::vector<int64_t> drp{0}, dci, orp{0}, oci;
  std::vector<char> dv, ov;
  const char* vb = static_cast<const char*>(vals.raw());
  for (int64_t r = 0; r < mine; ++r) {
    for (int64_t k = rp[size_t(r)]; k < rp[size_t(r) + 1]; ++k) {
      const int64_t c = ci[size_t(k)];
      const char* e = vb + size_t(k) * es;
      if (c >= first && c < end) {
        dci.push_back(c - first);
        dv.insert(dv.end(), e, e + es);
      } else {
        oci.push_back(std::lower_bound(ghosts_.begin(), ghosts_.end(), c) - ghosts_.begin());
        ov.insert(ov.end(), e, e + es);
      }
    }
    drp.push_back(int64_t(dci.size()));
    orp.push_back(int64_t(oci.size()));
  }
  auto block = [&](int64_t cols, const std::vector<int64_t>& bp, const std::vector<int64_t>& bc, const std::vector<char>& bv) {
    const DType it = index_type_for(mine, cols, int64_t(bc.size()));
    Tensor v = Tensor::empty(vt, {int64_t(bc.size())});
    if (!bv.empty()) std::memcpy(v.raw(), bv.data(), bv.size());
    return CsrMatrix(mine, cols, index_tensor(it, bp), index_tensor(it, bc), v);
  };
  diag_ = block(mine, drp, dci, dv);
  offd_ = block(int64_t(ghosts_.size()), orp, oci, ov);

  // The halo: receive each owner's columns (ghosts are grouped by owner in rank order, since
  // owners hold ascending ranges); tell each owner which of its entries to send.
  dist::HaloPattern pat;
  const int p = comm_.size();
  std::vector<std::vector<int64_t>> wanted(static_cast<size_t>(p));
  for (int64_t g : ghosts_) {
    const int owner = int(std::upper_bound(row_starts_.begin(), row_starts_.end(), g) - row_starts_.begin()) - 1;
    wanted[size_t(owner)].push_back(g);
  }
  for (int r = 0; r < p; ++r)
    if (!wanted[size_t(r)].empty()) {
      pat.recv_ranks.push_back(r);
      pat.recv_count.push_back(int64_t(wanted[size_t(r)].size()));
    }
  std::vector<std::vector<int64_t>> asked = comm_.all_to_all(wanted);
  for (int r = 0; r < p; ++r) {
    if (asked[size_t(r)].empty()) continue;
    std::vector<int64_t> idx;
    for (int64_t g : asked[size_t(r)]) idx.push_back(g - first);
    pat.send_ranks.push_back(r);
    pat.send_index.push_back(std::move(idx));
  }
  halo_ = std::make_shared<dist::HaloExchange>(comm_, std::move(pat));
}

int64_t DistCsrMatrix::halo_bytes() const {
  return int64_t(dtype_storage_bytes(value_type(), halo_->pattern().sends() + halo_->pattern().receives()));
}

CsrMatrix DistCsrMatrix::local_rows_global() const {
  const std::vector<int64_t> drp = index_vector(diag_.row_ptr()), dci = index_vector(diag_.col_idx());
  const std::vector<int64_t> orp = index_vector(offd_.row_ptr()), oci = index_vector(offd_.col_idx());
  const Tensor dv = host_contiguous(diag_.values()), ov = host_contiguous(offd_.values());
  std::vector<int64_t> i, j;
  std::vector<char> bytes;
  const size_t es = dtype_storage_bytes(value_type(), 1);
  for (int64_t r = 0; r < local_rows(); ++r) {
    for (int64_t k = drp[size_t(r)]; k < drp[size_t(r) + 1]; ++k) {
      i.push_back(r), j.push_back(dci[size_t(k)] + first_row());
      bytes.insert(bytes.end(), static_cast<const char*>(dv.raw()) + size_t(k) * es,
                   static_cast<const char*>(dv.raw()) + size_t(k + 1) * es);
    }
    for (int64_t k = orp[size_t(r)]; k < orp[size_t(r) + 1]; ++k) {
      i.push_back(r), j.push_back(ghosts_[size_t(oci[size_t(k)])]);
      bytes.insert(bytes.end(), static_cast<const char*>(ov.raw()) + size_t(k) * es,
                   static_cast<const char*>(ov.raw()) + size_t(k + 1) * es);
    }
  }
  Tensor v = Tensor::empty(value_type(), {int64_t(i.size())});
  if (!bytes.empty()) std::memcpy(v.raw(), bytes.data(), bytes.size());
  return CsrMatrix::from_coo(local_rows(), global_rows(), std::move(i), std::move(j), v);
}

std::vector<int64_t> DistCsrMatrix::user_rows() const {
  if (permuted_) return user_rows_;
  std::vector<int64_t> r(static_cast<size_t>(local_rows()));
  for (int64_t i = 0; i < local_rows(); ++i) r[size_t(i)] = first_row() + i;
  return r;
}

// ---------------------------------------------------------------- the operator

DistCsrOperator::DistCsrOperator(DistCsrMatrix A)
    : A_(std::move(A)), diag_(A_.diagonal_block()), offd_(A_.off_diagonal_block()) {}

Var DistCsrOperator::apply(BoundGraph& g, const Var& x) const {
  const dist::HaloExchange& h = A_.halo();
  // A rank that neither sends nor receives has no part in the exchange.
  if (h.pattern().sends() == 0 && h.pattern().receives() == 0) return diag_.apply(g, x);
  // The entries sent are gathered where x lives, then handed to the exchange: on a device
  // whose collectives are host-staged (cuda without CUDA-aware MPI) only they cross to the
  // host, not the whole local vector.
  auto& idx = g.bound_by[&h];
  if (idx.empty()) {
    const std::vector<int64_t> order = h.send_order();
    Tensor t = Tensor::empty(DType::I64, {int64_t(order.size())});
    if (!order.empty()) std::memcpy(t.raw(), order.data(), order.size() * sizeof(int64_t));
    idx = {g.bind("A.halo.send_index", t)};
  }
  Var begun = dist::halo_begin_packed(gather(x, idx[0], 0), h);
  Var y = diag_.apply(g, x);  // runs while the messages travel
  Var ghosts = dist::halo_end(begun, h);
  if (offd_.cols() == 0) return y;
  auto& v = g.bound_by[&offd_];
  if (v.empty()) v = {g.bind("A.offd.row_ptr", offd_.row_ptr()), g.bind("A.offd.col_idx", offd_.col_idx()),
                      g.bind("A.offd.values", offd_.values())};
  CsrVars O{v[0], v[1], v[2], offd_.rows(), offd_.cols()};
  return spmv(O, ghosts, 1.0, 1.0, y);
}

std::string DistCsrOperator::describe() const {
  return "distributed csr " + std::to_string(A_.global_rows()) + "x" + std::to_string(A_.global_rows()) + " over " +
         std::to_string(A_.communicator().size()) + " ranks; this rank: rows " + std::to_string(A_.first_row()) + ".." +
         std::to_string(A_.first_row() + A_.local_rows()) + ", " + std::to_string(A_.ghost_columns().size()) + " ghost columns";
}

// ---------------------------------------------------------------- preconditioners

std::unique_ptr<Preconditioner> make_dist_preconditioner(const std::string& name, const DistCsrOperator& A) {
  if (name == "none" || name == "jacobi") return make_preconditioner(name, A.diagonal_block());
  if (name == "bjacobi") return make_preconditioner("ilu0", A.diagonal_block());
  if (name == "bjacobi-ic0") return make_preconditioner("ic0", A.diagonal_block());
  throw InputError("unknown preconditioner '" + name + "' for a distributed matrix (expected none, jacobi, bjacobi or bjacobi-ic0)");
}

// ---------------------------------------------------------------- vectors

Tensor scatter_vector(const dist::Communicator& comm, const Tensor& global, const std::vector<int64_t>& row_starts,
                      int root) {
  const int p = comm.size();
  if (row_starts.size() != size_t(p) + 1) throw InputError("row_starts must hold one offset per rank plus one");
  std::string why;
  Tensor g;
  if (comm.rank() == root) {
    if (global.rank() != 1 || global.numel() != row_starts.back())
      why = "the vector must be [" + std::to_string(row_starts.back()) + "], got " + global.type().str();
    else g = host_contiguous(global);
  }
  dist::raise_collectively(comm, why);
  int64_t t = comm.rank() == root ? int64_t(g.dtype()) : 0;
  comm.broadcast(&t, 1, DType::I64, root);
  std::vector<int64_t> counts;
  for (int r = 0; r < p; ++r) counts.push_back(row_starts[size_t(r) + 1] - row_starts[size_t(r)]);
  const int64_t mine = counts[size_t(comm.rank())];
  Tensor local = Tensor::empty(DType(t), {mine});
  comm.scatter_v(comm.rank() == root ? g.raw() : nullptr, counts, DType(t), local.raw(), mine, root);
  return local;
}

Tensor gather_vector(const dist::Communicator& comm, const Tensor& local, const std::vector<int64_t>& row_starts) {
  const int p = comm.size();
  if (row_starts.size() != size_t(p) + 1) throw InputError("row_starts must hold one offset per rank plus one");
  std::vector<int64_t> counts;
  for (int r = 0; r < p; ++r) counts.push_back(row_starts[size_t(r) + 1] - row_starts[size_t(r)]);
  Tensor h = host_contiguous(local);
  std::string why;
  if (h.rank() != 1 || h.numel() != counts[size_t(comm.rank())])
    why = "this rank's part must be [" + std::to_string(counts[size_t(comm.rank())]) + "], got " + h.type().str();
  dist::raise_collectively(comm, why);
  require_agreement(comm, int64_t(h.dtype()), "the vector's dtype");
  Tensor out = Tensor::empty(h.dtype(), {row_starts.back()});
  comm.all_gather_v(h.raw(), h.dtype(), counts, out.raw());
  return out;
}

std::vector<int64_t> user_order(const DistCsrMatrix& A) {
  if (!A.permuted()) return {};
  const dist::Communicator& comm = A.communicator();
  std::vector<int64_t> counts;
  for (int r = 0; r < comm.size(); ++r) counts.push_back(A.row_starts()[size_t(r) + 1] - A.row_starts()[size_t(r)]);
  std::vector<int64_t> order(static_cast<size_t>(A.global_rows()));
  const std::vector<int64_t> mine = A.user_rows();
  comm.all_gather_v(mine.data(), DType::I64, counts, order.data());
  return order;
}

Tensor scatter_vector(const Tensor& global, const DistCsrMatrix& A, int root) {
  const dist::Communicator& comm = A.communicator();
  if (!A.permuted()) return scatter_vector(comm, global, A.row_starts(), root);
  const std::vector<int64_t> order = user_order(A);
  std::string why;
  Tensor g;
  if (comm.rank() == root) {
    try {
      g = permute_rows(global, order);
    } catch (const InputError& e) {
      why = "the vector must be [" + std::to_string(A.global_rows()) + "], got " + global.type().str();
    }
  }
  dist::raise_collectively(comm, why);
  return scatter_vector(comm, g, A.row_starts(), root);
}

Tensor gather_vector(const Tensor& local, const DistCsrMatrix& A) {
  Tensor g = gather_vector(A.communicator(), local, A.row_starts());
  return A.permuted() ? unpermute_rows(g, user_order(A)) : g;
}

double relative_residual(const DistCsrMatrix& A, const Tensor& x_local, const Tensor& b_local) {
  const dist::Communicator& comm = A.communicator();
  // x in the permuted order on every rank: the local rows' columns index it directly.
  const Tensor x = gather_vector(comm, x_local, A.row_starts());
  std::string why;
  long double sums[2] = {0, 0};
  try {
    std::tie(sums[0], sums[1]) = residual_sums(A.local_rows_global(), x, b_local);
  } catch (const InputError& e) {
    why = e.what();
  }
  dist::raise_collectively(comm, why);
  double s[2] = {double(sums[0]), double(sums[1])};
  comm.all_reduce(s, 2, DType::F64, ReduceOp::Sum);
  return s[1] > 0 ? std::sqrt(s[0] / s[1]) : std::sqrt(s[0]);
}

}  // namespace rlx::sparse
