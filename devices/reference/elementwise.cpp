// Elementwise kernels: unary and binary math, comparisons, logic, complex parts,
// where and cast. Each op is one function per compute domain; NumPy broadcasting and
// strided inputs are handled once, in map_elements.
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

// Evaluates f(offsets) for every element of `out`, where offsets[k] is the element
// offset of in[k] broadcast to out's shape, and stores the result (round once).
template <class F>
void map_elements(std::span<const Tensor> in, const Tensor& out, F&& f) {
  std::vector<std::vector<int64_t>> strides;
  for (const Tensor& t : in) strides.push_back(broadcast_strides(t, out.shape()));
  for_each_offset(out.shape(), strides, [&](int64_t i, const int64_t* off) { store(out, i, f(off)); });
}

[[noreturn]] void no_domain(const ir::Node& n, DType t) {
  throw InternalError("reference: " + n.op->name + " has no kernel for " + dtype_name(t));
}

// A unary op, given for each compute domain it accepts (nullptr: not accepted).
// Complex functions return a complex value; storing it to a real result (abs, real,
// imag) keeps the real part.
struct UnaryFns {
  int64_t (*i)(int64_t) = nullptr;
  double (*r)(double) = nullptr;
  cd (*c)(cd) = nullptr;
};

Kernel unary(UnaryFns fn) {
  return [fn](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    const Tensor& x = in[0];
    switch (domain_of(x.dtype())) {
      case Domain::Int:
        if (!fn.i) no_domain(n, x.dtype());
        map_elements(in, out[0], [&](const int64_t* o) { return fn.i(load_int(x, o[0])); });
        return;
      case Domain::Real:
        if (!fn.r) no_domain(n, x.dtype());
        map_elements(in, out[0], [&](const int64_t* o) { return fn.r(load_real(x, o[0])); });
        return;
      case Domain::Complex:
        if (!fn.c) no_domain(n, x.dtype());
        map_elements(in, out[0], [&](const int64_t* o) { return fn.c(load_complex(x, o[0])); });
        return;
    }
  };
}

// A binary op per compute domain; both operands share a dtype. Comparisons return 0/1
// in the operands' domain and are stored to the bool result as `!= 0`.
struct BinaryFns {
  int64_t (*i)(int64_t, int64_t) = nullptr;
  double (*r)(double, double) = nullptr;
  cd (*c)(cd, cd) = nullptr;
};

Kernel binary(BinaryFns fn) {
  return [fn](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    const Tensor &a = in[0], &b = in[1];
    switch (domain_of(a.dtype())) {
      case Domain::Int:
        if (!fn.i) no_domain(n, a.dtype());
        map_elements(in, out[0], [&](const int64_t* o) { return fn.i(load_int(a, o[0]), load_int(b, o[1])); });
        return;
      case Domain::Real:
        if (!fn.r) no_domain(n, a.dtype());
        map_elements(in, out[0], [&](const int64_t* o) { return fn.r(load_real(a, o[0]), load_real(b, o[1])); });
        return;
      case Domain::Complex:
        if (!fn.c) no_domain(n, a.dtype());
        map_elements(in, out[0], [&](const int64_t* o) { return fn.c(load_complex(a, o[0]), load_complex(b, o[1])); });
        return;
    }
  };
}

// Keeps NaN and signed zero.
double real_sign(double x) {
  if (x > 0) return 1.0;
  if (x < 0) return -1.0;
  return x;
}

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : (a < b ? b : a); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? a + b : (b < a ? b : a); }

int64_t int_div(int64_t a, int64_t b) {
  if (b == 0) return 0;                                               // docs/ir.md: int x/0 = 0
  if (a == std::numeric_limits<int64_t>::min() && b == -1) return a;  // wraps
  return a / b;                                                       // truncates toward zero
}

void where_kernel(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &c = in[0], &a = in[1], &b = in[2];
  std::vector<std::vector<int64_t>> st;
  for (const Tensor& t : in) st.push_back(broadcast_strides(t, out[0].shape()));
  for_each_offset(out[0].shape(), st, [&](int64_t i, const int64_t* o) {
    if (load_int(c, o[0]))
      copy_element(a, o[1], out[0], i);
    else
      copy_element(b, o[2], out[0], i);
  });
}

void make_complex_kernel(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  map_elements(in, out[0], [&](const int64_t* o) { return cd(load_real(in[0], o[0]), load_real(in[1], o[1])); });
}

void cast_kernel(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  visit_domain(in[0].dtype(), [&](auto zero) {
    using C = decltype(zero);
    map_elements(in, out[0], [&](const int64_t* o) { return load<C>(in[0], o[0]); });
  });
}

std::string cond_is_bool(const ir::Node& n, const ir::Graph& g) {
  DType t = g.type(n.inputs.at(0)).dtype;
  return t == DType::Bool ? "" : std::string("condition is ") + dtype_name(t) + ", not bool";
}

std::string both_f32(const ir::Node& n, const ir::Graph& g) {
  DType t = g.type(n.inputs.at(1)).dtype;
  return t == DType::F32 ? "" : std::string("imaginary part is ") + dtype_name(t) + ", not f32";
}

}  // namespace

