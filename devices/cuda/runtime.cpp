// The cuda device's runtime pieces: error checking, the stream, the caching allocator,
// scratch memory and strided views (devices/cuda/common.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"

namespace rlx::cuda {

namespace {
thread_local std::string g_node;

std::string where() { return g_node.empty() ? std::string() : " (node " + g_node + ")"; }
}  // namespace

NodeScope::NodeScope(std::string what) : prev_(std::move(g_node)) { g_node = std::move(what); }
NodeScope::~NodeScope() { g_node = std::move(prev_); }
const std::string& current_node() { return g_node; }

void check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the process can go on
  throw DeviceError("cuda: " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")" + where());
}

void check_launch(const char* kernel) { check(cudaGetLastError(), std::string("kernel ") + kernel); }

cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t st = nullptr;
    check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    return st;
  }();
  return s;
}

int sm_count() {
  static int n = [] {
    int dev = 0, c = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev), "multiprocessor count");
    return c;
  }();
  return n;
}

bool capturing() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream(), &st), "cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

namespace {

constexpr size_t kStage = size_t(8) << 20;  // bytes per pinned staging buffer

struct Staging {
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  bool ok = false;
  std::mutex mu;
};

Staging& staging() {
  static Staging* s = [] {
    auto* st = new Staging;  // lives as long as the process (pinned memory is released at exit)
    bool ok = true;
    for (int i = 0; i < 2 && ok; ++i) {
      ok = cudaMallocHost(&st->buf[i], kStage) == cudaSuccess &&
           cudaEventCreateWithFlags(&st->done[i], cudaEventDisableTiming) == cudaSuccess;
    }
    if (!ok) cudaGetLastError();  // fall back to pageable copies
    st->ok = ok;
    return st;
  }();
  return *s;
}

// Small host -> device copies (a batch's indices, a step's scalars) go through a ring of
// pinned slots and return without waiting for the device: the data is in pinned memory when
// the call returns, the transfer is ordered before all later work on the stream, and a slot
// is refilled only after its previous transfer is done (its event). Waiting here instead
// would make every training step wait for the previous one to finish on the GPU.
constexpr size_t kSlot = size_t(64) << 10, kSlots = 64;

struct SmallCopies {
  void* buf = nullptr;
  cudaEvent_t done[kSlots] = {};
  size_t next = 0;
  bool ok = false;
  std::mutex mu;
};

SmallCopies& small_copies() {
  static SmallCopies* s = [] {
    auto* r = new SmallCopies;  // lives as long as the process, like the staging buffers
    bool ok = cudaMallocHost(&r->buf, kSlot * kSlots) == cudaSuccess;
    for (size_t i = 0; i < kSlots && ok; ++i) ok = cudaEventCreateWithFlags(&r->done[i], cudaEventDisableTiming) == cudaSuccess;
    if (!ok) cudaGetLastError();
    r->ok = ok;
    return r;
  }();
  return *s;
}

// Copies n <= kSlot bytes without waiting; false when the ring is unavailable.
bool copy_small_from_host(void* dst, const void* src, size_t n) {
  SmallCopies& r = small_copies();
  if (!r.ok) return false;
  std::lock_guard<std::mutex> lk(r.mu);
  const size_t k = r.next;
  r.next = (k + 1) % kSlots;
  check(cudaEventSynchronize(r.done[k]), "copy from host");
  void* slot = static_cast<char*>(r.buf) + k * kSlot;
  std::memcpy(slot, src, n);
  check(cudaMemcpyAsync(dst, slot, n, cudaMemcpyHostToDevice, stream()), "copy from host");
  check(cudaEventRecord(r.done[k], stream()), "copy from host");
  return true;
}

// Freed blocks are kept by their rounded size and handed out again; all work is ordered
// on one stream, so a block freed by the host may be reused by later work at once (the
// kernels that read it earlier come first in stream order). On out-of-memory the cache
// is emptied and the allocation retried once.
class CachingAllocator final : public Allocator {
 public:
  std::string name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }

  static size_t round(size_t n) {
    if (n <= (1u << 20)) return std::max<size_t>(512, (n + 511) & ~size_t(511));
    return (n + (size_t(2) << 20) - 1) & ~((size_t(2) << 20) - 1);
  }

