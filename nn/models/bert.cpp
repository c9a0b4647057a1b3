#include "nn/models/bert.hpp"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/env.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/ggml_blocks.hpp"
#include "io/gguf.hpp"
#include "io/json_text.hpp"
#include "io/onnx.hpp"
#include "io/safetensors.hpp"
#include "nn/layers.hpp"
#include "nn/models/model_files.hpp"
#include "nn/packed.hpp"
#include "runtime/device.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

namespace rlx::nn {

namespace {

namespace fs = std::filesystem;

using model_files::gguf_int;
using model_files::int_field;
using model_files::ModuleLocation;
using model_files::string_field;
using model_files::to_f32;

nlohmann::json read_json(const std::string& path) { return model_files::read_config(path); }

}  // namespace

BertConfig BertConfig::from_file(const std::string& path) {
  const nlohmann::json j = read_json(path);
  if (!j.is_object()) throw InputError(path + ": the configuration must be a JSON object");
  const std::string type = string_field(j, path, "model_type", "bert");
  if (type != "bert") throw InputError(path + ": model_type \"" + type + "\" is not yet supported (only \"bert\")");
  const std::string act = string_field(j, path, "hidden_act", "gelu");
  if (act != "gelu") throw InputError(path + ": hidden_act \"" + act + "\" is not supported (only \"gelu\", the erf form)");
  const std::string pos = string_field(j, path, "position_embedding_type", "absolute");
  if (pos != "absolute") throw InputError(path + ": position_embedding_type \"" + pos + "\" is not supported (only \"absolute\")");
  constexpr int64_t kBig = int64_t(1) << 24;
  BertConfig c;
  c.vocab_size = int_field(j, path, "vocab_size", -1, 1, kBig);
  c.hidden_size = int_field(j, path, "hidden_size", -1, 1, 1 << 16);
  c.num_layers = int_field(j, path, "num_hidden_layers", -1, 1, 1024);
  c.num_heads = int_field(j, path, "num_attention_heads", -1, 1, 1024);
  c.intermediate_size = int_field(j, path, "intermediate_size", -1, 1, 1 << 18);
  c.max_positions = int_field(j, path, "max_position_embeddings", -1, 1, 1 << 20);
  c.type_vocab_size = int_field(j, path, "type_vocab_size", 2, 1, 1 << 16);
  if (j.contains("layer_norm_eps")) {
    const nlohmann::json& e = j.at("layer_norm_eps");
    if (!e.is_number() || !(e.get<double>() > 0) || !(e.get<double>() < 1))
      throw InputError(path + ": \"layer_norm_eps\" must be a number in (0, 1), got " + e.dump());
    c.layer_norm_eps = e.get<double>();
  }
  if (c.hidden_size % c.num_heads)
    throw InputError(path + ": " + std::to_string(c.num_heads) + " attention heads do not divide hidden_size " +
                     std::to_string(c.hidden_size));
  return c;
}

Var bert_encoder(Model& m, const BertConfig& c, const Var& ids, const Var& token_type_ids, const Var& attention_mask) {
  if (ids.rank() != 2 || ids.dtype() != DType::I64)
    throw InputError("bert_encoder: ids must be i64 [B, L], got " + ids.type().str());
  const int64_t len = ids.shape()[1], h = c.hidden_size;
  for (const Var* v : {&token_type_ids, &attention_mask})
    if (v->type() != ids.type())
      throw InputError("bert_encoder: token_type_ids and attention_mask must be " + ids.type().str() + " like the ids, got " +
                       v->type().str());
  if (len > c.max_positions)
    throw InputError("bert_encoder: " + std::to_string(len) + " positions, the model has " + std::to_string(c.max_positions));
  ir::Graph& g = *ids.graph();
  Var x;
  {
    ModuleLocation at("embeddings");
    Model::Scope scope(m, "embeddings");
    Var words = embedding(m, "word_embeddings", ids, c.vocab_size, h);
    Var positions = embedding(m, "position_embeddings", iota(g, {len}, 0, DType::I64), c.max_positions, h);
    Var types = embedding(m, "token_type_embeddings", token_type_ids, c.type_vocab_size, h);
    x = layer_norm(m, "LayerNorm", words + positions + types, c.layer_norm_eps);
  }
  Var padding;  // true where a key is padding
  {
    ModuleLocation at("attention_mask");
    padding = eq(attention_mask, scalar_like(attention_mask, 0.0));
  }
  // A projection with a bias, over packed blocks where c holds its weight packed.
  const Projection project = [&c](Model& m, const std::string& name, const Var& in, int64_t out, SrcLoc loc) {
    const auto it = c.packed.find(m.scoped(name));
    if (it == c.packed.end()) return linear(m, name, in, out, true, loc);
    Var y = linear_packed(m, name, in, out, it->second, loc);
    Model::Scope scope(m, name);
    return y + m.param("bias", {out}, Init::zeros(), loc);
  };
  const AttentionNames names{.q = "self/query", .k = "self/key", .v = "self/value", .out = "output/dense", .project = project};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string layer = "encoder/layer/" + std::to_string(i);
    Model::Scope scope(m, layer);
    {
      ModuleLocation at(checkpoint_name(layer) + ".attention");
      Var a = multi_head_attention(m, "attention", x, x, c.num_heads, false, padding, names);
      x = layer_norm(m, "attention/output/LayerNorm", x + a, c.layer_norm_eps);
    }
    Var f;
    {
      ModuleLocation at(checkpoint_name(layer) + ".intermediate");
      f = gelu(project(m, "intermediate/dense", x, c.intermediate_size, SrcLoc::current()), "none");
    }
    ModuleLocation at(checkpoint_name(layer) + ".output");
    f = project(m, "output/dense", f, h, SrcLoc::current());
    x = layer_norm(m, "output/LayerNorm", x + f, c.layer_norm_eps);
  }
  return x;
}

