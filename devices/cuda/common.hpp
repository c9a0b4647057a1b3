// What every file of the cuda device shares: error checking that names the kernel and
// the IR node, the device's one stream, its caching allocator and scratch memory, and
// the strided-view descriptor the kernels take. Host-side C++ (no device code here).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/env.hpp"
#include "core/tensor.hpp"

namespace rlx::cuda {

// Throws DeviceError "cuda: <what>: <CUDA's message> (node <current node>)" unless e is
// cudaSuccess. Out-of-memory reports the bytes asked for where `what` says so.
void check(cudaError_t e, const std::string& what);
// After a kernel launch: reports a bad launch configuration or an earlier fault.
void check_launch(const char* kernel);

// Multiprocessors of the current GPU (asked once).
int sm_count();


// All device work is ordered on this one stream (created on first use).
cudaStream_t stream();
// Whether stream() is being recorded into a CUDA graph: then nothing may wait for the
// device or read back to the host.
bool capturing();

// The device allocator: stream-ordered, caching freed blocks by size class.
Allocator* allocator();
bool is_device(const Tensor& t);
// While recording a CUDA graph, blocks freed by the host stay with the recording (its
// kernels use them on every replay) instead of going back to the cache.
void begin_keeping_freed_blocks();
std::vector<std::pair<void*, size_t>> end_keeping_freed_blocks();
void return_kept_blocks(const std::vector<std::pair<void*, size_t>>& blocks);
// Called (on the freeing thread, outside the allocator's lock) whenever a block goes back
// to the allocator, so caches keyed by device addresses can drop what lived there.
// A hook must not allocate or free device memory itself.
void on_device_free(void (*hook)(const void* p, size_t bytes));

// Checks recorded into a CUDA graph. A kernel that validates its input (gather's indices)
// cannot read its verdict back while the stream is being recorded, so it reports through a
// device word instead: recorded_check() hands out a word that holds ~0 until a kernel lowers
// it (atomicMin) to say what was wrong; after a replay, synchronize() and every copy to the
// host read the live words and throw describe(word) for the first one set (resetting it), so
// a replayed step with a bad index fails where its results are read instead of returning
// them. Words belong to the recording that asked for them (released with its replay).
unsigned long long* recorded_check(std::function<std::string(unsigned long long)> describe);
void begin_recording_checks();             // before a capture (outside it): the words exist and hold ~0
std::vector<int> end_recording_checks();   // the words the capture asked for
void release_recorded_checks(const std::vector<int>& ids);
void throw_recorded_faults();              // after the stream is synchronized

// The directory kept across processes for what the device builds once: generated kernels'
// cubins and the GEMM algorithms chosen by timing (RLX_CACHE_DIR/cuda, else
// XDG_CACHE_HOME/rlx/cuda, else ~/.cache/rlx/cuda). An entry is data stored under a key
// (file names from the key's hash, the key kept beside the data so a collision cannot
// alias), written atomically (temporary file + rename) so concurrent processes never read
// half of one. The cache is optional: a write that fails is skipped, a missing entry reads "".
std::string cache_dir();
std::string get_cache_entry(const std::string& key, const std::string& suffix);
void put_cache_entry(const std::string& key, const std::string& suffix, const std::string& data);

// Temporary device memory for one kernel call, returned to the cache on destruction
// (stream-ordered: reuse is safe for later work on stream()).
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The node a kernel runs for, named by error messages; set by the device around each
// kernel ("%12 spmv_csr at solver.cpp:40").
class NodeScope {
 public:
  explicit NodeScope(std::string what);
  ~NodeScope();

 private:
  std::string prev_;
};
const std::string& current_node();

// A strided view as kernels take it by value: up to kMaxRank dims, element strides.
constexpr int kMaxRank = 8;
struct View {
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};
// t's view (its shape, strides) or t broadcast to `shape` (size-1 and missing leading
// dims get stride 0). Throws InputError above kMaxRank dims.
View view_of(const Tensor& t);
View broadcast_view(const Tensor& t, const Shape& shape);

// A contiguous copy of a (possibly strided) device tensor, or t itself when contiguous.
Tensor contiguous(const Tensor& t);
// dst (contiguous, shape s) = src viewed through v; any element size 1, 2, 4, 8 or 16.
void copy_strided(const void* src, const View& v, void* dst, size_t esize);

}  // namespace rlx::cuda
