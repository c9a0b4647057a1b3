// Unit tests of the cpu device's own machinery: the vectorized f32 approximations
// against libm, the f16/bf16 conversions, the chunked fused executor against
// node-by-node evaluation on the reference device, GEMM against a naive loop, the
// threaded reduction/movement/source paths at sizes the op suite does not reach, the
// sort keys' inverse (values rebuilt from keys), the native layer_norm, softmax and
// attention kernels against the reference device, the thread pool, and core's fast divisor
// and dimension collapsing (the cuda device's index arithmetic too, checked here where every
// build runs it).
#define BOOST_TEST_MODULE cpu_kernels
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "core/collapse_dims.hpp"
#include "core/env.hpp"
#include "core/fast_divisor.hpp"
#include "core/half.hpp"
#include "core/sort_key.hpp"
#include "devices/cpu/vmath.hpp"
#include "devices/cpu/ew_kernels.hpp"
#include "devices/cpu/fused.hpp"
#include "devices/cpu/gemm.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "runtime/attention_layout.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "tests/support/nn_cases.hpp"
#include "tests/support/seed.hpp"

using namespace rlx;
using namespace rlx::cpu;

namespace {

Device& cpu_dev() { return DeviceRegistry::get().at("cpu"); }
Device& ref_dev() { return DeviceRegistry::get().at("reference"); }

float bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// |got - want| in units of the f32 spacing at want (2^-149 in the subnormal range).
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
  if (std::isinf(want)) return got == float(want) ? 0.0 : 1e30;
  if (std::isnan(got) || std::isinf(got)) return std::fabs(want) > 3.4028234e38 ? 0.0 : 1e30;
  int e;
  std::frexp(want, &e);  // want = m 2^e, m in [0.5, 1)
  double spacing = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(double(got) - want) / spacing;
}

struct ErrStats {
  double max_ulp = 0, max_rel = 0;
  float worst_x = 0;
};

ErrStats measure(EwOp op, const std::vector<float>& xs, double (*ref)(double)) {
  std::vector<float> ys(xs.size());
  ew_unary(op, CK::F32, xs.data(), ys.data(), int64_t(xs.size()));
  ErrStats s;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = ref(double(xs[i]));
    double u = ulp_error(ys[i], want);
    if (u > s.max_ulp) {
      s.max_ulp = u;
      s.worst_x = xs[i];
    }
    if (std::isfinite(want) && std::fabs(want) >= 1.1754944e-38 && std::fabs(want) < 3.4e38)
      s.max_rel = std::max(s.max_rel, std::fabs(double(ys[i]) - want) / std::fabs(want));
  }
  return s;
}

std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = lo + (hi - lo) * float(double(i) / (n - 1));
  return v;
}

// Random finite floats with |x| in [2^elo, 2^ehi), both signs.
std::vector<float> random_floats(int n, int elo, int ehi, bool positive, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) {
    int e = elo + int(rng() % uint64_t(ehi - elo));
    float m = 1.0f + float(rng() >> 40) * 0x1.0p-24f;
    x = std::ldexp(m, e);
    if (!positive && (rng() & 1)) x = -x;
  }
  return v;
}

float apply1(EwOp op, float x) {
  float y;
  ew_unary(op, CK::F32, &x, &y, 1);
  return y;
}

void report(const char* name, const ErrStats& s) {
  BOOST_TEST_MESSAGE(name << ": max " << s.max_ulp << " ulp at x=" << s.worst_x << ", max rel " << s.max_rel);
}

}  // namespace

// ---------------------------------------------------------------- approximations

BOOST_AUTO_TEST_SUITE(approximations)

BOOST_AUTO_TEST_CASE(exp_f32) {
  auto xs = sweep(-104.0f, 89.0f, 1 << 21);
  auto r = random_floats(1 << 20, -30, 7, false, 1);
  xs.insert(xs.end(), r.begin(), r.end());
  ErrStats s = measure(EwOp::Exp, xs, [](double x) { return std::exp(x); });
  report("exp", s);
  BOOST_TEST(s.max_ulp <= 2.0);
  BOOST_TEST(s.max_rel <= 1e-6);
  BOOST_TEST(apply1(EwOp::Exp, 0.0f) == 1.0f);
  BOOST_TEST(apply1(EwOp::Exp, -INFINITY) == 0.0f);
  BOOST_TEST(std::isinf(apply1(EwOp::Exp, INFINITY)));
  BOOST_TEST(std::isnan(apply1(EwOp::Exp, NAN)));
  BOOST_TEST(std::isinf(apply1(EwOp::Exp, 88.8f)));
  BOOST_TEST(std::isfinite(apply1(EwOp::Exp, 88.72f)));
  BOOST_TEST(apply1(EwOp::Exp, -104.0f) == 0.0f);
  BOOST_TEST(apply1(EwOp::Exp, -100.0f) > 0.0f);  // subnormal result
}

// The attention kernel's exp of x - max (x <= 0): the same accuracy as exp down to -87, 0
// below (where exp's result would be subnormal), NaN kept.
BOOST_AUTO_TEST_CASE(exp_f32_nonpos) {
  auto xs = sweep(-87.0f, 0.0f, 1 << 21);
  auto r = random_floats(1 << 20, -30, 6, true, 2);
  for (float& x : r) x = -x;
  xs.insert(xs.end(), r.begin(), r.end());
  double max_ulp = 0;
  float worst = 0;
  for (float x : xs) {
    const double u = ulp_error(vm::exp_f32_nonpos(x), std::exp(double(x)));
    if (u > max_ulp) max_ulp = u, worst = x;
  }
  BOOST_TEST_MESSAGE("exp_nonpos: max " << max_ulp << " ulp at x=" << worst);
  BOOST_TEST(max_ulp <= 2.0);
  BOOST_TEST(vm::exp_f32_nonpos(0.0f) == 1.0f);
  BOOST_TEST(vm::exp_f32_nonpos(-87.0f) > 0.0f);
  BOOST_TEST(vm::exp_f32_nonpos(-87.01f) == 0.0f);
  BOOST_TEST(vm::exp_f32_nonpos(-INFINITY) == 0.0f);
  BOOST_TEST(std::isnan(vm::exp_f32_nonpos(NAN)));
}

BOOST_AUTO_TEST_CASE(log_f32) {
  std::vector<float> xs;
  for (uint32_t u = 1; u < 0x7f800000u; u += 997) xs.push_back(bits_f(u));  // every binade, subnormals too
  auto near1 = sweep(0.5f, 2.0f, 1 << 20);
  xs.insert(xs.end(), near1.begin(), near1.end());
  ErrStats s = measure(EwOp::Log, xs, [](double x) { return std::log(x); });
  report("log", s);
  BOOST_TEST(s.max_ulp <= 2.0);
  BOOST_TEST(s.max_rel <= 1e-6);
  BOOST_TEST(apply1(EwOp::Log, 1.0f) == 0.0f);
  BOOST_TEST(apply1(EwOp::Log, 0.0f) == -INFINITY);
  BOOST_TEST(apply1(EwOp::Log, -0.0f) == -INFINITY);
  BOOST_TEST(std::isnan(apply1(EwOp::Log, -1.0f)));
  BOOST_TEST(std::isnan(apply1(EwOp::Log, -INFINITY)));
  BOOST_TEST(apply1(EwOp::Log, INFINITY) == INFINITY);
  BOOST_TEST(std::isnan(apply1(EwOp::Log, NAN)));
}

BOOST_AUTO_TEST_CASE(erf_f32) {
  auto xs = sweep(-6.0f, 6.0f, 1 << 21);
  auto r = random_floats(1 << 20, -40, 3, false, 2);
  xs.insert(xs.end(), r.begin(), r.end());
  ErrStats s = measure(EwOp::Erf, xs, [](double x) { return std::erf(x); });
  report("erf", s);
  BOOST_TEST(s.max_ulp <= 3.0);
  BOOST_TEST(s.max_rel <= 1e-6);
  BOOST_TEST(apply1(EwOp::Erf, INFINITY) == 1.0f);
  BOOST_TEST(apply1(EwOp::Erf, -INFINITY) == -1.0f);
  BOOST_TEST(apply1(EwOp::Erf, 5.0f) == 1.0f);
  BOOST_TEST(apply1(EwOp::Erf, 3.9375f) == 1.0f);
  BOOST_TEST(apply1(EwOp::Erf, -1e30f) == -1.0f);
  BOOST_TEST(apply1(EwOp::Erf, 0.0f) == 0.0f);
  BOOST_TEST(std::isnan(apply1(EwOp::Erf, NAN)));
  for (float x : {0.3f, 0.95f, 2.5f, 3.9f}) BOOST_TEST(apply1(EwOp::Erf, -x) == -apply1(EwOp::Erf, x));
}

BOOST_AUTO_TEST_CASE(tanh_f32) {
  auto xs = sweep(-12.0f, 12.0f, 1 << 21);
  auto r = random_floats(1 << 20, -40, 6, false, 3);
  xs.insert(xs.end(), r.begin(), r.end());
  ErrStats s = measure(EwOp::Tanh, xs, [](double x) { return std::tanh(x); });
  report("tanh", s);
  BOOST_TEST(s.max_ulp <= 2.0);
  BOOST_TEST(s.max_rel <= 1e-6);
  BOOST_TEST(apply1(EwOp::Tanh, INFINITY) == 1.0f);
  BOOST_TEST(apply1(EwOp::Tanh, -INFINITY) == -1.0f);
  BOOST_TEST(apply1(EwOp::Tanh, 1e30f) == 1.0f);
  BOOST_TEST(std::isnan(apply1(EwOp::Tanh, NAN)));
}

