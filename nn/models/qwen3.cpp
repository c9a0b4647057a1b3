#include "nn/models/qwen3.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/env.hpp"
#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
#include "core/rng.hpp"
#include "io/file_bytes.hpp"
#include "io/gguf.hpp"
#include "io/json_text.hpp"
#include "io/safetensors.hpp"
#include "nn/layers.hpp"
#include "nn/models/bert.hpp"
#include "nn/models/model_files.hpp"
#include "nn/packed.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

namespace rlx::nn {

namespace {

namespace fs = std::filesystem;
using model_files::gguf_int;
using model_files::int_field;
using model_files::ModuleLocation;
using model_files::number_field;
using model_files::string_field;

constexpr int64_t kMaxVocab = int64_t(1) << 24, kMaxHidden = 1 << 16, kMaxIntermediate = 1 << 20, kMaxLayers = 1024,
                  kMaxHeads = 1024, kMaxHeadDim = 4096, kMaxPositions = int64_t(1) << 24;

// What both sources of a configuration must satisfy beyond each field's range.
void check_shape(const Qwen3Config& c, const std::string& where) {
  if (c.num_heads % c.num_kv_heads)
    throw InputError(where + ": " + std::to_string(c.num_kv_heads) + " key/value heads do not divide " +
                     std::to_string(c.num_heads) + " attention heads");
  if (c.head_dim % 2) throw InputError(where + ": head_dim " + std::to_string(c.head_dim) + " is odd (rotary embedding pairs features)");
}

Qwen3Config from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) throw InputError(path + ": the configuration must be a JSON object");
  if (!j.contains("model_type")) throw InputError(path + ": the field \"model_type\" is missing (expected \"qwen3\")");
  const std::string type = string_field(j, path, "model_type", "");
  if (type != "qwen3") throw InputError(path + ": model_type \"" + io::printable(type, 40) + "\" is not \"qwen3\"");
  const std::string act = string_field(j, path, "hidden_act", "silu");
  if (act != "silu") throw InputError(path + ": hidden_act \"" + io::printable(act, 40) + "\" is not supported (only \"silu\")");
  Qwen3Config c;
  c.vocab_size = int_field(j, path, "vocab_size", -1, 1, kMaxVocab);
  c.hidden_size = int_field(j, path, "hidden_size", -1, 1, kMaxHidden);
  c.intermediate_size = int_field(j, path, "intermediate_size", -1, 1, kMaxIntermediate);
  c.num_layers = int_field(j, path, "num_hidden_layers", -1, 1, kMaxLayers);
  c.num_heads = int_field(j, path, "num_attention_heads", -1, 1, kMaxHeads);
  c.num_kv_heads = int_field(j, path, "num_key_value_heads", c.num_heads, 1, c.num_heads);
  if (!j.contains("head_dim") && c.hidden_size % c.num_heads)
    throw InputError(path + ": no \"head_dim\", and " + std::to_string(c.num_heads) + " heads do not divide hidden_size " +
                     std::to_string(c.hidden_size));
  c.head_dim = int_field(j, path, "head_dim", c.hidden_size / c.num_heads, 2, kMaxHeadDim);
  c.max_positions = int_field(j, path, "max_position_embeddings", -1, 1, kMaxPositions);
  c.rms_norm_eps = number_field(j, path, "rms_norm_eps", 1e-6, 0, 1);
  c.tie_word_embeddings = model_files::bool_field(j, path, "tie_word_embeddings", false);
  if (model_files::bool_field(j, path, "attention_bias", false))
    throw InputError(path + ": \"attention_bias\" is true; Qwen3's projections have no bias");
  if (model_files::bool_field(j, path, "use_sliding_window", false))
    throw InputError(path + ": \"use_sliding_window\" is true; sliding-window attention is not supported");
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null())
    throw InputError(path + ": \"rope_scaling\" is set; scaled rotary embeddings are not supported");
  // (transformers 5 writes rope_parameters {rope_type, rope_theta}; earlier versions rope_theta)
  if (j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) {
    const nlohmann::json& r = j.at("rope_parameters");
    const std::string where = path + ": rope_parameters";
    if (!r.is_object()) throw InputError(where + " must be a JSON object, got " + io::describe_json(r));
    const std::string rt = string_field(r, where, "rope_type", "default");
    if (rt != "default") throw InputError(where + ": rope_type \"" + io::printable(rt, 40) + "\" is not supported (only \"default\")");
    c.rope_theta = number_field(r, where, "rope_theta", 0, 1, 1e12, true);
    if (j.contains("rope_theta") && number_field(j, path, "rope_theta", 0, 1, 1e12) != c.rope_theta)
      throw InputError(path + ": \"rope_theta\" and rope_parameters' rope_theta differ");
  } else {
    c.rope_theta = number_field(j, path, "rope_theta", 10000.0, 1, 1e12);
  }
  check_shape(c, path);
  return c;
}

void check_sampling(const SamplingOptions& s) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    throw InputError("sampling: temperature must be a finite number >= 0, got " + std::to_string(s.temperature));
  if (s.top_k < 0) throw InputError("sampling: top_k must be >= 0, got " + std::to_string(s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1)) throw InputError("sampling: top_p must lie in (0, 1], got " + std::to_string(s.top_p));
}

Tensor host(const Tensor& t) { return t.is_host() ? t : t.to(host_allocator()); }

// i64 [B, T] of B sequences of T ids (checked to share one length by the caller).
Tensor ids_tensor(const std::vector<std::vector<int64_t>>& batch) {
  const int64_t t = int64_t(batch.at(0).size());
  Tensor r = Tensor::empty(DType::I64, {int64_t(batch.size()), t});
  for (size_t b = 0; b < batch.size(); ++b) std::copy(batch[b].begin(), batch[b].end(), r.data<int64_t>() + int64_t(b) * t);
  return r;
}

ir::Attrs packed_attrs(const std::string& type, int64_t k) { return ir::Attrs{{"type", type}, {"k", k}}; }

// A projection without bias: over an f32 parameter, or over packed blocks (nn::linear_packed)
// when the configuration keeps this layer's weight packed.
Var projection(Model& m, const Qwen3Config& c, const std::string& name, const Var& x, int64_t out) {
  auto it = c.packed.find(m.scoped(name));
  if (it == c.packed.end()) return linear(m, name, x, out, false);
  return linear_packed(m, name, x, out, it->second);
}

