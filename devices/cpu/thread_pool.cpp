#include "devices/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/env.hpp"

namespace rlx::cpu {

namespace {
thread_local bool t_in_task = false;

int default_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return int(env_int("RLX_NUM_THREADS", 1, 1024, hc ? int(hc) : 1));
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long an idle thread polls before it blocks: short, so that spinning never competes
// for long with other work on a small machine.
constexpr auto kSpin = std::chrono::microseconds(50);
}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool(default_threads());
  return pool;
}

ThreadPool::ThreadPool(int nthreads) : nthreads_(std::max(1, nthreads)) {
  threads_.reserve(size_t(nthreads_ - 1));
  for (int i = 1; i < nthreads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : threads_) t.join();
}

bool ThreadPool::in_task() { return t_in_task; }

void ThreadPool::worker(int id) {
  t_in_task = true;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int, int)>* job = nullptr;
    int nt = 0;
    // Poll briefly for the next job, then block.
    auto until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
        if (lk.owns_lock()) {
          if (stop_) return;
          if (generation_ != seen) {
            seen = generation_;
            job = job_;
            nt = job_nt_;
            break;
          }
        }
      }
      if (std::chrono::steady_clock::now() > until) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        nt = job_nt_;
        break;
      }
      for (int i = 0; i < 64; ++i) cpu_relax();
    }
    if (id >= nt) continue;  // this job needs fewer threads
    try {
      (*job)(id, nt);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::run(int nt, const std::function<void(int, int)>& f) {
  nt = std::clamp(nt, 1, nthreads_);
  if (nt == 1 || t_in_task) {
    f(0, 1);
    return;
  }
  std::lock_guard<std::mutex> region(run_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &f;
    job_nt_ = nt;
    pending_ = nt - 1;
    error_ = nullptr;
    ++generation_;
  }
  cv_work_.notify_all();
  std::exception_ptr mine;
  t_in_task = true;
  try {
    f(0, nt);
  } catch (...) {
    mine = std::current_exception();
  }
  t_in_task = false;
  {
    auto until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (pending_ == 0) break;
      }
      if (std::chrono::steady_clock::now() > until) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_done_.wait(lk, [&] { return pending_ == 0; });
        break;
      }
      for (int i = 0; i < 64; ++i) cpu_relax();
    }
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    err = error_;
    error_ = nullptr;
    job_ = nullptr;
  }
  if (mine) std::rethrow_exception(mine);
  if (err) std::rethrow_exception(err);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t parts = std::min<int64_t>(nthreads_, (n + grain - 1) / grain);
  if (parts <= 1 || t_in_task) {
    f(0, n);
    return;
  }
  run(int(parts), [&](int t, int nt) {
    int64_t b = n * t / nt, e = n * (t + 1) / nt;
    if (b < e) f(b, e);
  });
}

}  // namespace rlx::cpu
