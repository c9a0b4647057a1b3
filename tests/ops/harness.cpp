#include "harness.hpp"

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>

#include "core/error.hpp"

namespace rlx::test {

uint64_t base_seed() {
  static const uint64_t s = [] {
    if (const char* e = std::getenv("RLX_TEST_SEED")) return uint64_t(std::strtoull(e, nullptr, 10));
    return uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  }();
  return s;
}

uint64_t case_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h ^ (base_seed() * 0x9e3779b97f4a7c15ull);
}

std::string seed_note() {
  return "seed=" + std::to_string(base_seed()) + " (RLX_TEST_SEED=" + std::to_string(base_seed()) +
         " repeats this run)";
}

cd value_at(const Tensor& t, int64_t i) {
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  switch (t.dtype()) {
    case DType::Bool:
      return double(bytes[i]);
    case DType::I4: {
      int v = (i & 1) ? bytes[i >> 1] >> 4 : bytes[i >> 1] & 0xf;
      return double(v >= 8 ? v - 16 : v);
    }
    default:
      break;
  }
  return visit_dtype(t.dtype(), [&](auto z) -> cd {
    using T = decltype(z);
    T v = t.data<T>()[i];
    if constexpr (std::is_same_v<T, c64>)
      return {double(v.real()), double(v.imag())};
    else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
      return double(float(v));
    else
      return double(v);
  });
}

int64_t int_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::I8:
      return t.data<int8_t>()[i];
    case DType::U8:
    case DType::Bool:
      return t.data<uint8_t>()[i];
    case DType::I32:
      return t.data<int32_t>()[i];
    case DType::I64:
      return t.data<int64_t>()[i];
    case DType::I4:
      return int64_t(value_at(t, i).real());
    default:
      throw InternalError(std::string("int_at of ") + dtype_name(t.dtype()));
  }
}

void put(const Tensor& t, int64_t i, cd v) {
  if (t.dtype() == DType::I4) {
    auto* bytes = static_cast<uint8_t*>(t.raw());
    uint8_t nib = uint8_t(int(v.real()) & 0xf);
    bytes[i >> 1] = (i & 1) ? uint8_t((bytes[i >> 1] & 0x0f) | (nib << 4)) : uint8_t((bytes[i >> 1] & 0xf0) | nib);
    return;
  }
  visit_dtype(t.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, c64>)
      t.data<T>()[i] = c64(float(v.real()), float(v.imag()));
    else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
      t.data<T>()[i] = T(float(v.real()));
    else if constexpr (std::is_same_v<T, bool>)
      t.data<uint8_t>()[i] = v.real() != 0;
    else
      t.data<T>()[i] = static_cast<T>(v.real());
  });
}

std::vector<double> reals(const Tensor& t) {
  std::vector<double> r(size_t(t.numel()));
  for (size_t i = 0; i < r.size(); ++i) r[i] = value_at(t, int64_t(i)).real();
  return r;
}

std::vector<cd> complexes(const Tensor& t) {
  std::vector<cd> r(size_t(t.numel()));
  for (size_t i = 0; i < r.size(); ++i) r[i] = value_at(t, int64_t(i));
  return r;
}

Tensor make_tensor(DType t, Shape s, const std::vector<cd>& values) {
  Tensor x = Tensor::zeros(t, std::move(s));
  if (size_t(x.numel()) != values.size()) throw InternalError("make_tensor: value count differs from the shape");
  for (size_t i = 0; i < values.size(); ++i) put(x, int64_t(i), values[i]);
  return x;
}

namespace {
cd random_value(std::mt19937_64& rng, DType t, const Range& r) {
  if (t == DType::Bool) return double(rng() & 1);
  if (is_integer(t)) {
    int64_t lo = r.ilo, hi = r.ihi;
    if (t == DType::U8 && lo < 0) hi -= lo, lo = 0;
    int64_t tlo = t == DType::I4 ? -8 : t == DType::I8 ? -128 : t == DType::U8 ? 0 : INT32_MIN;
    int64_t thi = t == DType::I4 ? 7 : t == DType::I8 ? 127 : t == DType::U8 ? 255 : INT32_MAX;
    lo = std::clamp(lo, tlo, thi);
    hi = std::clamp(hi, tlo, thi);
    std::uniform_int_distribution<int64_t> d(lo, hi);
    int64_t v;
    do v = d(rng);
    while (r.nonzero && v == 0);
    return double(v);
  }
  auto real = [&] {
    std::uniform_real_distribution<double> d(r.lo, r.hi);
    double v;
    do {
      v = d(rng);
      if (r.quantum > 0) v = std::round(v / r.quantum) * r.quantum;
    } while (r.nonzero && std::fabs(v) < 0.1);
    return v;
  };
  if (t == DType::C64) {
    double re = real();
    return {re, real()};
  }
  return real();
}
}  // namespace

Tensor random_tensor(std::mt19937_64& rng, DType t, const Shape& s, const Range& r) {
  Tensor x = Tensor::zeros(t, s);
  for (int64_t i = 0; i < x.numel(); ++i) put(x, i, random_value(rng, t, r));
  return x;
}

