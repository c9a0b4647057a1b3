#include "dist/kernels.hpp"

#include <cstring>

#include "core/error.hpp"
#include "dist/communicator.hpp"

namespace rlx::dist {

namespace {

constexpr DTypeSet kCollective = bit(DType::F32) | bit(DType::F64) | bit(DType::C64) | bit(DType::I32) | bit(DType::I64);

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

Communicator comm_of(const ir::Node& n) { return Communicator::by_id(n.attrs.get_int("comm")); }

// The output holds the input's values (the collectives below then work in place on it).
void copy_in(const Tensor& in, Tensor& out) {
  Tensor c = contiguous(in);
  if (c.nbytes() && c.raw() != out.raw()) std::memcpy(out.raw(), c.raw(), c.nbytes());
}

void all_reduce_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  copy_in(in[0], out[0]);
  comm_of(n).all_reduce(out[0].raw(), out[0].numel(), out[0].dtype(), reduce_op_from_name(n.attrs.get_string("op")));
}

void all_reduce_begin_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  copy_in(in[0], out[0]);  // the token: x itself
  comm_of(n).all_reduce_start(n.attrs.get_int("slot"), out[0].raw(), out[0].numel(), out[0].dtype(),
                              reduce_op_from_name(n.attrs.get_string("op")));
}

void all_reduce_end_kernel(const ir::Node& n, std::span<const Tensor>, std::span<Tensor> out) {
  comm_of(n).all_reduce_wait(n.attrs.get_int("slot"), out[0].raw(), out[0].numel(), out[0].dtype());
}

// The rank count the node was built for must be the communicator's: it fixed the shapes.
Communicator sized_comm_of(const ir::Node& n) {
  Communicator c = comm_of(n);
  if (c.size() != n.attrs.get_int("ranks"))
    throw InputError(n.op->name + " was built for " + std::to_string(n.attrs.get_int("ranks")) + " ranks, its communicator (" +
                     c.describe() + ") has " + std::to_string(c.size()));
  return c;
}

void all_gather_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  Tensor x = contiguous(in[0]);
  sized_comm_of(n).all_gather(x.raw(), x.numel(), x.dtype(), out[0].raw());
}

void reduce_scatter_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  Tensor x = contiguous(in[0]);
  sized_comm_of(n).reduce_scatter(x.raw(), out[0].numel(), x.dtype(), reduce_op_from_name(n.attrs.get_string("op")),
                                  out[0].raw());
}

void broadcast_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  copy_in(in[0], out[0]);
  comm_of(n).broadcast(out[0].raw(), out[0].numel(), out[0].dtype(), int(n.attrs.get_int("root")));
}

// The plan the node names, with the counts the node was built for.
HaloExchange& plan_of(const ir::Node& n) {
  HaloExchange& h = HaloExchange::by_id(n.attrs.get_int("plan"));
  if (h.pattern().sends() != n.attrs.get_int("sends") || h.pattern().receives() != n.attrs.get_int("receives"))
    throw InputError(n.op->name + ": plan " + std::to_string(h.id()) + " sends " + std::to_string(h.pattern().sends()) +
                     " and receives " + std::to_string(h.pattern().receives()) + " entries, the node says " +
                     std::to_string(n.attrs.get_int("sends")) + " and " + std::to_string(n.attrs.get_int("receives")));
  return h;
}

void halo_begin_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  Tensor x = contiguous(in[0]);
  if (n.attrs.get_bool("packed")) plan_of(n).begin_packed(x.raw(), x.dtype(), out[0].raw());
  else plan_of(n).begin(x.raw(), x.numel(), x.dtype(), out[0].raw());
}

void halo_end_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  plan_of(n).end(out[0].raw(), out[0].dtype());
}

// On a device's memory: the inputs are contiguous there (the executor hands kernels dense
// tensors of their device), and every step completes before the next (mem.copy returns
// once its copy is done, MPI's calls once their buffers are).
const Tensor& dense_on_device(const DeviceMemory& mem, const ir::Node& n, const Tensor& t) {
  mem.ready();
  if (!t.is_contiguous())
    throw InputError(n.op->name + " on device memory needs a dense input (a strided view was given)");
  return t;
}

// all_reduce and broadcast work in place: out takes a copy of in, and MPI its result.
void* in_place_on_device(const DeviceMemory& mem, const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  dense_on_device(mem, n, in[0]);
  if (out[0].nbytes() && in[0].raw() != out[0].raw()) mem.copy(out[0].raw(), in[0].raw(), out[0].nbytes());
  return out[0].raw();
}

void device_all_reduce_kernel(const DeviceMemory& mem, const ir::Node& n, std::span<const Tensor> in,
                              std::span<Tensor> out) {
  comm_of(n).all_reduce(in_place_on_device(mem, n, in, out), out[0].numel(), out[0].dtype(),
                        reduce_op_from_name(n.attrs.get_string("op")));
}

void device_broadcast_kernel(const DeviceMemory& mem, const ir::Node& n, std::span<const Tensor> in,
                             std::span<Tensor> out) {
  comm_of(n).broadcast(in_place_on_device(mem, n, in, out), out[0].numel(), out[0].dtype(), int(n.attrs.get_int("root")));
}

// Asked when a program is compiled, not when the device is built: MPI is initialised by
// then, and a bad RLX_MPI_CUDA_AWARE is an error of the compile that meets it.
std::string device_route_missing(const ir::Node& n, const ir::Graph&) {
  if (mpi_cuda_aware()) return {};
  return n.op->name + " on device memory needs an MPI that takes it (a CUDA-aware Open MPI) and RLX_MPI_CUDA_AWARE=1";
}

}  // namespace

void add_device_collective_kernels(KernelTable& t, const DeviceMemory& mem) {
  const DeviceMemory* m = &mem;  // (the device owns mem for the kernel table's lifetime)
  t.add({"all_reduce", kCollective, 0,
         [m](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) { device_all_reduce_kernel(*m, n, in, out); },
         device_route_missing});
  t.add({"broadcast", kCollective, 0,
         [m](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) { device_broadcast_kernel(*m, n, in, out); },
         device_route_missing});
  // Only packed entries: gathering x's send entries is the gather kernel's work on the device.
  t.add({"halo_begin", kCollective, 0,
         [m](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           plan_of(n).begin_packed(dense_on_device(*m, n, in[0]).raw(), in[0].dtype(), out[0].raw(), *m);
         },
         [](const ir::Node& n, const ir::Graph& g) {
           if (!n.attrs.get_bool("packed")) return std::string("halo_begin on device memory takes packed entries (packed=true)");
           return device_route_missing(n, g);
         }});
  t.add({"halo_end", kCollective, 0,
         [m](const ir::Node& n, std::span<const Tensor>, std::span<Tensor> out) {
           plan_of(n).end(out[0].raw(), out[0].dtype(), *m);
         },
         device_route_missing});
}

void add_collective_kernels(KernelTable& t) {
  t.add({"all_reduce", kCollective, 0, all_reduce_kernel, {}});
  t.add({"all_reduce_begin", kCollective, 0, all_reduce_begin_kernel, {}});
  t.add({"all_reduce_end", kCollective, 0, all_reduce_end_kernel, {}});
  t.add({"all_gather", kCollective, 0, all_gather_kernel, {}});
  t.add({"reduce_scatter", kCollective, 0, reduce_scatter_kernel, {}});
  t.add({"broadcast", kCollective, 0, broadcast_kernel, {}});
  t.add({"halo_begin", kCollective, 0, halo_begin_kernel, {}});
  t.add({"halo_end", kCollective, 0, halo_end_kernel, {}});
}

}  // namespace rlx::dist
