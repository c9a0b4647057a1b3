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

DistCsrMatrix DistCsrMatrix::redistribute(const DistCsrMatrix& A, const std::vector<int64_t>& dest, std::string kind) {
  const dist::Communicator& comm = A.comm_;
  const int p = comm.size();
  const int64_t mine = A.local_rows();
  const std::vector<int64_t> users = A.user_rows();
  {
    std::string why;
    if (int64_t(dest.size()) != mine)
      why = "redistribute: rank " + std::to_string(comm.rank()) + " gives " + std::to_string(dest.size()) +
            " destinations for its " + std::to_string(mine) + " rows";
    for (int64_t i = 0; why.empty() && i < mine; ++i)
      if (dest[size_t(i)] < 0 || dest[size_t(i)] >= p)
        why = "redistribute: row " + std::to_string(users[size_t(i)]) + " is sent to rank " + std::to_string(dest[size_t(i)]) +
              ", outside 0.." + std::to_string(p - 1);
    dist::raise_collectively(comm, why);
  }
  // Rank d takes its rows source by source in rank order, each source's in its own order:
  // every source learns where its rows start in d's block, hence each row's new number.
  std::vector<std::vector<int64_t>> count_to(static_cast<size_t>(p), std::vector<int64_t>(1, 0));
  for (int64_t d : dest) ++count_to[size_t(d)][0];
  const std::vector<std::vector<int64_t>> count_from = comm.all_to_all(count_to);
  std::vector<std::vector<int64_t>> offset_to(static_cast<size_t>(p), std::vector<int64_t>(1, 0));
  int64_t new_mine = 0;
  for (int s = 0; s < p; ++s) {
    offset_to[size_t(s)][0] = new_mine;
    new_mine += count_from[size_t(s)][0];
  }
  const std::vector<std::vector<int64_t>> offset_from = comm.all_to_all(offset_to);
  const std::vector<int64_t> counts = comm.all_gather_counts(new_mine);
  std::vector<int64_t> starts(size_t(p) + 1, 0);
  for (int r = 0; r < p; ++r) starts[size_t(r) + 1] = starts[size_t(r)] + counts[size_t(r)];
  std::vector<int64_t> next(static_cast<size_t>(p)), new_index(static_cast<size_t>(mine));
  for (int d = 0; d < p; ++d) next[size_t(d)] = starts[size_t(d)] + offset_from[size_t(d)][0];
  for (int64_t i = 0; i < mine; ++i) new_index[size_t(i)] = next[size_t(dest[size_t(i)])]++;

  // The ghosts' new numbers, from their owners along the halo's own pattern: what this rank
  // sends a neighbour in an SpMV is what that neighbour needs renumbered.
  const dist::HaloPattern& pat = A.halo().pattern();
  std::vector<std::vector<int64_t>> tell(static_cast<size_t>(p));
  for (size_t k = 0; k < pat.send_ranks.size(); ++k)
    for (int64_t i : pat.send_index[k]) tell[size_t(pat.send_ranks[k])].push_back(new_index[size_t(i)]);
  const std::vector<std::vector<int64_t>> told = comm.all_to_all(tell);
  std::vector<int64_t> ghost_new;  // in ghosts_' order: ascending, so grouped by owner in rank order
  for (const auto& t : told) ghost_new.insert(ghost_new.end(), t.begin(), t.end());
  // (the checks of what arrives are raised on every rank: the next steps are collective)
  dist::raise_collectively(comm, ghost_new.size() == A.ghosts_.size()
                                     ? std::string()
                                     : "redistribute: " + std::to_string(ghost_new.size()) + " ghost numbers came back for " +
                                           std::to_string(A.ghosts_.size()) + " ghosts");

  // Each row to its rank as [new row, user row, length, (column, value words) ...], columns
  // renumbered and ascending, a value's bytes in whole 64-bit words.
  const DType vt = A.value_type();
  const size_t es = dtype_storage_bytes(vt, 1), words = (es + 7) / 8;
  const std::vector<int64_t> drp = index_vector(A.diag_.row_ptr()), dci = index_vector(A.diag_.col_idx());
  const std::vector<int64_t> orp = index_vector(A.offd_.row_ptr()), oci = index_vector(A.offd_.col_idx());
  const Tensor dv = host_contiguous(A.diag_.values()), ov = host_contiguous(A.offd_.values());
  const char* dvb = static_cast<const char*>(dv.raw());
  const char* ovb = static_cast<const char*>(ov.raw());
  std::vector<std::vector<int64_t>> rows_to(static_cast<size_t>(p));
  {  // (sized first: growing buffers of this size costs more than filling them)
    std::vector<size_t> words_to(static_cast<size_t>(p), 0);
    for (int64_t r = 0; r < mine; ++r)
      words_to[size_t(dest[size_t(r)])] +=
          3 + size_t(drp[size_t(r) + 1] - drp[size_t(r)] + orp[size_t(r) + 1] - orp[size_t(r)]) * (1 + words);
    for (int d = 0; d < p; ++d) rows_to[size_t(d)].reserve(words_to[size_t(d)]);
  }
  std::vector<std::pair<int64_t, const char*>> row;
  for (int64_t r = 0; r < mine; ++r) {
    row.clear();
    for (int64_t k = drp[size_t(r)]; k < drp[size_t(r) + 1]; ++k)
      row.emplace_back(new_index[size_t(dci[size_t(k)])], dvb + size_t(k) * es);
    for (int64_t k = orp[size_t(r)]; k < orp[size_t(r) + 1]; ++k)
      row.emplace_back(ghost_new[size_t(oci[size_t(k)])], ovb + size_t(k) * es);
    std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int64_t>& out = rows_to[size_t(dest[size_t(r)])];
    out.push_back(new_index[size_t(r)]);
    out.push_back(users[size_t(r)]);
    out.push_back(int64_t(row.size()));
    for (const auto& [c, v] : row) {
      out.push_back(c);
      int64_t w[2] = {0, 0};
      std::memcpy(w, v, es);
      out.insert(out.end(), w, w + words);
    }
  }
  const std::vector<std::vector<int64_t>> got = comm.all_to_all(rows_to);
  rows_to = {};

  // The rows arrive in their new order (sources in rank order, each in its own order).
  const int64_t first = starts[size_t(comm.rank())];
  std::vector<int64_t> rp{0}, ci, user_rows;
  std::vector<char> bytes;
  size_t got_words = 0;
  for (const std::vector<int64_t>& stream : got) got_words += stream.size();
  const size_t nnz_bound = got_words / (1 + words);
  user_rows.reserve(size_t(new_mine));
  rp.reserve(size_t(new_mine) + 1);
  ci.reserve(nnz_bound);
  bytes.reserve(nnz_bound * es);
  std::string why;
  for (const std::vector<int64_t>& stream : got) {
    size_t at = 0;
    while (why.empty() && at < stream.size()) {
      if (stream.size() - at < 3 || stream[at] != first + int64_t(user_rows.size())) {
        why = "redistribute: a received row is out of order";
        break;
      }
      const int64_t len = stream[at + 2];
      if (len < 0 || uint64_t(len) > (stream.size() - at - 3) / (1 + words)) {
        why = "redistribute: a received row is truncated";
        break;
      }
      user_rows.push_back(stream[at + 1]);
      at += 3;
      for (int64_t k = 0; k < len; ++k, at += 1 + words) {
        ci.push_back(stream[at]);
        const char* v = reinterpret_cast<const char*>(&stream[at + 1]);
        bytes.insert(bytes.end(), v, v + es);
      }
      rp.push_back(int64_t(ci.size()));
    }
  }
  if (why.empty() && int64_t(user_rows.size()) != new_mine)
    why = "redistribute: " + std::to_string(user_rows.size()) + " rows arrived, " + std::to_string(new_mine) + " were sent";
  dist::raise_collectively(comm, why);
  const int64_t n = A.global_rows(), nnz = int64_t(ci.size());
  Tensor v = Tensor::empty(vt, {nnz});
  if (!bytes.empty()) std::memcpy(v.raw(), bytes.data(), bytes.size());
  const DType it = index_type_for(new_mine, n, nnz);
  DistCsrMatrix R(comm, std::move(starts), CsrMatrix(new_mine, n, index_tensor(it, rp), index_tensor(it, ci), v));
  R.partition_kind_ = std::move(kind);
  R.permuted_ = true;
  R.user_rows_ = std::move(user_rows);
  return R;
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
