// Packed (quantized) weights: ggml's block formats kept as their bytes — a u8 tensor
// [N, row_bytes], row n holding the K / block blocks of weight row n — with the format and
// the logical row length K as attributes (core/ggml_blocks.hpp has the formats).
//   dequantize:     packed [N, row_bytes] -> f32 [N, K], bit for bit ggml's reference decode.
//   matmul_packed:  y[..., N] = x[..., K] · dequant(W)[N, K]^T in f32: the sum over k of
//                   x[k] * w[n, k] with w the exact f32 dequantized weight; devices may order
//                   the sum as they like (docs/io.md states the tolerance).
// A device without a native matmul_packed for a format runs the rewrite dequant-then-matmul
// (src/dispatch/rewrites.cpp): dequantize, then matmul.
#include <cstring>

#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
#include "core/half.hpp"
#include "ir/frontend.hpp"
#include "ir/ops/rules.hpp"

namespace rlx::ir {
using namespace rules;

namespace {

// The format the attributes name, after checking that the packed operand holds whole
// blocks of it: InputError naming the op and what differs.
const ggml::BlockFormat& packed_format(const char* op, const TensorType& w, const Attrs& a) {
  const std::string& type = a.get_string("type");
  const ggml::BlockFormat* f = ggml::block_format(type);
  if (!f)
    throw InputError(std::string(op) + ": type '" + type + "' is not a packed format rlx decodes (" +
                     ggml::block_format_names() + ")");
  const int64_t k = a.get_int("k");
  if (k <= 0) throw InputError(std::string(op) + ": k is " + std::to_string(k) + ", needs k >= 1");
  if (k % f->block != 0)
    throw InputError(std::string(op) + ": k = " + std::to_string(k) + " is not a multiple of " + f->name +
                     "'s block of " + std::to_string(f->block) + " elements");
  if (w.dtype != DType::U8) throw InputError(std::string(op) + ": the packed weight is " + dtype_name(w.dtype) + ", needs u8");
  if (w.shape.size() != 2)
    throw InputError(std::string(op) + ": the packed weight has rank " + std::to_string(w.shape.size()) +
                     ", needs [N, row_bytes]");
  const int64_t row_bytes = k / f->block * f->bytes;
  if (w.shape[1] != row_bytes)
    throw InputError(std::string(op) + ": the packed weight's rows are " + std::to_string(w.shape[1]) + " bytes, but " +
                     std::to_string(k) + " elements of " + f->name + " take " + std::to_string(row_bytes) + " (" +
                     std::to_string(k / f->block) + " blocks of " + std::to_string(f->bytes) + ")");
  return *f;
}

std::vector<AttrSpec> packed_attrs() {
  return {{"type", AttrKind::String, true, std::string()}, {"k", AttrKind::Int, true, int64_t(0)}};
}

// Valid blocks for the examples: random quants under finite scales, from a fixed seed (the
// op suite's random inputs would put NaN and Inf into the f16 scales).
Tensor example_blocks(const ggml::BlockFormat& f, int64_t rows, int64_t k, uint64_t seed) {
  const int64_t row_bytes = k / f.block * f.bytes;
  Tensor t = Tensor::empty(DType::U8, {rows, row_bytes});
  auto* p = t.data<unsigned char>();
  uint64_t s = seed;
  auto next = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(s >> 33);
  };
  auto put_half = [](unsigned char* at, float v) {
    const uint16_t h = f16::from_float(v);
    std::memcpy(at, &h, 2);
  };
  auto value = [&next] { return float(int(next() % 2001) - 1000) / 500.0f; };  // [-2, 2]
  const int64_t blocks = rows * (k / f.block);
  for (int64_t b = 0; b < blocks; ++b) {
    unsigned char* blk = p + b * f.bytes;
    for (int i = 0; i < f.bytes; ++i) blk[i] = static_cast<unsigned char>(next());
    switch (f.type) {
      case ggml::kF32: { const float v = value(); std::memcpy(blk, &v, 4); break; }
      case ggml::kF16: put_half(blk, value()); break;
      case ggml::kBF16: { const uint16_t h = bf16(value()).bits; std::memcpy(blk, &h, 2); break; }
      case ggml::kQ6_K: put_half(blk + 208, 0.01f + float(next() % 100) / 4000.0f); break;
      case ggml::kQ4_1: case ggml::kQ5_1: case ggml::kQ4_K: case ggml::kQ5_K:
        put_half(blk, 0.01f + float(next() % 100) / 4000.0f);
        put_half(blk + 2, 0.01f + float(next() % 100) / 4000.0f);
        break;
      default: put_half(blk, 0.01f + float(next() % 100) / 4000.0f); break;  // Q8_0 Q4_0 Q5_0
    }
  }
  return t;
}

Attrs packed_attrs_of(const ggml::BlockFormat& f, int64_t k) { return Attrs{{"type", std::string(f.name)}, {"k", k}}; }

// d/dx of x · W^T is the cotangent times W (the dequantized weight); the packed bytes have no gradient.
std::vector<Var> matmul_packed_vjp(const std::vector<Var>& in, const std::vector<Var>& out, const std::vector<Var>& g,
                                   const Attrs& a) {
  (void)out;
  const Var& x = in[0];
  const int64_t k = a.get_int("k"), n = in[1].shape()[0];
  Var w = op("dequantize", {in[1]}, a);
  Var g2 = reshape(g[0], {numel(x.shape()) / k, n});
  return {reshape(matmul(g2, w), x.shape()), Var()};
}

}  // namespace