Var mean_pool(const Var& hidden, const Var& mask, SrcLoc loc) {
  if (hidden.rank() != 3 || mask.rank() != 2 || mask.shape()[0] != hidden.shape()[0] || mask.shape()[1] != hidden.shape()[1])
    throw InputError("mean_pool: hidden [B, L, H] and mask [B, L] expected, got " + hidden.type().str() + " and " +
                     mask.type().str());
  const int64_t b = hidden.shape()[0], len = hidden.shape()[1];
  Var w = cast(reshape(mask, {b, len, 1}, loc), hidden.dtype(), loc);
  Var total = sum(hidden * w, {1}, false, loc);
  // (at least 1e-9 tokens, as sentence-transformers clamps: an all-padding row gives zeros)
  Var count = maximum(sum(w, {1}, false, loc), scalar_like(w, 1e-9, loc), loc);
  return total / count;
}

Var l2_normalize(const Var& x, SrcLoc loc) {
  Var norm = sqrt(sum(x * x, {-1}, true, loc), loc);
  return x / maximum(norm, scalar_like(norm, 1e-12, loc), loc);
}

std::string checkpoint_name(const std::string& parameter) {
  std::string s = parameter;
  for (char& ch : s)
    if (ch == '/') ch = '.';
  return s;
}

Tensor load_parameter(const io::SafetensorsFile& f, const std::string& name, const Parameter& p) {
  if (p.type.dtype != DType::F32)
    throw InputError("load_parameters: the model's parameters must be f32, '" + p.name + "' is " + dtype_name(p.type.dtype));
  if (!f.contains(name)) throw InputError(f.path() + ": the tensor '" + name + "' is missing");
  const io::SafetensorsEntry& e = f.entry(name);
  if (e.shape != p.type.shape)
    throw InputError(f.path() + ": the tensor '" + name + "' is " + shape_str(e.shape) + ", the model needs " +
                     shape_str(p.type.shape));
  if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16")
    throw InputError(f.path() + ": the tensor '" + name + "' is " + e.dtype + ", the model needs F32, F16 or BF16");
  return to_f32(f.view(name));  // f32: over the mapping, no copy
}

std::vector<Tensor> load_parameters(const Model& m, const std::string& safetensors_path, const std::string& prefix) {
  const io::SafetensorsFile f(safetensors_path);
  std::vector<Tensor> out;
  for (const Parameter& p : m.parameters()) out.push_back(load_parameter(f, prefix + checkpoint_name(p.name), p));
  return out;
}

std::vector<Tensor> load_sharded_parameters(const Model& m, const std::string& index_path, const std::string& prefix) {
  const std::map<std::string, std::string> map = model_files::shard_index(model_files::read_config(index_path), index_path);
  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> shards;  // opened on first use
  std::vector<Tensor> out;
  for (const Parameter& p : m.parameters()) {
    const std::string name = prefix + checkpoint_name(p.name);
    const auto it = map.find(name);
    if (it == map.end()) throw InputError(index_path + ": the tensor '" + name + "' is missing from weight_map");
    const std::string& file = it->second;
    std::unique_ptr<io::SafetensorsFile>& f = shards[file];
    if (!f) f = std::make_unique<io::SafetensorsFile>((dir / file).string());
    out.push_back(load_parameter(*f, name, p));
  }
  return out;
}

