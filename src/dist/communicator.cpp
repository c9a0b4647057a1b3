#include "dist/communicator.hpp"

#include <algorithm>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "core/env.hpp"
#include "core/error.hpp"
#include "dist/session.hpp"

#ifdef RLX_HAVE_MPI
#include "dist/mpi.hpp"
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // (Open MPI's extensions: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support)
#endif
#endif

namespace rlx::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Prod: return "prod";
  }
  return "?";
}

ReduceOp reduce_op_from_name(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "max") return ReduceOp::Max;
  if (s == "min") return ReduceOp::Min;
  throw InputError("reduction '" + s + "' is not one of sum, max, min");
}

bool have_mpi() {
#ifdef RLX_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool mpi_initialized() {
#ifdef RLX_HAVE_MPI
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
#else
  return false;
#endif
}

bool mpi_cuda_aware() {
  // (the variable is checked in every build: a bad value is an error wherever it is set)
  if (env_choice("RLX_MPI_CUDA_AWARE", {"0", "1"}) != 1) return false;
#if defined(RLX_HAVE_MPI) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return mpi_initialized() && MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

struct Communicator::Impl {
  int rank = 0, size = 1;
  int64_t id = 0;
  std::string name;
#ifdef RLX_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;  // created by split: freed with the last handle
  ~Impl() {
    if (owned && mpi_initialized()) MPI_Comm_free(&comm);
  }
#endif
};

namespace {

// Live communicators and halo plans by id. Ids are handed out in creation order, so
// processes that create them collectively (split) agree on them.
std::mutex registry_mutex;
std::map<int64_t, std::weak_ptr<Communicator::Impl>>& comms() {
  static std::map<int64_t, std::weak_ptr<Communicator::Impl>> m;
  return m;
}
int64_t next_comm_id = 2;  // 0: self, 1: world
std::map<int64_t, HaloExchange*>& plans() {
  static std::map<int64_t, HaloExchange*> m;
  return m;
}
int64_t next_plan_id = 1;

std::shared_ptr<Communicator::Impl> registered(std::shared_ptr<Communicator::Impl> c) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  comms()[c->id] = c;
  return c;
}

void require_collective_dtype(DType t, ReduceOp op) {
  if (t != DType::F32 && t != DType::F64 && t != DType::C64 && t != DType::I32 && t != DType::I64)
    throw InputError(std::string("collectives take f32, f64, c64, i32 or i64, not ") + dtype_name(t));
  if (t == DType::C64 && op != ReduceOp::Sum)
    throw InputError(std::string("a ") + reduce_op_name(op) + " over c64 values is not defined (complex numbers are not ordered)");
  if (op == ReduceOp::Prod) throw InputError("collectives reduce with sum, max or min, not prod");
}

size_t bytes_of(int64_t count, DType t) { return dtype_storage_bytes(t, count); }

#ifdef RLX_HAVE_MPI
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::C64: return MPI_C_FLOAT_COMPLEX;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: throw InputError(std::string("no MPI type for ") + dtype_name(t));
  }
}
MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    default: throw InputError("collectives reduce with sum, max or min");
  }
}
// MPI counts are int: a message past 2^31 - 1 elements is refused by name rather than truncated.
int mpi_count(int64_t n) {
  if (n < 0 || n > int64_t(std::numeric_limits<int>::max()))
    throw InputError("a message of " + std::to_string(n) + " elements does not fit MPI's int count");
  return int(n);
}
// MPI's default handler (MPI_ERRORS_ARE_FATAL) aborts the job on a failed call; a code that
// still comes back is reported, not ignored.
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw DeviceError(std::string(what) + " failed: " + std::string(msg, size_t(len)));
}
std::shared_ptr<Communicator::Impl> wrap(MPI_Comm c, int64_t id, std::string name, bool owned) {
  auto impl = std::make_shared<Communicator::Impl>();
  impl->comm = c;
  impl->owned = owned;
  impl->id = id;
  impl->name = std::move(name);
  MPI_Comm_rank(c, &impl->rank);
  MPI_Comm_size(c, &impl->size);
  return impl;
}
#endif

}  // namespace

