#include "devices/cpu/ew_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "devices/cpu/vmath.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define RLX_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define RLX_CLONES
#endif

// Round half to even. Clang before 17 (the sanitizer build's clang 16) has no
// __builtin_roundeven; nearbyint in the default rounding mode, which rlx never changes,
// rounds the same way (and vectorizes the same).
#if defined(__clang__) && __clang_major__ < 17
#define RLX_ROUNDEVENF(x) __builtin_nearbyintf(x)
#define RLX_ROUNDEVEN(x) __builtin_nearbyint(x)
#else
#define RLX_ROUNDEVENF(x) __builtin_roundevenf(x)
#define RLX_ROUNDEVEN(x) __builtin_roundeven(x)
#endif

namespace rlx::cpu {

using c64f = std::complex<float>;

CK ck_of(DType t) {
  switch (t) {
    case DType::Bool: return CK::B;
    case DType::I8: case DType::I4: return CK::I8;
    case DType::U8: return CK::U8;
    case DType::I32: return CK::I32;
    case DType::I64: return CK::I64;
    case DType::F16: case DType::BF16: case DType::F32: return CK::F32;
    case DType::F64: return CK::F64;
    case DType::C64: return CK::C64;
  }
  return CK::F32;
}

size_t ck_size(CK k) {
  switch (k) {
    case CK::B: case CK::I8: case CK::U8: return 1;
    case CK::I32: case CK::F32: return 4;
    case CK::I64: case CK::F64: case CK::C64: return 8;
  }
  return 8;
}

const char* ck_name(CK k) {
  static const char* names[] = {"bool", "i8", "u8", "i32", "i64", "f32", "f64", "c64"};
  return names[int(k)];
}

namespace {

struct OpInfo {
  const char* name;
  EwOp op;
  int arity;
};
constexpr OpInfo kOps[] = {
    {"neg", EwOp::Neg, 1},         {"abs", EwOp::Abs, 1},
    {"exp", EwOp::Exp, 1},         {"log", EwOp::Log, 1},
    {"sqrt", EwOp::Sqrt, 1},       {"rsqrt", EwOp::Rsqrt, 1},
    {"sin", EwOp::Sin, 1},         {"cos", EwOp::Cos, 1},
    {"tanh", EwOp::Tanh, 1},       {"erf", EwOp::Erf, 1},
    {"recip", EwOp::Recip, 1},     {"floor", EwOp::Floor, 1},
    {"ceil", EwOp::Ceil, 1},       {"round", EwOp::Round, 1},
    {"sign", EwOp::Sign, 1},       {"logical_not", EwOp::LogicalNot, 1},
    {"real", EwOp::Real, 1},       {"imag", EwOp::Imag, 1},
    {"conj", EwOp::Conj, 1},       {"add", EwOp::Add, 2},
    {"sub", EwOp::Sub, 2},         {"mul", EwOp::Mul, 2},
    {"div", EwOp::Div, 2},         {"pow", EwOp::Pow, 2},
    {"maximum", EwOp::Maximum, 2}, {"minimum", EwOp::Minimum, 2},
    {"eq", EwOp::Eq, 2},           {"ne", EwOp::Ne, 2},
    {"lt", EwOp::Lt, 2},           {"le", EwOp::Le, 2},
    {"gt", EwOp::Gt, 2},           {"ge", EwOp::Ge, 2},
    {"logical_and", EwOp::LogicalAnd, 2}, {"logical_or", EwOp::LogicalOr, 2},
    {"make_complex", EwOp::MakeComplex, 2}, {"where", EwOp::Where, 3},
    {"cast", EwOp::Cast, 1},
};

bool is_int(DType t) { return t == DType::I8 || t == DType::U8 || t == DType::I32 || t == DType::I64; }
bool is_flt(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64; }

template <CK K> struct ck_type;
template <> struct ck_type<CK::B> { using type = uint8_t; };
template <> struct ck_type<CK::I8> { using type = int8_t; };
template <> struct ck_type<CK::U8> { using type = uint8_t; };
template <> struct ck_type<CK::I32> { using type = int32_t; };
template <> struct ck_type<CK::I64> { using type = int64_t; };
template <> struct ck_type<CK::F32> { using type = float; };
template <> struct ck_type<CK::F64> { using type = double; };
template <> struct ck_type<CK::C64> { using type = c64f; };

[[noreturn]] void unsupported(EwOp op, CK k) {
  throw InternalError(std::string("cpu elementwise kernel: no ") + ew_op_name(op) + " for " + ck_name(k));
}

// ---------------------------------------------------------------- unary

template <class T>
RLX_CLONES void unary_fp(EwOp op, const T* __restrict a, T* __restrict o, int64_t n) {
  constexpr bool f32 = std::is_same_v<T, float>;
  switch (op) {
    case EwOp::Neg: for (int64_t i = 0; i < n; ++i) o[i] = -a[i]; return;
    case EwOp::Abs: for (int64_t i = 0; i < n; ++i) o[i] = std::fabs(a[i]); return;
    case EwOp::Exp:
      if constexpr (f32) for (int64_t i = 0; i < n; ++i) o[i] = vm::exp_f32(a[i]);
      else for (int64_t i = 0; i < n; ++i) o[i] = std::exp(a[i]);
      return;
    case EwOp::Log:
      if constexpr (f32) for (int64_t i = 0; i < n; ++i) o[i] = vm::log_f32(a[i]);
      else for (int64_t i = 0; i < n; ++i) o[i] = std::log(a[i]);
      return;
    case EwOp::Tanh:
      if constexpr (f32) for (int64_t i = 0; i < n; ++i) o[i] = vm::tanh_f32(a[i]);
      else for (int64_t i = 0; i < n; ++i) o[i] = std::tanh(a[i]);
      return;
    case EwOp::Erf:
      if constexpr (f32) for (int64_t i = 0; i < n; ++i) o[i] = vm::erf_f32(a[i]);
      else for (int64_t i = 0; i < n; ++i) o[i] = std::erf(a[i]);
      return;
    case EwOp::Sin:
    case EwOp::Cos: {
      bool c = op == EwOp::Cos;
      if constexpr (f32) {
        if (c) for (int64_t i = 0; i < n; ++i) o[i] = vm::sincos_f32(a[i], true);
        else for (int64_t i = 0; i < n; ++i) o[i] = vm::sincos_f32(a[i], false);
        for (int64_t i = 0; i < n; ++i)  // huge or non-finite arguments: libm
          if (!(std::fabs(a[i]) < 1048576.0f)) o[i] = float(c ? std::cos(double(a[i])) : std::sin(double(a[i])));
      } else {
        if (c) for (int64_t i = 0; i < n; ++i) o[i] = std::cos(a[i]);
        else for (int64_t i = 0; i < n; ++i) o[i] = std::sin(a[i]);
      }
      return;
    }
    case EwOp::Sqrt: for (int64_t i = 0; i < n; ++i) o[i] = std::sqrt(a[i]); return;
    case EwOp::Rsqrt: for (int64_t i = 0; i < n; ++i) o[i] = T(1) / std::sqrt(a[i]); return;
    case EwOp::Recip: for (int64_t i = 0; i < n; ++i) o[i] = T(1) / a[i]; return;
    case EwOp::Floor: for (int64_t i = 0; i < n; ++i) o[i] = std::floor(a[i]); return;
    case EwOp::Ceil: for (int64_t i = 0; i < n; ++i) o[i] = std::ceil(a[i]); return;
    case EwOp::Round:
      if constexpr (f32) for (int64_t i = 0; i < n; ++i) o[i] = RLX_ROUNDEVENF(a[i]);
      else for (int64_t i = 0; i < n; ++i) o[i] = RLX_ROUNDEVEN(a[i]);
      return;
    case EwOp::Sign:
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] > T(0) ? T(1) : (a[i] < T(0) ? T(-1) : a[i]);
      return;
    default: unsupported(op, f32 ? CK::F32 : CK::F64);
  }
}

template <class T>
RLX_CLONES void unary_int(EwOp op, const T* __restrict a, T* __restrict o, int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case EwOp::Neg: for (int64_t i = 0; i < n; ++i) o[i] = T(U(0) - U(a[i])); return;
    case EwOp::Abs: for (int64_t i = 0; i < n; ++i) o[i] = a[i] < 0 ? T(U(0) - U(a[i])) : a[i]; return;
    case EwOp::Sign: for (int64_t i = 0; i < n; ++i) o[i] = T((a[i] > 0) - (a[i] < 0)); return;
    default: break;
  }
  throw InternalError(std::string("cpu elementwise kernel: no integer ") + ew_op_name(op));
}