namespace {

// Every projection of a BERT layer, by its checkpoint scope under encoder/layer/N, and the
// name llama.cpp gives it; then the norms and tables.
const std::pair<const char*, const char*> kGgufLayerNames[] = {
    {"attention/self/query", "attn_q"},          {"attention/self/key", "attn_k"},     {"attention/self/value", "attn_v"},
    {"attention/output/dense", "attn_output"},   {"intermediate/dense", "ffn_up"},     {"output/dense", "ffn_down"},
    {"attention/output/LayerNorm", "attn_output_norm"}, {"output/LayerNorm", "layer_output_norm"}};
constexpr int kGgufProjections = 6;  // the first entries above
const std::pair<const char*, const char*> kGgufTopNames[] = {{"embeddings/word_embeddings", "token_embd"},
                                                             {"embeddings/position_embeddings", "position_embd"},
                                                             {"embeddings/token_type_embeddings", "token_types"},
                                                             {"embeddings/LayerNorm", "token_embd_norm"}};
constexpr int64_t kMaxGgufVocab = int64_t(1) << 24;

// A 2-D float table [rows, hidden] named `tensor` in f: its rows (InputError otherwise).
int64_t table_rows(const io::GgufFile& f, const std::string& tensor, int64_t hidden, int64_t max_rows) {
  const io::GgufTensor& t = f.tensor_info(tensor);
  if (t.shape.size() != 2 || t.shape[1] != hidden || t.shape[0] < 1 || t.shape[0] > max_rows)
    throw InputError(f.path() + ": " + tensor + " is " + shape_str(t.shape) + ", expected [rows, " + std::to_string(hidden) +
                     "] with 1 to " + std::to_string(max_rows) + " rows");
  return t.shape[0];
}

}  // namespace

BertConfig BertConfig::from_gguf(const io::GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch != "bert") throw InputError(f.path() + ": general.architecture is \"" + io::printable(arch, 40) + "\", not \"bert\"");
  BertConfig c;
  c.hidden_size = gguf_int(f, "bert.embedding_length", 1, 1 << 16);
  c.num_layers = gguf_int(f, "bert.block_count", 1, 1024);
  c.num_heads = gguf_int(f, "bert.attention.head_count", 1, 1024);
  c.intermediate_size = gguf_int(f, "bert.feed_forward_length", 1, 1 << 18);
  c.max_positions = gguf_int(f, "bert.context_length", 2, 1 << 20);
  c.layer_norm_eps = f.get_float("bert.attention.layer_norm_epsilon");
  if (!(c.layer_norm_eps > 0 && c.layer_norm_eps < 1))
    throw InputError(f.path() + ": bert.attention.layer_norm_epsilon must lie in (0, 1)");
  if (c.hidden_size % c.num_heads)
    throw InputError(f.path() + ": " + std::to_string(c.num_heads) + " attention heads do not divide bert.embedding_length " +
                     std::to_string(c.hidden_size));
  if (f.contains_key("bert.attention.causal") && f.get_bool("bert.attention.causal"))
    throw InputError(f.path() + ": bert.attention.causal is true; a BERT encoder attends both ways");
  if (f.contains_key("bert.pooling_type") && f.get_int("bert.pooling_type") != 1)
    throw InputError(f.path() + ": bert.pooling_type is " + std::to_string(f.get_int("bert.pooling_type")) +
                     "; only mean pooling (1) is supported");
  c.vocab_size = table_rows(f, "token_embd.weight", c.hidden_size, kMaxGgufVocab);
  c.type_vocab_size = table_rows(f, "token_types.weight", c.hidden_size, 1 << 16);
  const int64_t positions = table_rows(f, "position_embd.weight", c.hidden_size, 1 << 20);
  if (positions < c.max_positions)
    throw InputError(f.path() + ": position_embd.weight has " + std::to_string(positions) + " rows, bert.context_length is " +
                     std::to_string(c.max_positions));
  c.max_positions = positions;
  if (f.contains_key("tokenizer.ggml.token_type_count") && f.get_int("tokenizer.ggml.token_type_count") != c.type_vocab_size)
    throw InputError(f.path() + ": tokenizer.ggml.token_type_count " + std::to_string(f.get_int("tokenizer.ggml.token_type_count")) +
                     " differs from token_types.weight's " + std::to_string(c.type_vocab_size) + " rows");
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (int p = 0; p < kGgufProjections; ++p) {
      const std::string scope = "encoder/layer/" + std::to_string(i) + "/" + kGgufLayerNames[p].first;
      const std::string name = bert_gguf_tensor_name(scope + "/weight");
      if (!f.contains(name)) continue;  // (load_bert_gguf_weights names the missing tensor)
      const ggml::BlockFormat* b = ggml::block_format(f.tensor_info(name).type);
      if (b && b->block > 1) c.packed.emplace(scope, b->name);
    }
  return c;
}

