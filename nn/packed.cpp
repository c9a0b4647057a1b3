#include "nn/packed.hpp"

#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
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

}  // namespace rlx::nn