void unary_bool(EwOp op, const uint8_t* __restrict a, uint8_t* __restrict o, int64_t n) {
  if (op != EwOp::LogicalNot) unsupported(op, CK::B);
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] == 0;
}

void unary_c64(EwOp op, const c64f* a, void* out, int64_t n) {
  c64f* o = static_cast<c64f*>(out);
  float* of = static_cast<float*>(out);
  switch (op) {
    case EwOp::Neg: for (int64_t i = 0; i < n; ++i) o[i] = -a[i]; return;
    case EwOp::Conj: for (int64_t i = 0; i < n; ++i) o[i] = std::conj(a[i]); return;
    case EwOp::Exp:
      for (int64_t i = 0; i < n; ++i) {
        std::complex<double> z = std::exp(std::complex<double>(a[i].real(), a[i].imag()));
        o[i] = c64f(float(z.real()), float(z.imag()));
      }
      return;
    case EwOp::Abs: for (int64_t i = 0; i < n; ++i) of[i] = float(std::hypot(double(a[i].real()), double(a[i].imag()))); return;
    case EwOp::Real: for (int64_t i = 0; i < n; ++i) of[i] = a[i].real(); return;
    case EwOp::Imag: for (int64_t i = 0; i < n; ++i) of[i] = a[i].imag(); return;
    default: unsupported(op, CK::C64);
  }
}

// Kernels with folded scalar steps (f32; binary ones also f64): x = a[i] * pm + pa before
// the op, y * qm + qa after it. The file is compiled without FP contraction, so each
// product and sum rounds as the node it stands for did.
// Loops run in blocks of 256 elements; before each, a proportional slice of the
// background work is done.
void background_part(const Background* bg, int64_t b0, int64_t b1, int64_t n);

#define RLX_AFF1(EXPR)                                       \
  for (int64_t b0 = 0; b0 < n; b0 += 256) {                   \
    const int64_t b1 = b0 + 256 < n ? b0 + 256 : n;           \
    if (bg) background_part(bg, b0, b1, n);                             \
    for (int64_t i = b0; i < b1; ++i) {                       \
      float x = a[i];                                         \
      if constexpr (PRE) {                                    \
        x = x * pm;                                           \
        x = x + pa;                                           \
      }                                                       \
      float y = EXPR;                                         \
      if constexpr (POST) {                                   \
        y = y * qm;                                           \
        y = y + qa;                                           \
      }                                                       \
      o[i] = y;                                               \
    }                                                         \
  }

