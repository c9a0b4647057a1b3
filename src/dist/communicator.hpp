// A group of processes that compute together: rank, size, split, and the collectives and
// halo exchanges the distributed programs use, on host memory.
//
//   rlx::dist::Communicator world = rlx::dist::Communicator::world();
//   world.rank(), world.size();
//   auto rows = world.split(world.rank() % 2);            // a sub-group (collective)
//
// Built with MPI (RLX_HAVE_MPI), world() is MPI_COMM_WORLD once MPI is initialised, and
// dist/mpi.hpp wraps a user's MPI_Comm. rlx never initialises MPI itself: the program's entry
// point does (MPI_Init, or dist::MpiSession in the rlx CLI). Without MPI, or before MPI_Init,
// world() is the one-process group, where every collective is the identity the mathematics
// gives for one rank (a sum over one rank is the value itself).
//
// A communicator is a handle (copies share the group). Each has an id, registered
// process-wide for as long as a copy lives: IR ops name their communicator by that id
// (the attribute `comm`), and their kernels find it with Communicator::by_id
// (docs/distributed.md says why the handle is an attribute).
#pragma once
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "runtime/standard_kernels.hpp"

namespace rlx::dist {

using rlx::ReduceOp;
const char* reduce_op_name(ReduceOp op);          // "sum", "max", "min"
ReduceOp reduce_op_from_name(const std::string& s);  // throws InputError for others (prod included)

// Whether this build has MPI, and whether MPI is initialised in this process now.
bool have_mpi();
bool mpi_initialized();
// Whether MPI takes CUDA device memory (a CUDA-aware Open MPI: MPIX_Query_cuda_support()),
// with MPI initialised, and opted into with RLX_MPI_CUDA_AWARE=1 (0 or unset: no; another
// value: InputError): opt-in because on one GPU shared by two ranks the cuda route through it
// measured slower than host-staged (docs/distributed.md, "Routes"). False otherwise.
bool mpi_cuda_aware();

// A memory that MPI reads and writes directly: the host's, or a device's under a CUDA-aware
// MPI. Buffers in it, a copy within it that is complete when copy returns, and ready(), which
// returns once the work the device has queued is done (so MPI reads what the kernels before
// it wrote).
struct DeviceMemory {
  void* (*alloc)(size_t bytes);  // throws std::bad_alloc or a DeviceError when it cannot
  void (*release)(void* p);
  void (*copy)(void* dst, const void* src, size_t bytes);
  void (*ready)();
};
// The host's memory in that form (malloc, free, memcpy; nothing queued).
const DeviceMemory& host_memory();

class Communicator {
 public:
  // MPI_COMM_WORLD when MPI is initialised, else the one-process group.
  static Communicator world();
  // The one-process group (MPI_COMM_SELF under MPI; id 0 always exists).
  static Communicator self();
  // The live communicator with this id; throws InputError when none has it (its last copy
  // was destroyed, or the id was never issued in this process).
  static Communicator by_id(int64_t id);

  int rank() const;
  int size() const;
  int64_t id() const;
  bool is_mpi() const;  // false for the one-process group without MPI
  std::string describe() const;  // "MPI_COMM_WORLD rank 1 of 4"
  // Collective: processes with the same color form a group, ordered by (key, rank).
  Communicator split(int color, int key = 0) const;

  // The collectives, in place on host memory, over `count` elements of `t`
  // (f32 f64 c64 i32 i64; max/min refuse c64). Every rank must call them in the same order.
  void all_reduce(void* buf, int64_t count, DType t, ReduceOp op) const;
  double all_reduce(double v, ReduceOp op) const;
  int64_t all_reduce(int64_t v, ReduceOp op) const;
  // all_reduce in two halves: start copies `count` elements of buf and starts their reduction
  // (MPI_Iallreduce) under `slot`, a number pairing it with its wait in this process; wait
  // finishes it and writes the result to out. Waiting on a slot that is not in flight is an
  // InputError; starting one that is (its end never ran: the run between them threw) first
  // finishes the stale reduction. Ranks must start their reductions in one order, and a
  // program holding such a pair must not run on two threads at once (slots are per process).
  void all_reduce_start(int64_t slot, const void* buf, int64_t count, DType t, ReduceOp op) const;
  void all_reduce_wait(int64_t slot, void* out, int64_t count, DType t) const;
  // recv holds size() * count elements: rank r's `count` at offset r * count.
  void all_gather(const void* send, int64_t count, DType t, void* recv) const;
  // send holds size() * count elements; rank r receives the reduction of every rank's
  // block r (count elements) into recv.
  void reduce_scatter(const void* send, int64_t count, DType t, ReduceOp op, void* recv) const;
  void broadcast(void* buf, int64_t count, DType t, int root) const;
  // Blocks of different lengths: rank r contributes counts[r] elements (counts: every
  // rank's, in rank order, the same on all); recv gets them concatenated in rank order.
  void all_gather_v(const void* send, DType t, const std::vector<int64_t>& counts, void* recv) const;
  // Every rank's value of `mine`, in rank order.
  std::vector<int64_t> all_gather_counts(int64_t mine) const;
  // Root's send holds one block per rank in rank order, counts[r] elements of t each
  // (counts is read on root only); every rank receives its block, my_count elements, in recv.
  void scatter_v(const void* send, const std::vector<int64_t>& counts, DType t, void* recv, int64_t my_count,
                 int root) const;
  // Sends lists[r] to rank r (lists has size() entries) and returns what each rank sent to
  // this one, in rank order.
  std::vector<std::vector<int64_t>> all_to_all(const std::vector<std::vector<int64_t>>& lists) const;
  void barrier() const;