std::string bert_gguf_tensor_name(const std::string& p) {
  const size_t slash = p.rfind('/');
  const std::string scope = slash == std::string::npos ? "" : p.substr(0, slash), leaf = p.substr(slash + 1);
  if (slash != std::string::npos && (leaf == "weight" || leaf == "bias")) {
    for (const auto& [from, to] : kGgufTopNames)
      if (scope == from) return std::string(to) + "." + leaf;
    const std::string head = "encoder/layer/";
    const size_t end = scope.find('/', head.size());
    if (scope.rfind(head, 0) == 0 && end != std::string::npos && end > head.size()) {
      const std::string index = scope.substr(head.size(), end - head.size());
      if (std::all_of(index.begin(), index.end(), ::isdigit))
        for (const auto& [from, to] : kGgufLayerNames)
          if (scope.compare(end + 1, std::string::npos, from) == 0) return "blk." + index + "." + to + "." + leaf;
    }
  }
  throw InputError("bert_gguf_tensor_name: '" + p + "' is not a BERT parameter");
}

std::vector<Tensor> load_bert_gguf_weights(Model& m, const io::GgufFile& f, const BertConfig& c) {
  return model_files::gguf_weights(
      m, f, bert_gguf_tensor_name, [&c](const std::string& layer) { return c.packed.count(layer) != 0; },
      [&f](const std::string& tensor, const std::string&, const Var& input) { return load_packed(f, tensor, input); });
}

std::vector<std::string> bert_gguf_vocab(const io::GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "bert")
    throw InputError(f.path() + ": tokenizer.ggml.model is \"" + io::printable(model, 40) + "\", not \"bert\" (WordPiece)");
  std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types;
  if (f.contains_key("tokenizer.ggml.token_type")) {
    types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
      throw InputError(f.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                       std::to_string(tokens.size()) + " tokens");
  }
  // llama.cpp marks where a word starts (U+2581, UTF-8 E2 96 81) and leaves continuations bare;
  // control tokens ([CLS], ...; every bracketed token in files of older converters) are kept.
  const std::string start = "\xE2\x96\x81";
  constexpr int64_t kControl = 3;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& t = tokens[i];
    const bool control = !types.empty() && types[i] == kControl;
    if (control) continue;
    if (t.rfind(start, 0) == 0)
      t.erase(0, start.size());
    else if (!(t.size() > 2 && t.front() == '[' && t.back() == ']'))
      t = "##" + t;
  }
  return tokens;
}

// One compiled forward program: ids, token_type_ids, attention_mask, then the parameters
// (from ONNX: the model's inputs by name, then weights_[weights[i]]).
struct SentenceEmbedder::Compiled {
  ir::Graph graph;
  std::unique_ptr<Program> program;
  std::unique_ptr<Executor> executor;
  // On a device that records runs (a CUDA graph on cuda): the program's device inputs (ids,
  // token types, mask, then the weights) and result, and the recorded run over them. A call
  // copies its ids into `in` and relaunches, instead of issuing each kernel from the host.
  bool tried_replay = false;
  std::vector<Tensor> in, out;
  std::unique_ptr<Replay> replay;
  std::vector<std::string> inputs;
  std::vector<size_t> weights;
};