template <bool PRE, bool POST>
RLX_CLONES void unary_f32_aff(EwOp op, const float* __restrict a, float* __restrict o, int64_t n, float pm, float pa,
                              float qm, float qa, const Background* bg) {
  switch (op) {
    case EwOp::Neg: RLX_AFF1(-x); return;
    case EwOp::Abs: RLX_AFF1(std::fabs(x)); return;
    case EwOp::Exp: RLX_AFF1(vm::exp_f32(x)); return;
    case EwOp::Log: RLX_AFF1(vm::log_f32(x)); return;
    case EwOp::Tanh: RLX_AFF1(vm::tanh_f32(x)); return;
    case EwOp::Erf: RLX_AFF1(vm::erf_f32(x)); return;
    case EwOp::Sqrt: RLX_AFF1(std::sqrt(x)); return;
    case EwOp::Rsqrt: RLX_AFF1(1.0f / std::sqrt(x)); return;
    case EwOp::Recip: RLX_AFF1(1.0f / x); return;
    case EwOp::Floor: RLX_AFF1(std::floor(x)); return;
    case EwOp::Ceil: RLX_AFF1(std::ceil(x)); return;
    case EwOp::Round: RLX_AFF1(RLX_ROUNDEVENF(x)); return;
    case EwOp::Sign: RLX_AFF1(x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x)); return;
    default: break;
  }
  unsupported(op, CK::F32);
}
#undef RLX_AFF1

#define RLX_AFF2(EXPR)                                      \
  do {                                                      \
    auto pre = [&](T v) {                                   \
      if constexpr (PRE) {                                  \
        v = v * pm;                                         \
        v = v + pa;                                         \
      }                                                     \
      return v;                                             \
    };                                                      \
    auto post = [&](T v) {                                  \
      if constexpr (POST) {                                 \
        v = v * qm;                                         \
        v = v + qa;                                         \
      }                                                     \
      return v;                                             \
    };                                                      \
    for (int64_t b0 = 0; b0 < n; b0 += 256) {               \
      const int64_t b1 = b0 + 256 < n ? b0 + 256 : n;       \
      if (bg) background_part(bg, b0, b1, n);               \
      if (form == 0) {                                      \
        for (int64_t i = b0; i < b1; ++i) {                 \
          T x = pre(a[i]), y = b[i];                        \
          o[i] = post(EXPR);                                \
        }                                                   \
      } else if (form == 1) {                               \
        const T y = b[0];                                   \
        for (int64_t i = b0; i < b1; ++i) {                 \
          T x = pre(a[i]);                                  \
          o[i] = post(EXPR);                                \
        }                                                   \
      } else {                                              \
        const T x = pre(a[0]);                              \
        for (int64_t i = b0; i < b1; ++i) {                 \
          T y = b[i];                                       \
          o[i] = post(EXPR);                                \
        }                                                   \
      }                                                     \
    }                                                       \
  } while (0)

template <class T, bool PRE, bool POST>
RLX_CLONES void binary_fp_aff(EwOp op, int form, const T* __restrict a, const T* __restrict b, T* __restrict o,
                              int64_t n, T pm, T pa, T qm, T qa, const Background* bg) {
  switch (op) {
    case EwOp::Add: RLX_AFF2(x + y); return;
    case EwOp::Sub: RLX_AFF2(x - y); return;
    case EwOp::Mul: RLX_AFF2(x * y); return;
    case EwOp::Div: RLX_AFF2(x / y); return;
    case EwOp::Maximum: RLX_AFF2((x != x || y != y) ? x + y : (x < y ? y : x)); return;
    case EwOp::Minimum: RLX_AFF2((x != x || y != y) ? x + y : (y < x ? y : x)); return;
    default: break;
  }
  unsupported(op, std::is_same_v<T, float> ? CK::F32 : CK::F64);
}
#undef RLX_AFF2

// ---------------------------------------------------------------- binary

#define RLX_BINLOOP(OUT, EXPR)                                  \
  do {                                                          \
    if (form == 0) {                                            \
      for (int64_t i = 0; i < n; ++i) {                         \
        auto x = a[i];                                          \
        auto y = b[i];                                          \
        OUT[i] = EXPR;                                          \
      }                                                         \
    } else if (form == 1) {                                     \
      auto y = b[0];                                            \
      for (int64_t i = 0; i < n; ++i) {                         \
        auto x = a[i];                                          \
        OUT[i] = EXPR;                                          \
      }                                                         \
    } else {                                                    \
      auto x = a[0];                                            \
      for (int64_t i = 0; i < n; ++i) {                         \
        auto y = b[i];                                          \
        OUT[i] = EXPR;                                          \
      }                                                         \
    }                                                           \
  } while (0)

