// Loads and stores for every dtype, with the `cast` conversion rules of docs/ir.md.
#include "devices/reference/access.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"

namespace rlx::reference {

Domain domain_of(DType t) {
  if (is_float(t)) return Domain::Real;
  if (is_complex(t)) return Domain::Complex;
  return Domain::Int;
}

namespace {

template <class T>
T raw_at(const Tensor& t, int64_t off) {
  T v;
  std::memcpy(&v, static_cast<const char*>(t.raw()) + off * int64_t(sizeof(T)), sizeof(T));
  return v;
}

template <class T>
void raw_put(const Tensor& t, int64_t i, T v) {
  std::memcpy(static_cast<char*>(t.raw()) + i * int64_t(sizeof(T)), &v, sizeof(T));
}

// i4: element e lives in byte e/2, the low nibble for even e; two's complement.
int64_t load_i4(const Tensor& t, int64_t e) {
  uint8_t byte = static_cast<const uint8_t*>(t.raw())[e >> 1];
  int v = (e & 1) ? (byte >> 4) : (byte & 0xf);
  return v >= 8 ? v - 16 : v;
}

void store_i4(const Tensor& t, int64_t e, int64_t v) {
  uint8_t nib = uint8_t(std::clamp<int64_t>(v, -8, 7) & 0xf);
  uint8_t& byte = static_cast<uint8_t*>(t.raw())[e >> 1];
  byte = (e & 1) ? uint8_t((byte & 0x0f) | (nib << 4)) : uint8_t((byte & 0xf0) | nib);
}

// Float -> integer: truncate toward zero, saturate to [lo, hi], NaN -> 0.
int64_t saturate(double v, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  if (v <= double(lo)) return lo;
  if (v >= double(hi)) return hi;  // double(INT64_MAX) is 2^63, so this also catches it
  return int64_t(v);
}

// The float nearest v rounded to odd: exact when v is a float, otherwise the one of the
// two floats around v whose last significand bit is 1. Rounding that to f16 or bf16
// (at least 2 fewer significand bits) gives v correctly rounded, as if rounded once.
float round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || std::isinf(f) || double(f) == v) return f;
  if ((float_bits(f) & 1u) == 0) f = std::nextafter(f, v > double(f) ? INFINITY : -INFINITY);
  return f;
}

// As round_to_odd, from an integer (int64 -> double can itself round).
float round_to_odd(int64_t v) {
  float f = static_cast<float>(v);  // nearest, ties to even
  bool exact;
  if (f >= 0x1p63f)
    exact = false;  // v <= 2^63 - 1 < f
  else
    exact = int64_t(f) == v;
  if (!exact && (float_bits(f) & 1u) == 0) {
    bool up = f >= 0x1p63f ? false : v > int64_t(f);
    f = std::nextafter(f, up ? INFINITY : -INFINITY);
  }
  return f;
}

int64_t int_range_lo(DType t) {
  switch (t) {
    case DType::I8:
      return std::numeric_limits<int8_t>::min();
    case DType::U8:
      return 0;
    case DType::I32:
      return std::numeric_limits<int32_t>::min();
    case DType::I4:
      return -8;
    default:
      return std::numeric_limits<int64_t>::min();
  }
}

int64_t int_range_hi(DType t) {
  switch (t) {
    case DType::I8:
      return std::numeric_limits<int8_t>::max();
    case DType::U8:
      return std::numeric_limits<uint8_t>::max();
    case DType::I32:
      return std::numeric_limits<int32_t>::max();
    case DType::I4:
      return 7;
    default:
      return std::numeric_limits<int64_t>::max();
  }
}

[[noreturn]] void bad_dtype(const char* what, DType t) {
  throw InternalError(std::string("reference: ") + what + " of dtype " + dtype_name(t));
}

}  // namespace

int64_t load_int(const Tensor& t, int64_t off) {
  switch (t.dtype()) {
    case DType::Bool:
      return raw_at<uint8_t>(t, off) != 0;
    case DType::I8:
      return raw_at<int8_t>(t, off);
    case DType::U8:
      return raw_at<uint8_t>(t, off);
    case DType::I32:
      return raw_at<int32_t>(t, off);
    case DType::I64:
      return raw_at<int64_t>(t, off);
    case DType::I4:
      return load_i4(t, off);
    case DType::F16:
    case DType::BF16:
    case DType::F32:
    case DType::F64:
    case DType::C64:
      return saturate(load_real(t, off), int_range_lo(DType::I64), int_range_hi(DType::I64));
  }
  bad_dtype("load_int", t.dtype());
}