namespace {

// The embedder's graph for [batch, length]: the embeddings [batch, hidden]; m's parameters
// come out in the order load_parameters reads them.
Var build_embedder(Model& m, const BertConfig& c, int64_t batch, int64_t length) {
  Var ids = m.input("input_ids", DType::I64, {batch, length});
  Var types = m.input("token_type_ids", DType::I64, {batch, length});
  Var mask = m.input("attention_mask", DType::I64, {batch, length});
  Var hidden = bert_encoder(m, c, ids, types, mask);
  Var pooled;
  {
    ModuleLocation at("pooling");  // (sentence-transformers' modules 1_Pooling and 2_Normalize)
    pooled = mean_pool(hidden, mask);
  }
  ModuleLocation at("normalize");
  return l2_normalize(pooled);
}

// The tokenizer's maximum length: sentence_bert_config.json's max_seq_length when present,
// else the model's positions.
int64_t max_length_of(const std::string& folder, const BertConfig& c) {
  const std::string p = (fs::path(folder) / "sentence_bert_config.json").string();
  std::error_code ec;
  if (!fs::exists(p, ec)) return c.max_positions;
  const nlohmann::json j = read_json(p);
  if (!j.is_object()) throw InputError(p + ": must be a JSON object");
  return int_field(j, p, "max_seq_length", c.max_positions, 2, c.max_positions);
}

// The pooling sentence-transformers applies must be the mean this class computes.
void check_pooling(const std::string& folder) {
  const std::string p = (fs::path(folder) / "1_Pooling" / "config.json").string();
  std::error_code ec;
  if (!fs::exists(p, ec)) return;
  const nlohmann::json j = read_json(p);
  for (const char* other : {"pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens"})
    if (j.contains(other) && j.at(other) == true)
      throw InputError(p + ": " + other + " is not supported (only mean pooling)");
  if (j.contains("pooling_mode_mean_tokens") && j.at("pooling_mode_mean_tokens") != true)
    throw InputError(p + ": pooling_mode_mean_tokens is off; only mean pooling is supported");
}

// The sentence-transformers pipeline (modules.json) must be the one this class computes:
// Transformer, Pooling, Normalize.
void check_modules(const std::string& folder) {
  const std::string p = (fs::path(folder) / "modules.json").string();
  std::error_code ec;
  if (!fs::exists(p, ec)) return;
  const nlohmann::json j = read_json(p);
  if (!j.is_array()) throw InputError(p + ": must be a JSON array of modules");
  bool normalize = false;
  for (const nlohmann::json& mod : j) {
    const std::string type = mod.is_object() ? string_field(mod, p, "type", "") : "";
    const std::string kind = type.substr(type.rfind('.') + 1);
    if (kind != "Transformer" && kind != "Pooling" && kind != "Normalize")
      throw InputError(p + ": the module \"" + type + "\" is not supported (only Transformer, Pooling, Normalize)");
    normalize = normalize || kind == "Normalize";
  }
  if (!normalize) throw InputError(p + ": no Normalize module; rlx's sentence embedder always L2-normalises");
}

bool is_onnx(const std::string& model) { return fs::path(model).extension() == ".onnx"; }

// The folder of config.json and vocab.txt: the model itself, or for an .onnx file its own
// folder or the one above it (sentence-transformers keeps onnx/model.onnx in the model folder).
std::string model_folder(const std::string& model) {
  if (!is_onnx(model)) return model;
  std::error_code ec;
  if (!fs::is_regular_file(model, ec)) throw InputError(model + ": no such file");
  const fs::path here = fs::absolute(model, ec).parent_path();
  for (const fs::path& d : {here, here.parent_path()})
    if (fs::exists(d / "config.json", ec) && fs::exists(d / "vocab.txt", ec)) return d.string();
  throw InputError(model + ": no config.json and vocab.txt beside it or in the folder above (sentence-transformers' "
                   "onnx/model.onnx layout); the tokenizer and the model's sizes come from them");
}

const char* const kOnnxInputs[] = {"input_ids", "attention_mask", "token_type_ids"};

// The imported encoder's inputs must be ids, mask and (optionally) token types, i64 [batch, sequence].
void check_onnx_inputs(const io::OnnxModelFile& f) {
  std::vector<std::string> names = f.input_names();
  for (const char* need : {"input_ids", "attention_mask"})
    if (std::find(names.begin(), names.end(), need) == names.end())
      throw InputError(f.path() + ": the model has no input '" + need + "' (a BERT encoder's inputs are input_ids, attention_mask, token_type_ids)");
  for (const std::string& n : names) {
    if (std::find(std::begin(kOnnxInputs), std::end(kOnnxInputs), n) == std::end(kOnnxInputs))
      throw InputError(f.path() + ": the input '" + n + "' is none of input_ids, attention_mask, token_type_ids");
    const TensorType t = f.input_type(n);
    if (t.dtype != DType::I64 || t.shape.size() != 2)
      throw InputError(f.path() + ": the input '" + n + "' must be i64 [batch, sequence], the file has " + t.str());
  }
}

BertConfig checked_config(const std::string& folder) {
  std::error_code ec;
  const fs::path config = fs::path(folder) / "config.json";
  if (!fs::is_directory(folder, ec) || !fs::exists(config, ec))
    throw InputError(folder + ": not a model folder (expected config.json, vocab.txt and model.safetensors in it)");
  return BertConfig::from_file(config.string());
}

// The tokenizer of a model folder (vocab.txt) or of a GGUF file (its vocabulary).
WordPieceTokenizer tokenizer_of(const std::string& folder, const io::GgufFile* gguf, const BertConfig& c, int64_t max_length) {
  if (max_length != 0 && (max_length < 2 || max_length > c.max_positions))
    throw InputError("max_length " + std::to_string(max_length) + " must lie in [2, " + std::to_string(c.max_positions) +
                     "], the model's positions");
  if (gguf) {
    WordPieceTokenizer t(bert_gguf_vocab(*gguf), gguf->path(), {.max_length = max_length ? max_length : c.max_positions});
    if (t.vocab_size() != c.vocab_size)
      throw InputError(gguf->path() + ": " + std::to_string(t.vocab_size()) + " tokens, token_embd.weight has " +
                       std::to_string(c.vocab_size) + " rows");
    // (the file's own special ids, where it gives them, must be the tokens the tokenizer uses)
    const std::pair<const char*, int64_t> specials[] = {{"tokenizer.ggml.cls_token_id", t.cls_id()},
                                                        {"tokenizer.ggml.seperator_token_id", t.sep_id()},
                                                        {"tokenizer.ggml.padding_token_id", t.pad_id()},
                                                        {"tokenizer.ggml.unknown_token_id", t.unk_id()}};
    for (const auto& [key, id] : specials)
      if (gguf->contains_key(key) && gguf->get_int(key) != id)
        throw InputError(gguf->path() + ": " + key + " is " + std::to_string(gguf->get_int(key)) + ", the vocabulary has it at " +
                         std::to_string(id));
    return t;
  }
  return WordPieceTokenizer::from_file((fs::path(folder) / "vocab.txt").string(),
                                       {.max_length = max_length ? max_length : max_length_of(folder, c)});
}

}  // namespace