template <class T>
RLX_CLONES void binary_fp(EwOp op, int form, const T* __restrict a, const T* __restrict b, void* __restrict out,
                          int64_t n) {
  T* o = static_cast<T*>(out);
  uint8_t* ob = static_cast<uint8_t*>(out);
  switch (op) {
    case EwOp::Add: RLX_BINLOOP(o, x + y); return;
    case EwOp::Sub: RLX_BINLOOP(o, x - y); return;
    case EwOp::Mul: RLX_BINLOOP(o, x * y); return;
    case EwOp::Div: RLX_BINLOOP(o, x / y); return;
    case EwOp::Maximum: RLX_BINLOOP(o, (x != x || y != y) ? x + y : (x < y ? y : x)); return;
    case EwOp::Minimum: RLX_BINLOOP(o, (x != x || y != y) ? x + y : (y < x ? y : x)); return;
    case EwOp::Pow:
      if constexpr (std::is_same_v<T, float>) RLX_BINLOOP(o, float(std::pow(double(x), double(y))));
      else RLX_BINLOOP(o, std::pow(x, y));
      return;
    case EwOp::Eq: RLX_BINLOOP(ob, uint8_t(x == y)); return;
    case EwOp::Ne: RLX_BINLOOP(ob, uint8_t(x != y)); return;
    case EwOp::Lt: RLX_BINLOOP(ob, uint8_t(x < y)); return;
    case EwOp::Le: RLX_BINLOOP(ob, uint8_t(x <= y)); return;
    case EwOp::Gt: RLX_BINLOOP(ob, uint8_t(x > y)); return;
    case EwOp::Ge: RLX_BINLOOP(ob, uint8_t(x >= y)); return;
    case EwOp::MakeComplex:
      if constexpr (std::is_same_v<T, float>) {
        c64f* oc = static_cast<c64f*>(out);
        RLX_BINLOOP(oc, c64f(x, y));
        return;
      }
      break;
    default: break;
  }
  unsupported(op, std::is_same_v<T, float> ? CK::F32 : CK::F64);
}

template <class T>
inline T int_div(T x, T y) {
  using U = std::make_unsigned_t<T>;
  if (y == 0) return T(0);
  if constexpr (std::is_signed_v<T>)
    if (y == T(-1)) return T(U(0) - U(x));
  return T(x / y);
}

template <class T>
RLX_CLONES void binary_int(EwOp op, int form, const T* __restrict a, const T* __restrict b, void* __restrict out,
                           int64_t n) {
  using U = std::make_unsigned_t<T>;
  T* o = static_cast<T*>(out);
  uint8_t* ob = static_cast<uint8_t*>(out);
  switch (op) {
    case EwOp::Add: RLX_BINLOOP(o, T(U(x) + U(y))); return;
    case EwOp::Sub: RLX_BINLOOP(o, T(U(x) - U(y))); return;
    case EwOp::Mul: RLX_BINLOOP(o, T(U(x) * U(y))); return;
    case EwOp::Div: RLX_BINLOOP(o, int_div<T>(x, y)); return;
    case EwOp::Maximum: RLX_BINLOOP(o, x < y ? y : x); return;
    case EwOp::Minimum: RLX_BINLOOP(o, y < x ? y : x); return;
    case EwOp::Eq: RLX_BINLOOP(ob, uint8_t(x == y)); return;
    case EwOp::Ne: RLX_BINLOOP(ob, uint8_t(x != y)); return;
    case EwOp::Lt: RLX_BINLOOP(ob, uint8_t(x < y)); return;
    case EwOp::Le: RLX_BINLOOP(ob, uint8_t(x <= y)); return;
    case EwOp::Gt: RLX_BINLOOP(ob, uint8_t(x > y)); return;
    case EwOp::Ge: RLX_BINLOOP(ob, uint8_t(x >= y)); return;
    default: break;
  }
  throw InternalError(std::string("cpu elementwise kernel: no integer ") + ew_op_name(op));
}

void binary_bool(EwOp op, int form, const uint8_t* __restrict a, const uint8_t* __restrict b, uint8_t* __restrict o,
                 int64_t n) {
  switch (op) {
    case EwOp::Eq: RLX_BINLOOP(o, uint8_t(x == y)); return;
    case EwOp::Ne: RLX_BINLOOP(o, uint8_t(x != y)); return;
    case EwOp::LogicalAnd: RLX_BINLOOP(o, uint8_t((x != 0) & (y != 0))); return;
    case EwOp::LogicalOr: RLX_BINLOOP(o, uint8_t((x != 0) | (y != 0))); return;
    default: unsupported(op, CK::B);
  }
}

inline c64f cmul(c64f x, c64f y) {
  double xr = x.real(), xi = x.imag(), yr = y.real(), yi = y.imag();
  return {float(xr * yr - xi * yi), float(xr * yi + xi * yr)};
}
inline c64f cdiv(c64f x, c64f y) {
  std::complex<double> r = std::complex<double>(x.real(), x.imag()) / std::complex<double>(y.real(), y.imag());
  return {float(r.real()), float(r.imag())};
}

void binary_c64(EwOp op, int form, const c64f* a, const c64f* b, void* out, int64_t n) {
  c64f* o = static_cast<c64f*>(out);
  uint8_t* ob = static_cast<uint8_t*>(out);
  switch (op) {
    case EwOp::Add: RLX_BINLOOP(o, x + y); return;
    case EwOp::Sub: RLX_BINLOOP(o, x - y); return;
    case EwOp::Mul: RLX_BINLOOP(o, cmul(x, y)); return;
    case EwOp::Div: RLX_BINLOOP(o, cdiv(x, y)); return;
    case EwOp::Eq: RLX_BINLOOP(ob, uint8_t(x == y)); return;
    case EwOp::Ne: RLX_BINLOOP(ob, uint8_t(x != y)); return;
    default: unsupported(op, CK::C64);
  }
}
#undef RLX_BINLOOP

// ---------------------------------------------------------------- where, cast