void register_quant_ops(OpRegistry& r) {
  r.add({.name = "dequantize", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 1, .max_inputs = 1,
         .attrs = packed_attrs(),
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           packed_format("dequantize", in[0], a);
           return std::vector<TensorType>{{DType::F32, {in[0].shape[0], a.get_int("k")}}};
         },
         .not_differentiable = true,
         .dtypes = {DType::U8},
         .doc = "packed ggml blocks u8 [N, row_bytes] -> f32 [N, k] (attrs type, k), bit for bit ggml's decode",
         .example = [](ExampleInputs& x, DType) {
           std::vector<Var> r;
           uint64_t seed = 1;
           for (const ggml::BlockFormat& f : ggml::kBlockFormats)
             r.push_back(op("dequantize", {x.fixed(example_blocks(f, 3, 256, seed++))}, packed_attrs_of(f, 256)));
           return r;
         }});
  r.add({.name = "matmul_packed", .level = Level::Lib, .cls = OpClass::Library, .min_inputs = 2, .max_inputs = 2,
         .attrs = packed_attrs(),
         .infer = [](const std::vector<TensorType>& in, const Attrs& a, auto&) {
           packed_format("matmul_packed", in[1], a);
           require_dtype(in[0], {DType::F32}, "matmul_packed input");
           const int64_t k = a.get_int("k");
           if (in[0].shape.empty() || in[0].shape.back() != k)
             throw InputError("matmul_packed: the input's last dimension is " +
                              (in[0].shape.empty() ? std::string("absent (a scalar)") : std::to_string(in[0].shape.back())) +
                              ", the weight's rows have k = " + std::to_string(k));
           Shape s = in[0].shape;
           s.back() = in[1].shape[0];
           return std::vector<TensorType>{{DType::F32, s}};
         },
         .vjp = matmul_packed_vjp,
         .nondiff_inputs = {1},
         .dtypes = {DType::F32},
         .doc = "y[..., N] = x[..., k] f32 times dequantize(W packed [N, row_bytes])^T (attrs type, k)",
         .example = [](ExampleInputs& x, DType t) {
           std::vector<Var> r;
           Var a = x.in(t, {3, 256});
           uint64_t seed = 100;
           for (const char* name : {"Q8_0", "Q4_0", "Q4_K", "BF16", "F16"}) {
             const ggml::BlockFormat& f = *ggml::block_format(std::string_view(name));
             r.push_back(op("matmul_packed", {a, x.fixed(example_blocks(f, 5, 256, seed++))}, packed_attrs_of(f, 256)));
           }
           return r;
         }});
}

}  // namespace rlx::ir
