// The cpu device's thread pool: one set of worker threads for every kernel.
// Size: std::thread::hardware_concurrency(), or RLX_NUM_THREADS when set (>= 1).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rlx::cpu {

class ThreadPool {
 public:
  static ThreadPool& instance();
  explicit ThreadPool(int nthreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return nthreads_; }
  // Runs f(t, nt) for t in [0, nt) on nt threads (the caller is t = 0) and waits.
  // nt is clamped to [1, size()]; a call from inside a task runs inline with nt = 1.
  // The first exception thrown by any task is rethrown here.
  void run(int nt, const std::function<void(int t, int nt)>& f);
  // Splits [0, n) into at most size() contiguous ranges of at least `grain` elements
  // and calls f(begin, end) on each, in parallel. Small n runs inline.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
  // True on a pool worker or inside a task.
  static bool in_task();

 private:
  void worker(int id);

  int nthreads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int, int)>* job_ = nullptr;
  int job_nt_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex run_mu_;  // one parallel region at a time
};

// Convenience wrappers over ThreadPool::instance().
inline int num_threads() { return ThreadPool::instance().size(); }
inline void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  ThreadPool::instance().parallel_for(n, grain, f);
}

}  // namespace rlx::cpu
