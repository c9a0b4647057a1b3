// The optimized cpu device: a thread pool, a chunked executor for fused elementwise
// regions with vectorized kernels, OpenBLAS (loaded at run time) or built-in GEMM, and
// threaded reductions, scans, movement and source kernels. README.md describes it.
#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "devices/cpu/ew_kernels.hpp"
#include "devices/cpu/fused.hpp"
#include "devices/cpu/gemm.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/quant.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "dist/kernels.hpp"
#include "runtime/host_function.hpp"
#include "ir/op_registry.hpp"
#include "runtime/device.hpp"
#include "runtime/kernel_table.hpp"

namespace rlx {

namespace cpu {
namespace {

bool cast_touches_i4(const ir::Node& n, DType in) {
  return n.op->name == "cast" && (in == DType::I4 || n.attrs.get_dtype("dtype") == DType::I4);
}

// Casts from or to packed i4 (two per byte, low nibble first). To i4: the value's real
// part truncated toward zero and saturated to [-8, 7], NaN -> 0.
void cast_i4(const Tensor& x_in, Tensor& out) {
  Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  if (x.dtype() == DType::I4 && out.dtype() == DType::I4) {
    std::memcpy(out.raw(), x.raw(), out.nbytes());
    return;
  }
  if (x.dtype() == DType::I4) {
    const uint8_t* s = x.data<uint8_t>();
    std::vector<int8_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int q = (s[i >> 1] >> ((i & 1) * 4)) & 0xf;
      v[size_t(i)] = int8_t(q >= 8 ? q - 16 : q);
    }
    std::vector<uint64_t> tmp(static_cast<size_t>(n));
    ew_cast(CK::I8, out.dtype(), v.data(), tmp.data(), n);
    store_convert(out.dtype(), tmp.data(), out.raw(), n);
    return;
  }
  std::vector<double> d(static_cast<size_t>(n));
  std::vector<uint64_t> src(static_cast<size_t>(n) * 2);
  load_convert(x.dtype(), x.raw(), src.data(), n);
  ew_cast(ck_of(x.dtype()), DType::F64, src.data(), d.data(), n);
  uint8_t* o = out.data<uint8_t>();
  std::memset(o, 0, out.nbytes());
  for (int64_t i = 0; i < n; ++i) {
    double v = d[size_t(i)];
    int q = v != v ? 0 : v >= 7.0 ? 7 : v <= -8.0 ? -8 : int(v);
    o[i >> 1] = uint8_t(o[i >> 1] | ((q & 0xf) << ((i & 1) * 4)));
  }
}

std::string isa_name() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_x86_64_v4()) return "x86-64-v4 (AVX-512)";
  if (cpu_has_x86_64_v3()) return "x86-64-v3 (AVX2+FMA)";
  return "x86-64 baseline (SSE2)";
#else
  return "portable C++";
#endif
}

