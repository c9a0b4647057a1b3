// The cuda device: generated kernels for elementwise regions (codegen.cpp), hand-written
// kernels for reductions, scans, movement, gather/scatter and sources (reduce.cu, scan.cu,
// movement.cu, gather_scatter.cu, sources.cu), cuBLAS/cuSPARSE/cuSOLVER for the library
// primitives, one stream, a caching allocator. README.md describes it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/error.hpp"
#include "devices/cuda/blas.hpp"
#include "devices/cuda/codegen.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/kernels.hpp"
#include "devices/cuda/library.hpp"
#include "devices/cuda/quant.hpp"
#include "dist/kernels.hpp"
#include "ir/op_registry.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace rlx {

namespace cuda {
namespace {

std::string node_label(const ir::Node& n) {
  std::string s = "%";  // (appended piecewise: GCC 12 warns falsely on "%" + to_string)
  s += std::to_string(n.id);
  s += " " + n.op->name + " at " + n.loc.str();
  return s;
}

// Why this process cannot use the GPU ("" when it can). Asked once.
const std::string& probe() {
  static const std::string why = []() -> std::string {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return std::string("no usable CUDA driver or GPU (") + cudaGetErrorString(e) + ")";
    }
    if (count == 0) return "no CUDA GPU";
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "cannot read the GPU's properties";
    const int cc = p.major * 10 + p.minor;
    if (cc != 90)
      return std::string(p.name) + " is sm_" + std::to_string(cc) +
             "; this build's kernels are for sm_90 (configure with CMAKE_CUDA_ARCHITECTURES=" + std::to_string(cc) +
             " and adjust the check in devices/cuda/cuda_device.cpp)";
    return "";
  }();
  return why;
}

// The GPU's memory as a CUDA-aware MPI takes it (dist::add_device_collective_kernels): the
// halo's buffers, copies on the device's stream, each finished before MPI is called.
void mpi_ready() { check(cudaStreamSynchronize(stream()), "synchronizing before an MPI call"); }
void* mpi_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "allocating a buffer for MPI");
  return p;
}
void mpi_release(void* p) { cudaFree(p); }
void mpi_copy(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "copying for MPI");
  mpi_ready();
}
const dist::DeviceMemory kMpiMemory{mpi_alloc, mpi_release, mpi_copy, mpi_ready};

// A recorded program: a CUDA graph and the scratch blocks its kernels use.
class GraphReplay final : public Replay {
 public:
  GraphReplay(cudaGraphExec_t e, std::vector<std::pair<void*, size_t>> kept, std::vector<int> checks)
      : exec_(e), kept_(std::move(kept)), checks_(std::move(checks)) {}
  ~GraphReplay() override {
    cudaStreamSynchronize(stream());
    cudaGraphExecDestroy(exec_);
    return_kept_blocks(kept_);
    release_recorded_checks(checks_);
  }
  void launch() override { check(cudaGraphLaunch(exec_, stream()), "launching a CUDA graph"); }

 private:
  cudaGraphExec_t exec_;
  std::vector<std::pair<void*, size_t>> kept_;
  std::vector<int> checks_;  // recorded_check words its kernels report through
};

class CudaDevice final : public Device {
 public:
  CudaDevice() {
    add_standard_kernels(table_, RLX_STANDARD_KERNELS_OF(cuda));
    // gather_scatter.cu sorts (index, position) pairs in 32-bit positions.
    table_.restrict("scatter_add", [](const ir::Node& n, const ir::Graph& g) {
      const bool fits = numel(g.type(n.inputs.at(1)).shape) < (int64_t(1) << 31) && numel(n.out().shape) < (int64_t(1) << 31);
      return fits ? std::string() : std::string("scatter_add on cuda takes fewer than 2^31 indices and outputs");
    });
    // Every elementwise op of the registry, as a generated kernel where codegen.cpp has
    // an expression for its dtypes.
    for_each_op(ir::OpClass::Elementwise, [&](const ir::OpDef& op) {
      table_.add({op.name, kAll, -1,
                  [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
                    run_elementwise({&n}, n.inputs, {ir::Value{n.id, 0}}, n.out().shape, in, out);
                  },
                  elementwise_unsupported});
    });
    add_blas_kernels(table_);
    add_sparse_kernels(table_);
    add_solver_kernels(table_);
    add_sort_kernels(table_);
    add_optim_kernels(table_);
    add_nn_kernels(table_);
    add_splat_kernels(table_);
    add_quant_kernels(table_);
    // Collectives on the GPU's memory where MPI takes it (opted into; each kernel's check asks
    // when a program is compiled: docs/distributed.md); otherwise they take the host-staged
    // route.
    dist::add_device_collective_kernels(table_, kMpiMemory);
  }

  std::string name() const override { return "cuda"; }
  std::string unavailable() const override { return probe(); }
  std::string description() const override {
    if (!probe().empty()) return "NVIDIA GPU kernels (generated via NVRTC, cuBLAS, cuSPARSE, cuSOLVER)";
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, 0);
    return std::string(p.name) + " (sm_" + std::to_string(p.major * 10 + p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " SMs, " + std::to_string(p.totalGlobalMem >> 30) +
           " GiB): fused elementwise kernels generated by " + compiler_description() + "; " + library_description();
  }
  Allocator* allocator() override { return cuda::allocator(); }
  Geometry geometry() const override {
    if (!probe().empty()) return {};
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return {};
    return {p.multiProcessorCount, int64_t(p.sharedMemPerBlockOptin), int64_t(p.totalGlobalMem)};
  }
  bool fuses_elementwise() const override { return true; }
  bool fuses_reductions() const override { return true; }
  void synchronize() override {
    if (!probe().empty() || capturing()) return;
    check(cudaStreamSynchronize(stream()), "synchronize");
    throw_recorded_faults();
  }