namespace {
// The one-process group without MPI (also under MPI: the loopback halo plan uses it, so it
// behaves the same whether or not MPI is initialised).
std::shared_ptr<Communicator::Impl> local_self() {
  static std::shared_ptr<Communicator::Impl> s = [] {
    auto impl = std::make_shared<Communicator::Impl>();
    impl->id = 0;
    impl->name = "self";
    return registered(impl);
  }();
  return s;
}
}  // namespace

Communicator Communicator::self() {
  std::shared_ptr<Impl> s = local_self();
#ifdef RLX_HAVE_MPI
  if (mpi_initialized()) {
    static std::shared_ptr<Impl> m = [] {
      auto impl = wrap(MPI_COMM_SELF, 0, "MPI_COMM_SELF", false);
      return registered(impl);
    }();
    return Communicator(m);
  }
#endif
  return Communicator(s);
}

Communicator Communicator::world() {
#ifdef RLX_HAVE_MPI
  if (mpi_initialized()) {
    static std::shared_ptr<Impl> w = registered(wrap(MPI_COMM_WORLD, 1, "MPI_COMM_WORLD", false));
    return Communicator(w);
  }
#endif
  return self();
}

Communicator Communicator::by_id(int64_t id) {
  if (id == 0) return self();
  if (id == 1) return world();
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = comms().find(id);
  std::shared_ptr<Impl> c = it == comms().end() ? nullptr : it->second.lock();
  if (!c) throw InputError("communicator " + std::to_string(id) + " does not exist in this process (its last handle is gone)");
  return Communicator(c);
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
int64_t Communicator::id() const { return impl_->id; }
bool Communicator::is_mpi() const {
#ifdef RLX_HAVE_MPI
  return impl_->comm != MPI_COMM_NULL;
#else
  return false;
#endif
}
std::string Communicator::describe() const {
  return impl_->name + " rank " + std::to_string(rank()) + " of " + std::to_string(size());
}

Communicator Communicator::split(int color, int key) const {
  if (color < 0) throw InputError("split: color must be >= 0, got " + std::to_string(color));
#ifdef RLX_HAVE_MPI
  if (is_mpi()) {
    MPI_Comm c = MPI_COMM_NULL;
    check(MPI_Comm_split(impl_->comm, color, key, &c), "MPI_Comm_split");
    int64_t id;
    {
      std::lock_guard<std::mutex> lock(registry_mutex);
      id = next_comm_id++;
    }
    return Communicator(registered(wrap(c, id, impl_->name + "/split(" + std::to_string(color) + ")", true)));
  }
#endif
  return *this;  // one process: every split is the process itself
}

void Communicator::all_reduce(void* buf, int64_t count, DType t, ReduceOp op) const {
  require_collective_dtype(t, op);
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) {
    check(MPI_Allreduce(MPI_IN_PLACE, buf, mpi_count(count), mpi_type(t), mpi_op(op), impl_->comm), "MPI_Allreduce");
  }
#endif
}

namespace {

// The reductions in flight in this process, by slot: the copy being reduced (MPI writes the
// result over it) and its request.
struct InFlight {
  std::vector<char> data;
#ifdef RLX_HAVE_MPI
  MPI_Request req = MPI_REQUEST_NULL;
#endif
};
std::mutex g_in_flight_mu;
std::map<int64_t, InFlight>& in_flight() {
  static auto* m = new std::map<int64_t, InFlight>;  // never destroyed: ranks may end mid-reduction
  return *m;
}

}  // namespace