SentenceEmbedder::SentenceEmbedder(const std::string& model, int64_t max_length)
    : folder_(model_files::is_gguf_path(model) ? fs::path(model).parent_path().string() : model_folder(model)),
      gguf_(model_files::is_gguf_path(model) ? std::make_shared<const io::GgufFile>(model) : nullptr),
      config_(gguf_ ? BertConfig::from_gguf(*gguf_) : checked_config(folder_)),
      tokenizer_(tokenizer_of(folder_, gguf_.get(), config_, max_length)) {
  if (gguf_) {
    ir::Graph g;
    Model m(g);
    build_embedder(m, config_, 1, 2);
    weights_ = load_bert_gguf_weights(m, *gguf_, config_);
    parameter_count_ = m.parameter_count();
    for (const auto& [scope, type] : config_.packed)  // (a packed layer counts the weights it encodes)
      parameter_count_ += gguf_->tensor_info(bert_gguf_tensor_name(scope + "/weight")).numel;
    return;
  }
  const std::string& folder = folder_;
  check_pooling(folder);
  check_modules(folder);
  const std::string vocab = (fs::path(folder) / "vocab.txt").string();
  if (tokenizer_.vocab_size() != config_.vocab_size)
    throw InputError(vocab + ": " + std::to_string(tokenizer_.vocab_size()) + " tokens, config.json says vocab_size " +
                     std::to_string(config_.vocab_size));
  if (is_onnx(model)) {
    onnx_ = std::make_shared<const io::OnnxModelFile>(model);
    check_onnx_inputs(*onnx_);
    Compiled probe;  // (imported once here: the weights and the output are checked before any embed)
    import_onnx(probe, 1, 2);
    for (const Tensor& w : weights_) parameter_count_ += w.numel();
    return;
  }
  ir::Graph g;
  Model m(g);
  build_embedder(m, config_, 1, 2);
  const std::string weights = (fs::path(folder) / "model.safetensors").string();
  std::error_code ec;
  if (!fs::exists(weights, ec)) throw InputError(weights + ": missing (only safetensors weights are read)");
  const io::SafetensorsFile probe(weights);
  const std::string prefix =
      !probe.contains("embeddings.word_embeddings.weight") && probe.contains("bert.embeddings.word_embeddings.weight") ? "bert."
                                                                                                                      : "";
  weights_ = load_parameters(m, weights, prefix);
  parameter_count_ = m.parameter_count();
}