  std::unique_ptr<Replay> capture(const std::function<void()>& work) override {
    if (!probe().empty()) return nullptr;
    // One recording at a time (the stream and the allocator's keep-list are per process).
    std::lock_guard<std::mutex> lk(capture_mu_);
    check(cudaStreamSynchronize(stream()), "synchronize before recording");
    begin_recording_checks();
    check(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed), "beginning a CUDA graph capture");
    begin_keeping_freed_blocks();
    cudaGraph_t graph = nullptr;
    try {
      work();
    } catch (...) {
      cudaStreamEndCapture(stream(), &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      return_kept_blocks(end_keeping_freed_blocks());
      release_recorded_checks(end_recording_checks());
      throw;
    }
    cudaError_t e = cudaStreamEndCapture(stream(), &graph);
    auto kept = end_keeping_freed_blocks();
    std::vector<int> checks = end_recording_checks();
    if (e != cudaSuccess) {
      return_kept_blocks(kept);
      release_recorded_checks(checks);
      check(e, "ending a CUDA graph capture");
    }
    if (graph_stats()) print_graph_stats(graph);
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      return_kept_blocks(kept);
      release_recorded_checks(checks);
      check(e, "instantiating a CUDA graph");
    }
    return std::make_unique<GraphReplay>(exec, std::move(kept), std::move(checks));
  }

  Capability supports(const ir::Node& n, const ir::Graph& g) const override { return table_.supports(n, g); }

  void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) override {
    NodeScope scope(node_label(n));
    table_.run(n, in, out);
    after(n);
  }

  bool fuses_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g) const override {
    return takes_matmul_epilogue(e, g);
  }

  void run_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g, std::span<const Tensor> in,
                           std::span<Tensor> out) override {
    const ir::Node& last = g.nodes.at(size_t(e.nodes().back()));
    {
      NodeScope scope("matmul epilogue ending in " + node_label(last));
      if (cuda::run_matmul_epilogue(e, g, in, out[0])) return after(last);
    }
    Device::run_matmul_epilogue(e, g, in, out);  // no cuBLASLt algorithm: node by node
  }

  void run_fused(const FusedRegion& r, std::span<const Tensor> in, std::span<Tensor> out) override {
    NodeScope scope("fused region ending in " + node_label(r.graph->nodes.at(size_t(r.nodes.back()))));
    // Full f32/f64 sums the planner placed in the region are accumulated by the region's
    // kernel (block partials, then a fixed-order final pass); the rest is elementwise.
    FusedSplit s = split_fused_sums(r, out);
    bool generated = s.sums_f32_or_f64;
    for (const ir::Node* n : s.nodes) generated &= elementwise_unsupported(*n, *r.graph).empty();
    if (!generated) return Device::run_fused(r, in, out);  // node by node
    run_elementwise(s.nodes, r.inputs, s.outputs, r.shape, in, s.out, s.sums);
    if (sync_each()) sync_unless_recording("after the fused region");
  }

 private:
  // With RLX_CUDA_SYNC=1 every kernel is followed by a synchronize, so a faulting kernel
  // is reported with its own node instead of at the next synchronization point.
  void after(const ir::Node&) {
    if (sync_each()) sync_unless_recording("after the kernel");
  }
  void sync_unless_recording(const char* what) {
    if (!capturing()) check(cudaStreamSynchronize(stream()), what);
  }
  // With RLX_CUDA_GRAPH_STATS=1 each recording prints its nodes by kind to stderr: a replayed
  // step's kernel launches, counted without a profiler.
  static void print_graph_stats(cudaGraph_t graph) {
    size_t count = 0;
    if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return void(cudaGetLastError());
    std::vector<cudaGraphNode_t> nodes(count);
    if (cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return void(cudaGetLastError());
    size_t kernels = 0, copies = 0, sets = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      if (cudaGraphNodeGetType(node, &type) != cudaSuccess) continue;
      kernels += type == cudaGraphNodeTypeKernel;
      copies += type == cudaGraphNodeTypeMemcpy;
      sets += type == cudaGraphNodeTypeMemset;
    }
    std::fprintf(stderr, "cuda: recorded a graph of %zu nodes: %zu kernels, %zu copies, %zu memsets\n", count, kernels,
                 copies, sets);
  }
  KernelTable table_{"cuda"};
  std::mutex capture_mu_;
  // Read at first use, not when the registry builds the device: a bad value is then an error
  // of the cuda work that meets it, and the other devices stay usable.
  static bool graph_stats() {
    static const bool v = env_choice("RLX_CUDA_GRAPH_STATS", {"0", "1"}) == 1;
    return v;
  }
  static bool sync_each() {
    static const bool v = env_choice("RLX_CUDA_SYNC", {"0", "1"}) == 1;
    return v;
  }
};

}  // namespace
}  // namespace cuda

void register_cuda_device(DeviceRegistry& r) { r.add(std::make_unique<cuda::CudaDevice>()); }

}  // namespace rlx