void write_i64(Tensor& dst, int64_t v) { dst.allocator()->copy_from_host(dst.raw(), &v, sizeof v); }

// The decoder for prefill (pos == nullptr: positions 0..T-1, causal attention among them) or
// for one decode step (positions {pos}, attention over the cache with position pos written).
// start (i64 [B], or none): each row's first real position, the ones before it padding that
// no real query attends to (prompts of different lengths, padded on the left). Every row
// keeps the slots' positions for its rotary embedding: a row's tokens sit start positions
// later than alone, which leaves every query-key distance as it was, so the scores are the
// same in exact arithmetic (in f32 the rotation angles round differently: the logits differ
// in the last bits).
Qwen3Outputs decoder(Model& m, const Qwen3Config& c, const Var& ids, int64_t cache_len, const Var* pos,
                     const std::vector<Var>* cache, bool all_logits, const Var* start = nullptr) {
  if (ids.rank() != 2 || ids.dtype() != DType::I64) throw InputError("qwen3: ids must be i64 [B, T], got " + ids.type().str());
  const int64_t b = ids.shape()[0], t = ids.shape()[1], nh = c.num_heads, kv = c.num_kv_heads, hd = c.head_dim;
  if (b < 1 || t < 1) throw InputError("qwen3: empty ids " + ids.type().str());
  if (start && start->type() != TensorType{DType::I64, {b}})
    throw InputError("qwen3: start must be i64 [" + std::to_string(b) + "], got " + start->type().str());
  if (cache_len < t || cache_len > c.max_positions)
    throw InputError("qwen3: a cache of " + std::to_string(cache_len) + " positions for " + std::to_string(t) +
                     " tokens (the model has " + std::to_string(c.max_positions) + ")");
  ir::Graph& g = *ids.graph();
  const Shape full{b, kv, cache_len, hd};
  if (cache) {
    if (cache->size() != size_t(2 * c.num_layers))
      throw InputError("qwen3: " + std::to_string(cache->size()) + " cache tensors, the model needs " +
                       std::to_string(2 * c.num_layers));
    for (const Var& v : *cache)
      if (v.type() != TensorType{DType::F32, full})
        throw InputError("qwen3: a cache tensor is " + v.type().str() + ", expected " + TensorType{DType::F32, full}.str());
  }
  Qwen3Outputs out;
  Var table, x, positions;
  std::optional<Var> bias;
  const auto packed_table = c.packed.find("model/embed_tokens");
  {
    ModuleLocation at("model.embed_tokens");
    Model::Scope scope(m, "model/embed_tokens");
    if (packed_table == c.packed.end()) {
      table = m.param("weight", {c.vocab_size, c.hidden_size}, Init::normal(0, 0.02));
      x = gather(table, ids, 0);
    } else {
      // The rows of the tokens at hand, decoded: the table itself stays packed.
      const ggml::BlockFormat* f = ggml::block_format(packed_table->second);
      if (!f || c.hidden_size % f->block)
        throw InputError("qwen3: the embedding cannot be packed as '" + packed_table->second + "' with rows of " +
                         std::to_string(c.hidden_size));
      table = m.input("weight", DType::U8, {c.vocab_size, c.hidden_size / f->block * f->bytes});
      Var rows = gather(table, reshape(ids, {b * t}), 0);
      x = reshape(op("dequantize", {rows}, packed_attrs(packed_table->second, c.hidden_size)), {b, t, c.hidden_size});
    }
  }
  {
    ModuleLocation at("positions");
    // A row's padding: the keys before its start (a [B, S] mask, S the keys).
    auto after_start = [&](int64_t keys) {
      return ge(broadcast_to(reshape(iota(g, {keys}, 0, DType::I64), {1, keys}), {b, keys}),
                broadcast_to(reshape(*start, {b, 1}), {b, keys}));
    };
    if (pos) {
      positions = reshape(*pos, {1});
      // Keys after pos hold nothing yet (zeros, or an earlier sequence): -inf before the softmax.
      Var keep = le(iota(g, {cache_len}, 0, DType::I64), broadcast_to(*pos, {cache_len}));
      const int64_t rows = start ? b : 1;
      if (start) keep = logical_and(broadcast_to(reshape(keep, {1, cache_len}), {b, cache_len}), after_start(cache_len));
      Var zero = broadcast_to(scalar(g, 0.0, DType::F32), keep.shape());
      Var minus = broadcast_to(scalar(g, -INFINITY, DType::F32), keep.shape());
      bias = reshape(where(keep, zero, minus), {rows, 1, 1, 1, cache_len});
    } else {
      positions = iota(g, {t}, 0, DType::I64);
      if (start) {
        // Beside the causal mask: no key before the row's start. The bias is a key row per
        // sequence ([B, 1, 1, 1, T], not [B, T, T]), and finite: a padding query, whose keys
        // are all padding, then averages them instead of making its softmax NaN (its output
        // is never read); a real query gives them weight exactly 0 (exp(-1e30) underflows).
        Var keep = after_start(t);
        Var zero = broadcast_to(scalar(g, 0.0, DType::F32), {b, t});
        Var minus = broadcast_to(scalar(g, -1e30, DType::F32), {b, t});
        bias = reshape(where(keep, zero, minus), {b, 1, 1, 1, t});
      }
    }
  }
  const double eps = c.rms_norm_eps;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string layer = "model/layers/" + std::to_string(i);
    Model::Scope scope(m, layer);
    Var h;
    {
      ModuleLocation at(checkpoint_name(layer) + ".self_attn");
      Var a = rms_norm(m, "input_layernorm", x, eps);
      Model::Scope attn(m, "self_attn");
      Var q = reshape(projection(m, c, "q_proj", a, nh * hd), {b, t, nh, hd});
      Var k = reshape(projection(m, c, "k_proj", a, kv * hd), {b, t, kv, hd});
      Var v = reshape(projection(m, c, "v_proj", a, kv * hd), {b, t, kv, hd});
      q = permute(rotary_embedding(rms_norm(m, "q_norm", q, eps), positions, c.rope_theta), {0, 2, 1, 3});
      k = permute(rotary_embedding(rms_norm(m, "k_norm", k, eps), positions, c.rope_theta), {0, 2, 1, 3});
      v = permute(v, {0, 2, 1, 3});
      Var o;
      if (pos) {
        // The new k/v rows written at position pos. update_slice may take the cache's buffer
        // (Program::donations): a step that passes one set of tensors as both the cache in and
        // the cache out then writes B x kv rows instead of streaming the whole cache.
        Var kc = update_slice((*cache)[size_t(2 * i)], k, *pos, 2);
        Var vc = update_slice((*cache)[size_t(2 * i + 1)], v, *pos, 2);
        o = grouped_query_attention(q, kc, vc, false, bias);
        out.cache.push_back(kc);
        out.cache.push_back(vc);
      } else {
        o = grouped_query_attention(q, k, v, true, bias);
        for (const Var& kvt : {k, v})
          out.cache.push_back(cache_len == t ? kvt : pad(kvt, {0, 0, 0, 0}, {0, 0, cache_len - t, 0}));
      }
      h = projection(m, c, "o_proj", reshape(permute(o, {0, 2, 1, 3}), {b, t, nh * hd}), c.hidden_size);
    }
    x = x + h;
    ModuleLocation at(checkpoint_name(layer) + ".mlp");
    Var a = rms_norm(m, "post_attention_layernorm", x, eps);
    Model::Scope mlp(m, "mlp");
    Var gate = projection(m, c, "gate_proj", a, c.intermediate_size);
    Var up = projection(m, c, "up_proj", a, c.intermediate_size);
    x = x + projection(m, c, "down_proj", silu(gate) * up, c.hidden_size);
  }
  {
    ModuleLocation at("model.norm");
    Model::Scope scope(m, "model");
    x = rms_norm(m, "norm", x, eps);
  }
  ModuleLocation at("lm_head");
  if (!all_logits && t > 1) x = slice(x, {0, t - 1, 0}, {b, t, c.hidden_size});
  if (!c.tie_word_embeddings)
    out.logits = projection(m, c, "lm_head", x, c.vocab_size);
  else if (packed_table != c.packed.end())
    out.logits = op("matmul_packed", {x, table}, packed_attrs(packed_table->second, c.hidden_size));
  else
    out.logits = rlx::linear(x, table);
  return out;
}

}  // namespace

