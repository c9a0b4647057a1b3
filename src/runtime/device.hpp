// The device interface. A device declares what it can run (a capability predicate over
// op, dtypes, shapes and attributes) and runs L3 kernels on tensors it allocated.
// The runtime owns parameters, constants, views (reshape) and control flow; devices
// see only compute nodes.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "dispatch/target.hpp"
#include "ir/graph.hpp"
#include "passes/l3.hpp"
#include "passes/passes.hpp"

namespace rlx {

// A recorded piece of device work that can be launched again as a whole (a CUDA graph on
// the cuda device). It reads and writes the same buffers every time.
class Replay {
 public:
  virtual ~Replay() = default;
  virtual void launch() = 0;  // asynchronous; Device::synchronize() waits for it
};

// A full sum the planner placed in a fused region (devices with fuses_reductions()):
// accumulated while the region runs, written to `out` (rank 0) when it has run.
struct FusedSum {
  ir::Value operand;
  Tensor out;
};

// A fused region taken apart for a device that runs it as one elementwise pass with its
// full sums accumulated along the way: the elementwise nodes (SSA order), the values they
// write out with their tensors, and the sums. `sums_f32_or_f64` is false when some sum has
// another dtype (the devices then run the region node by node).
struct FusedSplit {
  std::vector<const ir::Node*> nodes;
  std::vector<ir::Value> outputs;
  std::vector<Tensor> out;
  std::vector<FusedSum> sums;
  bool sums_f32_or_f64 = true;
};
FusedSplit split_fused_sums(const FusedRegion& r, std::span<Tensor> out);

// Capability and the dispatch contract's view of a device (name, supports): dispatch/target.hpp.
// FusedRegion and MatmulEpilogue, the L3 kernels a device runs: passes/l3.hpp.
class Device : public Target {
 public:
  virtual std::string description() const = 0;  // one line: what runs the kernels
  virtual Allocator* allocator() = 0;
  // Empty when the device can run programs in this process; otherwise why not ("no CUDA
  // driver"). An unavailable device still answers supports(): programs compile for it.
  virtual std::string unavailable() const { return {}; }
  // (supports(n, g): Target's, the capability predicate.)
  // Runs one node; outputs are preallocated, contiguous, on this device; inputs are on
  // this device and may be strided views.
  virtual void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) = 0;
  // Runs a fused elementwise region in one pass. The default runs node by node.
  virtual void run_fused(const FusedRegion& r, std::span<const Tensor> in, std::span<Tensor> out);
  virtual bool fuses_elementwise() const { return false; }
  // Whether run_fused also accepts full `sum` nodes (f32/f64) over values of the region,
  // whose results are complete only when the region has run.
  virtual bool fuses_reductions() const { return false; }
  // Whether run_matmul_epilogue runs e as one kernel; the planner forms such kernels only
  // where this says yes.
  virtual bool fuses_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g) const { return false; }
  // in: the matmul's operands (positionally: matmul(z, z) passes z twice), the bias[, the
  // zero]; out: the last node's result. The default runs the nodes one by one.
  virtual void run_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g, std::span<const Tensor> in,
                                   std::span<Tensor> out);
  virtual void synchronize() {}
  // What data laid out for this device should be sized for (the tiled SpMV layout,
  // ir/ops/tiled_layout.hpp): its multiprocessors and the shared memory a block may use;
  // and the memory programs may fill (compile() refuses a program whose buffers cannot fit).
  // Zeros where the device has no such notion or cannot run here; a device whose allocator
  // is the host's is measured against the host's physical memory.
  struct Geometry {
    int multiprocessors = 0;
    int64_t shared_bytes_per_block = 0;
    int64_t memory_bytes = 0;
  };
  virtual Geometry geometry() const { return {}; }
  // Records the device work `work` issues (without running it) for replay; nullptr when
  // the device cannot record. The work must not wait for the device or copy to the host.
  virtual std::unique_ptr<Replay> capture(const std::function<void()>& work) { return nullptr; }
};

// Throws InputError "device 'cuda' cannot run programs here: <why>" when d is unavailable.
void require_runnable(const Device& d);

// d as constant folding's evaluator (passes::fold_constants): the nodes d supports, run on
// d, their results copied to the host.
passes::Evaluator evaluator_for(Device& d);

class DeviceRegistry {
 public:
  static DeviceRegistry& get();  // registers the built-in devices on first use
  void add(std::unique_ptr<Device> d);
  Device* find(const std::string& name) const;
  Device& at(const std::string& name) const;  // throws InputError listing the known devices
  std::vector<Device*> all() const;
  std::vector<Device*> runnable() const;  // those whose unavailable() is empty
  // As at(), for running: throws InputError saying why when the device cannot run here.
  Device& runnable_at(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<Device>> devices_;
};

// Defined in <build>/generated/device_list.cpp, which devices/CMakeLists.txt writes from its
// rlx_add_device lines: calls each device folder's register function.
void register_builtin_devices(DeviceRegistry& r);

}  // namespace rlx
