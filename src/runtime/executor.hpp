// Runs a compiled Program on its device. Holds the arena between runs, so repeated
// runs allocate nothing but their results.
#pragma once
#include <vector>

#include "runtime/program.hpp"

namespace rlx {

class Executor {
 public:
  Executor(const Program& p, Device& d);
  // As above, with the program's intermediates in `arena` (a U8 tensor on d's allocator of
  // at least p.arena_bytes) instead of an arena of its own. Executors whose runs never
  // overlap (a solver's steps, run one after another or queued in order on one device) may
  // share one arena: nothing in it outlives a run — results are never arena buffers — so the
  // steps of a GMRES(m) cycle need one arena, not m. Throws InputError when it is too small
  // or elsewhere.
  Executor(const Program& p, Device& d, Tensor arena);
  ~Executor();  // with RLX_PROFILE=1 in the environment, prints time per kernel
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Inputs anywhere (copied to the device when not already there); results stay on the
  // device (host tensors on host devices).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // As run, writing results into caller-provided device tensors of the right types.
  void run_into(const std::vector<Tensor>& inputs, std::vector<Tensor>& results);
  // As run_into, but returns once the work is queued on the device instead of waiting for
  // it (host devices finish it before returning anyway). Read the results only after
  // Device::synchronize() or a synchronous call; device inputs must not change before
  // then; a fault in the queued work is reported at that later point. Calls queue in order,
  // so repeated enqueues overlap the host's work for the next with the device's for this.
  void enqueue(const std::vector<Tensor>& inputs, std::vector<Tensor>& results);
  // Runs once (compiling and caching whatever the device needs), then records a run_into
  // of the same tensors for replay (a CUDA graph on the cuda device): launch() reruns the
  // whole program on the tensors' current contents. Inputs and results must be device
  // tensors that outlive the Replay (it keeps the executor's arena and the program's
  // constants alive itself); programs with control flow cannot be recorded.
  // Throws InputError when the device cannot record.
  std::unique_ptr<Replay> capture(const std::vector<Tensor>& inputs, std::vector<Tensor>& results);

 private:
  void execute(const std::vector<Tensor>& inputs, std::vector<Tensor>& results, bool have_results, bool wait = true);
  void run_control(const Kernel& k, std::vector<std::vector<Tensor>>& vals);
  void release_run_tensors();
  const Program& p_;
  Device& d_;
  Tensor arena_;
  std::vector<FusedRegion> regions_;  // per kernel, pointing at p_.graph
  bool profile_ = false;
  int64_t runs_ = 0;
  std::vector<double> kernel_seconds_, first_seconds_;  // runs after the first; the first
  // Per node and output: its tensor during a run, and whether that tensor is the same on
  // every run (made once by the constructor); per kernel: its operand and result handles.
  std::vector<std::vector<Tensor>> vals_;
  std::vector<std::vector<bool>> fixed_;
  std::vector<std::vector<Tensor>> kin_, kout_;
};

}  // namespace rlx
