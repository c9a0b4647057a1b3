// Vectorizable f32 transcendental functions for the cpu device's elementwise kernels.
//
// Every function is branch-free straight-line code (selects, bit casts, polynomials in
// explicit fused multiply-adds) and is force-inlined, so that a loop calling it over an
// array auto-vectorizes under whatever ISA the enclosing kernel is compiled for (see
// ew_kernels.cpp). The kernels are compiled without floating-point contraction, so
// every FMA here is written out and nothing else is fused: results are the same on
// every clone with FMA hardware (the baseline clone calls libm's fmaf). Polynomial coefficients are weighted minimax fits (Lawson's
// algorithm against 40-digit mpmath references, README.md); measured max errors are
// asserted in tests/cpu/test_cpu_kernels.cpp: at most a few ulp, < 1e-6 relative.
#pragma once
#include <bit>
#include <cstdint>

#define RLX_VM_INLINE inline __attribute__((always_inline))

namespace rlx::cpu::vm {

RLX_VM_INLINE float fma_f32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
RLX_VM_INLINE double fma_f64(double a, double b, double c) { return __builtin_fma(a, b, c); }
RLX_VM_INLINE float as_float(int32_t i) { return std::bit_cast<float>(i); }
RLX_VM_INLINE int32_t as_int(float f) { return std::bit_cast<int32_t>(f); }
RLX_VM_INLINE float abs_f32(float x) { return as_float(as_int(x) & 0x7fffffff); }
// |mag| with the sign of s.
RLX_VM_INLINE float copysign_f32(float mag, float s) {
  return as_float((as_int(mag) & 0x7fffffff) | (as_int(s) & int32_t(0x80000000u)));
}
// Clamp that lets NaN through.
RLX_VM_INLINE float clamp_f32(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

// Integer min on the bit patterns of non-negative floats (ordered like their values).
// Written this way so that the compiler sees a plain min and does not split the code
// that follows into constant-folded paths.
RLX_VM_INLINE float min_nonneg_f32(float x, float hi) {
  int32_t a = as_int(x), b = as_int(hi);
  return as_float(a < b ? a : b);
}

// e^x for x in [-103.9, 88.72] (callers guarantee the range). Cody-Waite reduction
// x = n ln2 + r, |r| <= ln2/2, e^r = 1 + r + r^2 P(r); the scale 2^n is applied as two
// exact power-of-two factors so that results in the subnormal range round once.
RLX_VM_INLINE float exp_f32_core(float x) {
  float kr = fma_f32(x, 1.44269504088896341f, 12582912.0f);  // 1.5 * 2^23: round to nearest
  float n = kr - 12582912.0f;
  uint32_t ni = uint32_t(as_int(kr)) - 0x4b400000u;
  float r = fma_f32(-n, 0.693145751953125f, x);  // ln2, high part (exact products)
  r = fma_f32(-n, 1.4286068202862268e-06f, r);    // ln2, low part
  float p = 0.0013814610429108143f;
  p = fma_f32(p, r, 0.008368710055947304f);
  p = fma_f32(p, r, 0.04166838899254799f);
  p = fma_f32(p, r, 0.1666652113199234f);
  p = fma_f32(p, r, 0.4999999403953552f);
  float e = 1.0f + fma_f32(r * r, p, r);
  uint32_t n1 = uint32_t(int32_t(ni) >> 1), n2 = ni - n1;
  return e * as_float(int32_t((n1 + 127u) << 23)) * as_float(int32_t((n2 + 127u) << 23));
}

// e^x for x in [-87.3, 88.3], where 2^n is a normal float: one scale factor.
RLX_VM_INLINE float exp_f32_normal(float x) {
  float kr = fma_f32(x, 1.44269504088896341f, 12582912.0f);
  float n = kr - 12582912.0f;
  uint32_t ni = uint32_t(as_int(kr)) - 0x4b400000u;
  float r = fma_f32(-n, 0.693145751953125f, x);
  r = fma_f32(-n, 1.4286068202862268e-06f, r);
  float p = 0.0013814610429108143f;
  p = fma_f32(p, r, 0.008368710055947304f);
  p = fma_f32(p, r, 0.04166838899254799f);
  p = fma_f32(p, r, 0.1666652113199234f);
  p = fma_f32(p, r, 0.4999999403953552f);
  float e = 1.0f + fma_f32(r * r, p, r);
  return e * as_float(int32_t((ni + 127u) << 23));
}

// e^x for x <= 0, as a softmax takes exp(x - max): below -87 the result is 0 instead of a
// subnormal (under 1.7e-38 of the row's largest term, which is 1), so one scale factor does;
// NaN stays NaN.
RLX_VM_INLINE float exp_f32_nonpos(float x) {
  const float r = exp_f32_normal(x < -87.0f ? -87.0f : x);
  return x < -87.0f ? 0.0f : r;
}

// e^x. Overflows to +inf above 88.72, underflows to 0 below -103.97, NaN stays NaN.
RLX_VM_INLINE float exp_f32(float x) {
  float ax = abs_f32(x);
  float xc = copysign_f32(min_nonneg_f32(ax, 103.5f), x);
  float r = exp_f32_core(xc);
  r = x > 88.7228394f ? as_float(0x7f800000) : r;
  r = x < -103.972084f ? 0.0f : r;
  return x != x ? x : r;
}

// Natural log. x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f)
// with f = m - 1. Subnormal inputs are scaled by 2^23 first. log(0) = -inf,
// log(x<0) = NaN, log(inf) = inf.
RLX_VM_INLINE float log_f32(float x) {
  int32_t sub = as_int(x) < 0x00800000 ? 1 : 0;  // subnormal or zero (or negative: fixed below)
  float xs = x * as_float(0x3f800000 + sub * (23 << 23));
  int32_t bits = as_int(xs);
  int32_t e = ((bits >> 23) & 0xff) - 127 - sub * 23;
  int32_t mb = (bits & 0x007fffff) | 0x3f800000;  // m in [1, 2)
  int32_t big = mb > 0x3fb504f3 ? 1 : 0;          // m > sqrt(2)
  float m = as_float(mb - (big << 23));            // halve when big
  e += big;
  float f = m - 1.0f;
  float p = -0.07634429633617401f;
  p = fma_f32(p, f, 0.12761549651622772f);
  p = fma_f32(p, f, -0.131601944565773f);
  p = fma_f32(p, f, 0.14201761782169342f);
  p = fma_f32(p, f, -0.16623356938362122f);
  p = fma_f32(p, f, 0.20001226663589478f);
  p = fma_f32(p, f, -0.250008225440979f);
  p = fma_f32(p, f, 0.3333333134651184f);
  float f2 = f * f;
  float fe = float(e);
  float r = fma_f32(f2 * f, p, fe * 1.4286068202862268e-06f);
  r = fma_f32(-0.5f, f2, r);
  r = fma_f32(fe, 0.693145751953125f, f + r);
  r = x < 0.0f ? as_float(0x7fc00000) : r;
  r = x == 0.0f ? as_float(int32_t(0xff800000u)) : r;
  r = x == as_float(0x7f800000) ? x : r;
  return x != x ? x : r;
}

// erf. |x| < 0.921875: x P(x^2). Otherwise +-(1 - Q(|x|)) with Q a degree-14 polynomial
// in (|x| - 2.4296875) / 1.5078125 fitted to erfc on [0.921875, 3.9375] (absolute error
// 1e-8, well under half an ulp of erf there); |x| >= 3.9375 gives +-1 exactly. No exp,
// no division: about 30 vector instructions per 16 lanes.
RLX_VM_INLINE float erf_f32(float x) {
  float ax = abs_f32(x);
  float t = x * x;
  float p = -0.0006013393285684288f;
  p = fma_f32(p, t, 0.004998000804334879f);
  p = fma_f32(p, t, -0.026770232245326042f);
  p = fma_f32(p, t, 0.11281926929950714f);
  p = fma_f32(p, t, -0.3761250674724579f);
  p = fma_f32(p, t, 1.1283791065216064f);
  float small = x * p;
  float u = fma_f32(min_nonneg_f32(ax, 3.9375f), 0.6632124352331606f, float(-2.4296875 * 0.6632124352331606));
  float q = -0.000379588280338794f;
  q = fma_f32(q, u, 0.00011415610060794279f);
  q = fma_f32(q, u, 0.0024925237521529198f);
  q = fma_f32(q, u, -0.00294484943151474f);
  q = fma_f32(q, u, -0.004164503421634436f);
  q = fma_f32(q, u, 0.013054341077804565f);
  q = fma_f32(q, u, -0.011703046038746834f);
  q = fma_f32(q, u, -0.006487694103270769f);
  q = fma_f32(q, u, 0.03552478551864624f);
  q = fma_f32(q, u, -0.05720626935362816f);
  q = fma_f32(q, u, 0.05678526312112808f);
  q = fma_f32(q, u, -0.03804786130785942f);
  q = fma_f32(q, u, 0.01701756753027439f);
  q = fma_f32(q, u, -0.0046449690125882626f);
  q = fma_f32(q, u, 0.0005901585100218654f);
  float large = copysign_f32(1.0f - q, x);
  float r = ax < 0.921875f ? small : large;
  return x != x ? x : r;
}

// tanh. |x| < 0.625: x + x^3 P(x^2). Otherwise sign(x) (1 - 2 / (e^{2|x|} + 1)), with
// |x| clamped to 10 (where tanh already rounds to 1).
RLX_VM_INLINE float tanh_f32(float x) {
  float ax = abs_f32(x);
  float t = x * x;
  float p = -0.005704978480935097f;
  p = fma_f32(p, t, 0.020639078691601753f);
  p = fma_f32(p, t, -0.05373971164226532f);
  p = fma_f32(p, t, 0.13331441581249237f);
  p = fma_f32(p, t, -0.3333328068256378f);
  float small = fma_f32(x * t, p, x);
  float e = exp_f32_normal(2.0f * min_nonneg_f32(ax, 10.0f));
  float large = copysign_f32(1.0f - 2.0f / (e + 1.0f), x);
  float r = ax < 0.625f ? small : large;
  return x != x ? x : r;
}

// sin and cos of an f32 argument, computed in double: k = round(x 2/pi), r = x - k pi/2
// (pi/2 in two parts, exact for |x| < 2^20), then the quadrant's polynomial. Callers
// recompute arguments with |x| >= 2^20 (and non-finite ones) with libm.
RLX_VM_INLINE float sincos_f32(float xf, bool cosine) {
  double x = xf;
  double kd = fma_f64(x, 0.63661977236758134308, 6755399441055744.0);  // 1.5 * 2^52
  int32_t k = int32_t(std::bit_cast<int64_t>(kd));
  kd -= 6755399441055744.0;
  double r = fma_f64(-kd, 1.5707963267341256e+00, x);  // pi/2 high 33 bits
  r = fma_f64(-kd, 6.0771005065061922e-11, r);         // pi/2 low part
  double r2 = r * r;
  double s = -2.5052108385441720e-08;
  s = fma_f64(s, r2, 2.7557319223985893e-06);
  s = fma_f64(s, r2, -1.9841269841269841e-04);
  s = fma_f64(s, r2, 8.3333333333333333e-03);
  s = fma_f64(s, r2, -1.6666666666666667e-01);
  s = fma_f64(r * r2, s, r);
  double c = -1.1470745597729725e-11;
  c = fma_f64(c, r2, 2.0876756987868099e-09);
  c = fma_f64(c, r2, -2.7557319223985891e-07);
  c = fma_f64(c, r2, 2.4801587301587302e-05);
  c = fma_f64(c, r2, -1.3888888888888889e-03);
  c = fma_f64(c, r2, 4.1666666666666667e-02);
  c = fma_f64(r2 * r2, c, fma_f64(-0.5, r2, 1.0));
  int32_t q = (k + (cosine ? 1 : 0)) & 3;  // sin(x + pi/2) = cos(x)
  double v = (q & 1) ? c : s;
  v = (q & 2) ? -v : v;
  return float(v);
}

}  // namespace rlx::cpu::vm