void Communicator::all_reduce_start(int64_t slot, const void* buf, int64_t count, DType t, ReduceOp op) const {
  require_collective_dtype(t, op);
  std::lock_guard<std::mutex> lk(g_in_flight_mu);
  auto [it, fresh] = in_flight().try_emplace(slot);
  if (!fresh) {
    // Its end never ran: the run that started it failed in between (an exception, on every
    // rank alike or followed by the job's end). The stale reduction is finished first (every
    // rank started it, so the wait ends), then this start goes on.
#ifdef RLX_HAVE_MPI
    if (it->second.req != MPI_REQUEST_NULL) MPI_Wait(&it->second.req, MPI_STATUS_IGNORE);
#endif
    it->second = InFlight{};
  }
  InFlight& f = it->second;
  try {
    f.data.resize(bytes_of(count, t));
  } catch (...) {
    in_flight().erase(it);
    throw;
  }
  if (!f.data.empty()) std::memcpy(f.data.data(), buf, f.data.size());
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) {
    try {
      check(MPI_Iallreduce(MPI_IN_PLACE, f.data.data(), mpi_count(count), mpi_type(t), mpi_op(op), impl_->comm, &f.req),
            "MPI_Iallreduce");
    } catch (...) {
      in_flight().erase(it);
      throw;
    }
  }
#endif
}

void Communicator::all_reduce_wait(int64_t slot, void* out, int64_t count, DType t) const {
  InFlight f;
  {
    std::lock_guard<std::mutex> lk(g_in_flight_mu);
    auto it = in_flight().find(slot);
    if (it == in_flight().end()) throw InputError("all_reduce slot " + std::to_string(slot) + " ended without a start");
    f = std::move(it->second);
    in_flight().erase(it);
  }
  // The reduction completes before anything is checked: MPI writes into f.data until then.
#ifdef RLX_HAVE_MPI
  if (f.req != MPI_REQUEST_NULL) check(MPI_Wait(&f.req, MPI_STATUS_IGNORE), "MPI_Wait");
#endif
  if (f.data.size() != bytes_of(count, t))
    throw InputError("all_reduce slot " + std::to_string(slot) + ": started with " + std::to_string(f.data.size()) +
                     " bytes, ended for " + std::to_string(bytes_of(count, t)));
  if (!f.data.empty()) std::memcpy(out, f.data.data(), f.data.size());
}

double Communicator::all_reduce(double v, ReduceOp op) const {
  all_reduce(&v, 1, DType::F64, op);
  return v;
}

int64_t Communicator::all_reduce(int64_t v, ReduceOp op) const {
  all_reduce(&v, 1, DType::I64, op);
  return v;
}

void Communicator::all_gather(const void* send, int64_t count, DType t, void* recv) const {
  require_collective_dtype(t, ReduceOp::Sum);
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) {
    check(MPI_Allgather(send, mpi_count(count), mpi_type(t), recv, mpi_count(count), mpi_type(t), impl_->comm),
          "MPI_Allgather");
    return;
  }
#endif
  if (count > 0 && recv != send) std::memmove(recv, send, bytes_of(count, t));
}

void Communicator::reduce_scatter(const void* send, int64_t count, DType t, ReduceOp op, void* recv) const {
  require_collective_dtype(t, op);
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) {
    check(MPI_Reduce_scatter_block(send, recv, mpi_count(count), mpi_type(t), mpi_op(op), impl_->comm),
          "MPI_Reduce_scatter_block");
    return;
  }
#endif
  if (count > 0 && recv != send) std::memmove(recv, send, bytes_of(count, t));
}

void Communicator::broadcast(void* buf, int64_t count, DType t, int root) const {
  require_collective_dtype(t, ReduceOp::Sum);
  if (root < 0 || root >= size())
    throw InputError("broadcast root " + std::to_string(root) + " outside the " + std::to_string(size()) + " ranks");
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) check(MPI_Bcast(buf, mpi_count(count), mpi_type(t), root, impl_->comm), "MPI_Bcast");
#endif
}