  void* allocate(size_t bytes) override {
    if (bytes == 0) bytes = 1;
    size_t r = round(bytes);
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = free_.find(r);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, r);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached();
      e = cudaMalloc(&p, r);
    }
    check(e, "allocating " + std::to_string(bytes) + " bytes on the GPU");
    return p;
  }

  void deallocate(void* p, size_t bytes) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (keeping_) kept_.push_back({p, bytes});
      else free_[round(bytes == 0 ? 1 : bytes)].push_back(p);
    }
    for (auto& h : hooks_)
      if (auto* f = h.load(std::memory_order_acquire)) f(p, bytes);
  }
  std::atomic<void (*)(const void*, size_t)> hooks_[4] = {};  // set once each, at first use of a cache
  void keep(bool on, std::vector<std::pair<void*, size_t>>* out) {
    std::lock_guard<std::mutex> lk(mu_);
    keeping_ = on;
    if (out) {
      out->swap(kept_);
      kept_.clear();
    }
  }

  // Host <-> device copies go through two pinned staging buffers (page-locked host memory
  // the GPU reads and writes directly), chunk by chunk, so that copying to or from the
  // staging buffer on the host overlaps the transfer of the other chunk. Both directions
  // return when the data has arrived (the callers' host buffers may go at once). Where
  // pinned memory cannot be had, the copy is a plain pageable one. Device -> host copies
  // of a staging buffer or more are plain pageable ones too: on the H200 machine the
  // driver's own path moved 1 GiB at 10.8 GB/s against 7.2 through the staging buffers
  // (`rlx-bench cuda --only xfer`), while a 16-byte readback took 7.2 us staged against 8.6.
  void copy_to_host(void* dst, const void* src, size_t n) override {
    if (n == 0) return;
    Staging& st = staging();
    if (!st.ok || n >= kStage) {
      check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream()), "copy to host");
      check(cudaStreamSynchronize(stream()), "copy to host");
      throw_recorded_faults();
      return;
    }
    std::lock_guard<std::mutex> lk(st.mu);
    const size_t chunks = (n + kStage - 1) / kStage;
    auto size_of = [&](size_t k) { return std::min(kStage, n - k * kStage); };
    auto issue = [&](size_t k) {
      check(cudaMemcpyAsync(st.buf[k % 2], static_cast<const char*>(src) + k * kStage, size_of(k),
                            cudaMemcpyDeviceToHost, stream()),
            "copy to host");
      check(cudaEventRecord(st.done[k % 2], stream()), "copy to host");
    };
    issue(0);
    for (size_t k = 0; k < chunks; ++k) {
      if (k + 1 < chunks) issue(k + 1);  // its buffer was emptied in the previous trip
      check(cudaEventSynchronize(st.done[k % 2]), "copy to host");
      std::memcpy(static_cast<char*>(dst) + k * kStage, st.buf[k % 2], size_of(k));
    }
    throw_recorded_faults();
  }
  void copy_from_host(void* dst, const void* src, size_t n) override {
    if (n == 0) return;
    // (A copy recorded into a graph being captured would replay the slot's later contents:
    // such a copy takes the waiting path below, which refuses to run during a capture.)
    if (n <= kSlot && !capturing() && copy_small_from_host(dst, src, n)) return;
    Staging& st = staging();
    if (!st.ok) {
      check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream()), "copy from host");
      check(cudaStreamSynchronize(stream()), "copy from host");
      return;
    }
    std::lock_guard<std::mutex> lk(st.mu);
    for (size_t off = 0, k = 0; off < n; off += kStage, ++k) {
      const size_t c = std::min(kStage, n - off);
      // The buffer's previous transfer must be done before it is refilled (an event never
      // recorded counts as done).
      check(cudaEventSynchronize(st.done[k % 2]), "copy from host");
      std::memcpy(st.buf[k % 2], static_cast<const char*>(src) + off, c);
      check(cudaMemcpyAsync(static_cast<char*>(dst) + off, st.buf[k % 2], c, cudaMemcpyHostToDevice, stream()),
            "copy from host");
      check(cudaEventRecord(st.done[k % 2], stream()), "copy from host");
    }
    check(cudaStreamSynchronize(stream()), "copy from host");
  }
  void copy_within(void* dst, const void* src, size_t n) override {
    if (n == 0) return;
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream()), "device copy");
  }

 private:
  void release_cached() {
    std::lock_guard<std::mutex> lk(mu_);
    cudaStreamSynchronize(stream());
    for (auto& [size, v] : free_)
      for (void* p : v) cudaFree(p);
    free_.clear();
  }
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  bool keeping_ = false;
  std::vector<std::pair<void*, size_t>> kept_;
};

constexpr size_t kCheckWords = 4096;

struct RecordedChecks {
  std::mutex mu;
  unsigned long long* words = nullptr;  // device memory, kCheckWords words
  std::vector<std::function<std::string(unsigned long long)>> describe;  // by word; empty: free
  std::vector<int> recording;  // the words asked for by the capture under way
  int live = 0;
};

RecordedChecks& recorded() {
  static RecordedChecks* r = new RecordedChecks;  // lives as long as the process
  return *r;
}

CachingAllocator& caching() {
  static CachingAllocator* a = new CachingAllocator;  // outlives every tensor
  return *a;
}

}  // namespace

Allocator* allocator() { return &caching(); }

