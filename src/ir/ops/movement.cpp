// Data movement: reshape, permute, broadcast_to, slice, concat, pad, gather, scatter_add,
// update_slice.
#include <algorithm>

#include "core/checked.hpp"
#include "ir/ops/vjp.hpp"

namespace rlx::ir {
using namespace rules;

static void require_len(const std::vector<int64_t>& v, size_t n, const char* what) {
  if (v.size() != n)
    throw InputError(std::string(what) + " has " + std::to_string(v.size()) + " entries, the input has rank " +
                     std::to_string(n));
}

static void require_index_dtype(const TensorType& t) {
  if (t.dtype != DType::I32 && t.dtype != DType::I64)
    throw InputError(std::string("indices must be i32 or i64, got ") + dtype_name(t.dtype));
}

static Shape gather_shape(const Shape& x, const Shape& idx, int ax) {
  Shape s(x.begin(), x.begin() + ax);
  s.insert(s.end(), idx.begin(), idx.end());
  s.insert(s.end(), x.begin() + ax + 1, x.end());
  return s;
}

namespace {

using V = std::vector<Var>;

// The adjoint of a strided slice: g placed at start, start + step, ... of each axis,
// zeros elsewhere. A step s > 1 interleaves s - 1 zeros after each element (a padded
// new axis, merged), then pads to the input's extent.
Var unslice(Var g, const Shape& in, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps) {
  for (size_t ax = 0; ax < in.size(); ++ax) {
    const int64_t n = g.shape()[ax], step = steps[ax];
    int64_t covered = n;  // extent from the first element to just past the last
    if (step > 1 && n > 0) {
      Shape split = g.shape();
      split.insert(split.begin() + int64_t(ax) + 1, 1);
      std::vector<int64_t> lo(split.size(), 0), hi(split.size(), 0);
      hi[ax + 1] = step - 1;
      Var spread = pad(reshape(g, split), lo, hi);
      Shape merged = g.shape();
      merged[ax] = n * step;
      g = reshape(spread, merged);
      covered = (n - 1) * step + 1;
      std::vector<int64_t> st(in.size(), 0), sp = merged, sk(in.size(), 1);
      sp[ax] = covered;
      g = slice(g, st, sp, sk);
    }
    std::vector<int64_t> lo(in.size(), 0), hi(in.size(), 0);
    lo[ax] = starts[ax];
    hi[ax] = in[ax] - starts[ax] - covered;
    if (lo[ax] || hi[ax]) g = pad(g, lo, hi);
  }
  return g;
}

}  // namespace

void register_movement_ops(OpRegistry& r) {
  r.add({.name = "reshape", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"shape", AttrKind::Ints, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           Shape s = a.get_ints("shape");
           for (int64_t d : s)
             if (d < 0) throw InputError("reshape target " + shape_str(s) + " has a negative extent");
           if (numel(s) != numel(in[0].shape))
             throw InputError("cannot reshape " + shape_str(in[0].shape) + " (" + std::to_string(numel(in[0].shape)) +
                              " elements) to " + shape_str(s));
           return std::vector<TensorType>{{in[0].dtype, s}};
         },
         .vjp = [](const V& in, const V&, const V& g, const Attrs&) { return V{reshape(g[0], in[0].shape())}; },
         .dtypes = kAll,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{reshape(x.in(t, {4, 8}), {32})}; }});
  r.add({.name = "permute", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"perm", AttrKind::Ints, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kAllButI4);
           const auto& p = a.get_ints("perm");
           size_t n = in[0].shape.size();
           require_len(p, n, "perm");
           std::vector<int64_t> sorted = p;
           std::sort(sorted.begin(), sorted.end());
           for (size_t i = 0; i < n; ++i)
             if (sorted[i] != int64_t(i)) throw InputError("perm " + shape_str(p) + " is not a permutation");
           Shape s(n);
           for (size_t i = 0; i < n; ++i) s[i] = in[0].shape[size_t(p[i])];
           return std::vector<TensorType>{{in[0].dtype, s}};
         },
         .vjp = [](const V&, const V&, const V& g, const Attrs& a) {
           const auto& p = a.get_ints("perm");
           std::vector<int64_t> inverse(p.size());
           for (size_t i = 0; i < p.size(); ++i) inverse[size_t(p[i])] = int64_t(i);
           return V{permute(g[0], inverse)};
         },
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{permute(x.in(t, {4, 8}), {1, 0})}; }});
  r.add({.name = "broadcast_to", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"shape", AttrKind::Ints, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kAllButI4);
           Shape s = a.get_ints("shape");
           if (broadcast_shapes(in[0].shape, s) != s)
             throw InputError("cannot broadcast " + shape_str(in[0].shape) + " to " + shape_str(s));
           return std::vector<TensorType>{{in[0].dtype, s}};
         },
         .vjp = [](const V& in, const V&, const V& g, const Attrs&) { return V{vjp::unbroadcast(g[0], in[0].shape())}; },
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{broadcast_to(x.in(t, {1, 8}), {4, 8})}; }});
  r.add({.name = "slice", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"starts", AttrKind::Ints, true}, {"stops", AttrKind::Ints, true}, {"steps", AttrKind::Ints, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kAllButI4);
           size_t n = in[0].shape.size();
           const auto &st = a.get_ints("starts"), &sp = a.get_ints("stops"), &sk = a.get_ints("steps");
           require_len(st, n, "starts");
           require_len(sp, n, "stops");
           require_len(sk, n, "steps");
           Shape s(n);
           for (size_t i = 0; i < n; ++i) {
             if (sk[i] < 1 || st[i] < 0 || st[i] > sp[i] || sp[i] > in[0].shape[i])
               throw InputError("slice [" + std::to_string(st[i]) + ":" + std::to_string(sp[i]) + ":" +
                                std::to_string(sk[i]) + "] is invalid for axis " + std::to_string(i) +
                                " of extent " + std::to_string(in[0].shape[i]));
             // ceil((stop - start) / step) without forming stop - start + step, which overflows
             // for a step near 2^63 (an ONNX Slice may carry one).
             s[i] = sp[i] == st[i] ? 0 : (sp[i] - st[i] - 1) / sk[i] + 1;
           }
           return std::vector<TensorType>{{in[0].dtype, s}};
         },
         .vjp = [](const V& in, const V&, const V& g, const Attrs& a) {
           return V{unslice(g[0], in[0].shape(), a.get_ints("starts"), a.get_ints("steps"))};
         },
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{slice(x.in(t, {4, 8}), {1, 0}, {3, 8}, {1, 2})}; }});
  r.add({.name = "concat", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 1, .max_inputs = -1,
         .attrs = {{"axis", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_same_dtype(in);
           require_dtype(in[0], kAllButI4);
           require_rank_at_least(in[0], 1);
           int ax = normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           Shape s = in[0].shape;
           for (size_t i = 1; i < in.size(); ++i) {
             if (in[i].shape.size() != s.size()) throw InputError("concat operands differ in rank");
             for (size_t d = 0; d < s.size(); ++d)
               if (int(d) != ax && in[i].shape[d] != s[d])
                 throw InputError("concat operand " + std::to_string(i) + " has shape " + shape_str(in[i].shape) +
                                  ", expected " + shape_str(in[0].shape) + " except on axis " + std::to_string(ax));
             s[size_t(ax)] = checked_add(s[size_t(ax)], in[i].shape[size_t(ax)], "concat extent");
           }
           return std::vector<TensorType>{{in[0].dtype, s}};
         },
         .vjp = [](const V& in, const V&, const V& g, const Attrs& a) {
           const Shape& gs = g[0].shape();
           const auto ax = size_t(normalize_axis(a.get_int("axis"), int(gs.size())));
           V r;
           int64_t at = 0;
           for (const Var& x : in) {
             std::vector<int64_t> st(gs.size(), 0), sp = gs, sk(gs.size(), 1);
             st[ax] = at;
             sp[ax] = at + x.shape()[ax];
             r.push_back(slice(g[0], st, sp, sk));
             at = sp[ax];
           }
           return r;
         },
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{concat({x.in(t, {4, 8}), x.in(t, {4, 8})}, 0)}; }});
  r.add({.name = "pad", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 1, .max_inputs = 1,
         .attrs = {{"low", AttrKind::Ints, true}, {"high", AttrKind::Ints, true}, {"value", AttrKind::Float, false, 0.0}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kAllButI4);
           size_t n = in[0].shape.size();
           const auto &lo = a.get_ints("low"), &hi = a.get_ints("high");
           require_len(lo, n, "low");
           require_len(hi, n, "high");
           Shape s = in[0].shape;
           for (size_t i = 0; i < n; ++i) {
             if (lo[i] < 0 || hi[i] < 0) throw InputError("pad widths must be non-negative");
             s[i] = checked_add(s[i], checked_add(lo[i], hi[i], "pad widths"), "padded extent");
           }
           return std::vector<TensorType>{{in[0].dtype, s}};
         },
         .vjp = [](const V& in, const V&, const V& g, const Attrs& a) {
           const auto& lo = a.get_ints("low");
           std::vector<int64_t> stop(lo.size()), step(lo.size(), 1);
           for (size_t i = 0; i < lo.size(); ++i) stop[i] = lo[i] + in[0].shape()[i];
           return V{slice(g[0], lo, stop, step)};
         },
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{pad(x.in(t, {4, 8}), {1, 0}, {0, 2})}; }});
  r.add({.name = "gather", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 2, .max_inputs = 2,
         .attrs = {{"axis", AttrKind::Int, false, int64_t(0)}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kAllButI4);
           require_rank_at_least(in[0], 1);
           require_index_dtype(in[1]);
           int ax = normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           return std::vector<TensorType>{{in[0].dtype, gather_shape(in[0].shape, in[1].shape, ax)}};
         },
         .vjp = [](const V& in, const V&, const V& g, const Attrs& a) {
           return V{scatter_add(vjp::zeros_like(in[0]), in[1], g[0], a.get_int("axis")), Var()};
         },
         .nondiff_inputs = {1},
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{gather(x.in(t, {4, 8}), x.index(DType::I64, {3}, 4), 0)}; }});
  r.add({.name = "scatter_add", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 3, .max_inputs = 3,
         .attrs = {{"axis", AttrKind::Int, false, int64_t(0)}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kNumeric);
           require_rank_at_least(in[0], 1);
           require_index_dtype(in[1]);
           if (in[2].dtype != in[0].dtype) throw InputError("updates dtype differs from the destination's");
           int ax = normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           Shape want = gather_shape(in[0].shape, in[1].shape, ax);
           if (in[2].shape != want)
             throw InputError("updates have shape " + shape_str(in[2].shape) + ", expected " + shape_str(want));
           return std::vector<TensorType>{in[0]};
         },
         .vjp = [](const V& in, const V&, const V& g, const Attrs& a) {
           return V{g[0], Var(), gather(g[0], in[1], a.get_int("axis"))};
         },
         .nondiff_inputs = {1},
         .dtypes = kNumeric,
         .example = [](ExampleInputs& x, DType t) { return std::vector<Var>{scatter_add(x.in(t, {4, 8}), x.index(DType::I64, {3}, 4), x.in(t, {3, 8}), 0)}; }});
  // x with the block update written at `start` (a runtime scalar) along `axis`: a KV cache's
  // new row at the decode position. The result may take x's buffer (inplace_input): kernels
  // then write only the block, so a step costs the block's bytes rather than the cache's.
  // start outside [0, extent - block] is an error on every device, never clamped.
  r.add({.name = "update_slice", .level = Level::L2, .cls = OpClass::Movement, .min_inputs = 3, .max_inputs = 3,
         .attrs = {{"axis", AttrKind::Int, true}},
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           require_dtype(in[0], kAllButI4);
           require_rank_at_least(in[0], 1);
           if (in[1].dtype != in[0].dtype) throw InputError("the block's dtype differs from the destination's");
           if (in[2].dtype != DType::I32 && in[2].dtype != DType::I64)
             throw InputError(std::string("start must be i32 or i64, got ") + dtype_name(in[2].dtype));
           if (!in[2].shape.empty()) throw InputError("start must be a scalar, got shape " + shape_str(in[2].shape));
           const int ax = normalize_axis(a.get_int("axis"), int(in[0].shape.size()));
           bool fits = in[1].shape.size() == in[0].shape.size();
           for (size_t d = 0; fits && d < in[0].shape.size(); ++d)
             fits = int(d) == ax ? in[1].shape[d] <= in[0].shape[d] : in[1].shape[d] == in[0].shape[d];
           if (!fits)
             throw InputError("a block of shape " + shape_str(in[1].shape) + " does not fit " + shape_str(in[0].shape) +
                              " along axis " + std::to_string(ax));
           return std::vector<TensorType>{in[0]};
         },
         // dx: g with the block zeroed; dblock: g's rows start .. start + extent - 1.
         .vjp = [](const V& in, const V&, const V& g, const Attrs& a) {
           const int ax = normalize_axis(a.get_int("axis"), in[0].rank());
           const int64_t u = in[1].shape()[size_t(ax)];
           Var start = in[2].dtype() == DType::I64 ? in[2] : cast(in[2], DType::I64);
           Var rows = iota(*g[0].graph(), {u}, 0, DType::I64) + broadcast_to(start, {u});
           return V{update_slice(g[0], vjp::zeros_like(in[1]), in[2], ax), gather(g[0], rows, ax), Var()};
         },
         .nondiff_inputs = {2},
         .inplace_input = 0,
         .dtypes = kAllButI4,
         .example = [](ExampleInputs& x, DType t) {
           return std::vector<Var>{update_slice(x.in(t, {4, 8}), x.in(t, {4, 3}), x.index(DType::I64, {}, 6), 1)};
         }});
}

}  // namespace rlx::ir
