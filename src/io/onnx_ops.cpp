// The ONNX operator table: one converter per op type, written with the front end
// (ir/frontend.hpp). A converter reads its inputs through the NodeContext (values in the graph,
// or tensors known at import for the inputs ONNX computes at run time and rlx needs as
// attributes: shapes, axes, slice bounds) and returns one result per output.
// docs/io.md lists the table with each op's opset-dependent forms.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/checked.hpp"
#include "io/onnx_import.hpp"

namespace rlx::io::onnx_detail {

namespace {

int64_t axis_in(const NodeContext& c, int64_t axis, int64_t rank, const char* what = "axis") {
  if (axis < -rank || axis >= rank)
    c.fail(std::string(what) + " " + std::to_string(axis) + " is outside a rank-" + std::to_string(rank) + " tensor");
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> axes_in(const NodeContext& c, std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& a : axes) a = axis_in(c, a, rank);
  std::vector<int64_t> s = axes;
  std::sort(s.begin(), s.end());
  if (std::adjacent_find(s.begin(), s.end()) != s.end()) c.fail("an axis is repeated");
  return axes;
}

Tensor i64_tensor(const std::vector<int64_t>& v, bool scalar = false) {
  Tensor t = Tensor::empty(DType::I64, scalar ? Shape{} : Shape{int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

DType onnx_to(const NodeContext& c, int64_t t) {
  if (t < INT32_MIN || t > INT32_MAX) c.fail("'to' " + std::to_string(t) + " is not a data type");
  auto d = dtype_of_onnx(int32_t(t));
  if (!d) c.fail("element type " + onnx_type_name(int32_t(t)) + " is not supported");
  return *d;
}

// Axes from the attribute (before `input_from`) or from input 1 (from that opset on).
std::optional<std::vector<int64_t>> axes_operand(const NodeContext& c, int64_t input_from) {
  if (c.opset() >= input_from) {
    if (!c.has(1)) return std::nullopt;
    return c.ints(1, "axes");
  }
  if (!c.has_attr("axes")) return std::nullopt;
  return c.attr_ints("axes");
}

std::vector<Result> unary(NodeContext& c, Var (*f)(const Var&, SrcLoc)) { return {f(c.var(0), SrcLoc::current())}; }
std::vector<Result> binary(NodeContext& c, Var (*f)(const Var&, const Var&, SrcLoc)) {
  return {f(c.var(0), c.var(1), SrcLoc::current())};
}

Var reduce(NodeContext& c, const char* kind, int64_t input_from) {
  Var x = c.var(0);
  const bool keep = c.attr_int("keepdims", 1) != 0;
  auto axes = axes_operand(c, input_from);
  if (!axes || axes->empty()) {
    if (c.attr_int("noop_with_empty_axes", 0)) return x;
    axes = std::vector<int64_t>(size_t(x.rank()));
    std::iota(axes->begin(), axes->end(), 0);
  }
  const std::vector<int64_t> ax = axes_in(c, *axes, x.rank());
  const std::string k = kind;
  if (k == "sum") return sum(x, ax, keep);
  if (k == "max") return max(x, ax, keep);
  if (k == "min") return min(x, ax, keep);
  if (k == "prod") return prod(x, ax, keep);
  int64_t count = 1;
  for (int64_t a : ax) count *= x.shape()[size_t(a)];
  if (!is_float(x.dtype())) c.fail("ReduceMean of " + std::string(dtype_name(x.dtype())) + " is not supported");
  return sum(x, ax, keep) / scalar_like(x, double(count));
}

// Softmax-like ops: from opset 13 along one axis; before, over the axes from `axis` on, as a 2-D view.
Var softmax_like(NodeContext& c, bool log) {
  Var x = c.var(0);
  auto f = [log](const Var& v, int64_t a) { return log ? log_softmax(v, a) : softmax(v, a); };
  if (c.opset() >= 13) return f(x, axis_in(c, c.attr_int("axis", -1), x.rank()));
  const int64_t a = axis_in(c, c.attr_int("axis", 1), x.rank());
  if (a == x.rank() - 1) return f(x, a);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < a ? outer : inner) *= x.shape()[size_t(i)];
  return reshape(f(reshape(x, {outer, inner}), 1), x.shape());
}

// The spatial attributes of Conv and the pools on a rank-4 input: kernel, strides, dilations
// and pads as {top, left, bottom, right}; auto_pad SAME_UPPER/SAME_LOWER made explicit.
struct Window {
  std::array<int64_t, 2> kernel{}, stride{1, 1}, dilation{1, 1};
  std::array<int64_t, 4> pads{};
};

Window window(const NodeContext& c, const Var& x, std::array<int64_t, 2> kernel) {
  if (x.rank() != 4) c.fail("only 2-D windows (rank-4 N, C, H, W inputs) are supported, got " + x.type().str());
  Window w;
  w.kernel = kernel;
  auto two = [&](const char* name, std::array<int64_t, 2> def) {
    auto v = c.attr_ints(name, {def[0], def[1]});
    if (v.size() != 2 || v[0] < 1 || v[1] < 1) c.fail(std::string(name) + " must be two positive integers");
    return std::array<int64_t, 2>{v[0], v[1]};
  };
  w.stride = two("strides", {1, 1});
  w.dilation = two("dilations", {1, 1});
  auto p = c.attr_ints("pads", {0, 0, 0, 0});
  if (p.size() != 4 || std::any_of(p.begin(), p.end(), [](int64_t v) { return v < 0 || v > (1 << 20); }))
    c.fail("pads must be four integers in [0, 2^20]");
  std::copy(p.begin(), p.end(), w.pads.begin());
  const std::string ap = c.attr_string("auto_pad", "NOTSET");
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    for (int i = 0; i < 2; ++i) {
      const int64_t in = x.shape()[size_t(2 + i)], out = (in + w.stride[i] - 1) / w.stride[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.stride[i] + (w.kernel[i] - 1) * w.dilation[i] + 1 - in);
      const int64_t small = total / 2, big = total - small;
      w.pads[size_t(i)] = ap == "SAME_UPPER" ? small : big;
      w.pads[size_t(i + 2)] = ap == "SAME_UPPER" ? big : small;
    }
  } else if (ap == "VALID") {
    w.pads = {0, 0, 0, 0};
  } else if (ap != "NOTSET") {
    c.fail("auto_pad '" + ap + "' is not an ONNX auto_pad");
  }
  return w;
}

// x padded explicitly where the window's padding is uneven; the symmetric rest stays for the op.
Var pad_uneven(Var x, Window& w, double value) {
  const int64_t t = w.pads[0], l = w.pads[1], b = w.pads[2], r = w.pads[3];
  if (t == b && l == r) return x;
  const int64_t pt = std::min(t, b), pl = std::min(l, r);
  x = pad(x, {0, 0, t - pt, l - pl}, {0, 0, b - pt, r - pl}, value);
  w.pads = {pt, pl, pt, pl};
  return x;
}

std::array<int64_t, 2> kernel_of(const NodeContext& c) {
  auto k = c.attr_ints("kernel_shape");
  if (k.size() != 2 || k[0] < 1 || k[1] < 1) c.fail("kernel_shape must be two positive integers (2-D pooling)");
  return {k[0], k[1]};
}

Var pool(NodeContext& c, bool is_max) {
  if (c.attr_int("ceil_mode", 0)) c.fail("ceil_mode=1 is not supported");
  if (is_max && c.attr_int("storage_order", 0)) c.fail("storage_order=1 is not supported");
  if (is_max && c.wants_output(1)) c.fail("the Indices output is not supported");
  Var x = c.var(0);
  if (!is_float(x.dtype())) c.fail("pooling of " + std::string(dtype_name(x.dtype())) + " is not supported (floats only)");
  Window w = window(c, x, kernel_of(c));
  if (w.dilation != std::array<int64_t, 2>{1, 1}) c.fail("dilated pooling is not supported");
  if (is_max) {
    x = pad_uneven(x, w, -INFINITY);
    return max_pool2d(x, w.kernel, w.stride, {w.pads[0], w.pads[1]});
  }
  const bool padded = std::any_of(w.pads.begin(), w.pads.end(), [](int64_t p) { return p != 0; });
  const bool include_pad = c.attr_int("count_include_pad", 0) != 0;
  Var xp = pad_uneven(x, w, 0.0);
  Var y = avg_pool2d(xp, w.kernel, w.stride, {w.pads[0], w.pads[1]});
  if (!padded || include_pad) return y;
  // (count_include_pad=0: divide by the share of each window that lies inside the image)
  Window w1 = window(c, x, kernel_of(c));
  Var ones = broadcast_to(scalar_like(x, 1.0), {1, 1, x.shape()[2], x.shape()[3]});
  Var share = avg_pool2d(pad_uneven(ones, w1, 0.0), w1.kernel, w1.stride, {w1.pads[0], w1.pads[1]});
  return y / share;
}

// ONNX Slice on known bounds: per listed axis, starts/ends clamped as the operator defines.
Var onnx_slice(NodeContext& c, const Var& x, std::vector<int64_t> starts, std::vector<int64_t> ends,
               std::optional<std::vector<int64_t>> axes, std::optional<std::vector<int64_t>> steps) {
  const int64_t r = x.rank();
  if (!axes) {
    axes = std::vector<int64_t>(starts.size());
    std::iota(axes->begin(), axes->end(), 0);
  }
  if (!steps) steps = std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes->size() != starts.size() || steps->size() != starts.size())
    c.fail("starts, ends, axes and steps must have one entry each per sliced axis");
  std::vector<int64_t> lo(size_t(r), 0), hi(x.shape().begin(), x.shape().end()), st(size_t(r), 1);
  const std::vector<int64_t> ax = axes_in(c, *axes, r);
  for (size_t i = 0; i < ax.size(); ++i) {
    const int64_t d = x.shape()[size_t(ax[i])];
    if ((*steps)[i] < 1) c.fail("slice steps below 1 are not supported (got " + std::to_string((*steps)[i]) + ")");
    auto clampd = [d](int64_t v) { return std::clamp(v < 0 ? (v < -d ? 0 : v + d) : v, int64_t(0), d); };
    lo[size_t(ax[i])] = clampd(starts[i]);
    hi[size_t(ax[i])] = std::max(lo[size_t(ax[i])], clampd(ends[i]));
    st[size_t(ax[i])] = (*steps)[i];
  }
  return slice(x, lo, hi, st);
}

Shape broadcast_shapes(const NodeContext& c, const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape s(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t x = i + a.size() >= r ? a[i + a.size() - r] : 1, y = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (x != y && x != 1 && y != 1) c.fail("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    s[i] = x == 1 ? y : x;
  }
  return s;
}

Tensor filled(DType t, const Shape& s, const Tensor& value) {
  Tensor r = Tensor::empty(t, s);
  const size_t e = dtype_size(t);
  for (int64_t i = 0; i < r.numel(); ++i) std::memcpy(static_cast<char*>(r.raw()) + size_t(i) * e, value.raw(), e);
  return r;
}

std::vector<Result> split(NodeContext& c) {
  Var x = c.var(0);
  const int64_t a = axis_in(c, c.attr_int("axis", 0), x.rank()), d = x.shape()[size_t(a)];
  std::vector<int64_t> parts;
  if (c.opset() >= 13 && c.has(1)) parts = c.ints(1, "split");
  else if (c.opset() < 13) parts = c.attr_ints("split");
  const int64_t n = int64_t(c.outputs());
  if (parts.empty()) {
    const int64_t k = c.opset() >= 18 && c.has_attr("num_outputs") ? c.attr_int("num_outputs", n) : n;
    if (k != n || n < 1) c.fail("num_outputs does not match the node's outputs");
    const int64_t each = (d + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) parts.push_back(std::clamp(d - i * each, int64_t(0), each));
  }
  if (int64_t(parts.size()) != n) c.fail("split lists " + std::to_string(parts.size()) + " parts for " + std::to_string(n) + " outputs");
  int64_t at = 0;
  std::vector<Result> r;
  for (int64_t p : parts) {
    if (p < 0 || p > d - at) c.fail("the split sizes do not add up to the axis' " + std::to_string(d));
    r.push_back(onnx_slice(c, x, {at}, {at + p}, std::vector<int64_t>{a}, std::nullopt));
    at += p;
  }
  if (at != d) c.fail("the split sizes do not add up to the axis' " + std::to_string(d));
  return r;
}

std::map<std::string, Converter> make_table() {
  std::map<std::string, Converter> t;
  // ---- elementwise ----
  t["Add"] = [](NodeContext& c) { return binary(c, add); };
  t["Sub"] = [](NodeContext& c) { return binary(c, sub); };
  t["Mul"] = [](NodeContext& c) { return binary(c, mul); };
  t["Div"] = [](NodeContext& c) { return binary(c, div); };
  t["Pow"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0), y = c.var(1);
    return {pow(x, y.dtype() == x.dtype() ? y : cast(y, x.dtype()))};
  };
  t["Equal"] = [](NodeContext& c) { return binary(c, eq); };
  t["Less"] = [](NodeContext& c) { return binary(c, lt); };
  t["LessOrEqual"] = [](NodeContext& c) { return binary(c, le); };
  t["Greater"] = [](NodeContext& c) { return binary(c, gt); };
  t["GreaterOrEqual"] = [](NodeContext& c) { return binary(c, ge); };
  t["And"] = [](NodeContext& c) { return binary(c, logical_and); };
  t["Or"] = [](NodeContext& c) { return binary(c, logical_or); };
  t["Not"] = [](NodeContext& c) { return unary(c, logical_not); };
  auto variadic = [](Var (*f)(const Var&, const Var&, SrcLoc)) {
    return [f](NodeContext& c) -> std::vector<Result> {
      Var r = c.var(0);
      for (size_t i = 1; i < c.inputs(); ++i) r = f(r, c.var(i), SrcLoc::current());
      return {r};
    };
  };
  t["Max"] = variadic(maximum);
  t["Min"] = variadic(minimum);
  t["Sum"] = variadic(add);
  t["Sqrt"] = [](NodeContext& c) { return unary(c, sqrt); };
  t["Erf"] = [](NodeContext& c) { return unary(c, erf); };
  t["Tanh"] = [](NodeContext& c) { return unary(c, tanh); };
  t["Exp"] = [](NodeContext& c) { return unary(c, exp); };
  t["Log"] = [](NodeContext& c) { return unary(c, log); };
  t["Neg"] = [](NodeContext& c) { return unary(c, neg); };
  t["Abs"] = [](NodeContext& c) { return unary(c, abs); };
  t["Reciprocal"] = [](NodeContext& c) { return unary(c, recip); };
  t["Floor"] = [](NodeContext& c) { return unary(c, floor); };
  t["Ceil"] = [](NodeContext& c) { return unary(c, ceil); };
  t["Sign"] = [](NodeContext& c) { return unary(c, sign); };
  t["Sin"] = [](NodeContext& c) { return unary(c, sin); };
  t["Cos"] = [](NodeContext& c) { return unary(c, cos); };
  t["Relu"] = [](NodeContext& c) { return unary(c, relu); };
  t["Sigmoid"] = [](NodeContext& c) { return unary(c, sigmoid); };
  t["Gelu"] = [](NodeContext& c) -> std::vector<Result> {
    return {gelu(c.var(0), c.attr_string("approximate", "none"))};
  };
  t["Clip"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    if (c.opset() < 11) {
      if (!is_float(x.dtype())) c.fail("Clip of " + std::string(dtype_name(x.dtype())) + " with attribute bounds");
      x = maximum(x, scalar_like(x, c.attr_float("min", -INFINITY)));
      return {minimum(x, scalar_like(x, c.attr_float("max", INFINITY)))};
    }
    if (c.has(1)) x = maximum(x, c.var(1));
    if (c.has(2)) x = minimum(x, c.var(2));
    return {x};
  };
  t["Where"] = [](NodeContext& c) -> std::vector<Result> { return {where(c.var(0), c.var(1), c.var(2))}; };
  t["Cast"] = [](NodeContext& c) -> std::vector<Result> {
    const DType to = onnx_to(c, c.attr_int("to", 0));
    Var x = c.var(0);
    return {x.dtype() == to ? x : cast(x, to)};
  };
  t["Identity"] = [](NodeContext& c) -> std::vector<Result> {
    if (const Tensor* k = c.known(0)) return {*k};
    return {c.var(0)};
  };
  // Inference: the input unchanged; the mask, when asked for, all true.
  t["Dropout"] = [](NodeContext& c) -> std::vector<Result> {
    if (c.opset() >= 12 && c.has(2) && (!c.known(2) || c.known(2)->numel() != 1 || c.known(2)->dtype() != DType::Bool || c.known(2)->data<bool>()[0]))
      c.fail("training_mode must be a known false (the importer builds inference graphs)");
    std::vector<Result> r;
    if (const Tensor* k = c.known(0)) r.emplace_back(*k);
    else r.emplace_back(c.var(0));
    if (c.wants_output(1)) {
      Tensor one = Tensor::empty(DType::Bool, {});
      one.data<bool>()[0] = true;
      const Shape& s = c.type(0).shape;
      if (numel(s) <= c.max_known()) r.emplace_back(filled(DType::Bool, s, one));
      else r.emplace_back(broadcast_to(constant(c.graph(), one), s));
    }
    return r;
  };
  // ---- sources and shapes ----
  t["Constant"] = [](NodeContext& c) -> std::vector<Result> {
    const std::string what = "its value";
    if (const onnx::TensorProto* v = c.attr_tensor("value")) return {read_tensor(*v, what, "")};
    if (c.has_attr("value_float")) return {scalar_tensor(DType::F32, c.attr_float("value_float", 0))};
    if (c.has_attr("value_int")) return {i64_tensor({c.attr_int("value_int", 0)}, true)};
    if (c.has_attr("value_ints")) return {i64_tensor(c.attr_ints("value_ints"))};
    if (c.has_attr("value_floats")) {
      const auto& n = c.node();
      for (const auto& a : n.attribute())
        if (a.name() == "value_floats") {
          Tensor r = Tensor::empty(DType::F32, {a.floats_size()});
          std::copy(a.floats().begin(), a.floats().end(), r.data<float>());
          return {r};
        }
    }
    c.fail("Constant needs one of value, value_float, value_int, value_ints, value_floats (sparse and string values are not supported)");
  };
  t["ConstantOfShape"] = [](NodeContext& c) -> std::vector<Result> {
    const std::vector<int64_t> s = c.ints(0, "shape");
    int64_t n = 1;
    for (int64_t d : s) {
      if (d < 0) c.fail("negative dimension " + std::to_string(d));
      n = checked_mul(n, d, "ConstantOfShape's element count");
    }
    Tensor v = scalar_tensor(DType::F32, 0.0);
    if (const onnx::TensorProto* p = c.attr_tensor("value")) {
      v = read_tensor(*p, "its value", "");
      if (v.numel() != 1) c.fail("value must hold one element");
      v = v.reshape({});
    }
    if (n <= c.max_known()) return {filled(v.dtype(), Shape(s.begin(), s.end()), v)};
    return {broadcast_to(constant(c.graph(), v), Shape(s.begin(), s.end()))};
  };
  t["Shape"] = [](NodeContext& c) -> std::vector<Result> {
    const Shape& s = c.type(0).shape;
    const int64_t r = int64_t(s.size());
    auto clampr = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t(0), r); };
    const int64_t lo = clampr(c.attr_int("start", 0)), hi = std::max(lo, clampr(c.attr_int("end", r)));
    return {i64_tensor(std::vector<int64_t>(s.begin() + lo, s.begin() + hi))};
  };
  t["Size"] = [](NodeContext& c) -> std::vector<Result> { return {i64_tensor({numel(c.type(0).shape)}, true)}; };
  t["Range"] = [](NodeContext& c) -> std::vector<Result> {
    for (size_t i = 0; i < 3; ++i)
      if (!c.known(i)) c.fail("Range's start, limit and delta must be known when the model is imported");
    const DType dt = c.known(0)->dtype();
    auto get = [&](size_t i) {
      const Tensor& k = *c.known(i);
      if (k.numel() != 1 || k.dtype() != dt) c.fail("start, limit and delta must be scalars of one type");
      double v = 0;
      visit_dtype(dt, [&](auto z) {
        using T = decltype(z);
        if constexpr (std::is_arithmetic_v<T>) v = double(k.data<T>()[0]);
        else c.fail("Range of " + std::string(dtype_name(dt)) + " is not supported");
      });
      return v;
    };
    const double start = get(0), limit = get(1), delta = get(2);
    if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta)) c.fail("delta must be non-zero and all finite");
    const double count = std::max(0.0, std::ceil((limit - start) / delta));
    if (count > double(c.max_known())) c.fail("Range of " + std::to_string(count) + " elements is larger than the importer folds");
    Tensor r = Tensor::empty(dt, {int64_t(count)});
    visit_dtype(dt, [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_arithmetic_v<T>) {
        // (integer ranges: both ends must fit the type, which every value between then does)
        if constexpr (std::is_integral_v<T>)
          for (double v : {start, start + (count > 0 ? count - 1 : 0) * delta})
            if (v < double(std::numeric_limits<T>::lowest()) || v > double(std::numeric_limits<T>::max()))
              c.fail("Range leaves the range of " + std::string(dtype_name(dt)));
        for (int64_t i = 0; i < int64_t(count); ++i) r.data<T>()[i] = T(start + double(i) * delta);
      }
    });
    return {r};
  };
  // ---- movement ----
  t["Reshape"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    std::vector<int64_t> s = c.opset() >= 5 ? c.ints(1, "shape") : c.attr_ints("shape");
    const bool allowzero = c.attr_int("allowzero", 0) != 0;
    int64_t fixed = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == 0 && !allowzero) {
        if (i >= size_t(x.rank())) c.fail("shape entry 0 at " + std::to_string(i) + " copies a dimension the input lacks");
        s[i] = x.shape()[i];
      } else if (s[i] < -1) {
        c.fail("shape entry " + std::to_string(s[i]) + " is negative");
      }
      if (s[i] != -1) fixed = checked_mul(fixed, s[i], "Reshape's shape");
    }
    return {reshape(x, Shape(s.begin(), s.end()))};
  };
  t["Flatten"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    const int64_t r = x.rank(), a = c.attr_int("axis", 1);
    if (a < -r || a > r) c.fail("axis " + std::to_string(a) + " is outside [-rank, rank]");
    const int64_t at = a < 0 ? a + r : a;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < r; ++i) (i < at ? outer : inner) *= x.shape()[size_t(i)];
    return {reshape(x, {outer, inner})};
  };
  t["Transpose"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    std::vector<int64_t> perm(size_t(x.rank()));
    std::iota(perm.rbegin(), perm.rend(), 0);
    perm = c.attr_ints("perm", perm);
    if (int64_t(perm.size()) != x.rank()) c.fail("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(x.rank()));
    return {permute(x, axes_in(c, perm, x.rank()))};
  };
  t["Unsqueeze"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    auto axes = axes_operand(c, 13);
    if (!axes) c.fail("axes is missing");
    const int64_t r = x.rank() + int64_t(axes->size());
    const std::vector<int64_t> ax = axes_in(c, *axes, r);
    Shape s;
    size_t k = 0;
    for (int64_t i = 0; i < r; ++i)
      s.push_back(std::count(ax.begin(), ax.end(), i) ? 1 : x.shape()[k++]);
    return {reshape(x, s)};
  };
  t["Squeeze"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    auto axes = axes_operand(c, 13);
    std::vector<int64_t> ax;
    if (axes) ax = axes_in(c, *axes, x.rank());
    else
      for (int64_t i = 0; i < x.rank(); ++i)
        if (x.shape()[size_t(i)] == 1) ax.push_back(i);
    Shape s;
    for (int64_t i = 0; i < x.rank(); ++i) {
      const bool drop = std::count(ax.begin(), ax.end(), i) > 0;
      if (drop && x.shape()[size_t(i)] != 1) c.fail("axis " + std::to_string(i) + " has size " + std::to_string(x.shape()[size_t(i)]) + ", not 1");
      if (!drop) s.push_back(x.shape()[size_t(i)]);
    }
    return {reshape(x, s)};
  };
  t["Concat"] = [](NodeContext& c) -> std::vector<Result> {
    std::vector<Var> xs;
    for (size_t i = 0; i < c.inputs(); ++i)
      if (c.has(i)) xs.push_back(c.var(i));
    if (xs.empty()) c.fail("no inputs");
    return {concat(xs, axis_in(c, c.attr_int("axis", 0), xs[0].rank()))};
  };
  t["Split"] = split;
  t["Slice"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    if (c.opset() < 10) {
      std::optional<std::vector<int64_t>> axes;
      if (c.has_attr("axes")) axes = c.attr_ints("axes");
      return {onnx_slice(c, x, c.attr_ints("starts"), c.attr_ints("ends"), axes, std::nullopt)};
    }
    std::optional<std::vector<int64_t>> axes, steps;
    if (c.has(3)) axes = c.ints(3, "axes");
    if (c.has(4)) steps = c.ints(4, "steps");
    return {onnx_slice(c, x, c.ints(1, "starts"), c.ints(2, "ends"), axes, steps)};
  };
  t["Gather"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    const int64_t a = axis_in(c, c.attr_int("axis", 0), x.rank()), d = x.shape()[size_t(a)];
    if (const Tensor* k = c.known(1)) {
      // (known indices: checked and made non-negative here)
      Tensor idx = Tensor::empty(DType::I64, k->shape());
      const std::vector<int64_t> v = c.ints(1, "indices");
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < -d || v[i] >= d) c.fail("index " + std::to_string(v[i]) + " is outside an axis of " + std::to_string(d));
        idx.data<int64_t>()[i] = v[i] < 0 ? v[i] + d : v[i];
      }
      return {gather(x, constant(c.graph(), idx), a)};
    }
    // (ONNX counts negative indices from the end)
    Var idx = c.var(1);
    Var wrapped = where(lt(idx, scalar_like(idx, 0.0)), idx + scalar_like(idx, double(d)), idx);
    return {gather(x, wrapped, a)};
  };
  // GatherND (batch_dims 0) as one gather over data with its first k axes flattened: each index
  // tuple becomes its row-major position there.
  t["GatherND"] = [](NodeContext& c) -> std::vector<Result> {
    if (c.attr_int("batch_dims", 0) != 0) c.fail("batch_dims other than 0 is not supported");
    Var x = c.var(0), idx = c.var(1);
    if (idx.dtype() != DType::I64 || idx.rank() < 1) c.fail("indices must be i64 of rank 1 or more, got " + idx.type().str());
    const int64_t k = idx.shape().back();
    if (k < 1 || k > x.rank()) c.fail("index tuples of " + std::to_string(k) + " for data of rank " + std::to_string(x.rank()));
    const Shape lead(idx.shape().begin(), idx.shape().end() - 1);
    Var position;
    int64_t stride = 1;
    for (int64_t j = k - 1; j >= 0; --j) {
      const int64_t d = x.shape()[size_t(j)];
      std::vector<int64_t> lo(size_t(idx.rank()), 0), hi(idx.shape().begin(), idx.shape().end());
      lo.back() = j;
      hi.back() = j + 1;
      Var ij = reshape(slice(idx, lo, hi), lead);
      ij = where(lt(ij, scalar_like(ij, 0.0)), ij + scalar_like(ij, double(d)), ij);  // (negative: from the end)
      Var term = stride == 1 ? ij : ij * scalar_like(ij, double(stride));
      position = position.defined() ? term + position : term;
      stride = checked_mul(stride, d, "GatherND's indexed extent");
    }
    Shape flat{stride};
    flat.insert(flat.end(), x.shape().begin() + k, x.shape().end());
    return {gather(reshape(x, flat), position, 0)};
  };
  t["Expand"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0);
    const std::vector<int64_t> s = c.ints(1, "shape");
    for (int64_t d : s)
      if (d < 0) c.fail("shape entry " + std::to_string(d) + " is negative");
    const Shape out = broadcast_shapes(c, x.shape(), Shape(s.begin(), s.end()));
    return {out == x.shape() ? x : broadcast_to(x, out)};
  };
  // ---- reductions and normalization ----
  t["ReduceMean"] = [](NodeContext& c) -> std::vector<Result> { return {reduce(c, "mean", 18)}; };
  t["ReduceSum"] = [](NodeContext& c) -> std::vector<Result> { return {reduce(c, "sum", 13)}; };
  t["ReduceMax"] = [](NodeContext& c) -> std::vector<Result> { return {reduce(c, "max", 18)}; };
  t["ReduceMin"] = [](NodeContext& c) -> std::vector<Result> { return {reduce(c, "min", 18)}; };
  t["ReduceProd"] = [](NodeContext& c) -> std::vector<Result> { return {reduce(c, "prod", 18)}; };
  t["Softmax"] = [](NodeContext& c) -> std::vector<Result> { return {softmax_like(c, false)}; };
  t["LogSoftmax"] = [](NodeContext& c) -> std::vector<Result> { return {softmax_like(c, true)}; };
  t["LayerNormalization"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0), g = c.var(1);
    if (axis_in(c, c.attr_int("axis", -1), x.rank()) != x.rank() - 1)
      c.fail("only normalization over the last axis is supported");
    if (c.wants_output(1) || c.wants_output(2)) c.fail("the Mean and InvStdDev outputs are not supported");
    Var b = c.has(2) ? c.var(2) : broadcast_to(scalar_like(g, 0.0), g.shape());
    return {layer_norm(x, g, b, c.attr_float("epsilon", 1e-5))};
  };
  t["BatchNormalization"] = [](NodeContext& c) -> std::vector<Result> {
    if (c.attr_int("training_mode", 0) || c.wants_output(1) || c.wants_output(2))
      c.fail("training mode is not supported (the importer builds inference graphs)");
    if (c.opset() < 7 && c.attr_int("is_test", 0) == 0) c.fail("is_test=0 is not supported");
    return {batch_norm(c.var(0), c.var(1), c.var(2), c.var(3), c.var(4), false, c.attr_float("momentum", 0.9),
                       c.attr_float("epsilon", 1e-5))
                .y};
  };
  // ---- linear algebra and convolution ----
  t["MatMul"] = [](NodeContext& c) -> std::vector<Result> {
    Var a = c.var(0), b = c.var(1);
    if (a.rank() == 0 || b.rank() == 0) c.fail("MatMul of a scalar");
    const bool va = a.rank() == 1, vb = b.rank() == 1;
    if (va) a = reshape(a, {1, a.shape()[0]});
    if (vb) b = reshape(b, {b.shape()[0], 1});
    Var y = matmul(a, b);
    if (va || vb) {
      Shape s = y.shape();
      if (vb) s.erase(s.end() - 1);
      if (va) s.erase(s.end() - (vb ? 1 : 2));
      y = reshape(y, s);
    }
    return {y};
  };
  t["Gemm"] = [](NodeContext& c) -> std::vector<Result> {
    Var a = c.var(0), b = c.var(1);
    if (a.rank() != 2 || b.rank() != 2) c.fail("A and B must be matrices");
    if (!is_float(a.dtype())) c.fail("Gemm of " + std::string(dtype_name(a.dtype())) + " is not supported (floats only)");
    const bool ta = c.attr_int("transA", 0) != 0, tb = c.attr_int("transB", 0) != 0;
    const double alpha = c.attr_float("alpha", 1.0), beta = c.attr_float("beta", 1.0);
    // (the common nn.Linear form is rlx's linear, which devices run as one GEMM with its bias)
    if (!ta && tb && alpha == 1.0 && (!c.has(2) || (beta == 1.0 && c.type(2).shape.size() == 1)))
      return {c.has(2) ? linear(a, b, c.var(2)) : linear(a, b)};
    Var y = matmul(a, b, ta, tb);
    if (alpha != 1.0) y = y * scalar_like(y, alpha);
    if (c.has(2) && beta != 0.0) {
      Var cc = c.var(2);
      y = y + (beta == 1.0 ? cc : cc * scalar_like(cc, beta));
    }
    return {y};
  };
  t["Conv"] = [](NodeContext& c) -> std::vector<Result> {
    Var x = c.var(0), w = c.var(1);
    if (w.rank() != 4) c.fail("only 2-D convolutions are supported (weights " + w.type().str() + ")");
    auto k = c.attr_ints("kernel_shape", {w.shape()[2], w.shape()[3]});
    if (k.size() != 2 || k[0] != w.shape()[2] || k[1] != w.shape()[3]) c.fail("kernel_shape disagrees with the weights");
    Window win = window(c, x, {k[0], k[1]});
    x = pad_uneven(x, win, 0.0);
    Conv2dOptions o{.stride = win.stride, .padding = {win.pads[0], win.pads[1]}, .dilation = win.dilation,
                    .groups = c.attr_int("group", 1)};
    return {c.has(2) ? conv2d(x, w, c.var(2), o) : conv2d(x, w, std::nullopt, o)};
  };
  t["MaxPool"] = [](NodeContext& c) -> std::vector<Result> { return {pool(c, true)}; };
  t["AveragePool"] = [](NodeContext& c) -> std::vector<Result> { return {pool(c, false)}; };
  auto global = [](bool is_max) {
    return [is_max](NodeContext& c) -> std::vector<Result> {
      Var x = c.var(0);
      if (x.rank() < 3) c.fail("the input must be N, C and at least one spatial axis");
      std::vector<int64_t> ax;
      int64_t count = 1;
      for (int64_t i = 2; i < x.rank(); ++i) {
        ax.push_back(i);
        count *= x.shape()[size_t(i)];
      }
      if (is_max) return {max(x, ax, true)};
      return {sum(x, ax, true) / scalar_like(x, double(count))};
    };
  };
  t["GlobalAveragePool"] = global(false);
  t["GlobalMaxPool"] = global(true);
  return t;
}

}  // namespace

const std::map<std::string, Converter>& converters() {
  static const std::map<std::string, Converter> table = make_table();
  return table;
}

}  // namespace rlx::io::onnx_detail