Qwen3Config Qwen3Config::from_file(const std::string& path) { return from_json(model_files::read_config(path), path); }

Qwen3Config Qwen3Config::from_text(std::string_view text, const std::string& name) {
  return from_json(model_files::parse_config(text, name), name);
}

Qwen3Config Qwen3Config::from_gguf(const io::GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch != "qwen3")
    throw InputError(f.path() + ": general.architecture is \"" + io::printable(arch, 40) + "\", not \"qwen3\"");
  Qwen3Config c;
  c.hidden_size = gguf_int(f, "qwen3.embedding_length", 1, kMaxHidden);
  c.intermediate_size = gguf_int(f, "qwen3.feed_forward_length", 1, kMaxIntermediate);
  c.num_layers = gguf_int(f, "qwen3.block_count", 1, kMaxLayers);
  c.num_heads = gguf_int(f, "qwen3.attention.head_count", 1, kMaxHeads);
  c.num_kv_heads = f.contains_key("qwen3.attention.head_count_kv") ? gguf_int(f, "qwen3.attention.head_count_kv", 1, c.num_heads)
                                                                    : c.num_heads;
  if (!f.contains_key("qwen3.attention.key_length") && c.hidden_size % c.num_heads)
    throw InputError(f.path() + ": no qwen3.attention.key_length, and the heads do not divide the embedding length");
  c.head_dim = f.contains_key("qwen3.attention.key_length") ? gguf_int(f, "qwen3.attention.key_length", 2, kMaxHeadDim)
                                                            : c.hidden_size / c.num_heads;
  if (f.contains_key("qwen3.attention.value_length") && f.get_int("qwen3.attention.value_length") != c.head_dim)
    throw InputError(f.path() + ": qwen3.attention.value_length differs from key_length " + std::to_string(c.head_dim));
  c.max_positions = gguf_int(f, "qwen3.context_length", 1, kMaxPositions);
  c.rms_norm_eps = f.get_float("qwen3.attention.layer_norm_rms_epsilon");
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1))
    throw InputError(f.path() + ": qwen3.attention.layer_norm_rms_epsilon must lie in (0, 1)");
  c.rope_theta = f.contains_key("qwen3.rope.freq_base") ? f.get_float("qwen3.rope.freq_base") : 10000.0;
  if (!(c.rope_theta > 1 && c.rope_theta < 1e12)) throw InputError(f.path() + ": qwen3.rope.freq_base must lie in (1, 1e12)");
  if (f.contains_key("qwen3.rope.scaling.type") && f.get_string("qwen3.rope.scaling.type") != "none")
    throw InputError(f.path() + ": qwen3.rope.scaling.type is set; scaled rotary embeddings are not supported");
  const io::GgufTensor& emb = f.tensor_info("token_embd.weight");
  if (emb.shape.size() != 2 || emb.shape[1] != c.hidden_size || emb.shape[0] < 1 || emb.shape[0] > kMaxVocab)
    throw InputError(f.path() + ": token_embd.weight is " + shape_str(emb.shape) + ", expected [vocab, " +
                     std::to_string(c.hidden_size) + "]");
  c.vocab_size = emb.shape[0];
  if (f.contains_key("qwen3.vocab_size") && f.get_int("qwen3.vocab_size") != c.vocab_size)
    throw InputError(f.path() + ": qwen3.vocab_size " + std::to_string(f.get_int("qwen3.vocab_size")) +
                     " differs from token_embd.weight's " + std::to_string(c.vocab_size) + " rows");
  c.tie_word_embeddings = !f.contains("output.weight");
  check_shape(c, f.path());
  return c;
}

Qwen3Outputs qwen3_prefill(Model& m, const Qwen3Config& c, const Var& ids, int64_t cache_len, bool all_logits,
                           const Var* start) {
  return decoder(m, c, ids, cache_len, nullptr, nullptr, all_logits, start);
}