BOOST_AUTO_TEST_CASE(sin_cos_f32) {
  auto xs = sweep(-100.0f, 100.0f, 1 << 20);
  auto r = random_floats(1 << 20, -30, 30, false, 4);  // up to 2^30: the libm path too
  xs.insert(xs.end(), r.begin(), r.end());
  ErrStats s = measure(EwOp::Sin, xs, [](double x) { return std::sin(x); });
  ErrStats c = measure(EwOp::Cos, xs, [](double x) { return std::cos(x); });
  report("sin", s);
  report("cos", c);
  BOOST_TEST(s.max_ulp <= 1.0);
  BOOST_TEST(c.max_ulp <= 1.0);
  BOOST_TEST(std::isnan(apply1(EwOp::Sin, INFINITY)));
  BOOST_TEST(std::isnan(apply1(EwOp::Cos, NAN)));
}

BOOST_AUTO_TEST_CASE(f64_functions_use_libm) {
  std::vector<double> xs = {-3.5, -0.25, 0.0, 0.7, 2.0, 20.0}, ys(xs.size());
  for (auto [op, fn] : {std::pair{EwOp::Exp, +[](double x) { return std::exp(x); }},
                        std::pair{EwOp::Erf, +[](double x) { return std::erf(x); }},
                        std::pair{EwOp::Tanh, +[](double x) { return std::tanh(x); }}}) {
    ew_unary(op, CK::F64, xs.data(), ys.data(), int64_t(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) BOOST_TEST(ys[i] == fn(xs[i]));
  }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- conversions

BOOST_AUTO_TEST_SUITE(conversions)

BOOST_AUTO_TEST_CASE(f16_exhaustive) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float want = f16::to_float(uint16_t(h));
    float got = f16_bits_to_float(uint16_t(h));
    if (std::isnan(want)) {
      BOOST_REQUIRE(std::isnan(got));
    } else {
      BOOST_REQUIRE_MESSAGE(f_bits(got) == f_bits(want), "f16 bits " << h);
    }
  }
  // float -> f16 against core/half.hpp over a dense sample of bit patterns.
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) {
    float f = bits_f(uint32_t(u));
    BOOST_REQUIRE_MESSAGE(float_to_f16_bits(f) == f16::from_float(f), "float bits " << u);
    BOOST_REQUIRE(float_to_bf16_bits(f) == bf16::from_float(f));
  }
  // Every tie and neighbour around every f16 value.
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    uint32_t b = f_bits(f16::to_float(uint16_t(h)));
    for (int d = -2; d <= 2; ++d) {
      float f = bits_f(b + uint32_t(d * 4096));
      BOOST_REQUIRE(float_to_f16_bits(f) == f16::from_float(f));
      BOOST_REQUIRE(float_to_f16_bits(-f) == f16::from_float(-f));
    }
  }
}

BOOST_AUTO_TEST_CASE(f64_to_f16_rounds_once) {
  // f16 values a and next(a); a double just above their midpoint must round up, one just
  // below down: plain double -> float -> f16 gets some of these wrong.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100000; ++i) {
    uint16_t h = uint16_t(rng() % 0x7bffu);
    double a = f16::to_float(h), b = f16::to_float(uint16_t(h + 1));
    double mid = (a + b) / 2;
    double up = std::nextafter(mid, INFINITY), down = std::nextafter(mid, -INFINITY);
    BOOST_REQUIRE(f16::from_float(f64_to_f32_odd(up)) == uint16_t(h + 1));
    BOOST_REQUIRE(f16::from_float(f64_to_f32_odd(down)) == h);
  }
}

BOOST_AUTO_TEST_CASE(cast_semantics) {
  std::vector<float> x = {-1e10f, -129.7f, -1.5f, -0.5f, 0.0f, 0.7f, 127.9f, 300.0f, NAN, INFINITY};
  std::vector<int8_t> i8(x.size());
  ew_cast(CK::F32, DType::I8, x.data(), i8.data(), int64_t(x.size()));
  std::vector<int8_t> want8 = {-128, -128, -1, 0, 0, 0, 127, 127, 0, 127};
  for (size_t i = 0; i < x.size(); ++i) BOOST_TEST(int(i8[i]) == int(want8[i]));
  std::vector<uint8_t> b(x.size());
  ew_cast(CK::F32, DType::Bool, x.data(), b.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) BOOST_TEST(int(b[i]) == int(x[i] != 0.0f));
  std::vector<int64_t> big = {int64_t(1) << 40, -300, 255, 256};
  std::vector<uint8_t> u8(big.size());
  ew_cast(CK::I64, DType::U8, big.data(), u8.data(), int64_t(big.size()));  // wraps
  BOOST_TEST(int(u8[0]) == 0);
  BOOST_TEST(int(u8[1]) == 212);
  BOOST_TEST(int(u8[2]) == 255);
  BOOST_TEST(int(u8[3]) == 0);
}

BOOST_AUTO_TEST_SUITE_END()

// sort_key::bits_of inverts sort_key::key for every element except NaNs and zeros, which
// it reports as inexact (their keys do not keep the payload or the sign): every dtype the
// sort keys cover, both directions, all 8- and 16-bit patterns and 2^20 random 32- and
// 64-bit ones plus the special values.
template <class U>
void check_bits_of(DType t, const std::vector<U>& patterns) {
  const sort_key::Layout lay = sort_key::layout_of(t);
  const U sign = U(U(1) << (sizeof(U) * 8 - 1));
  int64_t bad = 0;
  for (bool descending : {false, true})
    for (U bits : patterns) {
      const U k = sort_key::key<U>(bits, lay.kind, U(lay.inf_bits), descending);
      bool exact = true;
      const U back = sort_key::bits_of<U>(k, lay.kind, descending, exact);
      const U magnitude = U(bits & U(~sign));
      const bool special = lay.kind == sort_key::Kind::Float && (magnitude > U(lay.inf_bits) || magnitude == 0);
      if (exact == special || (exact && back != bits)) {
        if (++bad <= 5)
          BOOST_ERROR(dtype_name(t) << (descending ? " descending" : "") << ": bits " << uint64_t(bits) << " came back as "
                                    << uint64_t(back) << (exact ? " (exact)" : " (inexact)"));
      }
    }
  BOOST_TEST(bad == 0, dtype_name(t) << ": " << bad << " patterns wrong");
}

// Host buffers of 8 MiB and more lie on transparent huge pages (on request), each starting at
// another offset into its first huge page (RLX_HUGEPAGES=aligned: on the 2 MiB boundary),
// smaller ones on 64 bytes; every byte of either is usable, freeing one gives its block back
// whole (ASan checks), and a size past half the address space is refused before any
// arithmetic on it can wrap.
BOOST_AUTO_TEST_CASE(host_buffers_are_aligned_for_their_size) {
  const char* mode = std::getenv("RLX_HUGEPAGES");
  const std::string m = mode ? mode : "1";
  std::vector<Tensor> held;
  std::set<uintptr_t> starts;  // of the large buffers within their huge pages
  int large_ones = 0;
  for (int64_t n : {int64_t(1000), int64_t(1) << 20, (int64_t(2) << 20) + 3, (int64_t(3) << 20) + 5,
                    (int64_t(2) << 20) + 7, (int64_t(4) << 20)}) {
    Tensor t = Tensor::empty(DType::F32, {n});
    const auto at = reinterpret_cast<uintptr_t>(t.raw());
    const bool large = size_t(n) * 4 >= (size_t(8) << 20);
    BOOST_TEST(at % 64 == 0u, n);
    if (large) {
      ++large_ones;
      starts.insert(at % (uintptr_t(2) << 20));
      if (m == "aligned") BOOST_TEST(at % (uintptr_t(2) << 20) == 0u, n << " floats at " << at);
    }
    t.data<float>()[0] = 1.0f;
    t.data<float>()[n - 1] = 2.0f;
    BOOST_TEST(t.data<float>()[0] + t.data<float>()[n - 1] == 3.0f);
    held.push_back(t);
  }
  if (m == "1") BOOST_TEST(int(starts.size()) == large_ones);  // (the skews of successive buffers differ)
  held.clear();
  BOOST_CHECK_THROW(host_allocator()->allocate(SIZE_MAX - 10), DeviceError);
}

// Every numerator the device divides (below 2^31) against plain division, for small
// divisors, powers of two and their neighbours, and random ones up to 2^31.
BOOST_AUTO_TEST_CASE(fast_divisor_is_exact) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d < 2000; ++d) divisors.push_back(d);
  for (int k = 1; k <= 31; ++k)
    for (int64_t e : {-1, 0, 1}) divisors.push_back(uint32_t((int64_t(1) << k) + e));
  for (int i = 0; i < 2000; ++i) divisors.push_back(uint32_t(rng() % (uint64_t(1) << 31)) + 1);
  const uint32_t top = (uint32_t(1) << 31) - 1;
  int bad = 0;
  for (uint32_t d : divisors) {
    const FastDivisor f = fast_divisor(d);
    std::vector<uint32_t> ns{0, 1, d - 1, d, d + 1, top, top - 1, uint32_t(2) * d - 1};
    for (int i = 0; i < 64; ++i) ns.push_back(uint32_t(rng() % (uint64_t(top) + 1)));
    for (uint32_t n : ns) {
      if (n > top) continue;
      if (fast_divide(n, f) != n / d && ++bad <= 5) BOOST_ERROR(n << " / " << d << " gave " << fast_divide(n, f));
    }
  }
  BOOST_TEST(bad == 0);
}