template <class T>
RLX_CLONES void where_loop(const uint8_t* __restrict c, const T* __restrict a, const T* __restrict b, T* __restrict o,
                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? a[i] : b[i];
}

// float -> integer: truncate toward zero, saturate, NaN -> 0.
template <class I, class F>
inline I float_to_int(F x) {
  constexpr double hi = double(std::numeric_limits<I>::max()) + 1.0;  // a power of two
  constexpr double lo = double(std::numeric_limits<I>::min());
  double d = double(x);
  if (!(d == d)) return I(0);
  if (d >= hi) return std::numeric_limits<I>::max();
  if (d <= lo) return std::numeric_limits<I>::min();
  return I(x);
}

// The value to round to f16/bf16, as f32 (f64 sources round to odd first).
template <class S> inline float narrow_src(S x) {
  if constexpr (std::is_same_v<S, double>) return f64_to_f32_odd(x);
  else if constexpr (std::is_integral_v<S>) return f64_to_f32_odd(double(x));
  else return float(x);
}
template <> inline float narrow_src(c64f x) { return x.real(); }

// One element to the target dtype, held in the target's compute type. Tags select the
// target: its compute type D plus how values are narrowed.
enum class Narrow { None, Bool, F16, BF16 };

template <class D, Narrow N, class S>
inline D cast_one(S x) {
  constexpr bool src_c = std::is_same_v<S, c64f>;
  constexpr bool src_f = std::is_floating_point_v<S>;
  if constexpr (N == Narrow::Bool) {
    if constexpr (src_c) return uint8_t(x.real() != 0.0f || x.imag() != 0.0f);
    else return uint8_t(x != S(0));
  } else if constexpr (N == Narrow::F16) {
    return f16_bits_to_float(float_to_f16_bits(narrow_src(x)));
  } else if constexpr (N == Narrow::BF16) {
    return bf16_bits_to_float(float_to_bf16_bits(narrow_src(x)));
  } else if constexpr (std::is_same_v<D, c64f>) {
    if constexpr (src_c) return x;
    else return c64f(float(x), 0.0f);
  } else if constexpr (std::is_floating_point_v<D>) {
    if constexpr (src_c) return D(x.real());
    else return D(x);
  } else {  // integer target
    if constexpr (src_c) return float_to_int<D>(x.real());
    else if constexpr (src_f) return float_to_int<D>(x);
    else return D(x);  // modular (C++20 integral conversion)
  }
}

template <class D, Narrow N, class S>
RLX_CLONES void cast_loop(const S* __restrict a, D* __restrict o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = cast_one<D, N, S>(a[i]);
}

template <class S>
void cast_from(const S* a, DType to, void* o, int64_t n) {
  switch (to) {
    case DType::Bool: return cast_loop<uint8_t, Narrow::Bool>(a, static_cast<uint8_t*>(o), n);
    case DType::I8: return cast_loop<int8_t, Narrow::None>(a, static_cast<int8_t*>(o), n);
    case DType::U8: return cast_loop<uint8_t, Narrow::None>(a, static_cast<uint8_t*>(o), n);
    case DType::I32: return cast_loop<int32_t, Narrow::None>(a, static_cast<int32_t*>(o), n);
    case DType::I64: return cast_loop<int64_t, Narrow::None>(a, static_cast<int64_t*>(o), n);
    case DType::F16: return cast_loop<float, Narrow::F16>(a, static_cast<float*>(o), n);
    case DType::BF16: return cast_loop<float, Narrow::BF16>(a, static_cast<float*>(o), n);
    case DType::F32: return cast_loop<float, Narrow::None>(a, static_cast<float*>(o), n);
    case DType::F64: return cast_loop<double, Narrow::None>(a, static_cast<double*>(o), n);
    case DType::C64: return cast_loop<c64f, Narrow::None>(a, static_cast<c64f*>(o), n);
    case DType::I4: break;
  }
  throw InternalError("cpu cast: no i4 target in the chunk kernels");
}

// ---------------------------------------------------------------- storage conversions

RLX_CLONES void f16_to_f32(const uint16_t* __restrict s, float* __restrict d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = f16_bits_to_float(s[i]);
}
RLX_CLONES void f32_to_f16(const float* __restrict s, uint16_t* __restrict d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_f16_bits(s[i]);
}
RLX_CLONES void bf16_to_f32(const uint16_t* __restrict s, float* __restrict d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = bf16_bits_to_float(s[i]);
}
RLX_CLONES void f32_to_bf16(const float* __restrict s, uint16_t* __restrict d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16_bits(s[i]);
}

RLX_CLONES void round_f16(float* __restrict p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = f16_bits_to_float(float_to_f16_bits(p[i]));
}
RLX_CLONES void round_bf16(float* __restrict p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = bf16_bits_to_float(float_to_bf16_bits(p[i]));
}

struct F16In {
  static float conv(uint16_t h) { return f16_bits_to_float(h); }
};
struct BF16In {
  static float conv(uint16_t h) { return bf16_bits_to_float(h); }
};
template <class T>
struct RawIn {
  static T conv(T v) { return v; }
};