Qwen3Outputs qwen3_decode(Model& m, const Qwen3Config& c, const Var& ids, const Var& pos, const std::vector<Var>& cache,
                          const Var* start) {
  if (ids.rank() != 2 || ids.shape()[1] != 1) throw InputError("qwen3_decode: ids must be [B, 1], got " + ids.type().str());
  if (pos.type() != TensorType{DType::I64, {}}) throw InputError("qwen3_decode: pos must be i64 [], got " + pos.type().str());
  if (cache.empty() || cache[0].rank() != 4) throw InputError("qwen3_decode: the cache must be [B, kv_heads, length, head_dim] tensors");
  return decoder(m, c, ids, cache[0].shape()[2], &pos, &cache, true, start);
}

std::string gguf_tensor_name(const std::string& p) {
  static const std::map<std::string, std::string> top{{"model/embed_tokens/weight", "token_embd.weight"},
                                                       {"model/norm/weight", "output_norm.weight"},
                                                       {"lm_head/weight", "output.weight"}};
  static const std::map<std::string, std::string> layer{
      {"self_attn/q_proj", "attn_q"},          {"self_attn/k_proj", "attn_k"},     {"self_attn/v_proj", "attn_v"},
      {"self_attn/o_proj", "attn_output"},     {"self_attn/q_norm", "attn_q_norm"}, {"self_attn/k_norm", "attn_k_norm"},
      {"input_layernorm", "attn_norm"},        {"post_attention_layernorm", "ffn_norm"}, {"mlp/gate_proj", "ffn_gate"},
      {"mlp/up_proj", "ffn_up"},               {"mlp/down_proj", "ffn_down"}};
  if (auto it = top.find(p); it != top.end()) return it->second;
  const std::string head = "model/layers/", tail = "/weight";
  if (p.rfind(head, 0) == 0 && p.size() > head.size() + tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0) {
    const size_t slash = p.find('/', head.size());
    const std::string index = p.substr(head.size(), slash - head.size());
    if (slash != std::string::npos && !index.empty() && std::all_of(index.begin(), index.end(), ::isdigit))
      if (auto it = layer.find(p.substr(slash + 1, p.size() - tail.size() - slash - 1)); it != layer.end())
        return "blk." + index + "." + it->second + ".weight";
  }
  throw InputError("gguf_tensor_name: '" + p + "' is not a Qwen3 parameter");
}

namespace {
// The scopes of the weights a model may keep packed: the embedding, the lm_head when untied,
// every projection.
std::vector<std::string> packable_scopes(const Qwen3Config& c) {
  std::vector<std::string> scopes{"model/embed_tokens"};
  if (!c.tie_word_embeddings) scopes.push_back("lm_head");
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (const char* p : {"self_attn/q_proj", "self_attn/k_proj", "self_attn/v_proj", "self_attn/o_proj", "mlp/gate_proj",
                          "mlp/up_proj", "mlp/down_proj"})
      scopes.push_back("model/layers/" + std::to_string(i) + "/" + p);
  return scopes;
}

bool is_float16(const std::string& type) { return type == "BF16" || type == "F16"; }
}  // namespace

Qwen3Weights qwen3_weights_named(const std::string& name) {
  if (name == "stored") return Qwen3Weights::AsStored;
  if (name == "f32") return Qwen3Weights::F32;
  if (name == "bf16") return Qwen3Weights::BF16;
  throw InputError("weights '" + name + "': expected stored, f32 or bf16");
}

std::map<std::string, std::string> gguf_packed_weights(const io::GgufFile& f, const Qwen3Config& c, Qwen3Weights w) {
  std::map<std::string, std::string> r;
  if (w == Qwen3Weights::F32) return r;
  for (const std::string& s : packable_scopes(c)) {
    const std::string name = gguf_tensor_name(s + "/weight");
    if (!f.contains(name)) continue;  // (load_gguf_weights names the missing tensor)
    const io::GgufTensor& info = f.tensor_info(name);
    const char* type = io::ggml_type_name(info.type);
    const ggml::BlockFormat* b = type ? ggml::block_format(std::string_view(type)) : nullptr;
    if (w == Qwen3Weights::BF16) {
      if (!b || b->block != 1)
        throw InputError(f.path() + ": bf16 weights requested, but the tensor '" + name + "' is " +
                         (type ? std::string(type) : "ggml type " + std::to_string(info.type)) +
                         " (quantized weights are held as they are stored)");
      if (info.shape.size() == 2) r.emplace(s, "BF16");
      continue;
    }
    if (!b || b->type == ggml::kF32) continue;
    if (info.shape.size() != 2 || info.shape[1] % b->block) continue;  // (refused by shape when loaded)
    r.emplace(s, type);
  }
  return r;
}

std::vector<Tensor> load_gguf_weights(Model& m, const io::GgufFile& f, const Qwen3Config& c) {
  auto packed = [&](const std::string& tensor, const std::string& scope, const Var& input) {
    const auto layer = c.packed.find(scope);
    const std::string stored = packed_type(f, tensor);
    if (layer != c.packed.end() && layer->second != stored && is_float16(layer->second) && (stored == "F32" || is_float16(stored))) {
      Tensor t = pack_floats(f.dequantize(tensor), layer->second);  // (16-bit values are exact in f32)
      if (t.shape() != input.shape())
        throw InputError(f.path() + ": the tensor '" + tensor + "' is " + shape_str(f.tensor_info(tensor).shape) +
                         ", the layer's input is " + shape_str(input.shape()));
      return t;
    }
    return load_packed(f, tensor, input);
  };
  // (every packed layer's weight input: c.packed names exactly the layers built packed)
  return model_files::gguf_weights(m, f, gguf_tensor_name, [&c](const std::string& layer) { return c.packed.count(layer) != 0; },
                                   packed);
}

std::string qwen3_chat_prompt(const std::string& user, const std::optional<std::string>& system, bool thinking) {
  std::string t;
  if (system) t += "<|im_start|>system\n" + *system + "<|im_end|>\n";
  t += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  if (!thinking) t += "<think>\n\n</think>\n\n";
  return t;
}

