// Shared pieces of the ops' shape/dtype rules (internal to src/ir/ops).
#pragma once
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"

namespace rlx::ir::rules {

inline const std::vector<DType> kInts = {DType::I8, DType::U8, DType::I32, DType::I64};
inline const std::vector<DType> kFloats = {DType::F16, DType::BF16, DType::F32, DType::F64};
inline std::vector<DType> cat(std::initializer_list<std::vector<DType>> parts) {
  std::vector<DType> r;
  for (auto& p : parts) r.insert(r.end(), p.begin(), p.end());
  return r;
}
inline const std::vector<DType> kNumeric = cat({kInts, kFloats, {DType::C64}});
inline const std::vector<DType> kRealNumeric = cat({kInts, kFloats});
inline const std::vector<DType> kInexact = cat({kFloats, {DType::C64}});
inline const std::vector<DType> kAllButI4 = cat({{DType::Bool}, kInts, kFloats, {DType::C64}});
inline const std::vector<DType> kAll = cat({kAllButI4, {DType::I4}});

inline std::string dtype_list(const std::vector<DType>& ds) {
  std::string s;
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? ", " : "") + std::string(dtype_name(ds[i]));
  return s;
}
inline void require_dtype(const TensorType& t, const std::vector<DType>& ok, const char* what = "input") {
  for (DType d : ok)
    if (d == t.dtype) return;
  throw InputError(std::string(what) + " dtype " + dtype_name(t.dtype) + " is not one of {" + dtype_list(ok) + "}");
}
inline void require_same_dtype(const std::vector<TensorType>& in, size_t from = 0) {
  for (size_t i = from + 1; i < in.size(); ++i)
    if (in[i].dtype != in[from].dtype)
      throw InputError(std::string("operand dtypes differ: ") + dtype_name(in[from].dtype) + " and " +
                       dtype_name(in[i].dtype));
}
inline void require_rank_at_least(const TensorType& t, int r, const char* what = "input") {
  if (int(t.shape.size()) < r)
    throw InputError(std::string(what) + " has rank " + std::to_string(t.shape.size()) + ", needs at least " +
                     std::to_string(r));
}
// The result type an op declares by attributes `dtype` and `shape` (param, iota, rng_*,
// host_call): a negative extent is an InputError, an element count past the limit a
// SizeError naming the shape.
inline TensorType declared_type(const Attrs& a) {
  Shape s = a.get_ints("shape");
  for (int64_t d : s)
    if (d < 0) throw InputError("shape " + shape_str(s) + " has a negative extent");
  numel(s);
  return {a.get_dtype("dtype"), s};
}
// Pieces of the ops' examples (examples.cpp): a host tensor of dtype t from doubles; a
// symmetric diagonally dominant 4 x 4 input; the arrays (row_ptr, col_idx i32, values) of a
// 4 x 4 lower-triangular CSR matrix with its diagonal.
Tensor example_tensor(DType t, Shape s, const std::vector<double>& values);
Var example_spd(ExampleInputs& in, DType t);
std::vector<Var> example_csr(ExampleInputs& in, DType values, const ValueRange& range = {});

// An L1 op's shape rule: its lowering body run on a scratch graph, so the declared result
// types and the lowering cannot disagree. The first input's dtype must be one of `ok`; with
// same_dtype, every input's must equal it.
InferFn infer_by_lowering(LowerFn lower, std::vector<DType> ok, bool same_dtype = false);

// Reduction axes: normalized, sorted, unique; empty means all.
std::vector<int> reduce_axes(const Attrs& a, int rank);
Shape reduced_shape(const Shape& s, const std::vector<int>& axes, bool keepdims);

}  // namespace rlx::ir::rules