void begin_keeping_freed_blocks() { caching().keep(true, nullptr); }
std::vector<std::pair<void*, size_t>> end_keeping_freed_blocks() {
  std::vector<std::pair<void*, size_t>> v;
  caching().keep(false, &v);
  return v;
}
void on_device_free(void (*hook)(const void*, size_t)) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  for (auto& h : caching().hooks_)
    if (!h.load()) {
      h.store(hook, std::memory_order_release);
      return;
    }
  throw InternalError("cuda: too many allocator hooks");
}
void return_kept_blocks(const std::vector<std::pair<void*, size_t>>& blocks) {
  for (auto& [p, n] : blocks) caching().deallocate(p, n);
}

void begin_recording_checks() {
  RecordedChecks& r = recorded();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.words) {
    void* p = nullptr;
    check(cudaMalloc(&p, kCheckWords * sizeof(unsigned long long)), "allocating the recorded checks' words");
    check(cudaMemsetAsync(p, 0xff, kCheckWords * sizeof(unsigned long long), stream()), "recorded checks");
    r.words = static_cast<unsigned long long*>(p);
    r.describe.resize(kCheckWords);
  }
  r.recording.clear();
}

unsigned long long* recorded_check(std::function<std::string(unsigned long long)> describe) {
  RecordedChecks& r = recorded();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.words) throw InternalError("cuda: a recorded check outside a capture");
  for (size_t i = 0; i < kCheckWords; ++i)
    if (!r.describe[i]) {
      r.describe[i] = std::move(describe);
      r.recording.push_back(int(i));
      ++r.live;
      return r.words + i;
    }
  throw InputError("cuda: more than " + std::to_string(kCheckWords) +
                   " validated gathers in the CUDA graphs alive at once; release some replays");
}

std::vector<int> end_recording_checks() {
  RecordedChecks& r = recorded();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<int> ids;
  ids.swap(r.recording);
  return ids;
}

void release_recorded_checks(const std::vector<int>& ids) {
  RecordedChecks& r = recorded();
  std::lock_guard<std::mutex> lk(r.mu);
  for (int i : ids) {
    r.describe[size_t(i)] = nullptr;
    --r.live;
    // The word holds ~0 again for its next owner (stream-ordered after the replays that used it).
    cudaMemsetAsync(r.words + i, 0xff, sizeof(unsigned long long), stream());
  }
}

void throw_recorded_faults() {
  RecordedChecks& r = recorded();
  std::unique_lock<std::mutex> lk(r.mu);
  if (r.live == 0) return;
  size_t top = 0;
  for (size_t i = 0; i < kCheckWords; ++i)
    if (r.describe[i]) top = i + 1;
  std::vector<unsigned long long> w(top);
  check(cudaMemcpyAsync(w.data(), r.words, top * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream()),
        "reading the recorded checks");
  check(cudaStreamSynchronize(stream()), "reading the recorded checks");
  for (size_t i = 0; i < top; ++i)
    if (r.describe[i] && w[i] != ~0ull) {
      check(cudaMemsetAsync(r.words + i, 0xff, sizeof(unsigned long long), stream()), "recorded checks");
      auto describe = r.describe[i];
      lk.unlock();
      throw InputError(describe(w[i]));
    }
}

bool is_device(const Tensor& t) { return t.allocator() == allocator(); }

Scratch::Scratch(size_t bytes) : bytes_(bytes) { p_ = allocator()->allocate(bytes); }
Scratch::~Scratch() { allocator()->deallocate(p_, bytes_); }

View view_of(const Tensor& t) {
  if (t.rank() > kMaxRank)
    throw InputError("cuda: tensors of rank " + std::to_string(t.rank()) + " (at most " + std::to_string(kMaxRank) +
                     ")");
  View v;
  v.rank = t.rank();
  for (int d = 0; d < t.rank(); ++d) {
    v.shape[d] = t.shape()[size_t(d)];
    v.strides[d] = t.strides()[size_t(d)];
  }
  return v;
}

View broadcast_view(const Tensor& t, const Shape& shape) {
  if (shape.size() > size_t(kMaxRank))
    throw InputError("cuda: tensors of rank " + std::to_string(shape.size()) + " (at most " +
                     std::to_string(kMaxRank) + ")");
  View v;
  v.rank = int32_t(shape.size());
  const size_t lead = shape.size() - size_t(t.rank());
  for (size_t d = 0; d < shape.size(); ++d) {
    v.shape[d] = shape[d];
    if (d < lead) continue;
    size_t s = d - lead;
    v.strides[d] = t.shape()[s] == 1 && shape[d] != 1 ? 0 : t.strides()[s];
  }
  return v;
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor r = Tensor::empty(t.dtype(), t.shape(), allocator());
  copy_strided(t.raw(), view_of(t), r.raw(), dtype_size(t.dtype()));
  return r;
}

}  // namespace rlx::cuda