void Communicator::all_gather_v(const void* send, DType t, const std::vector<int64_t>& counts, void* recv) const {
  require_collective_dtype(t, ReduceOp::Sum);
  if (counts.size() != size_t(size())) throw InputError("all_gather_v: one count per rank");
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) {
    std::vector<int> cnt, off;
    int64_t o = 0;
    for (int64_t c : counts) {
      cnt.push_back(mpi_count(c));
      off.push_back(mpi_count(o));
      o += c;
    }
    check(MPI_Allgatherv(send, cnt[size_t(rank())], mpi_type(t), recv, cnt.data(), off.data(), mpi_type(t), impl_->comm),
          "MPI_Allgatherv");
    return;
  }
#endif
  if (counts[0] > 0 && recv != send) std::memmove(recv, send, bytes_of(counts[0], t));
}

std::vector<int64_t> Communicator::all_gather_counts(int64_t mine) const {
  std::vector<int64_t> all(static_cast<size_t>(size()));
  all_gather(&mine, 1, DType::I64, all.data());
  return all;
}

void Communicator::scatter_v(const void* send, const std::vector<int64_t>& counts, DType t, void* recv,
                             int64_t my_count, int root) const {
  require_collective_dtype(t, ReduceOp::Sum);
  if (root < 0 || root >= size())
    throw InputError("scatter root " + std::to_string(root) + " outside the " + std::to_string(size()) + " ranks");
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) {
    std::vector<int> cnt, off;
    if (rank() == root) {
      if (counts.size() != size_t(size())) throw InputError("scatter_v: one count per rank");
      int64_t o = 0;
      for (int64_t c : counts) {
        cnt.push_back(mpi_count(c));
        off.push_back(mpi_count(o));
        o += c;
      }
    }
    check(MPI_Scatterv(send, cnt.data(), off.data(), mpi_type(t), recv, mpi_count(my_count), mpi_type(t), root,
                       impl_->comm),
          "MPI_Scatterv");
    return;
  }
#endif
  if (my_count > 0 && recv != send) std::memmove(recv, send, bytes_of(my_count, t));
}

std::vector<std::vector<int64_t>> Communicator::all_to_all(const std::vector<std::vector<int64_t>>& lists) const {
  if (lists.size() != size_t(size()))
    throw InputError("all_to_all: " + std::to_string(lists.size()) + " lists for " + std::to_string(size()) + " ranks");
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) {
    const size_t p = size_t(size());
    // MPI counts and offsets are ints: what one rank sends or receives must fit them, and a
    // rank past that is an error on every rank (not one rank throwing while the others wait).
    auto too_many = [this](int64_t mine, const char* what) {
      const int64_t most = all_reduce(mine, ReduceOp::Max);
      if (most > int64_t(std::numeric_limits<int>::max()))
        throw CollectiveError("all_to_all: a rank " + std::string(what) + " " + std::to_string(most) +
                              " entries, more than one MPI call carries");
    };
    int64_t sending = 0;
    for (const auto& l : lists) sending += int64_t(l.size());
    too_many(sending, "sends");
    std::vector<int> scount(p), rcount(p), soff(p), roff(p);
    std::vector<int64_t> flat;
    flat.reserve(size_t(sending));
    for (size_t r = 0; r < p; ++r) {
      soff[r] = int(flat.size());
      scount[r] = int(lists[r].size());
      flat.insert(flat.end(), lists[r].begin(), lists[r].end());
    }
    check(MPI_Alltoall(scount.data(), 1, MPI_INT, rcount.data(), 1, MPI_INT, impl_->comm), "MPI_Alltoall");
    int64_t total = 0;
    for (size_t r = 0; r < p; ++r) total += rcount[r];
    too_many(total, "receives");
    total = 0;
    for (size_t r = 0; r < p; ++r) {
      roff[r] = int(total);
      total += rcount[r];
    }
    std::vector<int64_t> in(static_cast<size_t>(total));
    check(MPI_Alltoallv(flat.data(), scount.data(), soff.data(), MPI_INT64_T, in.data(), rcount.data(), roff.data(),
                        MPI_INT64_T, impl_->comm),
          "MPI_Alltoallv");
    std::vector<std::vector<int64_t>> out(p);
    for (size_t r = 0; r < p; ++r) out[r].assign(in.begin() + roff[r], in.begin() + roff[r] + rcount[r]);
    return out;
  }