int64_t sample_token(const float* logits, int64_t n, const SamplingOptions& s, uint64_t step) {
  if (n < 1) throw InputError("sample_token: no logits");
  check_sampling(s);
  if (s.temperature == 0) {
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(logits[i])) return i;
    return int64_t(std::max_element(logits, logits + n) - logits);  // (the first maximum)
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = s.top_k > 0 ? std::min(s.top_k, n) : n;
  if (keep < n || s.top_p < 1) {
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
    order.resize(size_t(keep));
  }
  const double top = logits[*std::max_element(order.begin(), order.end(), [&](int64_t a, int64_t b) { return before(b, a); })];
  std::vector<double> w(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) total += w[i] = std::exp((double(logits[order[i]]) - top) / s.temperature);
  if (s.top_p < 1) {  // the smallest prefix of the sorted tokens whose probability reaches top_p
    double cum = 0;
    size_t m = 0;
    while (m < w.size() && (m == 0 || cum < s.top_p * total)) cum += w[m++];
    w.resize(m);
    order.resize(m);
    total = cum;
  }
  const double u = rng_unit(s.seed, step) * total;
  double acc = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if ((acc += w[i]) > u) return order[i];
  return order.back();
}

struct Qwen3Generator::Program_ {
  ir::Graph graph;
  std::unique_ptr<Program> program;
  std::unique_ptr<Executor> exec;
};

// The decode step of one batch size and cache length on one device, with the cache's
// set(s) and the step's inputs and logits on the device. Where the compiled step writes each
// cache result over its cache input (Program::donations) there is one set, read and written
// in place; otherwise two, each step reading one and writing the other.
struct Qwen3Generator::Session {
  int64_t batch = 1, cache_len = 0;
  bool ragged = false;  // the step takes `start` (each row's first real position)
  Program_ decode;
  bool in_place = false;
  std::vector<Tensor> sets[2];
  // chosen: the logits' argmax, so that a greedy step brings back B ids instead of B × vocab
  // floats (9.7 MB a step at batch 16 for Qwen3's 151,936 tokens).
  Tensor ids, pos, start, logits, chosen;
  std::unique_ptr<Replay> replay[2];
  bool replayed = false;
  int next(int from) const { return in_place ? from : 1 - from; }
};

namespace {
void build_prefill(Model& m, const Qwen3Config& c, int64_t batch, int64_t length, int64_t cache_len, bool all_logits,
                   bool ragged = false) {
  Var ids = m.input("input_ids", DType::I64, {batch, length});
  std::optional<Var> start;
  if (ragged) start = m.input("start", DType::I64, {batch});
  Qwen3Outputs o = qwen3_prefill(m, c, ids, cache_len, all_logits, start ? &*start : nullptr);
  std::vector<Var> res{o.logits};
  res.insert(res.end(), o.cache.begin(), o.cache.end());
  output(m.graph(), res);
}

// The model's parameters by its configuration (packed weights count the elements they encode).
int64_t config_parameter_count(const Qwen3Config& c) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t layer = h * q + 2 * h * kv + q * h + 2 * c.head_dim + 2 * h + 3 * h * c.intermediate_size;
  return c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + c.num_layers * layer + h;
}
}  // namespace

namespace {
// A model folder's tensors: model.safetensors, or the shards model.safetensors.index.json
// lists (each opened on first use).
class Checkpoint {
 public:
  explicit Checkpoint(const fs::path& dir) : single_(dir / "model.safetensors"), index_(dir / "model.safetensors.index.json") {
    std::error_code ec;
    if (fs::exists(single_, ec)) {
      files_.emplace("", std::make_unique<io::SafetensorsFile>(single_.string()));
    } else if (fs::exists(index_, ec)) {
      map_ = model_files::shard_index(model_files::read_config(index_.string()), index_.string());
      sharded_ = true;
    } else {
      throw InputError(single_.string() +
                       ": missing, and no model.safetensors.index.json (only safetensors weights are read from a folder)");
    }
  }
  // The f32 parameters of m, by name, from the files this checkpoint has open.
  std::map<std::string, Tensor> parameters(const Model& m) {
    std::map<std::string, Tensor> r;
    for (const Parameter& p : m.parameters()) {
      const std::string name = checkpoint_name(p.name);
      r.emplace(p.name, load_parameter(file_of(name), name, p));
    }
    return r;
  }
  // The file holding the tensor `name`; InputError naming the file (or index) when it is missing.
  const io::SafetensorsFile& file_of(const std::string& name) {
    if (!sharded_) {
      const io::SafetensorsFile& f = *files_.at("");
      if (!f.contains(name)) throw InputError(f.path() + ": the tensor '" + name + "' is missing");
      return f;
    }
    const auto it = map_.find(name);
    if (it == map_.end()) throw InputError(index_.string() + ": the tensor '" + name + "' is missing from weight_map");
    std::unique_ptr<io::SafetensorsFile>& f = files_[it->second];
    if (!f) f = std::make_unique<io::SafetensorsFile>((index_.parent_path() / it->second).string());
    return *f;
  }
  // The tensor's dtype as the file spells it, or "" when the checkpoint lacks it (the
  // loaders name the missing tensor).
  std::string dtype_of(const std::string& name) {
    if (sharded_ ? !map_.count(name) : !files_.at("")->contains(name)) return "";
    const io::SafetensorsFile& f = file_of(name);
    return f.contains(name) ? f.entry(name).dtype : "";
  }

