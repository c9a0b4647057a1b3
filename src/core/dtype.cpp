#include "core/dtype.hpp"

namespace rlx {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::C64: return "c64";
    case DType::I4: return "i4";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view s) {
  for (DType t : kAllDTypes)
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::Bool: case DType::I8: case DType::U8: return 8;
    case DType::I32: case DType::F32: return 32;
    case DType::I64: case DType::F64: case DType::C64: return 64;
    case DType::F16: case DType::BF16: return 16;
    case DType::I4: return 4;
  }
  return 8;
}

bool is_float(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64; }
bool is_complex(DType t) { return t == DType::C64; }
bool is_integer(DType t) {
  return t == DType::I8 || t == DType::U8 || t == DType::I32 || t == DType::I64 || t == DType::I4;
}

}  // namespace rlx