  struct Impl;
  explicit Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// An InputError that every rank of a communicator throws at the same point (so the job can
// end cleanly: no rank is left waiting).
class CollectiveError : public InputError {
 public:
  using InputError::InputError;
};

// A collective verdict (every rank calls it): when some rank's `why` is not empty, every
// rank throws CollectiveError("rank R: <R's why>") for the lowest such rank R, so that an error
// found on one rank (a file it cannot read, input it refuses) stops all of them at the same
// point instead of leaving the others waiting in the next collective.
void raise_collectively(const Communicator& c, const std::string& why);

// Runs f() and returns the message of the InputError (or allocation failure) it throws,
// empty when it returns normally: the `why` raise_collectively takes, for work one rank
// does on its own (reading its share of a file) that every rank must agree on.
template <class F>
std::string failure_of(F&& f, const std::string& path) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::bad_alloc&) {
    return path + ": out of memory while reading";
  } catch (const std::length_error&) {
    return path + ": out of memory while reading";
  }
  return {};
}

// Root's string on every rank (collective; the others' argument is ignored).
std::string broadcast_string(const Communicator& c, const std::string& s, int root);

// A point-to-point exchange of vector entries with neighbouring ranks, planned once and
// run many times (persistent requests): each rank sends, to each neighbour, its entries at
// fixed local indices, and receives a fixed count from each neighbour into one ghost
// vector (neighbours in ascending rank order, each's entries in the order it sends them).
// begin() packs and starts every send and receive; end() waits for them. The IR ops
// halo_begin / halo_end run it (attribute `plan` = id()), so a distributed SpMV can
// multiply its local block between the two.
struct HaloPattern {
  std::vector<int> send_ranks;                    // ascending
  std::vector<std::vector<int64_t>> send_index;   // per send rank: local indices to send
  std::vector<int> recv_ranks;                    // ascending
  std::vector<int64_t> recv_count;                // per recv rank
  int64_t sends() const;                          // total entries sent
  int64_t receives() const;                       // total entries received
};

class HaloExchange {
 public:
  // Not collective; the neighbours' patterns must mirror this one (what A sends to B, B
  // receives from A, in count). Throws InputError for ranks outside the communicator or
  // negative indices.
  HaloExchange(Communicator comm, HaloPattern pattern);
  ~HaloExchange();
  HaloExchange(const HaloExchange&) = delete;
  HaloExchange& operator=(const HaloExchange&) = delete;

  int64_t id() const { return id_; }
  const HaloPattern& pattern() const { return pattern_; }
  const Communicator& communicator() const { return comm_; }
  // The plan with this id; throws InputError when it no longer exists. Plan 0 always
  // exists: a one-process loopback sending entries 3, 0, 2 of x to itself.
  static HaloExchange& by_id(int64_t id);

  // x: `local` contiguous elements of t (indices checked against it); packed receives the
  // sends() entries in send order. Starts the messages (their buffers are the plan's own,
  // so x and packed may be reused at once).
  void begin(const void* x, int64_t local, DType t, void* packed);
  // begin() for entries already packed: `entries` holds the sends() entries in send order
  // (gathered where x lives: on a GPU, so that only they cross to the host). With a device's
  // memory (entries and packed there), the messages go from and to buffers in that memory.
  void begin_packed(const void* entries, DType t, void* packed, const DeviceMemory& mem = host_memory());
  // The send indices of every neighbour in send order, one list: what begin() packs.
  std::vector<int64_t> send_order() const;
  // Waits for begin()'s messages; ghosts receives receives() entries. mem: the memory the
  // exchange began in (ghosts there).
  void end(void* ghosts, DType t, const DeviceMemory& mem = host_memory());

 private:
  struct Requests;
  HaloExchange(Communicator comm, HaloPattern pattern, int64_t fixed_id);
  Requests& requests_for(DType t, const DeviceMemory& mem = host_memory());
  void start(Requests& r, void* packed);  // copies r.send to packed, starts the messages
  Communicator comm_;
  HaloPattern pattern_;
  int64_t id_ = -1;
  std::vector<std::unique_ptr<Requests>> by_dtype_;
  Requests* active_ = nullptr;
};

}  // namespace rlx::dist