void add_elementwise_kernels(KernelTable& t) {
  struct Unary {
    const char* op;
    DTypeSet dtypes;
    UnaryFns fn;
  };
  const Unary unaries[] = {
      {"neg",
       kNumeric,
       {.i = [](int64_t a) { return wrap_sub(0, a); }, .r = [](double x) { return -x; }, .c = [](cd z) { return -z; }}},
      {"abs",
       kNumeric,
       {.i = [](int64_t a) { return a < 0 ? wrap_sub(0, a) : a; },
        .r = [](double x) { return std::fabs(x); },
        .c = [](cd z) { return cd(std::abs(z)); }}},
      {"exp", kInexact, {.r = [](double x) { return std::exp(x); }, .c = [](cd z) { return std::exp(z); }}},
      {"log", kFloats, {.r = [](double x) { return std::log(x); }}},
      {"sqrt", kFloats, {.r = [](double x) { return std::sqrt(x); }}},
      {"rsqrt", kFloats, {.r = [](double x) { return 1.0 / std::sqrt(x); }}},
      {"sin", kFloats, {.r = [](double x) { return std::sin(x); }}},
      {"cos", kFloats, {.r = [](double x) { return std::cos(x); }}},
      {"tanh", kFloats, {.r = [](double x) { return std::tanh(x); }}},
      {"erf", kFloats, {.r = [](double x) { return std::erf(x); }}},
      {"recip", kFloats, {.r = [](double x) { return 1.0 / x; }}},
      {"floor", kFloats, {.r = [](double x) { return std::floor(x); }}},
      {"ceil", kFloats, {.r = [](double x) { return std::ceil(x); }}},
      {"round", kFloats, {.r = [](double x) { return std::nearbyint(x); }}},  // default mode: half to even
      {"sign",
       kRealNumeric,
       {.i = [](int64_t a) { return int64_t(a > 0) - int64_t(a < 0); },
        .r = real_sign}},
      {"logical_not", kBool, {.i = [](int64_t a) { return int64_t(a == 0); }}},
      {"real", kC64, {.c = [](cd z) { return cd(z.real()); }}},
      {"imag", kC64, {.c = [](cd z) { return cd(z.imag()); }}},
      {"conj", kC64, {.c = [](cd z) { return std::conj(z); }}},
  };
  for (const Unary& u : unaries) t.add({u.op, u.dtypes, 0, unary(u.fn), {}});

  struct Binary {
    const char* op;
    DTypeSet dtypes;
    BinaryFns fn;
  };
  const Binary binaries[] = {
      {"add",
       kNumeric,
       {.i = wrap_add, .r = [](double a, double b) { return a + b; }, .c = [](cd a, cd b) { return a + b; }}},
      {"sub",
       kNumeric,
       {.i = wrap_sub, .r = [](double a, double b) { return a - b; }, .c = [](cd a, cd b) { return a - b; }}},
      {"mul",
       kNumeric,
       {.i = wrap_mul, .r = [](double a, double b) { return a * b; }, .c = [](cd a, cd b) { return a * b; }}},
      {"div",
       kNumeric,
       {.i = int_div, .r = [](double a, double b) { return a / b; }, .c = [](cd a, cd b) { return a / b; }}},
      {"pow", kFloats, {.r = [](double a, double b) { return std::pow(a, b); }}},
      {"maximum", kRealNumeric, {.i = [](int64_t a, int64_t b) { return a < b ? b : a; }, .r = nan_max}},
      {"minimum", kRealNumeric, {.i = [](int64_t a, int64_t b) { return b < a ? b : a; }, .r = nan_min}},
      {"eq",
       kAllButI4,
       {.i = [](int64_t a, int64_t b) { return int64_t(a == b); },
        .r = [](double a, double b) { return double(a == b); },
        .c = [](cd a, cd b) { return cd(a == b); }}},
      {"ne",
       kAllButI4,
       {.i = [](int64_t a, int64_t b) { return int64_t(a != b); },
        .r = [](double a, double b) { return double(a != b); },
        .c = [](cd a, cd b) { return cd(a != b); }}},
      {"lt",
       kRealNumeric,
       {.i = [](int64_t a, int64_t b) { return int64_t(a < b); },
        .r = [](double a, double b) { return double(a < b); }}},
      {"le",
       kRealNumeric,
       {.i = [](int64_t a, int64_t b) { return int64_t(a <= b); },
        .r = [](double a, double b) { return double(a <= b); }}},
      {"gt",
       kRealNumeric,
       {.i = [](int64_t a, int64_t b) { return int64_t(a > b); },
        .r = [](double a, double b) { return double(a > b); }}},
      {"ge",
       kRealNumeric,
       {.i = [](int64_t a, int64_t b) { return int64_t(a >= b); },
        .r = [](double a, double b) { return double(a >= b); }}},
      {"logical_and", kBool, {.i = [](int64_t a, int64_t b) { return int64_t(a && b); }}},
      {"logical_or", kBool, {.i = [](int64_t a, int64_t b) { return int64_t(a || b); }}},
  };
  for (const Binary& b : binaries) t.add({b.op, b.dtypes, 0, binary(b.fn), {}});

  t.add({"make_complex", bit(DType::F32), 0, make_complex_kernel, both_f32});
  t.add({"where", kAllButI4, 1, where_kernel, cond_is_bool});
  t.add({"cast", kAll, 0, cast_kernel, {}});
}

}  // namespace rlx::reference