template <class S, class D, class Conv>
void strided_impl(const S* base, const int64_t* shape, const int64_t* strides, int rank, int64_t start, int64_t n,
                  D* __restrict dst) {
  if (rank == 0) {
    D v = Conv::conv(base[0]);
    for (int64_t i = 0; i < n; ++i) dst[i] = v;
    return;
  }
  int64_t idx[16];
  int64_t rem = start, off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = rem % shape[d];
    rem /= shape[d];
    off += idx[d] * strides[d];
  }
  const int last = rank - 1;
  const int64_t inner = shape[last], s = strides[last];
  int64_t done = 0;
  while (done < n) {
    int64_t run = std::min(inner - idx[last], n - done);
    const S* p = base + off;
    D* q = dst + done;
    if (s == 1)
      for (int64_t j = 0; j < run; ++j) q[j] = Conv::conv(p[j]);
    else if (s == 0) {
      D v = Conv::conv(p[0]);
      for (int64_t j = 0; j < run; ++j) q[j] = v;
    } else
      for (int64_t j = 0; j < run; ++j) q[j] = Conv::conv(p[j * s]);
    done += run;
    off += run * s;
    idx[last] += run;
    // carry into the outer dimensions
    for (int d = last; d > 0 && idx[d] == shape[d]; --d) {
      off -= idx[d] * strides[d];
      idx[d] = 0;
      ++idx[d - 1];
      off += strides[d - 1];
    }
  }
}

template <class T>
void fill_impl(const void* src, void* dst, int64_t n) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  T* d = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = v;
}

}  // namespace

std::optional<EwOp> ew_op_from_name(std::string_view name) {
  for (const auto& o : kOps)
    if (name == o.name) return o.op;
  return std::nullopt;
}

const char* ew_op_name(EwOp op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.name;
  return "?";
}

int ew_arity(EwOp op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.arity;
  return 0;
}

bool ew_supported(EwOp op, DType t) {
  bool i = is_int(t), f = is_flt(t), c = t == DType::C64, b = t == DType::Bool;
  switch (op) {
    case EwOp::Neg: case EwOp::Abs: case EwOp::Add: case EwOp::Sub: case EwOp::Mul: case EwOp::Div:
      return i || f || c;
    case EwOp::Exp: return f || c;
    case EwOp::Log: case EwOp::Sqrt: case EwOp::Rsqrt: case EwOp::Sin: case EwOp::Cos: case EwOp::Tanh:
    case EwOp::Erf: case EwOp::Recip: case EwOp::Floor: case EwOp::Ceil: case EwOp::Round: case EwOp::Pow:
      return f;
    case EwOp::Sign: case EwOp::Maximum: case EwOp::Minimum: case EwOp::Lt: case EwOp::Le: case EwOp::Gt:
    case EwOp::Ge:
      return i || f;
    case EwOp::LogicalNot: case EwOp::LogicalAnd: case EwOp::LogicalOr: return b;
    case EwOp::Real: case EwOp::Imag: case EwOp::Conj: return c;
    case EwOp::MakeComplex: return t == DType::F32;
    case EwOp::Eq: case EwOp::Ne: case EwOp::Where: case EwOp::Cast: return t != DType::I4;
  }
  return false;
}

void ew_unary(EwOp op, CK k, const void* a, void* o, int64_t n) {
  if (n <= 0) return;
  switch (k) {
    case CK::F32: return unary_fp<float>(op, static_cast<const float*>(a), static_cast<float*>(o), n);
    case CK::F64: return unary_fp<double>(op, static_cast<const double*>(a), static_cast<double*>(o), n);
    case CK::I8: return unary_int<int8_t>(op, static_cast<const int8_t*>(a), static_cast<int8_t*>(o), n);
    case CK::U8: return unary_int<uint8_t>(op, static_cast<const uint8_t*>(a), static_cast<uint8_t*>(o), n);
    case CK::I32: return unary_int<int32_t>(op, static_cast<const int32_t*>(a), static_cast<int32_t*>(o), n);
    case CK::I64: return unary_int<int64_t>(op, static_cast<const int64_t*>(a), static_cast<int64_t*>(o), n);
    case CK::B: return unary_bool(op, static_cast<const uint8_t*>(a), static_cast<uint8_t*>(o), n);
    case CK::C64: return unary_c64(op, static_cast<const c64f*>(a), o, n);
  }
}

void ew_binary(EwOp op, CK k, int form, const void* a, const void* b, void* o, int64_t n) {
  if (n <= 0) return;
  switch (k) {
    case CK::F32: return binary_fp<float>(op, form, static_cast<const float*>(a), static_cast<const float*>(b), o, n);
    case CK::F64:
      return binary_fp<double>(op, form, static_cast<const double*>(a), static_cast<const double*>(b), o, n);
    case CK::I8:
      return binary_int<int8_t>(op, form, static_cast<const int8_t*>(a), static_cast<const int8_t*>(b), o, n);
    case CK::U8:
      return binary_int<uint8_t>(op, form, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), o, n);
    case CK::I32:
      return binary_int<int32_t>(op, form, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), o, n);
    case CK::I64:
      return binary_int<int64_t>(op, form, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), o, n);
    case CK::B:
      return binary_bool(op, form, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
                         static_cast<uint8_t*>(o), n);
    case CK::C64: return binary_c64(op, form, static_cast<const c64f*>(a), static_cast<const c64f*>(b), o, n);
  }
}

bool ew_affine_ok(EwOp op) {
  switch (op) {
    case EwOp::Neg: case EwOp::Abs: case EwOp::Exp: case EwOp::Log: case EwOp::Tanh: case EwOp::Erf:
    case EwOp::Sqrt: case EwOp::Rsqrt: case EwOp::Recip: case EwOp::Floor: case EwOp::Ceil: case EwOp::Round:
    case EwOp::Sign: case EwOp::Add: case EwOp::Sub: case EwOp::Mul: case EwOp::Div: case EwOp::Maximum:
    case EwOp::Minimum:
      return true;
    default: return false;
  }
}

