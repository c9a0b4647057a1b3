// Element access for the reference kernels. Every dtype is read into one of three
// compute domains (int64_t, double, std::complex<double>) and written back with the
// conversion rules of docs/ir.md `cast`, rounding exactly once. Kernels are written once
// per domain and never per storage dtype.
#pragma once
#include <complex>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "ir/op_registry.hpp"
#include "runtime/kernel_table.hpp"

namespace rlx::reference {

using cd = std::complex<double>;

enum class Domain { Int, Real, Complex };
Domain domain_of(DType t);  // bool, ints, i4: Int; f16 bf16 f32 f64: Real; c64: Complex

// Reads the element at `off` elements from t.raw() (an offset computed from t's strides).
int64_t load_int(const Tensor& t, int64_t off);  // bool, ints, i4 exactly; floats truncate
double load_real(const Tensor& t, int64_t off);  // any dtype but c64 (c64: the real part)
cd load_complex(const Tensor& t, int64_t off);   // any dtype

// Writes element `i` of the contiguous tensor t, converting as `cast` does:
// int -> narrower int wraps (two's complement), -> i4 saturates to [-8, 7];
// real -> int truncates toward zero and saturates, NaN -> 0; anything -> bool is `!= 0`;
// complex -> non-complex takes the real part; floats round to nearest even, once.
void store_int(const Tensor& t, int64_t i, int64_t v);
void store_real(const Tensor& t, int64_t i, double v);
void store_complex(const Tensor& t, int64_t i, cd v);

template <class C>
C load(const Tensor& t, int64_t off);
template <>
inline int64_t load<int64_t>(const Tensor& t, int64_t off) {
  return load_int(t, off);
}
template <>
inline double load<double>(const Tensor& t, int64_t off) {
  return load_real(t, off);
}
template <>
inline cd load<cd>(const Tensor& t, int64_t off) {
  return load_complex(t, off);
}
inline void store(const Tensor& t, int64_t i, int64_t v) { store_int(t, i, v); }
inline void store(const Tensor& t, int64_t i, double v) { store_real(t, i, v); }
inline void store(const Tensor& t, int64_t i, cd v) { store_complex(t, i, v); }

// Calls f(C{}) with the compute type of the domain of t.
template <class F>
decltype(auto) visit_domain(DType t, F&& f) {
  switch (domain_of(t)) {
    case Domain::Int:
      return f(int64_t{});
    case Domain::Real:
      return f(double{});
    case Domain::Complex:
      break;
  }
  return f(cd{});
}

// Copies one element unchanged (any whole-byte dtype).
void copy_element(const Tensor& src, int64_t src_off, const Tensor& dst, int64_t dst_i);

// Per-dimension element strides of t broadcast (NumPy rules) to `shape`: 0 on broadcast axes.
std::vector<int64_t> broadcast_strides(const Tensor& t, const Shape& shape);

// Visits every index of `shape` in row-major order and calls f(i, off), where i is the
// linear index and off[k] = sum over d of index[d] * strides[k][d].
template <class F>
void for_each_offset(const Shape& shape, const std::vector<std::vector<int64_t>>& strides, F&& f) {
  const int64_t n = numel(shape);
  const size_t rank = shape.size(), k = strides.size();
  std::vector<int64_t> idx(rank, 0), off(k, 0);
  for (int64_t i = 0; i < n; ++i) {
    f(i, static_cast<const int64_t*>(off.data()));
    for (size_t d = rank; d-- > 0;) {
      ++idx[d];
      for (size_t j = 0; j < k; ++j) off[j] += strides[j][d];
      if (idx[d] < shape[d]) break;
      for (size_t j = 0; j < k; ++j) off[j] -= strides[j][d] * shape[d];
      idx[d] = 0;
    }
  }
}

// Wrapping integer arithmetic (signed overflow is undefined in C++; the IR wraps).
inline int64_t wrap_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
inline int64_t wrap_sub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
inline int64_t wrap_mul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }

// ---- the kernel table (runtime/kernel_table.hpp): one add_*_kernels per family ----

using Kernel = KernelFn;
using Check = KernelCheck;

void add_elementwise_kernels(KernelTable& t);
void add_reduce_kernels(KernelTable& t);
void add_movement_kernels(KernelTable& t);
void add_linalg_kernels(KernelTable& t);
void add_source_kernels(KernelTable& t);
void add_dense_la_kernels(KernelTable& t);
void add_sparse_kernels(KernelTable& t);
void add_sort_kernels(KernelTable& t);
void add_splat_kernels(KernelTable& t);
void add_quant_kernels(KernelTable& t);  // dequantize matmul_packed (quant.cpp)

}  // namespace rlx::reference
