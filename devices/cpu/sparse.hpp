// What the sparse kernel files of the cpu device share (spmv.cpp, sptrsv.cpp, tiled.cpp):
// the kernels add_sparse_kernels (spmv.cpp) registers from the other two, the dispatch
// over CSR's index and value dtypes, and the prefetch distance of the nonzero streams.
// Internal to devices/cpu.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "devices/cpu/kernels.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cpu {

// Software prefetch distance, in nonzeros, for the values and col_idx streams. One thread
// on a 3D Poisson SpMV (f64, i32), back to back, on the Emerald Rapids host this was tuned
// on: 1M rows 13.8 GB/s without and 19.6 GB/s with prefetching 512 ahead; 8M rows (DRAM)
// 11.4 and 12.9 GB/s; 128 ahead gains less, 1024 or an extra L2 prefetch 2048 ahead no more.
// RLX_CPU_SPMV_PREFETCH=N (0..65536; 0: none in the scalar SpMV rows, the line being read elsewhere) sets it, read once per process, so the distance
// can be measured on another CPU without a rebuild (docs/runtime.md, "Environment").
constexpr int64_t kPrefetchDefault = 512;
int64_t sparse_prefetch_distance();

// Calls f(I{}, T{}) with the index type I (i32, i64) and value type T (f32, f64, c64).
template <class F>
decltype(auto) visit_csr(DType index, DType value, F&& f) {
  auto with_index = [&](auto i) -> decltype(auto) {
    using I = decltype(i);
    switch (value) {
      case DType::F32: return f(I{}, float{});
      case DType::F64: return f(I{}, double{});
      case DType::C64: return f(I{}, c64{});
      default: break;
    }
    throw InternalError(std::string("cpu sparse: no kernel for ") + dtype_name(value) + " values");
  };
  if (index == DType::I32) return with_index(int32_t{});
  if (index == DType::I64) return with_index(int64_t{});
  throw InternalError(std::string("cpu sparse: no kernel for ") + dtype_name(index) + " indices");
}

// The kernels read raw arrays: strided inputs are copied to contiguous ones first.
inline std::vector<Tensor> contiguous_inputs(std::span<const Tensor> in) {
  std::vector<Tensor> r(in.begin(), in.end());
  for (Tensor& t : r)
    if (!t.is_contiguous()) t = t.contiguous();
  return r;
}

// sptrsv.cpp
void run_sptrsv(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out);
// tiled.cpp
void run_spmv_tiled(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out);
void run_tile_csr(const ir::Node& n, std::span<const Tensor> in0, std::span<Tensor> out);
Capability tile_csr_supported(const ir::Node& n, const ir::Graph& g);
Capability tiled_supported(const ir::Node& n, const ir::Graph& g);

}  // namespace rlx::cpu