#endif
  return lists;
}

void Communicator::barrier() const {
#ifdef RLX_HAVE_MPI
  if (is_mpi() && size() > 1) check(MPI_Barrier(impl_->comm), "MPI_Barrier");
#endif
}

#ifdef RLX_HAVE_MPI
Communicator from_mpi(MPI_Comm comm) {
  if (!mpi_initialized()) throw InputError("from_mpi: MPI is not initialised");
  if (comm == MPI_COMM_NULL) throw InputError("from_mpi: MPI_COMM_NULL is not a communicator");
  if (comm == MPI_COMM_WORLD) return Communicator::world();
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    id = next_comm_id++;
  }
  return Communicator(registered(wrap(comm, id, "user communicator", false)));
}

MPI_Comm mpi_comm(const Communicator& c) { return c.is_mpi() ? c.impl().comm : MPI_COMM_SELF; }
#endif

std::string broadcast_string(const Communicator& c, const std::string& s, int root) {
  int64_t len = int64_t(s.size());
  c.broadcast(&len, 1, DType::I64, root);
  std::vector<int32_t> chars(s.begin(), s.end());
  chars.resize(size_t(len));
  if (len > 0) c.broadcast(chars.data(), len, DType::I32, root);
  return std::string(chars.begin(), chars.end());
}

void raise_collectively(const Communicator& c, const std::string& why) {
  const int64_t bad = c.all_reduce(int64_t(why.empty() ? c.size() : c.rank()), ReduceOp::Min);
  if (bad == c.size()) return;
  throw CollectiveError("rank " + std::to_string(bad) + ": " + broadcast_string(c, why, int(bad)));
}

// ---------------------------------------------------------------- halo exchange

int64_t HaloPattern::sends() const {
  int64_t n = 0;
  for (auto& s : send_index) n += int64_t(s.size());
  return n;
}
int64_t HaloPattern::receives() const {
  int64_t n = 0;
  for (auto c : recv_count) n += c;
  return n;
}

namespace {
void* host_alloc(size_t bytes) {
  void* p = std::malloc(bytes);
  if (!p) throw std::bad_alloc();
  return p;
}
void host_release(void* p) { std::free(p); }
void host_copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void host_ready() {}
}  // namespace

const DeviceMemory& host_memory() {
  static const DeviceMemory m{host_alloc, host_release, host_copy, host_ready};
  return m;
}

// The messages of one dtype in one memory (created on first use of the pair): send and
// receive buffers in that memory and the persistent requests bound to them.
struct HaloExchange::Requests {
  DType dtype;
  const DeviceMemory* mem;
  char* send = nullptr;
  char* recv = nullptr;
  size_t send_bytes = 0, recv_bytes = 0;
#ifdef RLX_HAVE_MPI
  std::vector<MPI_Request> reqs;
#endif
  Requests(DType t, const DeviceMemory& m) : dtype(t), mem(&m) {}
  void copy(void* dst, const void* src, size_t n) const {
    if (n) mem->copy(dst, src, n);
  }
  ~Requests() {
#ifdef RLX_HAVE_MPI
    if (mpi_initialized())
      for (auto& r : reqs)
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
#endif
    if (send) mem->release(send);
    if (recv) mem->release(recv);
  }
};

HaloExchange::HaloExchange(Communicator comm, HaloPattern pattern) : HaloExchange(std::move(comm), std::move(pattern), -1) {}

