// The reference device: naive kernels that compute in f64 / complex<double> / int64
// and round once on store; the oracle every other device is tested against.
#include "devices/reference/access.hpp"
#include "dist/kernels.hpp"
#include "runtime/host_function.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace rlx {
namespace {

class ReferenceDevice final : public Device {
 public:
  ReferenceDevice() {
    reference::add_elementwise_kernels(table_);
    reference::add_reduce_kernels(table_);
    reference::add_movement_kernels(table_);
    reference::add_linalg_kernels(table_);
    reference::add_source_kernels(table_);
    reference::add_dense_la_kernels(table_);
    reference::add_sparse_kernels(table_);
    reference::add_sort_kernels(table_);
    reference::add_splat_kernels(table_);
    reference::add_quant_kernels(table_);
    dist::add_collective_kernels(table_);  // host memory: MPI reads the tensors directly
    add_host_call_kernel(table_);          // host memory: the function reads the tensors directly
  }

  std::string name() const override { return "reference"; }
  std::string description() const override { return "naive f64-accumulating oracle kernels"; }
  Allocator* allocator() override { return host_allocator(); }
  Capability supports(const ir::Node& n, const ir::Graph& g) const override { return table_.supports(n, g); }
  void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) override { table_.run(n, in, out); }

 private:
  KernelTable table_{"reference"};
};

}  // namespace

void register_reference_device(DeviceRegistry& r) { r.add(std::make_unique<ReferenceDevice>()); }

}  // namespace rlx