 private:
  fs::path single_, index_;
  bool sharded_ = false;
  std::map<std::string, std::string> map_;
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> files_;
};

// The layers of a checkpoint that a model keeps packed when held as `w`: AsStored, the BF16
// and F16 projections and embedding; BF16, every one of them (F32 and F16 rounded on load).
std::map<std::string, std::string> safetensors_packed_weights(Checkpoint& ck, const Qwen3Config& c, Qwen3Weights w) {
  std::map<std::string, std::string> r;
  if (w == Qwen3Weights::F32) return r;
  for (const std::string& s : packable_scopes(c)) {
    const std::string dtype = ck.dtype_of(checkpoint_name(s + "/weight"));
    if (w == Qwen3Weights::BF16 && (dtype == "F32" || is_float16(dtype)))
      r.emplace(s, "BF16");
    else if (w == Qwen3Weights::AsStored && is_float16(dtype))
      r.emplace(s, dtype);
  }
  return r;
}

// m's inputs that are weights, in the graph's order: the f32 parameters, and the packed layers'
// rows (a checkpoint tensor of the layer's format as its bytes, another float one rounded).
std::vector<Tensor> load_safetensors_weights(Model& m, Checkpoint& ck, const Qwen3Config& c) {
  std::map<std::string, Tensor> params = ck.parameters(m);
  const ir::Graph& g = m.graph();
  const std::string weight = "/weight";
  std::vector<Tensor> out;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const std::string pname = g.param_name(i);
    if (auto p = params.find(pname); p != params.end()) {
      out.push_back(std::move(p->second));
      continue;
    }
    const auto layer =
        pname.size() > weight.size() ? c.packed.find(pname.substr(0, pname.size() - weight.size())) : c.packed.end();
    if (layer == c.packed.end()) continue;  // (ids, position, cache)
    const std::string name = checkpoint_name(pname);
    const io::SafetensorsFile& f = ck.file_of(name);
    const io::SafetensorsEntry& e = f.entry(name);
    const Shape want = g.type(g.params[i]).shape;
    if (e.shape.size() != 2 || e.shape[0] != want[0] || 2 * e.shape[1] != want[1])
      throw InputError(f.path() + ": the tensor '" + name + "' is " + shape_str(e.shape) + ", the model needs [" +
                       std::to_string(want[0]) + ", " + std::to_string(want[1] / 2) + "]");
    if (e.dtype != "F32" && !is_float16(e.dtype))
      throw InputError(f.path() + ": the tensor '" + name + "' is " + e.dtype + ", the model needs F32, F16 or BF16");
    if (e.dtype == layer->second) {  // (the stored bytes as they are, over the mapping: no copy)
      const std::span<const std::byte> b = f.bytes(name);
      if (int64_t(b.size()) != numel(want))
        throw InternalError(f.path() + ": the tensor '" + name + "': validated size differs from the layer's");
      out.push_back(Tensor::over(f.mapping(), b.data(), DType::U8, want));
    } else {
      out.push_back(pack_floats(f.tensor(name), layer->second));
    }
  }
  return out;
}
}  // namespace

Qwen3Generator::Qwen3Generator(const std::string& path, Qwen3Weights weights) {
  std::error_code ec;
  ir::Graph g;
  Model m(g);
  if (model_files::is_gguf_path(path)) {
    if (!fs::is_regular_file(path, ec)) throw InputError(path + ": no such GGUF file");
    const io::GgufFile f(path);
    config_ = Qwen3Config::from_gguf(f);
    config_.packed = gguf_packed_weights(f, config_, weights);
    build_prefill(m, config_, 1, 1, 1, false);
    weights_ = load_gguf_weights(m, f, config_);
  } else {
    if (!fs::is_directory(path, ec))
      throw InputError(path + ": not a model folder (config.json + model.safetensors) nor a .gguf file");
    const fs::path config = fs::path(path) / "config.json";
    if (!fs::exists(config, ec)) throw InputError(config.string() + ": missing (a Qwen3 model folder has config.json)");
    config_ = Qwen3Config::from_file(config.string());
    Checkpoint ck(path);
    config_.packed = safetensors_packed_weights(ck, config_, weights);
    build_prefill(m, config_, 1, 1, 1, false);
    weights_ = load_safetensors_weights(m, ck, config_);
  }
  parameter_count_ = config_parameter_count(config_);
}

Qwen3Generator::~Qwen3Generator() = default;

int64_t Qwen3Generator::weight_bytes() const {
  int64_t n = 0;
  for (const Tensor& t : weights_) n += int64_t(t.nbytes());
  return n;
}

const std::vector<Tensor>& Qwen3Generator::weights_on(Device& d) { return model_files::weights_on(device_weights_, weights_, d); }

void Qwen3Generator::check_ids(const std::vector<int64_t>& ids, const char* what) const {
  if (ids.empty()) throw InputError(std::string(what) + ": no token ids");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= config_.vocab_size)
      throw InputError(std::string(what) + ": token id " + std::to_string(ids[i]) + " at " + std::to_string(i) +
                       " is outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
  if (int64_t(ids.size()) > config_.max_positions)
    throw InputError(std::string(what) + ": " + std::to_string(ids.size()) + " tokens, the model has " +
                     std::to_string(config_.max_positions) + " positions");
}

void Qwen3Generator::check_batch(const std::vector<std::vector<int64_t>>& batch, const char* what, bool one_length) const {
  if (batch.empty()) throw InputError(std::string(what) + ": no sequences");
  for (size_t b = 0; b < batch.size(); ++b) {
    check_ids(batch[b], what);
    if (one_length && batch[b].size() != batch[0].size())
      throw InputError(std::string(what) + ": sequence " + std::to_string(b) + " has " + std::to_string(batch[b].size()) +
                       " ids, sequence 0 has " + std::to_string(batch[0].size()) + " (a batch needs one length)");
  }
}

Qwen3Generator::Program_& Qwen3Generator::prefill_program(int64_t batch, int64_t length, int64_t cache_len, bool all_logits,
                                                          Device& d, bool ragged) {
  const std::string key = d.name() + "/prefill/" + std::to_string(batch) + "/" + std::to_string(length) + "/" +
                          std::to_string(cache_len) + (all_logits ? "/all" : "/last") + (ragged ? "/ragged" : "");
  auto it = programs_.find(key);
  if (it != programs_.end()) return *it->second;
  auto p = std::make_unique<Program_>();
  Model m(p->graph);
  build_prefill(m, config_, batch, length, cache_len, all_logits, ragged);
  p->program = std::make_unique<Program>(compile(p->graph, d));
  p->exec = std::make_unique<Executor>(*p->program, d);
  return *programs_.emplace(key, std::move(p)).first->second;
}