double load_real(const Tensor& t, int64_t off) {
  switch (t.dtype()) {
    case DType::F16:
      return double(float(raw_at<f16>(t, off)));
    case DType::BF16:
      return double(float(raw_at<bf16>(t, off)));
    case DType::F32:
      return double(raw_at<float>(t, off));
    case DType::F64:
      return raw_at<double>(t, off);
    case DType::C64:
      return double(raw_at<c64>(t, off).real());
    default:
      return double(load_int(t, off));
  }
}

cd load_complex(const Tensor& t, int64_t off) {
  if (t.dtype() == DType::C64) {
    c64 z = raw_at<c64>(t, off);
    return {double(z.real()), double(z.imag())};
  }
  return {load_real(t, off), 0.0};
}

void store_int(const Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::Bool:
      raw_put<uint8_t>(t, i, v != 0);
      return;
    case DType::I8:
      raw_put<int8_t>(t, i, static_cast<int8_t>(v));
      return;  // modular since C++20
    case DType::U8:
      raw_put<uint8_t>(t, i, static_cast<uint8_t>(v));
      return;
    case DType::I32:
      raw_put<int32_t>(t, i, static_cast<int32_t>(v));
      return;
    case DType::I64:
      raw_put<int64_t>(t, i, v);
      return;
    case DType::I4:
      store_i4(t, i, v);
      return;
    case DType::F16:
      raw_put<f16>(t, i, f16(round_to_odd(v)));
      return;
    case DType::BF16:
      raw_put<bf16>(t, i, bf16(round_to_odd(v)));
      return;
    case DType::F32:
      raw_put<float>(t, i, static_cast<float>(v));
      return;
    case DType::F64:
      raw_put<double>(t, i, static_cast<double>(v));
      return;
    case DType::C64:
      raw_put<c64>(t, i, c64(static_cast<float>(v), 0.0f));
      return;
  }
  bad_dtype("store_int", t.dtype());
}

void store_real(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::Bool:
      raw_put<uint8_t>(t, i, v != 0.0);
      return;  // NaN != 0: true
    case DType::F16:
      raw_put<f16>(t, i, f16(round_to_odd(v)));
      return;
    case DType::BF16:
      raw_put<bf16>(t, i, bf16(round_to_odd(v)));
      return;
    case DType::F32:
      raw_put<float>(t, i, static_cast<float>(v));
      return;
    case DType::F64:
      raw_put<double>(t, i, v);
      return;
    case DType::C64:
      raw_put<c64>(t, i, c64(static_cast<float>(v), 0.0f));
      return;
    case DType::I8:
    case DType::U8:
    case DType::I32:
    case DType::I64:
    case DType::I4:
      store_int(t, i, saturate(v, int_range_lo(t.dtype()), int_range_hi(t.dtype())));
      return;
  }
  bad_dtype("store_real", t.dtype());
}

void store_complex(const Tensor& t, int64_t i, cd v) {
  if (t.dtype() == DType::C64)
    raw_put<c64>(t, i, c64(static_cast<float>(v.real()), static_cast<float>(v.imag())));
  else if (t.dtype() == DType::Bool)
    raw_put<uint8_t>(t, i, v != cd(0.0, 0.0));
  else
    store_real(t, i, v.real());
}

void copy_element(const Tensor& src, int64_t src_off, const Tensor& dst, int64_t dst_i) {
  if (src.dtype() == DType::I4 || dst.dtype() != src.dtype()) bad_dtype("copy_element", src.dtype());
  size_t es = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + dst_i * int64_t(es),
              static_cast<const char*>(src.raw()) + src_off * int64_t(es), es);
}

std::vector<int64_t> broadcast_strides(const Tensor& t, const Shape& shape) {
  const Shape& s = t.shape();
  if (s.size() > shape.size())
    throw InternalError("reference: cannot broadcast " + shape_str(s) + " to " + shape_str(shape));
  std::vector<int64_t> r(shape.size(), 0);
  size_t lead = shape.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) {
    if (s[d] == shape[lead + d])
      r[lead + d] = s[d] == 1 ? 0 : t.strides()[d];
    else if (s[d] != 1)
      throw InternalError("reference: cannot broadcast " + shape_str(s) + " to " + shape_str(shape));
  }
  return r;
}

}  // namespace rlx::reference
