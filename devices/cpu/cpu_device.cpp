// The optimized cpu device: a thread pool, a chunked executor for fused elementwise
// regions with vectorized kernels, OpenBLAS (loaded at run time) or built-in GEMM, and
// threaded reductions, scans, movement and source kernels. README.md describes it.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/error.hpp"
#include "devices/cpu/ew_kernels.hpp"
#include "devices/cpu/fused.hpp"
#include "devices/cpu/gemm.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/library.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"
#include "ir/ops/semantics.hpp"
#include "runtime/device.hpp"

namespace rlx {

namespace cpu {
namespace {

enum class Kind {
  Elementwise, Sum, Prod, Max, Min, Argmax, Cumsum, Matmul, Permute, BroadcastTo, Slice, Concat, Pad, Gather,
  ScatterAdd, Iota, RngUniform, RngNormal,
};

const std::unordered_map<std::string, Kind>& kinds() {
  static const std::unordered_map<std::string, Kind> m = [] {
    std::unordered_map<std::string, Kind> k = {
        {"sum", Kind::Sum},         {"prod", Kind::Prod},
        {"max", Kind::Max},         {"min", Kind::Min},
        {"argmax", Kind::Argmax},   {"cumsum", Kind::Cumsum},
        {"matmul", Kind::Matmul},   {"permute", Kind::Permute},
        {"broadcast_to", Kind::BroadcastTo}, {"slice", Kind::Slice},
        {"concat", Kind::Concat},   {"pad", Kind::Pad},
        {"gather", Kind::Gather},   {"scatter_add", Kind::ScatterAdd},
        {"iota", Kind::Iota},       {"rng_uniform", Kind::RngUniform},
        {"rng_normal", Kind::RngNormal},
    };
    for (const char* ew : {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "recip", "floor",
                           "ceil", "round", "sign", "logical_not", "real", "imag", "conj", "add", "sub", "mul", "div",
                           "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                           "logical_or", "make_complex", "where", "cast"})
      k.emplace(ew, Kind::Elementwise);
    return k;
  }();
  return m;
}



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
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "optimized host kernels: " + std::to_string(ThreadPool::instance().size()) +
           " threads; elementwise chunks vectorized for " + isa_name() + "; " + gemm_description();
  }
  Allocator* allocator() override { return host_allocator(); }
  bool fuses_elementwise() const override { return true; }

  Capability supports(const ir::Node& n, const ir::Graph& g) const override {
    if (n.op->level == ir::Level::L1) return Capability::no("L1 op: runs through its lowering");
    if (const LibraryKernel* lib = find_library_kernel(n.op->name)) return lib->supports(n, g);
    auto it = kinds().find(n.op->name);
    if (it == kinds().end()) return Capability::no("no cpu kernel for " + n.op->name);
    auto in = [&](size_t i) { return g.type(n.inputs.at(i)).dtype; };
    auto no_dtype = [&](DType t) {
      return Capability::no("no " + std::string(dtype_name(t)) + " " + n.op->name + " kernel on cpu");
    };
    switch (it->second) {
      case Kind::Elementwise: {
        std::vector<DType> ds;
        for (size_t i = 0; i < n.inputs.size(); ++i) ds.push_back(in(i));
        if (!ds.empty() && cast_touches_i4(n, ds[0])) return Capability::yes();
        if (elementwise_supported(n, ds)) return Capability::yes();
        return no_dtype(ds.empty() ? n.out().dtype : ds[n.op->name == "where" ? 1 : 0]);
      }
      case Kind::Sum: case Kind::Prod: case Kind::Cumsum:
        return is_numeric(in(0)) ? Capability::yes() : no_dtype(in(0));
      case Kind::Max: case Kind::Min: case Kind::Argmax:
        return is_real_numeric(in(0)) ? Capability::yes() : no_dtype(in(0));
      case Kind::Matmul:
        if (in(0) == DType::F32 || in(0) == DType::F64) return Capability::yes();
        return Capability::no(std::string("no native ") + dtype_name(in(0)) +
                              " matmul on cpu (f32 and f64 only; others are rewritten)");
      case Kind::Permute: case Kind::BroadcastTo: case Kind::Slice: case Kind::Concat: case Kind::Pad:
      case Kind::Gather:
        return in(0) != DType::I4 ? Capability::yes() : no_dtype(in(0));
      case Kind::ScatterAdd: return is_numeric(in(0)) ? Capability::yes() : no_dtype(in(0));
      case Kind::Iota: return is_real_numeric(n.out().dtype) ? Capability::yes() : no_dtype(n.out().dtype);
      case Kind::RngUniform: case Kind::RngNormal:
        return is_float(n.out().dtype) ? Capability::yes() : no_dtype(n.out().dtype);
    }
    return Capability::no("no cpu kernel for " + n.op->name);
  }

  void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) override {
    if (const LibraryKernel* lib = find_library_kernel(n.op->name)) return lib->run(n, in, out);
    auto it = kinds().find(n.op->name);
    if (it == kinds().end()) throw InternalError("cpu: asked to run " + n.op->name + ", which it has no kernel for");
    for (const Tensor& t : out)
      if (!t.is_contiguous()) throw InternalError("cpu: " + n.op->name + " given a strided output");
    const ir::Attrs& a = n.attrs;
    Tensor& o = out[0];
    switch (it->second) {
      case Kind::Elementwise:
        if (!in.empty() && cast_touches_i4(n, in[0].dtype())) return cast_i4(in[0], o);
        return run_elementwise({&n}, n.inputs, {ir::Value{n.id, 0}}, n.out().shape, in, out);
      case Kind::Sum: return reduce(ReduceOp::Sum, in[0], ir::reduce_axes(n, in[0].rank()), o);
      case Kind::Prod: return reduce(ReduceOp::Prod, in[0], ir::reduce_axes(n, in[0].rank()), o);
      case Kind::Max: return reduce(ReduceOp::Max, in[0], ir::reduce_axes(n, in[0].rank()), o);
      case Kind::Min: return reduce(ReduceOp::Min, in[0], ir::reduce_axes(n, in[0].rank()), o);
      case Kind::Argmax: return argmax(in[0], normalize_axis(a.get_int("axis"), in[0].rank()), o);
      case Kind::Cumsum:
        return cumsum(in[0], normalize_axis(a.get_int("axis"), in[0].rank()), a.get_bool("exclusive"),
                      a.get_bool("reverse"), o);
      case Kind::Matmul: return matmul(in[0], in[1], a.get_bool("transpose_a"), a.get_bool("transpose_b"), o);
      case Kind::Permute: return permute(in[0], a.get_ints("perm"), o);
      case Kind::BroadcastTo: return broadcast_to(in[0], o);
      case Kind::Slice: return slice(in[0], a.get_ints("starts"), a.get_ints("steps"), o);
      case Kind::Concat: return concat(in, normalize_axis(a.get_int("axis"), o.rank()), o);
      case Kind::Pad: return pad(in[0], a.get_ints("low"), a.get_float("value"), o);
      case Kind::Gather: return gather(in[0], in[1], normalize_axis(a.get_int("axis"), in[0].rank()), o);
      case Kind::ScatterAdd:
        return scatter_add(in[0], in[1], in[2], normalize_axis(a.get_int("axis"), in[0].rank()), o);
      case Kind::Iota: return iota(o.rank() ? normalize_axis(a.get_int("axis"), o.rank()) : 0, o);
      case Kind::RngUniform: return rng_uniform(uint64_t(a.get_int("seed")), a.get_float("low"), a.get_float("high"), o);
      case Kind::RngNormal:
        return rng_normal(uint64_t(a.get_int("seed")), a.get_float("mean"), a.get_float("stddev"), o);
    }
  }

  bool fuses_reductions() const override { return true; }

  void run_fused(const FusedRegion& r, std::span<const Tensor> in, std::span<Tensor> out) override {
    // Full sums the planner placed in the region are accumulated chunk by chunk while the
    // region runs (their operands never go to memory); the rest is elementwise.
    FusedSplit s = split_fused_sums(r, out);
    bool chunked = s.sums_f32_or_f64;
    for (const ir::Node* n : s.nodes) {
      auto it = kinds().find(n->op->name);
      if (it == kinds().end() || it->second != Kind::Elementwise) chunked = false;
      else if (n->op->name == "cast" &&
               (r.graph->type(n->inputs[0]).dtype == DType::I4 || n->attrs.get_dtype("dtype") == DType::I4))
        chunked = false;
    }
    for (const Tensor& t : in) chunked &= t.dtype() != DType::I4;
    if (!chunked) return Device::run_fused(r, in, out);  // node by node
    run_elementwise(s.nodes, r.inputs, s.outputs, r.shape, in, s.out, s.sums);
  }
};

}  // namespace
}  // namespace cpu

void register_cpu_device(DeviceRegistry& r) { r.add(std::make_unique<cpu::CpuDevice>()); }

}  // namespace rlx