SentenceEmbedder::~SentenceEmbedder() = default;

const std::vector<Tensor>& SentenceEmbedder::weights_on(Device& d) { return model_files::weights_on(device_weights_, weights_, d); }
// The ONNX encoder for [batch, length] with the embedder's pooling and normalisation after it;
// the weights it reads are found in weights_ by initializer name (added on first sight).
void SentenceEmbedder::import_onnx(Compiled& c, int64_t batch, int64_t length) {
  io::OnnxImportOptions o;
  for (const std::string& n : onnx_->input_names()) o.input_shapes[n] = {batch, length};
  o.evaluate = evaluator_for(DeviceRegistry::get().at("reference"));
  io::OnnxGraph g = onnx_->import_graph(o);
  c.graph = std::move(g.graph);
  c.inputs = g.inputs;
  size_t out = g.outputs.size();
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (g.outputs[i] == "last_hidden_state" || (out == g.outputs.size() && c.graph.type(c.graph.results[i]).shape.size() == 3))
      out = i;
  if (out == g.outputs.size()) throw InputError(onnx_->path() + ": no output last_hidden_state, nor any [batch, sequence, hidden] output");
  Var hidden(&c.graph, c.graph.results[out]);
  const Shape want{batch, length, config_.hidden_size};
  if (hidden.dtype() != DType::F32 || hidden.shape() != want)
    throw InputError(onnx_->path() + ": the output '" + g.outputs[out] + "' is " + hidden.type().str() + ", config.json's model gives f32" +
                     shape_str(want));
  const size_t mask_at = size_t(std::find(c.inputs.begin(), c.inputs.end(), "attention_mask") - c.inputs.begin());
  Var mask(&c.graph, c.graph.params.at(mask_at));
  c.graph.results.clear();
  Var pooled;
  {
    ModuleLocation at("pooling");
    pooled = mean_pool(hidden, mask);
  }
  {
    ModuleLocation at("normalize");
    output(c.graph, {l2_normalize(pooled)});
  }
  for (size_t i = 0; i < g.weight_names.size(); ++i) {
    auto it = std::find(weight_names_.begin(), weight_names_.end(), g.weight_names[i]);
    if (it == weight_names_.end()) {
      weight_names_.push_back(g.weight_names[i]);
      weights_.push_back(g.weights[i]);
      device_weights_.clear();
      it = weight_names_.end() - 1;
    }
    c.weights.push_back(size_t(it - weight_names_.begin()));
  }
}

SentenceEmbedder::Compiled& SentenceEmbedder::compiled(int64_t batch, int64_t length, Device& d) {
  const std::string key = d.name() + "/" + std::to_string(batch) + "x" + std::to_string(length);
  auto it = programs_.find(key);
  if (it != programs_.end()) return *it->second;
  auto c = std::make_unique<Compiled>();
  if (onnx_) {
    import_onnx(*c, batch, length);
  } else {
    Model m(c->graph);
    output(c->graph, {build_embedder(m, config_, batch, length)});
  }
  c->program = std::make_unique<Program>(compile(c->graph, d));
  c->executor = std::make_unique<Executor>(*c->program, d);
  return *programs_.emplace(key, std::move(c)).first->second;
}

