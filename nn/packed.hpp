// Layers over packed (ggml-quantized) weights, and loading those weights from a GGUF file
// without decoding them (docs/io.md, "Packed weights"):
//
//   io::GgufFile f("model.gguf");
//   const std::string type = nn::packed_type(f, "blk.0.attn_q.weight");      // "Q4_K"
//   Var q = nn::linear_packed(m, "blk.0/attn_q", x, 4096, type);             // a u8 data input
//   ... compile, then feed nn::load_packed(f, "blk.0.attn_q.weight", q_weight_input)
//
// The weight is a data input (u8 [out, row_bytes], the GGUF blocks as they are stored), not
// a parameter: it is not trained and never drawn by initial_values(). The layer's node is
// matmul_packed, which a device runs natively or through the rewrite dequant-then-matmul.
#pragma once
#include <string>

#include "io/gguf.hpp"
#include "nn/model.hpp"

namespace rlx::nn {

// y = x · dequant(W)^T, W packed in format `type` ("Q8_0", "Q4_K", ... core/ggml_blocks.hpp)
// with `out` rows of x's last dimension: the data input scope + name + "/weight".
// InputError when x's last dimension is not a multiple of the format's block.
Var linear_packed(Model& m, const std::string& name, const Var& x, int64_t out, const std::string& type,
                  SrcLoc loc = SrcLoc::current());
// The input linear_packed declared for layer `name` (scope included): m.data_inputs()' entry.
Var packed_weight_input(const Model& m, const std::string& name);

// GGUF's name of the tensor's format, for linear_packed's `type`.
std::string packed_type(const io::GgufFile& f, const std::string& tensor);
// The tensor's blocks as the value of `input` (a packed weight input): InputError naming the
// file and the tensor when its format differs from the layer's or its shape from the input's.
Tensor load_packed(const io::GgufFile& f, const std::string& tensor, const Var& input);

// A float tensor [N, K] (F32, F16 or BF16) as the rows of a BF16 or F16 packed weight: u8
// [N, 2 K], each value rounded to nearest even (a value already of that format is copied as
// it is). InputError for another dtype, rank or format.
Tensor pack_floats(const Tensor& values, const std::string& type);

}  // namespace rlx::nn
