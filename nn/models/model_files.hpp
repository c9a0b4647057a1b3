// What the model loaders of this folder share (bert.cpp, qwen3.cpp): reading a model's
// config.json as untrusted JSON, checked fields with InputErrors naming the file and the
// field, node locations named after a checkpoint's modules, and widening f16/bf16 weights.
// Internal to nn/models (not installed).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"
#include "ir/frontend.hpp"
#include "nn/model.hpp"

namespace rlx {
class Device;
namespace io {
class GgufFile;
}
}  // namespace rlx

namespace rlx::nn::model_files {

// A config.json's text parsed as untrusted JSON: malformed text is a ParseError at path:line,
// nesting past 16 levels (no model configuration nests that deep; the parser recurses) and a
// key given twice in one object an InputError naming the file (io::StrictJsonCheck).
nlohmann::json parse_config(std::string_view text, const std::string& path);
// The file read (at most 16 MiB) and parsed as parse_config parses it.
nlohmann::json read_config(const std::string& path);
// A prompts file's text (rlx generate --prompts): its non-empty lines (LF or CR LF ends) with
// their line numbers from 1. InputError naming `source` and the line for a line that is not
// UTF-8, and for more than max_prompts lines or none.
std::vector<std::pair<int64_t, std::string>> prompt_lines(std::string_view text, const std::string& source,
                                                          size_t max_prompts = 4096);
// Whether a model path names a GGUF file (its extension is .gguf, in any case) rather than a folder: the
// rule every loader and the CLI share.
bool is_gguf_path(const std::string& path);

// A sharded checkpoint's index (model.safetensors.index.json, parsed as parse_config does):
// its "weight_map", tensor name -> shard file. Every shard must be the plain name of a file
// beside the index (the index is untrusted: no folders, no "." or ".."); InputError naming
// `path` and the entry otherwise. Checked whole, before any shard is opened.
std::map<std::string, std::string> shard_index(const nlohmann::json& j, const std::string& path);

// An integer field in [lo, hi]; absent: def, or an error when def < 0.
int64_t int_field(const nlohmann::json& j, const std::string& path, const char* key, int64_t def, int64_t lo, int64_t hi);
// A string field; absent: def.
std::string string_field(const nlohmann::json& j, const std::string& path, const char* key, const std::string& def);
// A number field in (lo, hi) (open bounds); absent: def, or an error when `required`.
double number_field(const nlohmann::json& j, const std::string& path, const char* key, double def, double lo, double hi,
                    bool required = false);
// A GGUF integer metadata value in [lo, hi] (InputError naming the file and the key).
int64_t gguf_int(const io::GgufFile& f, const std::string& key, int64_t lo, int64_t hi);
// m's weight inputs read from a GGUF file, in the graph's order: each f32 parameter the tensor
// `tensor_name(parameter)` (F32 over the file's mapping, other types decoded; its shape checked), each packed layer's `.../weight` input
// (`packed(layer scope)` true) what `load_packed(tensor, layer, input)` gives; other inputs (ids,
// masks, caches) are skipped. InputError naming the file and the tensor (and its checkpoint
// name) when one is missing or of another shape.
std::vector<Tensor> gguf_weights(Model& m, const io::GgufFile& f, const std::function<std::string(const std::string&)>& tensor_name,
                                 const std::function<bool(const std::string&)>& packed,
                                 const std::function<Tensor(const std::string&, const std::string&, const Var&)>& load_packed);
// A bool field; absent: def.
bool bool_field(const nlohmann::json& j, const std::string& path, const char* key, bool def);

// The nodes made while one lives carry a module's checkpoint name as their location, so a
// dispatch report or an error names "encoder.layer.3.intermediate" as an imported model's
// node would be named, rather than the one line of the model's file that every layer shares.
struct ModuleLocation : LocationScope {
  explicit ModuleLocation(const std::string& module) : LocationScope(ir::Location{.name = module}) {}
};

// The host weights on device d, uploaded on first use and kept in `uploaded` by device name
// (host devices use the host tensors as they are).
const std::vector<Tensor>& weights_on(std::map<std::string, std::vector<Tensor>>& uploaded, const std::vector<Tensor>& host,
                                     Device& d);

// Host f32 of a float tensor (f16 and bf16 widen exactly).
Tensor to_f32(const Tensor& t);

}  // namespace rlx::nn::model_files