Tensor SentenceEmbedder::embed(const TokenBatch& batch, Device& d) {
  if (batch.ids.rank() != 2 || batch.ids.dtype() != DType::I64)
    throw InputError("embed: ids must be i64 [B, L], got " + batch.ids.type().str());
  const int64_t b = batch.ids.shape()[0], len = batch.ids.shape()[1];
  if (b < 1 || len < 1) throw InputError("embed: an empty batch " + batch.ids.type().str());
  if (len > config_.max_positions)
    throw InputError("embed: " + std::to_string(len) + " tokens, the model has " + std::to_string(config_.max_positions) +
                     " positions");
  for (const Tensor* t : {&batch.attention_mask, &batch.token_type_ids})
    if (t->type() != batch.ids.type())
      throw InputError("embed: the mask and token types must be " + batch.ids.type().str() + ", got " + t->type().str());
  // (gather reads in-range indices only: ids from elsewhere than the tokenizer are checked)
  auto check_range = [&](const Tensor& t, int64_t hi, const char* what) {
    if (!t.is_host()) return;
    for (int64_t i = 0; i < t.numel(); ++i)
      if (t.data<int64_t>()[i] < 0 || t.data<int64_t>()[i] >= hi)
        throw InputError(std::string("embed: ") + what + " " + std::to_string(t.data<int64_t>()[i]) + " at " +
                         std::to_string(i) + " is outside [0, " + std::to_string(hi) + ")");
  };
  check_range(batch.ids, config_.vocab_size, "token id");
  check_range(batch.token_type_ids, config_.type_vocab_size, "token type");
  Compiled& c = compiled(b, len, d);
  const std::vector<Tensor>& w = weights_on(d);
  // The program's data inputs in its order (an ONNX model names its own), then its weights.
  std::vector<const Tensor*> data{&batch.ids, &batch.token_type_ids, &batch.attention_mask};
  std::vector<Tensor> weights = w;
  if (onnx_) {
    data.clear();
    weights.clear();
    for (const std::string& n : c.inputs)
      data.push_back(n == "input_ids" ? &batch.ids : n == "attention_mask" ? &batch.attention_mask : &batch.token_type_ids);
    for (size_t i : c.weights) weights.push_back(w[i]);
  }
  Allocator* a = d.allocator();
  // Recording pays off only where launches cost (not on host devices), and RLX_PROFILE's
  // per-kernel times need the kernels issued one by one.
  if (!c.tried_replay && !a->host_accessible() && env_choice("RLX_PROFILE", {"0", "1"}) == 0) {
    c.tried_replay = true;
    for (const Tensor* t : data) c.in.push_back(t->to(a));
    c.in.insert(c.in.end(), weights.begin(), weights.end());
    c.out = {Tensor::empty(DType::F32, {b, config_.hidden_size}, a)};
    try {
      c.replay = c.executor->capture(c.in, c.out);
    } catch (const InputError&) {  // the device cannot record this program: run it op by op
      c.replay.reset();
    }
    if (c.replay) return c.out[0].clone();  // capture() has run the program on these ids
  }
  if (c.replay) {
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i]->is_host())
        a->copy_from_host(c.in[i].raw(), data[i]->raw(), size_t(data[i]->nbytes()));
      else
        a->copy_within(c.in[i].raw(), (data[i]->is_contiguous() ? *data[i] : data[i]->to(a)).raw(),
                       size_t(data[i]->nbytes()));
    }
    c.replay->launch();
    return c.out[0].clone();  // the next call overwrites c.out
  }
  std::vector<Tensor> in;
  for (const Tensor* t : data) in.push_back(*t);
  in.insert(in.end(), weights.begin(), weights.end());
  return c.executor->run(in)[0];
}

// A multiple of 16 tokens: one program serves 16 lengths, so a stream of texts compiles a
// bounded number of programs (padding is masked out of attention and pooling).
int64_t SentenceEmbedder::padded_length(int64_t length) const {
  return std::min((length + 15) / 16 * 16, std::max(length, config_.max_positions));
}

std::string SentenceEmbedder::explain(int64_t batch, int64_t length, Device& d) {
  return compiled(batch, length, d).program->report.table();
}

Tensor SentenceEmbedder::embed(const std::vector<std::string>& texts, Device& d) {
  if (texts.empty()) throw InputError("embed: no texts");
  const TokenBatch b = tokenizer_.encode_batch(texts);
  const int64_t n = b.ids.shape()[0], len = b.ids.shape()[1], padded = padded_length(len);
  TokenBatch p{Tensor::zeros(DType::I64, {n, padded}), Tensor::zeros(DType::I64, {n, padded}),
               Tensor::zeros(DType::I64, {n, padded})};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < padded; ++c) {
      const bool in = c < len;
      p.ids.data<int64_t>()[r * padded + c] = in ? b.ids.data<int64_t>()[r * len + c] : tokenizer_.pad_id();
      p.attention_mask.data<int64_t>()[r * padded + c] = in ? b.attention_mask.data<int64_t>()[r * len + c] : 0;
      p.token_type_ids.data<int64_t>()[r * padded + c] = in ? b.token_type_ids.data<int64_t>()[r * len + c] : 0;
    }
  Tensor r = embed(p, d);
  return r.is_host() ? r : r.to(host_allocator());
}

}  // namespace rlx::nn