// The fused executor's sums: value(i) for i in [0, n) added in double in eight lanes (lane l
// the elements i = l mod 8 of each whole block of eight, lane 0 the tail), the lanes then
// pairwise. ew_sum and ew_dot share it, so a product summed as it is computed has the bits of
// the stored product's sum.
template <class F>
inline double lane_sum(int64_t n, F value) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += value(i + l);
  for (; i < n; ++i) lanes[0] += value(i);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

template <class T>
RLX_CLONES double sum_lanes(const T* __restrict x, int64_t n) {
  return lane_sum(n, [&](int64_t i) { return double(x[i]); });
}

template <class T>
RLX_CLONES double dot_lanes(const T* __restrict a, const T* __restrict b, int64_t n) {
  return lane_sum(n, [&](int64_t i) {
    const T p = a[i] * b[i];  // rounded to T, as a stored product is
    return double(p);
  });
}

double ew_sum(CK k, const void* x, int64_t n) {
  if (k == CK::F64) return sum_lanes<double>(static_cast<const double*>(x), n);
  if (k == CK::F32) return sum_lanes<float>(static_cast<const float*>(x), n);
  throw InternalError(std::string("cpu elementwise kernel: no sum of ") + ck_name(k));
}

double ew_dot(CK k, const void* a, const void* b, int64_t n) {
  if (k == CK::F64) return dot_lanes<double>(static_cast<const double*>(a), static_cast<const double*>(b), n);
  if (k == CK::F32) return dot_lanes<float>(static_cast<const float*>(a), static_cast<const float*>(b), n);
  throw InternalError(std::string("cpu elementwise kernel: no dot product of ") + ck_name(k));
}

bool ew_affine_ok_f64(EwOp op) {
  switch (op) {
    case EwOp::Add: case EwOp::Sub: case EwOp::Mul: case EwOp::Div: case EwOp::Maximum: case EwOp::Minimum:
      return true;
    default: return false;
  }
}

void ew_unary_f32_affine(EwOp op, const float* a, float* o, int64_t n, const Affine* pre, const Affine* post,
                         const Background* bg) {
  if (n <= 0) return;
  const Affine id;
  const Affine &p = pre ? *pre : id, &q = post ? *post : id;
  if (bg && bg->empty()) bg = nullptr;
  if (pre && post) return unary_f32_aff<true, true>(op, a, o, n, p.mul, p.add, q.mul, q.add, bg);
  if (pre) return unary_f32_aff<true, false>(op, a, o, n, p.mul, p.add, q.mul, q.add, bg);
  if (post) return unary_f32_aff<false, true>(op, a, o, n, p.mul, p.add, q.mul, q.add, bg);
  if (bg) return unary_f32_aff<false, false>(op, a, o, n, p.mul, p.add, q.mul, q.add, bg);
  unary_fp<float>(op, a, o, n);
}

void ew_binary_f32_affine(EwOp op, int form, const float* a, const float* b, float* o, int64_t n, const Affine* pre,
                          const Affine* post, const Background* bg) {
  if (n <= 0) return;
  const Affine id;
  const Affine &p = pre ? *pre : id, &q = post ? *post : id;
  if (bg && bg->empty()) bg = nullptr;
  if (pre && post) return binary_fp_aff<float, true, true>(op, form, a, b, o, n, p.mul, p.add, q.mul, q.add, bg);
  if (pre) return binary_fp_aff<float, true, false>(op, form, a, b, o, n, p.mul, p.add, q.mul, q.add, bg);
  if (post) return binary_fp_aff<float, false, true>(op, form, a, b, o, n, p.mul, p.add, q.mul, q.add, bg);
  if (bg) return binary_fp_aff<float, false, false>(op, form, a, b, o, n, p.mul, p.add, q.mul, q.add, bg);
  binary_fp<float>(op, form, a, b, o, n);
}

void ew_binary_f64_affine(EwOp op, int form, const double* a, const double* b, double* o, int64_t n,
                          const AffineD* pre, const AffineD* post) {
  if (n <= 0) return;
  const AffineD id;
  const AffineD &p = pre ? *pre : id, &q = post ? *post : id;
  if (pre && post) return binary_fp_aff<double, true, true>(op, form, a, b, o, n, p.mul, p.add, q.mul, q.add, nullptr);
  if (pre) return binary_fp_aff<double, true, false>(op, form, a, b, o, n, p.mul, p.add, q.mul, q.add, nullptr);
  if (post) return binary_fp_aff<double, false, true>(op, form, a, b, o, n, p.mul, p.add, q.mul, q.add, nullptr);
  binary_fp<double>(op, form, a, b, o, n);
}

void ew_where(CK k, const uint8_t* c, const void* a, const void* b, void* o, int64_t n) {
  if (n <= 0) return;
  switch (ck_size(k)) {
    case 1:
      return where_loop<uint8_t>(c, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
                                 static_cast<uint8_t*>(o), n);
    case 4:
      return where_loop<uint32_t>(c, static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b),
                                  static_cast<uint32_t*>(o), n);
    default:
      return where_loop<uint64_t>(c, static_cast<const uint64_t*>(a), static_cast<const uint64_t*>(b),
                                  static_cast<uint64_t*>(o), n);
  }
}