// collapse_dims (core/collapse_dims.hpp, the cpu copies' and the cuda codegen's dimension merging):
// every element's offsets, walked in row-major order, are the same over the collapsed
// dimensions as over the original ones, for random shapes and contiguous, broadcast and
// permuted strides; and the causal mask's case merges to two dimensions.
BOOST_AUTO_TEST_CASE(collapse_dims_keeps_every_offset) {
  auto offsets = [](const std::vector<int64_t>& sh, const std::vector<int64_t>& st, int rank) {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= sh[size_t(d)];
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) {
      int64_t rest = i, off = 0;
      for (int d = rank - 1; d >= 0; --d) {
        off += rest % sh[size_t(d)] * st[size_t(d)];
        rest /= sh[size_t(d)];
      }
      out.push_back(off);
    }
    return out;
  };
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 2000; ++trial) {
    const int rank = int(rng() % 6);
    Shape shape(static_cast<size_t>(rank));
    for (int64_t& e : shape) e = int64_t(rng() % 3) + 1;
    std::vector<std::vector<int64_t>> sets;
    for (int k = 0; k < 3; ++k) {
      std::vector<int64_t> perm(static_cast<size_t>(rank));
      for (int d = 0; d < rank; ++d) perm[size_t(d)] = d;
      const int kind = int(rng() % 3);  // contiguous, broadcast dims, permuted
      if (kind == 2) std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int64_t> st(static_cast<size_t>(rank));
      int64_t step = 1;
      for (int j = rank - 1; j >= 0; --j) {
        const int d = int(perm[size_t(j)]);
        st[size_t(d)] = kind == 1 && rng() % 2 ? 0 : step;
        step *= shape[size_t(d)];
      }
      sets.push_back(st);
    }
    std::vector<std::vector<int64_t>> want;
    for (const auto& st : sets) want.push_back(offsets(shape, st, rank));
    Shape sh = shape;
    std::vector<int64_t*> ptrs;
    for (auto& st : sets) ptrs.push_back(st.data());
    const int r = collapse_dims(rank, sh.data(), ptrs);
    BOOST_TEST_REQUIRE(r <= rank);
    for (size_t k = 0; k < sets.size(); ++k)
      BOOST_TEST_REQUIRE(offsets(sh, sets[k], r) == want[k], "trial " << trial << " operand " << k);
  }
  Shape scores{16, 8, 2, 512, 512};
  std::vector<int64_t> out = contiguous_strides(scores), mask{0, 0, 0, 512, 1};
  BOOST_TEST(collapse_dims(5, scores.data(), {out.data(), mask.data()}) == 2);
  BOOST_TEST((Shape{scores[0], scores[1]} == Shape{256, 262144}));
  BOOST_TEST((std::vector<int64_t>{out[0], out[1], mask[0], mask[1]} == std::vector<int64_t>{262144, 1, 0, 1}));
}

BOOST_AUTO_TEST_SUITE(sort_keys)

BOOST_AUTO_TEST_CASE(inverse) {
  std::vector<uint8_t> p8;
  for (int i = 0; i < 256; ++i) p8.push_back(uint8_t(i));
  std::vector<uint16_t> p16;
  for (int i = 0; i < 65536; ++i) p16.push_back(uint16_t(i));
  std::mt19937_64 rng(7);
  std::vector<uint32_t> p32 = {0u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u,
                               0x00000001u, 0x80000001u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0xFFFFFFFFu, 0x7FFFFFFFu};
  std::vector<uint64_t> p64 = {0, 0x8000000000000000u, 0x7FF0000000000000u, 0xFFF0000000000000u,
                               0x7FF8000000000000u, 0xFFF0000000000001u, 1, 0x8000000000000001u,
                               0x7FEFFFFFFFFFFFFFu, 0xFFFFFFFFFFFFFFFFu, 0x7FFFFFFFFFFFFFFFu};
  for (int i = 0; i < (1 << 20); ++i) {
    p32.push_back(uint32_t(rng()));
    p64.push_back(rng());
  }
  check_bits_of<uint8_t>(DType::U8, p8);
  check_bits_of<uint8_t>(DType::I8, p8);
  check_bits_of<uint16_t>(DType::F16, p16);
  check_bits_of<uint16_t>(DType::BF16, p16);
  check_bits_of<uint32_t>(DType::I32, p32);
  check_bits_of<uint32_t>(DType::F32, p32);
  check_bits_of<uint64_t>(DType::I64, p64);
  check_bits_of<uint64_t>(DType::F64, p64);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- fused executor

namespace {

std::mt19937_64 g_rng(12345);

Tensor random_tensor(DType t, Shape s, double lo = -2, double hi = 2) {
  Tensor r = Tensor::empty(t, s);
  std::uniform_real_distribution<double> u(lo, hi);
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = r.data<T>();
    for (int64_t i = 0; i < r.numel(); ++i) {
      if constexpr (std::is_same_v<T, bool>) p[i] = (g_rng() & 1) != 0;
      else if constexpr (std::is_same_v<T, c64>) p[i] = c64(float(u(g_rng)), float(u(g_rng)));
      else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) p[i] = T(float(u(g_rng)));
      else if constexpr (std::is_integral_v<T>) p[i] = T(int64_t(std::floor(u(g_rng) * 20)));
      else p[i] = T(u(g_rng));
    }
  });
  return r;
}

std::vector<std::complex<double>> values(const Tensor& t_in) {
  Tensor t = t_in.contiguous();
  std::vector<std::complex<double>> v(static_cast<size_t>(t.numel()));
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, c64>) v[size_t(i)] = {p[i].real(), p[i].imag()};
      else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) v[size_t(i)] = double(float(p[i]));
      else v[size_t(i)] = double(p[i]);
    }
  });
  return v;
}

// Max |got - want| / max(|want|, 1); NaN must match NaN, integers and bools exactly.
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  BOOST_REQUIRE_MESSAGE(got.type() == want.type(), what << ": " << got.type().str() << " vs " << want.type().str());
  auto g = values(got), w = values(want);
  bool exact = !is_inexact(want.dtype());
  double worst = 0;
  int64_t at = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    bool gn = std::isnan(g[i].real()) || std::isnan(g[i].imag());
    bool wn = std::isnan(w[i].real()) || std::isnan(w[i].imag());
    double e = (gn || wn) ? (gn == wn ? 0.0 : 1e30) : std::abs(g[i] - w[i]) / std::max(std::abs(w[i]), 1.0);
    if (std::isinf(w[i].real()) || std::isinf(g[i].real())) e = g[i] == w[i] ? 0.0 : 1e30;
    if (exact && g[i] != w[i]) e = 1e30;
    // (tol 0: the same value, zeros with the same sign)
    if (tol == 0.0 && g[i] == w[i] && g[i].real() == 0 && std::signbit(g[i].real()) != std::signbit(w[i].real())) e = 1e30;
    if (e > worst) {
      worst = e;
      at = int64_t(i);
    }
  }
  BOOST_CHECK_MESSAGE(worst <= tol, what << ": error " << worst << " at element " << at << " (got "
                                         << (at >= 0 ? g[size_t(at)] : 0.0) << ", want "
                                         << (at >= 0 ? w[size_t(at)] : 0.0) << ")");
}

// Runs a region (every node after the params, in order) on cpu (one chunked pass) and on
// the reference device (node by node) and compares the outputs.
void check_region(const ir::Graph& g, const std::vector<Var>& outs, const std::vector<Tensor>& inputs, double tol,
                  const std::string& what, bool in_place = false) {
  FusedRegion r;
  r.graph = &g;
  r.inputs = g.params;
  std::vector<Tensor> all_in = inputs;
  for (auto& n : g.nodes) {
    if (n.op->name == "constant") {  // constants are region inputs, as in a compiled program
      r.inputs.push_back({n.id, 0});
      all_in.push_back(n.attrs.get_tensor("value"));
    } else if (n.op->name != "param") {
      r.nodes.push_back(n.id);
    }
  }
  for (auto& v : outs) r.outputs.push_back(v.value());
  r.shape = outs[0].shape();
  std::vector<Tensor> got, want;
  for (auto& v : outs) {
    got.push_back(Tensor::empty(v.dtype(), v.shape()));
    want.push_back(Tensor::empty(v.dtype(), v.shape()));
  }
  std::vector<Tensor> cin = all_in;
  if (in_place) {
    // The first output takes the memory of the first input (same shape, element size).
    Tensor copy = all_in[0].to(host_allocator());
    cin[0] = copy;
    got[0] = Tensor::view_of(copy.raw(), host_allocator(), outs[0].dtype(), outs[0].shape());
  }
  cpu_dev().run_fused(r, cin, got);
  ref_dev().run_fused(r, all_in, want);
  for (size_t i = 0; i < outs.size(); ++i) expect_close(got[i], want[i], tol, what + " output " + std::to_string(i));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fused_executor)