class CpuDevice final : public Device {
 public:
  CpuDevice() {
    add_standard_kernels(table_, RLX_STANDARD_KERNELS_OF(cpu));
    // Every elementwise op of the registry, judged by the vectorized kernels' own tables;
    // casts from or to packed i4 run apart (cast_i4).
    for_each_op(ir::OpClass::Elementwise, [&](const ir::OpDef& op) {
      table_.add({op.name, kAll, -1, run_elementwise_node, [](const ir::Node& n, const ir::Graph& g) {
                    std::vector<DType> ds;
                    for (ir::Value v : n.inputs) ds.push_back(g.type(v).dtype);
                    if ((!ds.empty() && cast_touches_i4(n, ds[0])) || elementwise_supported(n, ds)) return std::string();
                    DType t = ds.empty() ? n.out().dtype : ds[n.op->name == "where" ? 1 : 0];
                    return "no " + std::string(dtype_name(t)) + " " + n.op->name + " kernel on cpu";
                  }});
    });
    table_.add({"matmul", bit(DType::F32) | bit(DType::F64), 0,
                [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
                  matmul(in[0], in[1], n.attrs.get_bool("transpose_a"), n.attrs.get_bool("transpose_b"), out[0]);
                }});
    // project_out with one column in one read of V; more columns, and c64, run its lowering.
    table_.add({"project_out", bit(DType::F32) | bit(DType::F64), 0,
                [](const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
                  project_out(in[0], in[1], in[2], out[0], out[1]);
                },
                [](const ir::Node& n, const ir::Graph& g) {
                  return g.type(n.inputs[1]).shape.back() == 1 ? std::string()
                                                               : std::string("project_out on cpu: one column (w [n, 1])");
                }});
    add_sparse_kernels(table_);
    add_lapack_kernels(table_);
    add_sort_kernels(table_);
    add_optim_kernels(table_);
    add_splat_kernels(table_);
    add_nn_kernels(table_);
    add_quant_kernels(table_);
    dist::add_collective_kernels(table_);  // host memory: MPI reads the tensors directly
    add_host_call_kernel(table_);          // host memory: the function reads the tensors directly
  }

  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "optimized host kernels: " + std::to_string(ThreadPool::instance().size()) +
           " threads; elementwise chunks vectorized for " + isa_name() + "; " + gemm_description();
  }
  Allocator* allocator() override { return host_allocator(); }
  bool fuses_elementwise() const override { return true; }
  // A bias after a matmul is added by the threads that wrote each block of the product, while
  // it is in their caches (gemm.cpp); a relu after it runs as its own kernel.
  bool fuses_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g) const override {
    const ir::Node& mm = g.nodes.at(size_t(e.matmul));
    const DType t = mm.out().dtype;
    return e.activation == MatmulEpilogue::None && !mm.host && (t == DType::F32 || t == DType::F64);
  }
  void run_matmul_epilogue(const MatmulEpilogue& e, const ir::Graph& g, std::span<const Tensor> in,
                           std::span<Tensor> out) override {
    if (e.activation != MatmulEpilogue::None) return Device::run_matmul_epilogue(e, g, in, out);
    const ir::Node& mm = g.nodes.at(size_t(e.matmul));
    matmul(in[0], in[1], mm.attrs.get_bool("transpose_a"), mm.attrs.get_bool("transpose_b"), out[0], &in[2]);
  }
  bool fuses_reductions() const override { return true; }
  Capability supports(const ir::Node& n, const ir::Graph& g) const override { return table_.supports(n, g); }
  void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) override { table_.run(n, in, out); }

  void run_fused(const FusedRegion& r, std::span<const Tensor> in, std::span<Tensor> out) override {
    // Full sums the planner placed in the region are accumulated chunk by chunk while the
    // region runs (their operands never go to memory); the rest is elementwise.
    FusedSplit s = split_fused_sums(r, out);
    bool chunked = s.sums_f32_or_f64;
    for (const ir::Node* n : s.nodes) {
      if (n->op->cls != ir::OpClass::Elementwise) chunked = false;
      else if (cast_touches_i4(*n, r.graph->type(n->inputs[0]).dtype)) chunked = false;
    }
    for (const Tensor& t : in) chunked &= t.dtype() != DType::I4;
    if (!chunked) return Device::run_fused(r, in, out);  // node by node
    run_elementwise(s.nodes, r.inputs, s.outputs, r.shape, in, s.out, s.sums);
  }

 private:
  static void run_elementwise_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    if (!in.empty() && cast_touches_i4(n, in[0].dtype())) return cast_i4(in[0], out[0]);
    run_elementwise({&n}, n.inputs, {ir::Value{n.id, 0}}, n.out().shape, in, out);
  }
  KernelTable table_{"cpu"};
};

}  // namespace
}  // namespace cpu

void register_cpu_device(DeviceRegistry& r) { r.add(std::make_unique<cpu::CpuDevice>()); }

}  // namespace rlx