HaloExchange::HaloExchange(Communicator comm, HaloPattern pattern, int64_t fixed_id)
    : comm_(std::move(comm)), pattern_(std::move(pattern)) {
  const auto& p = pattern_;
  if (p.send_index.size() != p.send_ranks.size() || p.recv_count.size() != p.recv_ranks.size())
    throw InputError("halo pattern: one index list per send rank and one count per receive rank");
  auto check_ranks = [&](const std::vector<int>& ranks, const char* what) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= comm_.size())
        throw InputError(std::string("halo pattern: ") + what + " rank " + std::to_string(ranks[i]) + " outside the " +
                         std::to_string(comm_.size()) + " ranks of " + comm_.describe());
      if (i > 0 && ranks[i] <= ranks[i - 1])
        throw InputError(std::string("halo pattern: ") + what + " ranks must be ascending and distinct");
    }
  };
  check_ranks(p.send_ranks, "send");
  check_ranks(p.recv_ranks, "receive");
  for (auto& s : p.send_index)
    for (int64_t i : s)
      if (i < 0) throw InputError("halo pattern: negative send index " + std::to_string(i));
  for (auto c : p.recv_count)
    if (c < 0) throw InputError("halo pattern: negative receive count " + std::to_string(c));
  if (fixed_id >= 0) {
    id_ = fixed_id;
    return;
  }
  std::lock_guard<std::mutex> lock(registry_mutex);
  id_ = next_plan_id++;
  plans()[id_] = this;
}

HaloExchange::~HaloExchange() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  plans().erase(id_);
}

HaloExchange& HaloExchange::by_id(int64_t id) {
  if (id == 0) {
    // Plan 0, the loopback the ops' examples probe devices with: entries 3, 0, 2 to itself.
    static HaloExchange* loop = [] {
      HaloPattern p;
      p.send_ranks = {0};
      p.send_index = {{3, 0, 2}};
      p.recv_ranks = {0};
      p.recv_count = {3};
      return new HaloExchange(Communicator(local_self()), std::move(p), 0);
    }();
    return *loop;
  }
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = plans().find(id);
  if (it == plans().end()) throw InputError("halo plan " + std::to_string(id) + " does not exist in this process");
  return *it->second;
}

HaloExchange::Requests& HaloExchange::requests_for(DType t, const DeviceMemory& mem) {
  for (auto& r : by_dtype_)
    if (r->dtype == t && r->mem == &mem) return *r;
  require_collective_dtype(t, ReduceOp::Sum);
  auto r = std::make_unique<Requests>(t, mem);
  const size_t es = dtype_storage_bytes(t, 1);
  r->send_bytes = size_t(pattern_.sends()) * es;
  r->recv_bytes = size_t(pattern_.receives()) * es;
  // (at least one byte each: a buffer of no entries still needs an address for MPI)
  r->send = static_cast<char*>(mem.alloc(std::max<size_t>(r->send_bytes, 1)));
  r->recv = static_cast<char*>(mem.alloc(std::max<size_t>(r->recv_bytes, 1)));
#ifdef RLX_HAVE_MPI
  if (comm_.is_mpi()) {
    // One tag per plan keeps two plans' messages on one communicator apart.
    const int tag = int(id_ % 32000) + 1;
    MPI_Comm c = comm_.impl().comm;
    size_t off = 0;
    for (size_t i = 0; i < pattern_.recv_ranks.size(); ++i) {
      MPI_Request q;
      check(MPI_Recv_init(r->recv + off * es, mpi_count(pattern_.recv_count[i]), mpi_type(t),
                          pattern_.recv_ranks[i], tag, c, &q),
            "MPI_Recv_init");
      r->reqs.push_back(q);
      off += size_t(pattern_.recv_count[i]);
    }
    off = 0;
    for (size_t i = 0; i < pattern_.send_ranks.size(); ++i) {
      MPI_Request q;
      const int64_t n = int64_t(pattern_.send_index[i].size());
      check(MPI_Send_init(r->send + off * es, mpi_count(n), mpi_type(t), pattern_.send_ranks[i], tag, c, &q),
            "MPI_Send_init");
      r->reqs.push_back(q);
      off += size_t(n);
    }
  }
#endif
  by_dtype_.push_back(std::move(r));
  return *by_dtype_.back();
}