BOOST_AUTO_TEST_CASE(float_chain_with_broadcasts) {
  for (Shape s : {Shape{3, 1037}, Shape{37, 4099}, Shape{1, 1}, Shape{5, 1}}) {
    const int64_t R = s[0], C = s[1];
    ir::Graph g;
    Var x = input(g, "x", DType::F32, s);
    Var bias = input(g, "bias", DType::F32, {C});
    Var scale = input(g, "scale", DType::F32, {R, 1});
    Var k = input(g, "k", DType::F32, {});
    Var xt = input(g, "xt", DType::F32, s);
    Var y = erf(x * scale + bias) * xt - k;
    Var z = where(gt(y, k), exp(y), tanh(y));
    Var w = cast(z, DType::F16);
    Var m = maximum(log(abs(z) + k), sqrt(abs(y) + k));
    // xt as a transposed view: the strided (gather) input path.
    Tensor base = random_tensor(DType::F32, {C, R});
    Tensor xt_view = base.with_strides(s, {1, R}, 0);
    std::vector<Tensor> in = {random_tensor(DType::F32, s), random_tensor(DType::F32, {C}),
                              random_tensor(DType::F32, {R, 1}), random_tensor(DType::F32, {}, 0.5, 1.0), xt_view};
    check_region(g, {z, y, m}, in, 2e-6, "f32 chain " + shape_str(s));
    check_region(g, {w}, in, 1e-3, "f32 chain to f16 " + shape_str(s));  // one f16 ulp
  }
}

BOOST_AUTO_TEST_CASE(f64_half_and_bf16) {
  Shape s{7, 3001};
  for (DType t : {DType::F64, DType::F16, DType::BF16}) {
    ir::Graph g;
    Var x = input(g, "x", t, s);
    Var b = input(g, "b", t, {3001});
    Var c = input(g, "c", t, {});
    Var y = tanh(x * c + b) + exp(x) / (abs(x) + c);
    Var z = round(y * c) - floor(x) + ceil(x - b) + sign(x) - rsqrt(abs(x) + c) + recip(c + abs(y));
    std::vector<Tensor> in = {random_tensor(t, s), random_tensor(t, {3001}), random_tensor(t, {}, 0.5, 1.5)};
    // f16/bf16 nodes compute in f32 and round like the reference; the f32 approximations
    // may still land one unit of the narrow type away.
    double tol = t == DType::F64 ? 1e-12 : t == DType::F16 ? 2e-3 : 1.6e-2;
    check_region(g, {y, z}, in, tol, std::string("chain ") + dtype_name(t));
  }
}

BOOST_AUTO_TEST_CASE(integers_bools_compare_where) {
  Shape s{9, 2053};
  for (DType t : {DType::I8, DType::U8, DType::I32, DType::I64}) {
    ir::Graph g;
    Var a = input(g, "a", t, s);
    Var b = input(g, "b", t, {2053});
    Var c = input(g, "c", t, {9, 1});
    Var q = a * b + c - a / b;  // wraps; x/0 = 0
    Var mx = maximum(q, minimum(a, c));
    Var flag = logical_or(logical_and(lt(a, b), ge(q, c)), logical_not(eq(a, c)));
    Var sel = where(flag, mx, neg(abs(q)));
    Var f = cast(sel, DType::F32) + cast(sign(a), DType::F32);
    Var back = cast(f * 100.0, t);  // saturating float -> int
    std::vector<Tensor> in = {random_tensor(t, s, -7, 7), random_tensor(t, {2053}, -3, 3),
                              random_tensor(t, {9, 1}, -5, 5)};
    check_region(g, {sel, flag, f, back, ne(sel, a)}, in, 0.0, std::string("ints ") + dtype_name(t));
  }
}

BOOST_AUTO_TEST_CASE(complex) {
  Shape s{4, 2500};
  ir::Graph g;
  Var re = input(g, "re", DType::F32, s);
  Var im = input(g, "im", DType::F32, {2500});
  Var z = make_complex(re, im);
  Var w = exp(z) * conj(z) / (z + z) - neg(z);
  Var r = real(w) + imag(w) + abs(z);
  check_region(g, {w, r, cast(w, DType::F32), eq(w, z)},
               {random_tensor(DType::F32, s, 0.5, 1), random_tensor(DType::F32, {2500}, 0.5, 1)}, 1e-6, "c64");
}

BOOST_AUTO_TEST_CASE(folded_scalar_steps_round_like_nodes) {
  // Chains of mul/add/sub by scalars are folded into neighbouring kernels (f32: unary and
  // binary steps, f64: binary ones); every product and sum must still round on its own, so
  // the results equal the reference exactly, through discontinuous ops too.
  Shape s{5, 4111};
  for (DType t : {DType::F32, DType::F64}) {
    ir::Graph g;
    Var x = input(g, "x", t, s);
    Var q = input(g, "q", t, s);
    Var a = input(g, "a", t, {});
    Var b = input(g, "b", t, {});
    Var c = input(g, "c", t, {});
    Var y = floor((x * a + b) * c);         // product+sum, then another product
    Var z = round(c - y * a);               // (-v) + c
    Var u = (x + b) * a - c;                // sum, then product, then difference
    Var w = maximum(x * a, q) + sqrt(abs(q - b));
    Var v = a * x + b * q;                  // a transformed second operand (swapped)
    Var e = exp(x * a - b) * c;             // pre and post around exp
    Var k = (q - x) / c + (b - q);          // c - v form
    Var m = q - x * a;                      // a product subtracted: q + x * (-a)
    Var h = q - (x * a + c);                // a product and sum subtracted: not folded that way
    std::vector<Tensor> in = {random_tensor(t, s, -50, 50), random_tensor(t, s, -50, 50), random_tensor(t, {}, 0.1, 3),
                              random_tensor(t, {}, -5, 5), random_tensor(t, {}, 0.3, 7)};
    // Zeros of every sign where a product meets its subtrahend: -(x a) against x (-a).
    for (int64_t i = 0; i < 8; ++i) {
      double xs = i % 2 ? -0.0 : 0.0;
      if (t == DType::F32) {
        in[0].data<float>()[i] = float(xs);
        in[1].data<float>()[i] = i % 4 < 2 ? 0.0f : -0.0f;
      } else {
        in[0].data<double>()[i] = xs;
        in[1].data<double>()[i] = i % 4 < 2 ? 0.0 : -0.0;
      }
    }
    const std::string what = std::string("folded chains ") + dtype_name(t);
    check_region(g, {y, z, u, w, v, k, m, h}, in, 0.0, what);
    check_region(g, {e}, in, t == DType::F32 ? 2e-6 : 1e-15, what + " around exp");
  }
}

// A conjugate-gradient step as the solvers write it (x + alpha p, r - alpha q, z = r d and
// the two sums fused with it): folding its f64 scalar products changes no bit of any result,
// and the vectors equal the reference's exactly (the sums, added in another order, within
// 1e-13).
BOOST_AUTO_TEST_CASE(a_cg_step_folds_its_f64_products_exactly) {
  const int64_t n = 50000;
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {n}), p = input(g, "p", DType::F64, {n}), r = input(g, "r", DType::F64, {n});
  Var q = input(g, "q", DType::F64, {n}), d = input(g, "d", DType::F64, {n});
  Var rz = input(g, "rz", DType::F64, {}), pq = input(g, "pq", DType::F64, {});
  Var alpha = rz / pq;
  Var x1 = x + alpha * p, r1 = r - alpha * q, z = r1 * d;
  output(g, {x1, r1, z, sum(r1 * z), sum(r1 * r1)});
  std::vector<Tensor> in;
  for (int i = 0; i < 5; ++i) in.push_back(random_tensor(DType::F64, {n}, -2, 2));
  in.push_back(random_tensor(DType::F64, {}, 0.5, 1));
  in.push_back(random_tensor(DType::F64, {}, 1, 2));
  const Program pc = compile(g, cpu_dev());
  std::vector<std::vector<Tensor>> got;
  for (const char* fold : {"0", "1"}) {
    setenv("RLX_CPU_FOLD", fold, 1);
    got.push_back(run(pc, cpu_dev(), in));
  }
  unsetenv("RLX_CPU_FOLD");
  const std::vector<Tensor> want = run(compile(g, ref_dev()), ref_dev(), in);
  for (size_t i = 0; i < 5; ++i) {
    BOOST_TEST_REQUIRE(got[0][i].nbytes() == got[1][i].nbytes());
    BOOST_TEST(std::memcmp(got[0][i].raw(), got[1][i].raw(), got[0][i].nbytes()) == 0, "result " << i << " folded or not");
    expect_close(got[1][i], want[i], i < 3 ? 0.0 : 1e-13, "cg step result " + std::to_string(i));
  }
}

