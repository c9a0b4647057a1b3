#include "nn/packed.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
#include "core/half.hpp"
#include "ir/op_registry.hpp"

namespace rlx::nn {

Var linear_packed(Model& m, const std::string& name, const Var& x, int64_t out, const std::string& type, SrcLoc loc) {
  const ggml::BlockFormat* f = ggml::block_format(type);
  if (!f)
    throw InputError("linear_packed '" + name + "': '" + type + "' is not a packed format (" +
                     ggml::block_format_names() + ")");
  if (x.rank() < 1) throw InputError("linear_packed '" + name + "': the input is a scalar");
  const int64_t k = x.shape().back();
  if (k % f->block != 0)
    throw InputError("linear_packed '" + name + "': rows of " + std::to_string(k) + " are not a multiple of " + type +
                     "'s block of " + std::to_string(f->block));
  Var w = m.input(name + "/weight", DType::U8, {out, k / f->block * f->bytes}, loc);
  return op("matmul_packed", {x, w}, {{"type", type}, {"k", k}}, loc);
}

Var packed_weight_input(const Model& m, const std::string& name) {
  const std::string want = m.scoped(name + "/weight");
  for (const Var& v : m.data_inputs())
    if (v.graph()->node(v.value()).attrs.get_string("name") == want) return v;
  throw InputError("no packed weight input '" + want + "' in the model");
}

std::string packed_type(const io::GgufFile& f, const std::string& tensor) {
  const char* name = io::ggml_type_name(f.tensor_info(tensor).type);
  return name ? name : "ggml type " + std::to_string(f.tensor_info(tensor).type);
}

Tensor load_packed(const io::GgufFile& f, const std::string& tensor, const Var& input) {
  io::PackedTensor p = f.packed(tensor);
  // The format the layer was built for: the type of the matmul_packed that reads the input
  // (Q4_0 and Q4_K rows of the same length take the same bytes, so the shape cannot tell).
  for (const ir::Node& n : input.graph()->nodes)
    if (n.op->name == "matmul_packed" && n.inputs.size() == 2 && n.inputs[1] == input.value() &&
        n.attrs.get_string("type") != p.type)
      throw InputError(f.path() + ": tensor '" + tensor + "' is " + p.type + " but the layer reading it was built for " +
                       n.attrs.get_string("type"));
  if (p.blocks.shape() != input.shape())
    throw InputError(f.path() + ": tensor '" + tensor + "' packs to " + shape_str(p.blocks.shape()) + " (" + p.type +
                     ", rows of " + std::to_string(p.k) + ") but the layer's input is " + shape_str(input.shape()));
  return std::move(p.blocks);
}

Tensor pack_floats(const Tensor& values, const std::string& type) {
  if (type != "BF16" && type != "F16") throw InputError("pack_floats: '" + type + "' is not BF16 or F16");
  const DType to = type == "BF16" ? DType::BF16 : DType::F16;
  if (values.rank() != 2) throw InputError("pack_floats: the values are " + shape_str(values.shape()) + ", need [N, K]");
  const Tensor v = values.contiguous();
  Tensor r = Tensor::empty(DType::U8, {v.shape()[0], 2 * v.shape()[1]});
  auto* out = r.data<uint16_t>();
  const int64_t n = v.numel();
  if (v.dtype() == to) {
    std::memcpy(out, v.raw(), size_t(n) * 2);
    return r;
  }
  auto put = [&](int64_t i, float x) { out[i] = to == DType::BF16 ? bf16::from_float(x) : f16::from_float(x); };
  if (v.dtype() == DType::F32)
    for (int64_t i = 0; i < n; ++i) put(i, v.data<float>()[i]);
  else if (v.dtype() == DType::F16)
    for (int64_t i = 0; i < n; ++i) put(i, float(v.data<f16>()[i]));
  else if (v.dtype() == DType::BF16)
    for (int64_t i = 0; i < n; ++i) put(i, float(v.data<bf16>()[i]));
  else
    throw InputError(std::string("pack_floats: a ") + dtype_name(v.dtype()) + " tensor is not F32, F16 or BF16");
  return r;
}

}  // namespace rlx::nn