void ew_cast(CK from, DType to, const void* a, void* o, int64_t n) {
  if (n <= 0) return;
  switch (from) {
    case CK::B: return cast_from(static_cast<const uint8_t*>(a), to, o, n);
    case CK::I8: return cast_from(static_cast<const int8_t*>(a), to, o, n);
    case CK::U8: return cast_from(static_cast<const uint8_t*>(a), to, o, n);
    case CK::I32: return cast_from(static_cast<const int32_t*>(a), to, o, n);
    case CK::I64: return cast_from(static_cast<const int64_t*>(a), to, o, n);
    case CK::F32: return cast_from(static_cast<const float*>(a), to, o, n);
    case CK::F64: return cast_from(static_cast<const double*>(a), to, o, n);
    case CK::C64: return cast_from(static_cast<const c64f*>(a), to, o, n);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
__attribute__((target("avx512f"))) void stream_avx512(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(reinterpret_cast<const void*>(s + i)));
}
__attribute__((target("avx2"))) void stream_avx2(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
}
void stream_sse2(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
}
using stream_fn = void (*)(char*, const char*, size_t);
stream_fn pick_stream() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return stream_avx512;
  if (__builtin_cpu_supports("avx2")) return stream_avx2;
  return stream_sse2;
}
}  // namespace
#endif

void stream_store(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const stream_fn fn = pick_stream();
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Unaligned head and tail by memcpy; the 64-byte-aligned body streamed.
  size_t head = std::min(bytes, size_t((64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63));
  std::memcpy(d, s, head);
  size_t body = (bytes - head) & ~size_t(63);
  if (body) fn(d + head, s + head, body);
  std::memcpy(d + head + body, s + head + body, bytes - head - body);
#else
  std::memcpy(dst, src, bytes);
#endif
}

namespace {
void background_part(const Background* bg, int64_t b0, int64_t b1, int64_t n) {
  for (int r = 0; r < bg->nprefetch; ++r) {
    const int64_t lines = (bg->prefetch_bytes[r] + 63) / 64;
    for (int64_t l = lines * b0 / n; l < lines * b1 / n; ++l) __builtin_prefetch(bg->prefetch[r] + l * 64, 0, 3);
  }
  for (int r = 0; r < bg->ncopy; ++r) {
    const int64_t total = bg->copy_bytes[r];
    const int64_t from = b0 == 0 ? 0 : (total * b0 / n) & ~int64_t(63);
    const int64_t to = b1 == n ? total : (total * b1 / n) & ~int64_t(63);
    if (to > from) stream_store(bg->copy_dst[r] + from, bg->copy_src[r] + from, size_t(to - from));
  }
}
}  // namespace

void stream_fence() {
#if defined(__x86_64__) && defined(__GNUC__)
  _mm_sfence();
#endif
}

void round_to_storage(DType t, float* p, int64_t n) {
  if (n <= 0) return;
  if (t == DType::F16) round_f16(p, n);
  if (t == DType::BF16) round_bf16(p, n);
}

void load_convert(DType storage, const void* src, void* dst, int64_t n) {
  if (n <= 0) return;
  if (storage == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  if (storage == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  std::memcpy(dst, src, size_t(n) * dtype_size(storage));
}

void store_convert(DType storage, const void* src, void* dst, int64_t n) {
  if (n <= 0) return;
  if (storage == DType::F16) return f32_to_f16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  if (storage == DType::BF16) return f32_to_bf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  std::memcpy(dst, src, size_t(n) * dtype_size(storage));
}

void load_strided(DType storage, const void* base, const int64_t* shape, const int64_t* strides, int rank,
                  int64_t start, int64_t n, void* dst) {
  if (n <= 0) return;
  if (rank > 16) throw InternalError("cpu strided load: rank above 16");
  switch (storage) {
    case DType::F16:
      return strided_impl<uint16_t, float, F16In>(static_cast<const uint16_t*>(base), shape, strides, rank, start, n,
                                                  static_cast<float*>(dst));
    case DType::BF16:
      return strided_impl<uint16_t, float, BF16In>(static_cast<const uint16_t*>(base), shape, strides, rank, start,
                                                   n, static_cast<float*>(dst));
    default: break;
  }
  switch (dtype_size(storage)) {
    case 1:
      return strided_impl<uint8_t, uint8_t, RawIn<uint8_t>>(static_cast<const uint8_t*>(base), shape, strides, rank,
                                                            start, n, static_cast<uint8_t*>(dst));
    case 2:
      return strided_impl<uint16_t, uint16_t, RawIn<uint16_t>>(static_cast<const uint16_t*>(base), shape, strides,
                                                               rank, start, n, static_cast<uint16_t*>(dst));
    case 4:
      return strided_impl<uint32_t, uint32_t, RawIn<uint32_t>>(static_cast<const uint32_t*>(base), shape, strides,
                                                               rank, start, n, static_cast<uint32_t*>(dst));
    default:
      return strided_impl<uint64_t, uint64_t, RawIn<uint64_t>>(static_cast<const uint64_t*>(base), shape, strides,
                                                               rank, start, n, static_cast<uint64_t*>(dst));
  }
}

void fill_ck(CK k, const void* src, void* dst, int64_t n) {
  switch (ck_size(k)) {
    case 1: return fill_impl<uint8_t>(src, dst, n);
    case 4: return fill_impl<uint32_t>(src, dst, n);
    default: return fill_impl<uint64_t>(src, dst, n);
  }
}

}  // namespace rlx::cpu