// A product read only by its sum is summed as it is computed, never stored (ew_dot); the
// sum has the same bits as when the product is also a result (stored, then summed), f32
// and f64, over lengths that end inside a block of eight and inside a chunk.
BOOST_AUTO_TEST_CASE(a_product_summed_unstored_has_the_stored_sums_bits) {
  for (DType t : {DType::F32, DType::F64})
    for (int64_t n : {int64_t(7), int64_t(13), int64_t(29), int64_t(2048 * 3 + 13), int64_t(100003)}) {
      std::vector<Tensor> in = {random_tensor(t, {n}, -3, 3), random_tensor(t, {n}, -3, 3)};
      std::vector<Tensor> r[2];
      for (int stored = 0; stored < 2; ++stored) {
        ir::Graph g;
        Var a = input(g, "a", t, {n}), b = input(g, "b", t, {n});
        Var ab = a * b, aa = a * a;
        if (stored) output(g, {sum(ab), sum(aa), ab, aa});
        else output(g, {sum(ab), sum(aa)});
        r[stored] = run(compile(g, cpu_dev()), cpu_dev(), in);
      }
      for (size_t i = 0; i < 2; ++i)
        BOOST_TEST(std::memcmp(r[0][i].raw(), r[1][i].raw(), r[0][i].nbytes()) == 0,
                   dtype_name(t) << " n " << n << " sum " << i << ": " << values(r[0][i])[0].real() << " against "
                                 << values(r[1][i])[0].real());
    }
  // Beside another output written with streaming stores (deferred into the next chunk's f32
  // kernels): the summed product does no share of that work, and every element arrives.
  for (DType t : {DType::F32, DType::F64}) {
    const int64_t n = 2048 * 40 + 5;
    ir::Graph g;
    Var a = input(g, "a", t, {n}), b = input(g, "b", t, {n}), c = input(g, "c", t, {n});
    output(g, {a + c, sum(a * b)});
    std::vector<Tensor> in = {random_tensor(t, {n}, -3, 3), random_tensor(t, {n}, -3, 3), random_tensor(t, {n}, -3, 3)};
    const std::vector<Tensor> want = run(compile(g, ref_dev()), ref_dev(), in);
    for (const char* mode : {"1", "0"}) {
      setenv("RLX_CPU_STREAM", mode, 1);
      const std::vector<Tensor> got = run(compile(g, cpu_dev()), cpu_dev(), in);
      expect_close(got[0], want[0], 0.0, std::string("a + c beside an unstored sum, ") + dtype_name(t) + " stream " + mode);
      expect_close(got[1], want[1], 1e-12, std::string("the unstored sum, ") + dtype_name(t) + " stream " + mode);
    }
    unsetenv("RLX_CPU_STREAM");
  }
}

BOOST_AUTO_TEST_CASE(streaming_stores_and_deferred_outputs) {
  // Large regions write their outputs with non-temporal stores; with a transcendental
  // step the stores of one chunk are deferred into the next chunk's heavy loop.
  // RLX_CPU_STREAM forces the path at test sizes.
  for (const char* mode : {"1", "0"}) {
    setenv("RLX_CPU_STREAM", mode, 1);
    Shape s{19, 4097};
    ir::Graph g;
    Var x = input(g, "x", DType::F32, s);
    Var a = input(g, "a", DType::F32, {});
    Var b = input(g, "b", DType::F32, {4097});
    Var early = x * a + b;                  // an output made before the heavy step
    Var h = tanh(early) * a;                // the heavy step, with folded neighbours
    Var late = h - x;                       // and one made after it
    Var half = cast(late, DType::F16);      // a converted output
    std::vector<Tensor> in = {random_tensor(DType::F32, s), random_tensor(DType::F32, {}, 0.5, 1.5),
                              random_tensor(DType::F32, {4097})};
    check_region(g, {early, h, late, half}, in, 1e-3, std::string("stream=") + mode);
    check_region(g, {late}, in, 2e-6, std::string("stream=") + mode + " one output");
    check_region(g, {h, early}, in, 2e-6, std::string("stream=") + mode + " in place", true);
  }
  unsetenv("RLX_CPU_STREAM");
}

BOOST_AUTO_TEST_CASE(in_place_over_an_input) {
  Shape s{33, 4100};
  ir::Graph g;
  Var x = input(g, "x", DType::F32, s);
  Var b = input(g, "b", DType::F32, {4100});
  Var y = exp(x) * b + x;  // x is read by two nodes; the output overwrites it chunk by chunk
  Var z = x - y;
  check_region(g, {y, z}, {random_tensor(DType::F32, s), random_tensor(DType::F32, {4100})}, 2e-6, "in place", true);
}

// An output written over an input: every read of the input's chunk must see the old values,
// whether it comes before or after the overwriting step, with and without streaming
// (deferred) outputs. (Reading such an input in place instead of through its chunk copy fails
// the later reads here.)
BOOST_AUTO_TEST_CASE(in_place_reads_before_and_after_the_overwrite) {
  for (const char* mode : {"1", "0"}) {
    setenv("RLX_CPU_STREAM", mode, 1);
    Shape s{21, 4099};
    ir::Graph g;
    Var x = input(g, "x", DType::F32, s);
    Var p = input(g, "p", DType::F32, s);
    Var a = input(g, "a", DType::F32, {});
    Var axpy = x + a * p;         // the only reader of x: read in place
    Var heavy = tanh(x) * a;      // over x, then x read again below
    Var after = x - p;
    Var reread = axpy * x;        // the overwriting step's own result with x after it
    std::vector<Tensor> in = {random_tensor(DType::F32, s), random_tensor(DType::F32, s),
                              random_tensor(DType::F32, {}, 0.5, 1.5)};
    const std::string m = std::string("stream=") + mode;
    check_region(g, {axpy}, in, 2e-6, m + " axpy", true);
    check_region(g, {axpy, a * p - x}, in, 2e-6, m + " axpy and a later read", true);
    check_region(g, {heavy, after}, in, 2e-6, m + " heavy, then a read", true);
    check_region(g, {axpy, reread}, in, 2e-6, m + " axpy, then its product with x", true);
  }
  unsetenv("RLX_CPU_STREAM");
}

BOOST_AUTO_TEST_CASE(compile_and_run_fuses_gelu_chain) {
  const int64_t n = 300007;
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {n});
  Var a = input(g, "a", DType::F32, {});
  Var b = input(g, "b", DType::F32, {});
  output(g, {gelu(x * a + b)});
  Program p = compile(g, cpu_dev());
  bool fused = false;
  for (auto& k : p.kernels) fused |= k.kind == Kernel::Fused && k.nodes.size() >= 5;
  BOOST_TEST(fused);
  Tensor xt = random_tensor(DType::F32, {n}, -6, 6), at = random_tensor(DType::F32, {}), bt = random_tensor(DType::F32, {});
  auto out = run(p, cpu_dev(), {xt, at, bt});
  const float *xp = xt.data<float>(), *op = out[0].data<float>();
  double av = at.data<float>()[0], bv = bt.data<float>()[0], worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = double(float(double(float(double(xp[i]) * av)) + bv));  // the f32 intermediates
    double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    // Absolute near zero: 1 + erf(x) cancels for x << 0 in any f32 evaluation.
    worst = std::max(worst, std::fabs(op[i] - want) / std::max(std::fabs(want), 1.0));
  }
  BOOST_TEST(worst < 1e-6);
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- GEMM

namespace {

template <class T>
double gemm_error(bool ta, bool tb, int64_t M, int64_t N, int64_t K, bool builtin, int64_t pad) {
  // Leading dimensions larger than the matrices (pad) exercise lda/ldb/ldc.
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> A(size_t(std::max<int64_t>(ar * lda, 1))), B(size_t(std::max<int64_t>(br * ldb, 1))),
      C(size_t(std::max<int64_t>(M * ldc, 1)), T(777));
  for (auto& v : A) v = T(u(g_rng));
  for (auto& v : B) v = T(u(g_rng));
  if (builtin) gemm_builtin(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc);
  else gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc);
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
        double b = tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
        s += a * b;
        mag += std::fabs(a * b);
      }
      worst = std::max(worst, std::fabs(double(C[size_t(i * ldc + j)]) - s) / std::max(mag, 1e-300));
      if (K == 0) worst = std::max(worst, std::fabs(double(C[size_t(i * ldc + j)])));
    }
  // Padding columns of C stay untouched.
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j)
      if (C[size_t(i * ldc + j)] != T(777)) worst = 1e30;
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm_kernels)

BOOST_AUTO_TEST_CASE(against_naive_loop) {
  BOOST_TEST_MESSAGE(gemm_description());
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 65, 17}, {130, 257, 129}, {300, 1, 40},
                              {1, 300, 40}, {9, 17, 600}, {64, 64, 0}, {0, 5, 5}, {263, 131, 300},
                              // few rows times a transposed weight, k a multiple of 64: the decode
                              // kernel (quant.hpp matmul_small_m_f32) at 1, 3, 4, 5 and 16 rows
                              // (groups of 4 and their remainders); 17 rows: the GEMM again
                              {1, 300, 128}, {3, 37, 1024}, {4, 65, 64}, {5, 129, 192}, {16, 33, 256}, {17, 33, 128},
                              // f64 matrix-vector products (gemv_f64): k across three blocks of
                              // 8192 and a ragged one; m across blocks when A is transposed
                              {15, 1, 3 * 8192 + 5}, {3 * 8192 + 5, 1, 15}};
  for (bool builtin : {false, true})
    for (auto& sz : sizes)
      for (int t = 0; t < 4; ++t)
        for (int64_t pad : {0, 3}) {
          bool ta = t & 1, tb = t & 2;
          double e32 = gemm_error<float>(ta, tb, sz[0], sz[1], sz[2], builtin, pad);
          double e64 = gemm_error<double>(ta, tb, sz[0], sz[1], sz[2], builtin, pad);
          BOOST_CHECK_MESSAGE(e32 < 2e-6 && e64 < 1e-14, (builtin ? "builtin" : "gemm")
                                                             << " M,N,K=" << sz[0] << "," << sz[1] << "," << sz[2]
                                                             << " ta=" << ta << " tb=" << tb << " pad=" << pad
                                                             << ": f32 " << e32 << ", f64 " << e64);
        }
}

