// The collectives' kernels on host memory (the ops of src/ir/ops/dist.cpp). They are the
// same for every device whose tensors the host can read (reference, cpu): each resolves
// its communicator or halo plan from the node's attribute and hands the tensor's memory to
// MPI. A device whose memory the host cannot read does not register them; its collectives
// then take the host-staged route, with the bytes in the report (docs/distributed.md).
#pragma once
#include "dist/communicator.hpp"
#include "runtime/kernel_table.hpp"

namespace rlx::dist {

void add_collective_kernels(KernelTable& t);
// The kernels a device whose memory MPI takes directly (CUDA-aware MPI) registers:
// all_reduce, broadcast, halo_begin (of packed entries) and halo_end on that memory, each
// complete when it returns. The others (all_gather, reduce_scatter, all_reduce_begin/end)
// stay host-staged there.
void add_device_collective_kernels(KernelTable& t, const DeviceMemory& mem);

}  // namespace rlx::dist