Qwen3Generator::Session& Qwen3Generator::session(int64_t batch, int64_t cache_len, Device& d, bool ragged) {
  const std::string key = d.name() + "/" + std::to_string(batch) + "/" + std::to_string(cache_len) + (ragged ? "/ragged" : "");
  auto it = sessions_.find(key);
  if (it != sessions_.end()) return *it->second;
  require_runnable(d);
  auto s = std::make_unique<Session>();
  s->batch = batch;
  s->cache_len = cache_len;
  s->ragged = ragged;
  // (inputs: ids, pos, start when ragged, the cache, the weights; results: the logits, their
  // argmax, the cache)
  const size_t first_cache = ragged ? 3 : 2;
  {
    Model m(s->decode.graph);
    Var ids = m.input("input_ids", DType::I64, {batch, 1});
    Var pos = m.input("position", DType::I64, {});
    std::optional<Var> start;
    if (ragged) start = m.input("start", DType::I64, {batch});
    std::vector<Var> cache;
    const Shape full{batch, config_.num_kv_heads, cache_len, config_.head_dim};
    for (int64_t i = 0; i < config_.num_layers; ++i)
      for (const char* kv : {"k", "v"}) cache.push_back(m.input("cache/" + std::to_string(i) + "/" + kv, DType::F32, full));
    Qwen3Outputs o = qwen3_decode(m, config_, ids, pos, cache, start ? &*start : nullptr);
    std::vector<Var> res{o.logits, argmax(o.logits, -1)};
    res.insert(res.end(), o.cache.begin(), o.cache.end());
    output(s->decode.graph, res);
    s->decode.program = std::make_unique<Program>(compile(s->decode.graph, d));
    s->decode.exec = std::make_unique<Executor>(*s->decode.program, d);
    s->in_place = true;
    for (size_t i = 0; i < cache.size(); ++i) s->in_place = s->in_place && s->decode.program->donates(first_cache + i, 2 + i);
    for (int k = 0; k < (s->in_place ? 1 : 2); ++k)
      for (size_t i = 0; i < cache.size(); ++i) s->sets[k].push_back(Tensor::zeros(DType::F32, full).to(d.allocator()));
  }
  s->ids = Tensor::zeros(DType::I64, {batch, 1}).to(d.allocator());
  s->pos = Tensor::zeros(DType::I64, {}).to(d.allocator());
  if (ragged) s->start = Tensor::zeros(DType::I64, {batch}).to(d.allocator());
  s->logits = Tensor::empty(DType::F32, {batch, 1, config_.vocab_size}, d.allocator());
  s->chosen = Tensor::empty(DType::I64, {batch, 1}, d.allocator());
  // Record both directions now, before any prefill fills set 0 (capture runs the step once).
  // RLX_PROFILE's per-kernel times need the kernels issued one by one: no recording then.
  const std::vector<Tensor>& w = weights_on(d);
  try {
    for (int k = 0; k < (s->in_place ? 1 : 2) && env_choice("RLX_PROFILE", {"0", "1"}) == 0; ++k) {
      std::vector<Tensor> in{s->ids, s->pos};
      if (ragged) in.push_back(s->start);
      in.insert(in.end(), s->sets[k].begin(), s->sets[k].end());
      in.insert(in.end(), w.begin(), w.end());
      std::vector<Tensor> out{s->logits, s->chosen};
      out.insert(out.end(), s->sets[s->next(k)].begin(), s->sets[s->next(k)].end());
      s->replay[k] = s->decode.exec->capture(in, out);
    }
  } catch (const InputError&) {  // (a device that does not record runs the step each time)
    s->replay[0].reset();
    s->replay[1].reset();
  }
  return *sessions_.emplace(key, std::move(s)).first->second;
}

Tensor Qwen3Generator::run_prefill(const std::vector<std::vector<int64_t>>& batch, Session& s, bool all_logits, Device& d) {
  const int64_t n = int64_t(batch.at(0).size()), b = int64_t(batch.size());
  Program_& p = prefill_program(b, n, s.cache_len, all_logits, d, s.ragged);
  std::vector<Tensor> in{ids_tensor(batch)};
  if (s.ragged) in.push_back(s.start);
  const std::vector<Tensor>& w = weights_on(d);
  in.insert(in.end(), w.begin(), w.end());
  std::vector<Tensor> out{Tensor::empty(DType::F32, {b, all_logits ? n : 1, config_.vocab_size}, d.allocator())};
  out.insert(out.end(), s.sets[0].begin(), s.sets[0].end());
  p.exec->run_into(in, out);
  return out[0];
}

void Qwen3Generator::run_step(const std::vector<int64_t>& tokens, int64_t pos, int64_t step, Session& s, Device& d) {
  if (pos >= s.cache_len) throw InternalError("qwen3: decode position past the cache");
  if (int64_t(tokens.size()) != s.batch) throw InternalError("qwen3: a decode step's tokens differ from its batch");
  const int from = s.in_place ? 0 : int(step % 2), to = s.next(from);
  s.ids.allocator()->copy_from_host(s.ids.raw(), tokens.data(), tokens.size() * sizeof(int64_t));
  write_i64(s.pos, pos);
  if (s.replay[from]) {
    s.replay[from]->launch();
    s.replayed = true;
  } else {
    std::vector<Tensor> in{s.ids, s.pos};
    if (s.ragged) in.push_back(s.start);
    in.insert(in.end(), s.sets[from].begin(), s.sets[from].end());
    const std::vector<Tensor>& w = weights_on(d);
    in.insert(in.end(), w.begin(), w.end());
    std::vector<Tensor> out{s.logits, s.chosen};
    out.insert(out.end(), s.sets[to].begin(), s.sets[to].end());
    s.decode.exec->run_into(in, out);
    s.replayed = false;
  }
  d.synchronize();
}

Tensor Qwen3Generator::prefill_logits(const std::vector<int64_t>& ids, Device& d) {
  check_ids(ids, "prefill");
  require_runnable(d);
  const int64_t n = int64_t(ids.size());
  Program_& p = prefill_program(1, n, n, true, d);
  std::vector<Tensor> in{ids_tensor({ids})};
  const std::vector<Tensor>& w = weights_on(d);
  in.insert(in.end(), w.begin(), w.end());
  return host(p.exec->run(in)[0]).reshape({n, config_.vocab_size});
}

Tensor Qwen3Generator::decode_logits(const std::vector<int64_t>& ids, int64_t prefill, Device& d, int64_t cache_len) {
  const int64_t n = int64_t(ids.size());
  return decode_logits_batch({ids}, prefill, d, cache_len).reshape({n, config_.vocab_size});
}