Tensor strided_copy(const Tensor& t) {
  if (t.dtype() == DType::I4 || t.rank() == 0 || t.numel() == 0) return t;
  Shape wide = t.shape();
  wide.back() *= 2;
  Tensor buf = Tensor::empty(t.dtype(), wide);
  std::memset(buf.raw(), 0x7f, buf.nbytes());  // garbage a device that ignores strides would read
  std::vector<int64_t> st = contiguous_strides(wide);
  st.back() = 2;
  Tensor v = buf.with_strides(t.shape(), st, 0);
  Tensor src = t.contiguous();
  size_t es = dtype_size(t.dtype());
  std::vector<int64_t> idx(size_t(t.rank()), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
    std::memcpy(static_cast<char*>(v.raw()) + off * int64_t(es), static_cast<const char*>(src.raw()) + i * int64_t(es),
                es);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return v;
}

double tolerance(DType t) {
  switch (t) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
    case DType::C64:
      return 1e-5;
    case DType::F16:
      return 2e-3;
    case DType::BF16:
      return 1e-2;
    default:
      return 0;
  }
}

namespace {
std::string show(cd v) {
  std::ostringstream o;
  o.precision(9);
  if (v.imag() == 0)
    o << v.real();
  else
    o << v.real() << (v.imag() < 0 ? "" : "+") << v.imag() << "i";
  return o.str();
}
bool has_nan(cd v) { return std::isnan(v.real()) || std::isnan(v.imag()); }
bool finite(cd v) { return std::isfinite(v.real()) && std::isfinite(v.imag()); }
}  // namespace

std::string mismatch(const Tensor& got, const std::vector<cd>& want, double tol) {
  if (size_t(got.numel()) != want.size())
    return "got " + std::to_string(got.numel()) + " elements, want " + std::to_string(want.size());
  double scale = 0, worst = 0;
  int64_t at = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (finite(want[i])) scale = std::max(scale, std::abs(want[i]));
  for (size_t i = 0; i < want.size(); ++i) {
    cd g = value_at(got, int64_t(i)), w = want[i];
    bool bad;
    if (has_nan(w) || has_nan(g))
      bad = has_nan(w) != has_nan(g);
    else if (!finite(w) || !finite(g))
      bad = g != w;
    else if (tol == 0)
      bad = g != w;
    else {
      double e = std::abs(g - w) / std::max(scale, 1e-300);
      if (e > worst) worst = e, at = int64_t(i);
      bad = false;
    }
    if (bad) return "element " + std::to_string(i) + ": got " + show(g) + ", want " + show(w);
  }
  if (worst > tol) {
    std::ostringstream o;
    o << "normalized error " << worst << " > " << tol << " (at element " << at << ": got " << show(value_at(got, at))
      << ", want " << show(want[size_t(at)]) << ", max |want| " << scale << ")";
    return o.str();
  }
  return "";
}

std::string mismatch(const Tensor& got, const Tensor& want, double tol) {
  if (got.type() != want.type()) return "got " + got.type().str() + ", want " + want.type().str();
  if (tolerance(want.dtype()) == 0) {  // bool and integers: exactly, as integers
    for (int64_t i = 0; i < want.numel(); ++i)
      if (int_at(got, i) != int_at(want, i))
        return "element " + std::to_string(i) + ": got " + std::to_string(int_at(got, i)) + ", want " +
               std::to_string(int_at(want, i));
    return "";
  }
  return mismatch(got, complexes(want), tol);
}

Var Build::in(DType t, Shape s, const Range& r) {
  inputs.push_back(random_tensor(rng, t, s, r));
  return rlx::input(g, "x" + std::to_string(inputs.size() - 1), t, std::move(s));
}

Var Build::index(DType t, Shape s, int64_t extent) {
  Range r;
  r.ilo = 0;
  r.ihi = extent - 1;
  return in(t, std::move(s), r);
}

Var Build::fixed(const Tensor& value) {
  inputs.push_back(value);
  return rlx::input(g, "x" + std::to_string(inputs.size() - 1), value.dtype(), value.shape());
}

CompileOptions test_options() {
  CompileOptions o;
  o.fold_constants = false;
  return o;
}

std::optional<std::vector<Tensor>> compile_and_run(Device& d, const ir::Graph& g, const std::vector<Tensor>& in,
                                                   std::string* why, bool strided_inputs) {
  std::optional<Program> p;
  try {
    p = compile(g, d, test_options());
  } catch (const LegalizeError& e) {
    std::string w;
    for (const NodeReport& n : e.report().nodes)
      if (n.route == Route::Unsupported) w += (w.empty() ? "" : "; ") + n.op + ": " + n.why;
    if (why) *why = w;
    return std::nullopt;
  }
  if (!strided_inputs) return run(*p, d, in);
  std::vector<Tensor> s;
  for (const Tensor& t : in) s.push_back(strided_copy(t));
  return run(*p, d, s);
}

namespace {
std::map<std::string, std::pair<int, int>>& tallies() {
  static std::map<std::string, std::pair<int, int>> t;
  return t;
}

struct SeedReport {
  SeedReport() { std::cout << "test_ops: " << seed_note() << std::endl; }
  ~SeedReport() {
    for (auto& [dev, n] : tallies())
      std::cout << "test_ops: device " << dev << ": " << n.first << " combinations checked, " << n.second
                << " skipped as unsupported" << std::endl;
    for (Device* d : DeviceRegistry::get().all())
      if (std::string why = d->unavailable(); !why.empty())
        std::cout << "test_ops: device " << d->name() << ": not run in this process: " << why << std::endl;
  }
};
}  // namespace

void count(const Device& d, bool skipped) {
  auto& t = tallies()[d.name()];
  (skipped ? t.second : t.first)++;
}

BOOST_TEST_GLOBAL_FIXTURE(SeedReport);

}  // namespace rlx::test