// The AVX-512 f32 kernels (gemm.cpp) at the shapes that reach each of their paths: x W^T of up
// to 256 rows (weight rows: 6-row blocks of W, 64-row panels of x, both ragged here); more
// rows or a non-transposed B (8 x 48 tiles: panels split over threads, or rows when there are
// few panels; past 512 rows all panels packed first; k past 1536 in two passes that add into
// C); 16 x 16 transposes with ragged k. gemm_builtin runs them on any x86-64-v4 CPU (elsewhere
// the portable kernel, checked the same way).
BOOST_AUTO_TEST_CASE(avx512_f32_paths) {
  BOOST_TEST_MESSAGE(gemm_builtin_isa());
  const int64_t sizes[][3] = {{128, 384, 384}, {128, 1536, 384}, {128, 384, 1536}, {61, 97, 45}, {256, 50, 17},
                              {200, 101, 1600}, {600, 200, 70}, {1030, 100, 40}, {100, 40, 33}, {48, 48, 16},
                              {257, 96, 3100}};
  for (auto& sz : sizes)
    for (bool tb : {false, true})
      for (int64_t pad : {0, 5}) {
        double e32 = gemm_error<float>(false, tb, sz[0], sz[1], sz[2], true, pad);
        BOOST_CHECK_MESSAGE(e32 < 2e-6, "builtin M,N,K=" << sz[0] << "," << sz[1] << "," << sz[2] << " tb=" << tb
                                                         << " pad=" << pad << ": f32 " << e32);
      }
  // And through the default dispatch (48 to 256 rows: weight rows; more rows with k >= 2n, or
  // any k on AMD: 8 x 48 tiles; OpenBLAS otherwise).
  for (int64_t m : {48, 130, 256, 300})
    for (int64_t k : {384, 800}) {
      double e32 = gemm_error<float>(false, true, m, 390, k, false, 0);
      BOOST_CHECK_MESSAGE(e32 < 2e-6, "gemm M=" << m << " K=" << k << " x W^T: f32 " << e32);
    }
}

// x W^T + b compiled for cpu: the bias joins the product as an epilogue, at every row count —
// few rows (the decode kernel of small products), many (OpenBLAS in one call, or threaded
// in blocks of rows, or of columns for a wide W; the built-in 8 x 48 tiles over panels or
// rows, full and ragged, and with k in two passes) — against the reference device.
BOOST_AUTO_TEST_CASE(bias_epilogue_at_few_and_many_rows) {
  struct Size {
    int64_t m, n, k = 128;
  };
  for (DType t : {DType::F32, DType::F64})
    for (Size sz : std::vector<Size>{{1, 40}, {3, 40}, {16, 40}, {17, 40}, {64, 40}, {300, 40}, {1000, 40}, {64, 400},
                                     {1000, 200}, {517, 100}, {300, 96, 1700}}) {
      const int64_t m = sz.m, n = sz.n, k = sz.k;
      ir::Graph g;
      Var x = input(g, "x", t, {m, k}), w = input(g, "w", t, {n, k}), b = input(g, "b", t, {n});
      output(g, {matmul(x, w, false, true) + b});
      std::vector<Tensor> in = {random_tensor(t, {m, k}), random_tensor(t, {n, k}), random_tensor(t, {n})};
      auto want = run(compile(g, ref_dev()), ref_dev(), in), got = run(compile(g, cpu_dev()), cpu_dev(), in);
      // f32: a sum of 128 products of values in [-2, 2] in any order reaches 1.4e-5 of
      // max(|y|, 1) from the exact value (OpenBLAS and a plain loop alike, 240K outputs);
      // 1,700 products, ~sqrt(13) times that.
      const double tol = t == DType::F32 ? (k > 128 ? 2e-4 : 4e-5) : 1e-12;
      expect_close(got[0], want[0], tol, std::string("x W^T + b, ") + dtype_name(t) + ", " + std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k));
    }
}

BOOST_AUTO_TEST_CASE(matmul_batches_views_and_transposes) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  std::vector<Case> cases = {
      {{2, 3, 17, 9}, {3, 9, 11}, false, false},  // b broadcast over the leading batch dim
      {{4, 1, 5, 7}, {1, 6, 5, 8}, true, false},  // both broadcast
      {{3, 50, 40}, {40, 30}, false, false},      // folded into one GEMM
      {{3, 50, 40}, {30, 40}, false, true},
      {{64, 8, 8}, {64, 8, 8}, false, true},      // many small products in parallel
      {{1, 1}, {1, 1}, false, false},
      {{6, 0, 4}, {6, 4, 3}, false, false},
  };
  for (DType t : {DType::F32, DType::F64})
    for (auto& c : cases)
      for (bool strided : {false, true}) {
        ir::Graph g;
        Var a = input(g, "a", t, c.a);
        Var b = input(g, "b", t, c.b);
        Var y = matmul(a, b, c.ta, c.tb);
        const ir::Node& n = g.node(y.value());
        Tensor at = random_tensor(t, c.a), bt = random_tensor(t, c.b);
        if (strided && at.rank() >= 2 && at.numel() > 0) {
          // Same values through a transposed-storage view: the Trans flag path.
          Shape st = c.a;
          std::swap(st[st.size() - 1], st[st.size() - 2]);
          Tensor tr = Tensor::empty(t, st);
          std::vector<int64_t> perm(st.size());
          for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
          std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
          rlx::cpu::permute(at, perm, tr);  // tr = a^T (contiguous)
          auto s = tr.strides();
          std::swap(s[s.size() - 1], s[s.size() - 2]);
          at = tr.with_strides(c.a, s, 0);  // a view with a's shape over a^T's storage
        }
        Tensor got = Tensor::empty(t, y.shape()), want = Tensor::empty(t, y.shape());
        std::vector<Tensor> in = {at, bt};
        std::vector<Tensor> o1 = {got}, o2 = {want};
        cpu_dev().run_node(n, in, o1);
        ref_dev().run_node(n, in, o2);
        expect_close(got, want, t == DType::F32 ? 1e-5 : 1e-13,
                     "matmul " + shape_str(c.a) + " x " + shape_str(c.b) + (strided ? " strided" : ""));
      }
}