Tensor Qwen3Generator::decode_logits_batch(const std::vector<std::vector<int64_t>>& batch, int64_t prefill, Device& d,
                                     int64_t cache_len) {
  check_batch(batch, "decode");
  const int64_t b = int64_t(batch.size()), n = int64_t(batch[0].size()), v = config_.vocab_size;
  if (prefill < 1 || prefill > n)
    throw InputError("decode: a prefill of " + std::to_string(prefill) + " of " + std::to_string(n) + " tokens");
  if (cache_len == 0) cache_len = n;
  if (cache_len < n || cache_len > config_.max_positions)
    throw InputError("decode: a cache of " + std::to_string(cache_len) + " positions for " + std::to_string(n) + " tokens");
  Session& s = session(b, cache_len, d);
  Tensor r = Tensor::empty(DType::F32, {b, n, v});
  std::vector<std::vector<int64_t>> head;
  for (const auto& ids : batch) head.emplace_back(ids.begin(), ids.begin() + prefill);
  Tensor first = host(run_prefill(head, s, true, d));
  for (int64_t k = 0; k < b; ++k)
    std::copy(first.data<float>() + k * prefill * v, first.data<float>() + (k + 1) * prefill * v, r.data<float>() + k * n * v);
  std::vector<int64_t> tokens(size_t(b), 0);
  for (int64_t i = prefill; i < n; ++i) {
    for (int64_t k = 0; k < b; ++k) tokens[size_t(k)] = batch[size_t(k)][size_t(i)];
    run_step(tokens, i, i - prefill, s, d);
    Tensor l = host(s.logits);
    for (int64_t k = 0; k < b; ++k) std::copy(l.data<float>() + k * v, l.data<float>() + (k + 1) * v, r.data<float>() + (k * n + i) * v);
  }
  return r;
}

GenerationResult Qwen3Generator::generate(const std::vector<int64_t>& prompt, int64_t max_new, const SamplingOptions& opt,
                                          Device& d) {
  BatchGenerationResult b = generate_batch(std::vector<std::vector<int64_t>>{prompt}, max_new, opt, d);
  GenerationResult r;
  r.ids = std::move(b.ids[0]);
  r.prefill_seconds = b.prefill_seconds;
  r.decode_seconds = b.decode_seconds;
  r.prefill_tokens = b.prefill_tokens;
  r.decode_steps = b.decode_steps;
  return r;
}

BatchGenerationResult Qwen3Generator::generate_batch(const std::vector<std::vector<int64_t>>& prompts_in, int64_t max_new,
                                               const SamplingOptions& opt, Device& d) {
  check_batch(prompts_in, "generate", false);
  // Prompts of different lengths: padded on the left with token 0 to the longest, each row's
  // start telling attention where its own tokens begin.
  size_t longest = 0;
  for (const auto& pr : prompts_in) longest = std::max(longest, pr.size());
  bool ragged = false;
  std::vector<int64_t> starts;
  std::vector<std::vector<int64_t>> padded;
  for (const auto& pr : prompts_in) {
    ragged = ragged || pr.size() != longest;
    starts.push_back(int64_t(longest - pr.size()));
  }
  if (ragged)
    for (const auto& pr : prompts_in) {
      padded.emplace_back(longest - pr.size(), 0);
      padded.back().insert(padded.back().end(), pr.begin(), pr.end());
    }
  const std::vector<std::vector<int64_t>>& prompts = ragged ? padded : prompts_in;
  const int64_t b = int64_t(prompts.size()), p = int64_t(prompts[0].size()), v = config_.vocab_size;
  if (max_new < 1) throw InputError("generate: max_new must be at least 1, got " + std::to_string(max_new));
  if (max_new > config_.max_positions - p)
    throw InputError("generate: " + std::to_string(p) + " prompt tokens + " + std::to_string(max_new) +
                     " new ones exceed the model's " + std::to_string(config_.max_positions) + " positions");
  check_sampling(opt);
  // The cache covers every position a step feeds, rounded up so that nearby lengths share
  // one decode program.
  const int64_t cache_len = std::min(config_.max_positions, (p + max_new + 63) / 64 * 64);
  Session& s = session(b, cache_len, d, ragged);
  if (ragged) s.start.allocator()->copy_from_host(s.start.raw(), starts.data(), starts.size() * sizeof(int64_t));
  BatchGenerationResult r;
  r.ids.resize(size_t(b));
  auto t0 = std::chrono::steady_clock::now();
  Tensor l = host(run_prefill(prompts, s, false, d));
  d.synchronize();
  auto t1 = std::chrono::steady_clock::now();
  std::vector<int64_t> tokens(static_cast<size_t>(b), 0);
  // A sequence that has ended keeps riding in the batch (its step is computed, its tokens
  // dropped) until every one has.
  std::vector<char> ended(static_cast<size_t>(b), 0);
  int64_t running = b;
  auto take = [&](int64_t k, int64_t id) {
    tokens[size_t(k)] = id;
    if (ended[size_t(k)]) return;
    r.ids[size_t(k)].push_back(id);
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), id) != opt.stop_ids.end()) ended[size_t(k)] = 1, --running;
  };
  for (int64_t k = 0; k < b; ++k) take(k, sample_token(l.data<float>() + k * v, v, opt, 0));
  int64_t steps = 0;
  for (int64_t i = 1; i < max_new && running > 0; ++i, ++steps) {
    run_step(tokens, p + i - 1, i - 1, s, d);
    if (opt.temperature == 0) {
      const Tensor next = host(s.chosen);
      for (int64_t k = 0; k < b; ++k) take(k, next.data<int64_t>()[k]);
      continue;
    }
    l = host(s.logits);
    for (int64_t k = 0; k < b; ++k) take(k, sample_token(l.data<float>() + k * v, v, opt, uint64_t(i)));
  }
  auto t2 = std::chrono::steady_clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  r.prefill_tokens = b * p;
  r.decode_steps = steps;
  return r;
}

std::string Qwen3Generator::explain_decode(int64_t cache_len, Device& d, int64_t batch, bool ragged) {
  if (cache_len < 1 || cache_len > config_.max_positions)
    throw InputError("explain: a cache of " + std::to_string(cache_len) + " positions");
  if (batch < 1) throw InputError("explain: a batch of " + std::to_string(batch));
  return session(batch, cache_len, d, ragged).decode.program->report.table();
}

bool Qwen3Generator::replays(Device& d) {
  for (auto& [key, s] : sessions_)
    if (key.rfind(d.name() + "/", 0) == 0 && s->replayed) return true;
  return false;
}

}  // namespace rlx::nn