void HaloExchange::begin(const void* x, int64_t local, DType t, void* packed) {
  if (active_) throw InputError("halo plan " + std::to_string(id_) + ": begin() again before end()");
  Requests& r = requests_for(t);
  const size_t es = dtype_storage_bytes(t, 1);
  const char* src = static_cast<const char*>(x);
  char* dst = r.send;
  for (const auto& idx : pattern_.send_index)
    for (int64_t i : idx) {
      if (i >= local)
        throw InputError("halo plan " + std::to_string(id_) + ": send index " + std::to_string(i) + " outside the " +
                         std::to_string(local) + " local entries");
      std::memcpy(dst, src + size_t(i) * es, es);
      dst += es;
    }
  start(r, packed);
}

std::vector<int64_t> HaloExchange::send_order() const {
  std::vector<int64_t> order;
  order.reserve(size_t(pattern_.sends()));
  for (const auto& idx : pattern_.send_index) order.insert(order.end(), idx.begin(), idx.end());
  return order;
}

void HaloExchange::begin_packed(const void* entries, DType t, void* packed, const DeviceMemory& mem) {
  if (active_) throw InputError("halo plan " + std::to_string(id_) + ": begin() again before end()");
  Requests& r = requests_for(t, mem);
  r.copy(r.send, entries, r.send_bytes);
  start(r, packed);
}

void HaloExchange::start(Requests& r, void* packed) {
  r.copy(packed, r.send, r.send_bytes);
#ifdef RLX_HAVE_MPI
  if (comm_.is_mpi()) {
    if (!r.reqs.empty()) check(MPI_Startall(int(r.reqs.size()), r.reqs.data()), "MPI_Startall");
    active_ = &r;
    return;
  }
#endif
  // One process: the only neighbour is the process itself, so what it sends is what it receives.
  if (r.send_bytes != r.recv_bytes)
    throw InputError("halo plan " + std::to_string(id_) + ": on one process the entries sent (" +
                     std::to_string(pattern_.sends()) + ") must be those received (" + std::to_string(pattern_.receives()) + ")");
  r.copy(r.recv, r.send, r.send_bytes);
  active_ = &r;
}

void HaloExchange::end(void* ghosts, DType t, const DeviceMemory& mem) {
  if (!active_) throw InputError("halo plan " + std::to_string(id_) + ": end() without begin()");
  Requests& r = *active_;
  active_ = nullptr;
  if (r.dtype != t)
    throw InputError(std::string("halo plan ") + std::to_string(id_) + ": end() for " + dtype_name(t) +
                     " after begin() for " + dtype_name(r.dtype));
#ifdef RLX_HAVE_MPI
  // (the messages complete before the memory check: MPI writes into r's buffers until then)
  if (comm_.is_mpi() && !r.reqs.empty())
    check(MPI_Waitall(int(r.reqs.size()), r.reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
#endif
  if (r.mem != &mem) {
    auto where = [](const DeviceMemory* m) { return m == &host_memory() ? "host" : "a device's"; };
    throw InputError("halo plan " + std::to_string(id_) + ": end() in " + where(&mem) + " memory after begin() in " +
                     where(r.mem) + " memory");
  }
  r.copy(ghosts, r.recv, r.recv_bytes);
}

// ---------------------------------------------------------------- the CLI's session

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"})
    if (std::getenv(v)) return true;
  return false;
}

MpiSession::MpiSession(int* argc, char*** argv) {
#ifdef RLX_HAVE_MPI
  if (!launched_by_mpi() || mpi_initialized()) return;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  owned_ = true;
#endif
}

MpiSession::~MpiSession() {
#ifdef RLX_HAVE_MPI
  if (owned_ && mpi_initialized()) MPI_Finalize();
#endif
}

void MpiSession::abort_job(int code) {
#ifdef RLX_HAVE_MPI
  if (mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

}  // namespace rlx::dist