// project_out in one read of V has the bits of the two products and the subtraction done
// apart (f64: the GEMV's order of sums; V's rows a basis's, lda > n), at 1-3 column blocks
// with tails and a basis of 1 to 31 rows; f32 (whose products apart are OpenBLAS's) within
// rounding of them.
BOOST_AUTO_TEST_CASE(project_out_has_the_bits_of_its_products_apart) {
  for (DType t : {DType::F64, DType::F32})
    for (auto [k, n] : {std::pair<int64_t, int64_t>{1, 5}, {3, 8192}, {7, 8200}, {16, 20001}, {31, 3 * 8192}}) {
      const int64_t lda = n + 3;
      Tensor basis = random_tensor(t, {k, lda});
      Tensor V = basis.with_strides({k, n}, {lda, 1}, 0);
      Tensor w = random_tensor(t, {n, 1}), h = random_tensor(t, {k, 1});
      Tensor u = Tensor::empty(t, {n, 1}), c = Tensor::empty(t, {k, 1});
      project_out(V, w, h, u, c);
      Tensor Vh = Tensor::empty(t, {n, 1}), u2 = Tensor::empty(t, {n, 1}), c2 = Tensor::empty(t, {k, 1});
      matmul(V, h, true, false, Vh);
      for (int64_t i = 0; i < n; ++i) {
        if (t == DType::F64) u2.data<double>()[i] = w.data<double>()[i] - Vh.data<double>()[i];
        else u2.data<float>()[i] = w.data<float>()[i] - Vh.data<float>()[i];
      }
      matmul(V, u2, false, false, c2);
      BOOST_TEST_CONTEXT(dtype_name(t) << " k=" << k << " n=" << n) {
        // (RLX_CPU_GEMM=openblas sends the f64 products apart to OpenBLAS: then within rounding)
        const char* mode = std::getenv("RLX_CPU_GEMM");
        if (t == DType::F64 && !(mode && std::string(mode) == "openblas")) {
          BOOST_TEST(std::memcmp(u.raw(), u2.raw(), u.nbytes()) == 0);
          BOOST_TEST(std::memcmp(c.raw(), c2.raw(), c.nbytes()) == 0);
        } else {
          auto at = [&](const Tensor& x, int64_t i) {
            return t == DType::F64 ? x.data<double>()[i] : double(x.data<float>()[i]);
          };
          double worst = 0, scale = 0;
          for (int64_t r = 0; r < k; ++r) {
            worst = std::max(worst, std::abs(at(c, r) - at(c2, r)));
            scale = std::max(scale, std::abs(at(c2, r)));
          }
          // (products apart in OpenBLAS: the same sums in its order; each term |V h| <= 4)
          const double eps = t == DType::F64 ? 1.2e-16 : 6e-8;
          double worst_u = 0;
          for (int64_t i = 0; i < n; ++i) worst_u = std::max(worst_u, std::abs(at(u, i) - at(u2, i)));
          BOOST_TEST(worst_u <= 4 * eps * 4.0 * double(k + 1));
          BOOST_TEST(worst <= (t == DType::F64 ? 1e-13 : 1e-5) * std::max(1.0, scale) * std::sqrt(double(n)));
        }
      }
    }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- other kernels at size

namespace {

// Runs the node that produced y on cpu and on the reference device.
void check_node(const Var& y, const std::vector<Tensor>& in, double tol, const std::string& what) {
  const ir::Node& n = y.graph()->node(y.value());
  Tensor got = Tensor::empty(y.dtype(), y.shape()), want = Tensor::empty(y.dtype(), y.shape());
  std::vector<Tensor> o1 = {got}, o2 = {want};
  cpu_dev().run_node(n, in, o1);
  ref_dev().run_node(n, in, o2);
  expect_close(got, want, tol, what);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(threaded_kernels)

BOOST_AUTO_TEST_CASE(reductions_large) {
  for (DType t : {DType::F32, DType::F16, DType::F64, DType::I32, DType::C64}) {
    Shape s{37, 129, 61};
    Tensor x = random_tensor(t, s, -1, 1);
    for (std::vector<int64_t> axes : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1}}) {
      ir::Graph g;
      Var v = input(g, "x", t, s);
      std::string ax = shape_str(axes);
      double tol = t == DType::F16 ? 1e-3 : t == DType::F64 ? 1e-12 : 1e-6;
      check_node(sum(v, axes, true), {x}, tol, std::string("sum ") + dtype_name(t) + ax);
      if (t != DType::C64) {
        check_node(max(v, axes), {x}, 0, std::string("max ") + dtype_name(t) + ax);
        check_node(min(v, axes), {x}, 0, std::string("min ") + dtype_name(t) + ax);
      }
    }
    if (t != DType::C64)
      for (int64_t axis : {0, 1, 2}) {
        ir::Graph g;
        Var v = input(g, "x", t, s);
        check_node(argmax(v, axis), {x}, 0, std::string("argmax ") + dtype_name(t));
      }
    for (int64_t axis : {0, 2})
      for (bool excl : {false, true}) {
        ir::Graph g;
        Var v = input(g, "x", t, s);
        check_node(cumsum(v, axis, excl, !excl), {x}, t == DType::F16 ? 2e-3 : 1e-6, std::string("cumsum ") + dtype_name(t));
      }
  }
  // NaN propagates through max and wins argmax; prod of a large run.
  Tensor x = random_tensor(DType::F32, {1000, 300}, 0.9, 1.1);
  x.data<float>()[12345] = NAN;
  ir::Graph g;
  Var v = input(g, "x", DType::F32, {1000, 300});
  check_node(max(v, {0}), {x}, 0, "max with NaN");
  check_node(argmax(v, 1), {x}, 0, "argmax with NaN");
  check_node(prod(v, {1}), {x}, 1e-5, "prod");
}

BOOST_AUTO_TEST_CASE(movement_large) {
  Tensor x = random_tensor(DType::F32, {300, 517});
  Tensor x3 = random_tensor(DType::F16, {17, 300, 65});
  ir::Graph g;
  Var v = input(g, "x", DType::F32, {300, 517});
  Var v3 = input(g, "x3", DType::F16, {17, 300, 65});
  check_node(permute(v, {1, 0}), {x}, 0, "transpose (tiled)");
  check_node(permute(v3, {2, 0, 1}), {x3}, 0, "permute 3d");
  check_node(permute(v3, {1, 0, 2}), {x3}, 0, "permute 3d rows");
  check_node(slice(v, {3, 5}, {299, 511}, {2, 3}), {x}, 0, "slice with steps");
  check_node(broadcast_to(input(g, "r", DType::F32, {517}), {400, 517}), {random_tensor(DType::F32, {517})}, 0,
             "broadcast_to");
  check_node(concat({v, v, v}, 1), {x, x, x}, 0, "concat");
  check_node(pad(v3, {1, 0, 2}, {0, 3, 1}, -1.5), {x3}, 0, "pad");
  Var idx = input(g, "i", DType::I64, {5000});
  Tensor it = Tensor::empty(DType::I64, {5000});
  for (int64_t i = 0; i < 5000; ++i) it.data<int64_t>()[i] = int64_t(g_rng() % 600) - 300;  // negatives count from the end
  check_node(gather(v, idx, 0), {x, it}, 0, "gather");
  // Indices all in [0, 300) take the path that reads them in place; one past the end there
  // is still an error.
  Tensor in_range = Tensor::empty(DType::I64, {5000});
  for (int64_t i = 0; i < 5000; ++i) in_range.data<int64_t>()[i] = int64_t(g_rng() % 300);
  check_node(gather(v, idx, 0), {x, in_range}, 0, "gather (indices in range)");
  in_range.data<int64_t>()[4999] = 300;
  {
    Tensor o = Tensor::empty(DType::F32, {5000, 517});
    std::vector<Tensor> in = {x, in_range}, out = {o};
    BOOST_CHECK_THROW(cpu_dev().run_node(g.node(gather(v, idx, 0).value()), in, out), InputError);
  }
  Var upd = input(g, "u", DType::F32, {5000, 517});
  check_node(scatter_add(v, idx, upd, 0), {x, it, random_tensor(DType::F32, {5000, 517})}, 1e-6, "scatter_add");
  // An index out of range is an error.
  it.data<int64_t>()[77] = 300;
  Tensor o = Tensor::empty(DType::F32, {5000, 517});
  std::vector<Tensor> in = {x, it}, out = {o};
  BOOST_CHECK_THROW(cpu_dev().run_node(g.node(gather(v, idx, 0).value()), in, out), InputError);
}

BOOST_AUTO_TEST_CASE(rng_is_bit_exact) {
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    ir::Graph g;
    check_node(rng_uniform(g, {1000, 257}, t, 42, -3.0, 5.0), {}, 0, std::string("rng_uniform ") + dtype_name(t));
    check_node(rng_normal(g, {1000, 257}, t, 7, 1.0, 2.0), {}, 0, std::string("rng_normal ") + dtype_name(t));
    check_node(iota(g, {300, 700}, 1, t), {}, 0, std::string("iota ") + dtype_name(t));
  }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- nn kernels

// layer_norm, rms_norm, softmax and attention run as native kernels (one pass each instead of their
// lowerings' chains) and match the reference device on fresh random data (RLX_TEST_SEED):
// odd row lengths, rows enough for both threads, special values (a softmax row of -inf and
// one holding NaN give NaN rows, as the lowering does); attention on the shapes every
// device's kernel is checked with (tests/support/nn_cases.hpp), f64 included; and the cases
// the kernels refuse still compile, through the lowering.
// Tolerances (|got - want| / max(|want|, 1)): f32 1e-5 (f32 sums in another order, the
// vectorized exp of a few ulp), f64 1e-12.
BOOST_AUTO_TEST_SUITE(nn_kernels)

std::string route_of(const Program& p, const std::string& op) {
  for (const NodeReport& r : p.report.nodes)
    if (r.op == op) return std::string(route_name(r.route));
  return "absent";
}
double tol_of(DType t) { return t == DType::F64 ? 1e-12 : 1e-5; }

// The attention kernels' index arithmetic (runtime/attention_layout.hpp, cpu and cuda): for
// random shapes in both layouts — hld with k and v of 1 where q has a batch dimension
// (grouped-query attention), lhd with heads — and a bias broadcasting to the scores, every
// (batch, head) pair's rows of q, k, v and the result, and every bias entry, lie where a
// contiguous tensor of that shape holds them.
BOOST_AUTO_TEST_CASE(attention_offsets_address_every_operand_as_stored) {
  std::mt19937_64 rng(test::run_seed("test_cpu_kernels") + 11);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
  // The flat index of a multi-index in a contiguous tensor of shape s (an index into a
  // dimension of 1 is 0: the tensor broadcasts there).
  auto flat = [](const Shape& s, const std::vector<int64_t>& idx) {
    int64_t f = 0;
    for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + (s[d] == 1 ? 0 : idx[d]);
    return f;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const bool lhd = trial % 2 == 1;
    const int lead = int(pick(lhd ? 0 : 1, lhd ? 2 : 3));
    const int64_t lq = pick(1, 5), lk = pick(1, 6), d = pick(1, 4), dv = pick(1, 4), heads = lhd ? pick(1, 3) : 1;
    Shape ql, kl, vl;
    for (int i = 0; i < lead; ++i) {
      const int64_t e = pick(1, 3);
      ql.push_back(e);
      kl.push_back(!lhd && pick(0, 1) ? 1 : e);  // (hld: k and v may broadcast)
      vl.push_back(!lhd && pick(0, 1) ? 1 : e);
    }
    auto shape = [&](const Shape& l, int64_t len, int64_t w) {
      Shape s = l;
      s.push_back(len);
      if (lhd) s.push_back(heads);
      s.push_back(w);
      return s;
    };
    const Shape q = shape(ql, lq, d), k = shape(kl, lk, d), v = shape(vl, lk, dv), o = shape(ql, lq, dv);
    // The scores [batch.., Lq, Lk] (batch: q's leading dimensions, then H for lhd); the bias
    // of a random rank up to theirs, each dimension the scores' or 1.
    Shape scores = ql;
    if (lhd) scores.push_back(heads);
    scores.push_back(lq);
    scores.push_back(lk);
    Shape b;
    for (size_t i = scores.size() - size_t(pick(1, int64_t(scores.size()))); i < scores.size(); ++i)
      b.push_back(pick(0, 1) ? scores[i] : 1);
    AttentionLayout a;
    const int64_t pairs = attention_layout(a, q, k, v, o, &b, lhd);
    BOOST_TEST_REQUIRE(pairs == numel(scores) / (lq * lk));
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const AttentionOffsets off = attention_offsets(a, bh);
      std::vector<int64_t> idx(scores.size() - 2);  // bh over the scores' batch dimensions
      for (int64_t rest = bh, dim = int64_t(idx.size()) - 1; dim >= 0; --dim) {
        idx[size_t(dim)] = rest % scores[size_t(dim)];
        rest /= scores[size_t(dim)];
      }
      // An operand's multi-index for row `row`, column 0: the leading indices, the row, then
      // the head for lhd.
      auto at = [&](int64_t row) {
        std::vector<int64_t> m(idx.begin(), idx.begin() + lead);
        m.push_back(row);
        if (lhd) m.push_back(idx.back());
        m.push_back(0);
        return m;
      };
      bool ok = true;
      for (int64_t i = 0; i < lq; ++i) {
        ok = ok && off.q + i * a.q_row == flat(q, at(i));
        ok = ok && off.o + i * a.o_row == flat(o, at(i));
      }
      for (int64_t j = 0; j < lk; ++j) {
        ok = ok && off.k + j * a.k_row == flat(k, at(j));
        ok = ok && off.v + j * a.v_row == flat(v, at(j));
      }
      for (int64_t i = 0; i < lq; ++i)
        for (int64_t j = 0; j < lk; ++j) {
          std::vector<int64_t> m = idx;
          m.push_back(i);
          m.push_back(j);
          std::vector<int64_t> bm(m.end() - int64_t(b.size()), m.end());  // right-aligned
          ok = ok && off.bias + i * a.bias_q_stride + j * a.bias_k_stride == flat(b, bm);
        }
      BOOST_TEST(ok, (lhd ? "lhd" : "hld") << " q" << shape_str(q) << " k" << shape_str(k) << " v" << shape_str(v)
                                          << " bias" << shape_str(b) << " pair " << bh);
      if (!ok) return;
    }
  }
}

