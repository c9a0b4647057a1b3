// Host tensors built from std::vector values, converted to the dtype asked for: the
// index arrays and real values the sparse and cuda suites feed their kernels.
#pragma once
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

}  // namespace rlx::test
