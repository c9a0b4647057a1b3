// Host tensors built from std::vector values, converted to the dtype asked for: the
// index arrays and values the sparse and cuda suites feed their kernels; and a dense solve.
#pragma once
#include <complex>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace rlx::test {

// A 1-D host tensor of dtype t (i32, i64, f32 or f64) holding v, each element converted.
template <class V = double>  // (double for braced lists: {0, 2, 3})
Tensor host_tensor(DType t, const std::vector<V>& v) {
  Tensor r = Tensor::empty(t, {int64_t(v.size())});
  for (size_t k = 0; k < v.size(); ++k) {
    if (t == DType::I32) r.data<int32_t>()[k] = int32_t(v[k]);
    else if (t == DType::I64) r.data<int64_t>()[k] = int64_t(v[k]);
    else if (t == DType::F32) r.data<float>()[k] = float(v[k]);
    else if (t == DType::F64) r.data<double>()[k] = double(v[k]);
    else throw InputError(std::string("host_tensor: ") + dtype_name(t) + " (i32, i64, f32 or f64)");
  }
  return r;
}

// A 1-D host tensor of dtype t (f32, f64 or c64) holding v: the real parts for f32 and f64.
inline Tensor host_values(DType t, const std::vector<std::complex<double>>& v) {
  Tensor r = Tensor::empty(t, {int64_t(v.size())});
  for (size_t k = 0; k < v.size(); ++k) {
    if (t == DType::F64) r.data<double>()[k] = v[k].real();
    else if (t == DType::F32) r.data<float>()[k] = float(v[k].real());
    else if (t == DType::C64) r.data<c64>()[k] = c64(float(v[k].real()), float(v[k].imag()));
    else throw InputError(std::string("host_values: ") + dtype_name(t) + " (f32, f64 or c64)");
  }
  return r;
}

// x = A^-1 b for a row-major n x n A that needs no pivoting (Hermitian positive definite,
// diagonally dominant), by Gaussian elimination in double: the tests' dense reference.
inline std::vector<std::complex<double>> solve_without_pivoting(std::vector<std::complex<double>> A,
                                                                std::vector<std::complex<double>> x) {
  const auto n = int64_t(x.size());
  auto a = [&](int64_t i, int64_t j) -> std::complex<double>& { return A[size_t(i * n + j)]; };
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = k + 1; i < n; ++i) {
      const std::complex<double> f = a(i, k) / a(k, k);
      for (int64_t j = k; j < n; ++j) a(i, j) -= f * a(k, j);
      x[size_t(i)] -= f * x[size_t(k)];
    }
  for (int64_t i = n; i-- > 0;) {
    for (int64_t j = i + 1; j < n; ++j) x[size_t(i)] -= a(i, j) * x[size_t(j)];
    x[size_t(i)] /= a(i, i);
  }
  return x;
}

}  // namespace rlx::test