BOOST_AUTO_TEST_CASE(nn_kernels_match_the_reference) {
  g_rng.seed(test::run_seed("test_cpu_kernels"));
  for (DType t : {DType::F32, DType::F64}) {
    for (const Shape& s : {Shape{3, 7, 45}, Shape{2, 301, 384}, Shape{5}}) {
      const int64_t d = s.back();
      ir::Graph g;
      Var x = input(g, "x", t, s), gm = input(g, "g", t, {d}), b = input(g, "b", t, {d});
      output(g, {layer_norm(x, gm, b, 1e-6), softmax(x * 3.0), rms_norm(x, gm, 1e-6)});
      Tensor xt = random_tensor(t, s);
      if (s.size() == 3) {  // row 1: all -inf; row 2: one NaN (softmax NaN rows either way)
        for (int64_t i = 0; i < d; ++i) {
          if (t == DType::F64) xt.data<double>()[d + i] = -INFINITY;
          else xt.data<float>()[d + i] = -INFINITY;
        }
        if (t == DType::F64) xt.data<double>()[2 * d + 3] = NAN;
        else xt.data<float>()[2 * d + 3] = NAN;
      }
      std::vector<Tensor> in = {xt, random_tensor(t, {d}), random_tensor(t, {d})};
      Program p = compile(g, cpu_dev());
      BOOST_TEST(route_of(p, "layer_norm") == "native");
      BOOST_TEST(route_of(p, "softmax") == "native");
      BOOST_TEST(route_of(p, "rms_norm") == "native");
      auto want = run(compile(g, ref_dev()), ref_dev(), in), got = run(p, cpu_dev(), in);
      const std::string what = std::string(dtype_name(t)) + " " + shape_str(s);
      expect_close(got[0], want[0], tol_of(t), "layer_norm " + what);
      expect_close(got[1], want[1], tol_of(t), "softmax " + what);
      expect_close(got[2], want[2], tol_of(t), "rms_norm " + what);
    }
  }
  // The shared cases, then grouped-query attention's shapes (test::grouped_attention_cases),
  // native here from 16 query rows on; a decode step's one row per head keeps the lowering.
  // Each against the reference (which lowers them to broadcasting matmuls).
  std::vector<test::AttentionCase> cases = test::attention_cases(true);
  const size_t shared = cases.size();
  for (const test::AttentionCase& c : test::grouped_attention_cases()) cases.push_back(c);
  for (size_t i = 0; i < cases.size(); ++i) {
    const test::AttentionCase& c = cases[i];
    ir::Graph g = test::attention_graph(c);
    std::vector<Tensor> in = test::attention_inputs(c, [&](DType t, const Shape& s) { return random_tensor(t, s); });
    Program p = compile(g, cpu_dev());
    const std::string what = std::string("attention ") + dtype_name(c.t) + " q" + shape_str(c.q) + " k" + shape_str(c.k) + " " + c.mask;
    const bool native = i < shared || c.q[c.q.size() - 2] >= 16;
    BOOST_TEST(route_of(p, "attention") == (native ? "native" : "common-ir"), what << ": " << p.report.table());
    auto want = run(compile(g, ref_dev()), ref_dev(), in), got = run(p, cpu_dev(), in);
    expect_close(got[0], want[0], tol_of(c.t), what);
  }
  {  // refused shapes run the lowering
    ir::Graph g = test::refused_nn_graph();
    Program p = compile(g, cpu_dev());
    BOOST_TEST(route_of(p, "attention") == "common-ir");
    BOOST_TEST(route_of(p, "softmax") == "common-ir");
    std::vector<Tensor> in;
    for (const Shape& s : test::refused_nn_shapes()) in.push_back(random_tensor(DType::F32, s));
    auto want = run(compile(g, ref_dev()), ref_dev(), in), got = run(p, cpu_dev(), in);
    expect_close(got[0], want[0], 1e-5, "attention through the lowering");
    expect_close(got[1], want[1], 1e-5, "softmax through the lowering");
  }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------- thread pool

BOOST_AUTO_TEST_CASE(thread_pool_covers_ranges_and_rethrows) {
  ThreadPool& pool = ThreadPool::instance();
  BOOST_TEST(pool.size() >= 1);
  for (int64_t n : {1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_for(n, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      parallel_for(4, 1, [](int64_t, int64_t) {});  // nested: inline
    });
    for (auto& h : hits) BOOST_REQUIRE(h.load() == 1);
  }
  BOOST_CHECK_THROW(parallel_for(1000, 1, [](int64_t b, int64_t) {
                      if (b > 0) throw InputError("task failed");
                      if (ThreadPool::instance().size() == 1) throw InputError("task failed");
                    }),
                    InputError);
}

// rlx's environment switches (src/core/env.hpp): unset or empty is the default, a listed value
// its index, a number within its range its value; anything else an InputError naming the
// variable, the value and what it takes — and the cpu device's switches go through them.
BOOST_AUTO_TEST_CASE(environment_switches_refuse_unknown_values) {
  const char* var = "RLX_TEST_SWITCH";
  auto refused = [&](auto f, const std::string& takes) {
    try {
      f();
      BOOST_TEST(false, "accepted: " << std::getenv(var));
    } catch (const InputError& e) {
      const std::string m = e.what();
      BOOST_TEST((m.find(var) != std::string::npos && m.find(std::getenv(var)) != std::string::npos &&
                  m.find(takes) != std::string::npos), m);
    }
  };
  ::unsetenv(var);
  BOOST_TEST(env_choice(var, {"auto", "lanes", "tile"}) == 0);
  BOOST_TEST(env_int(var, 1, 1024, 7) == 7);
  ::setenv(var, "", 1);
  BOOST_TEST(env_choice(var, {"auto", "lanes", "tile"}) == 0);
  ::setenv(var, "tile", 1);
  BOOST_TEST(env_choice(var, {"auto", "lanes", "tile"}) == 2);
  ::setenv(var, "TILE", 1);
  refused([&] { env_choice(var, {"auto", "lanes", "tile"}); }, "auto, lanes, tile");
  ::setenv(var, "16", 1);
  BOOST_TEST(env_int(var, 1, 1024, 7) == 16);
  for (const char* bad : {"0", "1025", "4x", "two", "-3", " 8", "99999999999999999999"}) {
    ::setenv(var, bad, 1);
    refused([&] { env_int(var, 1, 1024, 7); }, "from 1 to 1024");
  }
  ::unsetenv(var);
  // The cpu device's own: RLX_CPU_STREAM takes auto, 0 or 1 (it used to read "yes" as 0).
  ::setenv("RLX_CPU_STREAM", "yes", 1);
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {4096});
  output(g, {exp(x) * 2.0 + 1.0});
  BOOST_CHECK_THROW(run(compile(g, cpu_dev()), cpu_dev(), {Tensor::zeros(DType::F32, {4096})}), InputError);
  ::unsetenv("RLX_CPU_STREAM");
}
