// A Qwen3 decoder on the nn/ layers, with a key/value cache kept on the device and token
// generation around it:
// ids -> embedding -> N layers of (RMSNorm, attention: q/k/v projections without bias,
// per-head RMSNorm of q and k, rotary embedding (rotate-half, rope_theta), grouped-query
// attention, o projection; residual; RMSNorm, SwiGLU MLP down(silu(gate x) * up x);
// residual) -> RMSNorm -> lm_head (the embedding's transpose when tied).
//
// Parameters are declared under transformers' names with '/' for '.'
// (`model/layers/0/self_attn/q_proj/weight`), so a safetensors file loads by name; a GGUF file
// loads through the llama.cpp names (`blk.0.attn_q.weight`, gguf_tensor_name), its quantized
// weights kept as their blocks (Qwen3Config::packed: matmul_packed over them); BF16 and F16
// weights of either file stay 16-bit the same way (Qwen3Weights).
//
//   nn::Qwen3Generator gen("path/to/Qwen3-0.6B");            // config.json + model.safetensors, or a .gguf
//   auto r = gen.generate({9707, 11, 1879}, 32, {}, DeviceRegistry::get().at("cuda"));  // greedy
//
// Generation runs two compiled programs per device and batch size (B prompts generate
// together; of different lengths, they are padded on the left and both programs also take
// each row's start): the prefill (B prompts of P tokens -> logits and the cache, one program
// per P) and the decode step (one token at a position given
// as an input tensor -> logits and the cache with that position written; fixed shapes, the
// cache at its full length, attention masked to positions <= pos). The cache never leaves the
// device: the step writes each new row into the cache in place (update_slice over a donated
// buffer, Program::donations; two sets read and written in turn where a device's plan cannot
// donate), and on a device that records (cuda) the step is a captured graph replayed per token.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nn/model.hpp"

namespace rlx {
class Device;
namespace io {
class GgufFile;
}
}  // namespace rlx

namespace rlx::nn {

struct Qwen3Config {
  int64_t vocab_size = 151936, hidden_size = 1024, intermediate_size = 3072, num_layers = 28;
  int64_t num_heads = 16, num_kv_heads = 8, head_dim = 128, max_positions = 40960;
  double rms_norm_eps = 1e-6, rope_theta = 1e6;
  bool tie_word_embeddings = true;
  // Weights kept as their ggml blocks (a GGUF file's quantized tensors; BF16 and F16 weights
  // as 2-byte "blocks" of one element): the layer's scope ("model/layers/0/mlp/up_proj",
  // "model/embed_tokens", "lm_head") -> the format ("Q4_0", "BF16").
  // Such a projection is matmul_packed over a u8 [out, row_bytes] input named scope +
  // "/weight" (nn::linear_packed); a packed embedding table is gathered by row and decoded
  // (dequantize) for the tokens at hand, and when tied the lm_head is matmul_packed over the
  // same bytes. Empty: every weight is an f32 parameter.
  std::map<std::string, std::string> packed;
  // config.json of a transformers Qwen3 checkpoint, checked field by field: model_type
  // "qwen3", hidden_act "silu", the sizes, rms_norm_eps, rope_theta (top level, or in
  // rope_parameters with rope_type "default"), no rope scaling, no attention bias, no
  // sliding window. InputError naming the file and the field.
  static Qwen3Config from_file(const std::string& path);
  // The same checks on config.json's text (`name` stands for the file in messages).
  static Qwen3Config from_text(std::string_view text, const std::string& name);
  // A GGUF file's qwen3.* metadata (general.architecture "qwen3"); the vocabulary from
  // token_embd.weight, tie_word_embeddings when there is no output.weight.
  static Qwen3Config from_gguf(const io::GgufFile& f);
};

// The decoder's outputs: logits and the key/value cache, k then v per layer, each
// [B, num_kv_heads, cache_len, head_dim] (keys after q/k norm and rotary embedding).
struct Qwen3Outputs {
  Var logits;
  std::vector<Var> cache;
};
// Prefill: ids i64 [B, P] at positions 0..P-1 -> logits [B, P, vocab] (all_logits) or of the
// last position [B, 1, vocab], and the cache with positions 0..P-1 filled, zeros after, up to
// cache_len (>= P). Node locations are the checkpoint's module names.
// start (i64 [B], optional): each row's first real position, the ones before it padding
// (prompts of different lengths padded on the left) that no query attends to.
Qwen3Outputs qwen3_prefill(Model& m, const Qwen3Config& c, const Var& ids, int64_t cache_len, bool all_logits = true,
                           const Var* start = nullptr);
// One decode step: ids i64 [B, 1] at position pos (i64 [], < cache_len) with the cache of the
// positions before it -> logits [B, 1, vocab] and the cache with position pos written.
// Attention reads positions <= pos only (and, given start, none before the row's start).
Qwen3Outputs qwen3_decode(Model& m, const Qwen3Config& c, const Var& ids, const Var& pos, const std::vector<Var>& cache,
                          const Var* start = nullptr);

// How a model holds its projection and embedding weights (norm weights are f32 in every case):
//   AsStored  as the file stores them: a GGUF file's quantized, F16 and BF16 tensors and a
//             safetensors checkpoint's BF16 and F16 tensors stay packed (Qwen3Config::packed:
//             matmul_packed over their bytes, native on cpu and cuda), F32 ones are f32
//             parameters;
//   F32       every weight decoded to an f32 parameter when the file is read;
//   BF16      every projection and the embedding held as BF16, F32 and F16 values rounded
//             to nearest even; a quantized GGUF tensor is refused (InputError naming it: its
//             decoded values are not bf16 values, and bf16 would take more bytes).
enum class Qwen3Weights { AsStored, F32, BF16 };
// "stored", "f32" or "bf16" (the CLI's --weights); InputError for another name.
Qwen3Weights qwen3_weights_named(const std::string& name);

// llama.cpp's GGUF name of a parameter ("model/layers/3/mlp/up_proj/weight" ->
// "blk.3.ffn_up.weight"); InputError for a name a Qwen3 model does not have.
std::string gguf_tensor_name(const std::string& parameter);
// The weights of a GGUF file that a model keeps packed (Qwen3Config::packed) when held as `w`:
// AsStored, every 2-D tensor of a projection or the embedding in a format other than F32
// (quantized, F16, BF16: cpu and cuda multiply them natively, so they are never decoded to a
// whole f32 matrix); BF16, every such tensor as BF16 (InputError for a quantized one); F32, none.
std::map<std::string, std::string> gguf_packed_weights(const io::GgufFile& f, const Qwen3Config& c,
                                                       Qwen3Weights w = Qwen3Weights::AsStored);
// m's weights from a GGUF file in the order of the graph's inputs (the inputs that are not
// weights, ids and cache, skipped): a parameter as an f32 host tensor (every type
// GgufFile::dequantize decodes), a packed weight input (c.packed) as its blocks, or for a
// BF16 or F16 layer over an F32, F16 or BF16 tensor of another of these, its values rounded
// to the layer's format.
std::vector<Tensor> load_gguf_weights(Model& m, const io::GgufFile& f, const Qwen3Config& c);

// How the next token is chosen from a step's logits. temperature 0: greedy (the first
// maximum, a NaN counting as the largest, as the argmax op and torch.argmax count it; a
// decode step then chooses on the device and only the chosen ids come back to the host). Otherwise transformers' order: logits / temperature, keep the top_k largest
// (0: all), keep the smallest set of most probable tokens whose probability reaches top_p
// (1: all; at least one), then draw with the counter RNG at (seed, step): the same tokens
// for the same seed on every device and run.
struct SamplingOptions {
  double temperature = 0;
  int64_t top_k = 0;
  double top_p = 1;
  uint64_t seed = 0;
  // A sequence ends at the first of these it yields (kept as its last token); generation
  // stops when every sequence of the batch has ended, or after max_new tokens. Empty: always
  // max_new tokens.
  std::vector<int64_t> stop_ids;
};
// The token chosen from logits[0..n) for generation step `step` (InputError for bad options).
int64_t sample_token(const float* logits, int64_t n, const SamplingOptions& s, uint64_t step);

// The text Qwen3's chat template renders for one user turn with add_generation_prompt (ChatML):
// a system turn when `system` is given (an empty one too, as the template writes it), the user turn, the assistant's opening, and the
// empty thinking block the template writes when thinking is off (enable_thinking=False).
// Checked against jinja2's rendering of the real template (data/bpe/qwen3_chat_reference.json).
std::string qwen3_chat_prompt(const std::string& user, const std::optional<std::string>& system = std::nullopt,
                              bool thinking = true);

struct GenerationResult {
  std::vector<int64_t> ids;  // the new tokens
  double prefill_seconds = 0, decode_seconds = 0;  // wall time, the device synchronised
  int64_t prefill_tokens = 0, decode_steps = 0;
};

// A batch of B prompts generated together (one cache [B, ...], one program per step for all
// B): ids[b] are prompt b's new tokens. prefill_tokens counts B * P (P the longest prompt,
// padding included), decode_steps the steps (each yields a token for every sequence that has
// not ended).
struct BatchGenerationResult {
  std::vector<std::vector<int64_t>> ids;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prefill_tokens = 0, decode_steps = 0;
};

class Qwen3Generator {
 public:
  // A model folder (config.json + model.safetensors, or the shards model.safetensors.index.json
  // lists) or a .gguf file, its weights held as `weights` says (AsStored: a GGUF file's
  // quantized, F16 and BF16 weights and a checkpoint's BF16 and F16 ones stay packed; BF16: an
  // f32 checkpoint held as bf16). InputError naming the missing or bad file, field or tensor.
  explicit Qwen3Generator(const std::string& path, Qwen3Weights weights = Qwen3Weights::AsStored);
  ~Qwen3Generator();
  Qwen3Generator(const Qwen3Generator&) = delete;
  Qwen3Generator& operator=(const Qwen3Generator&) = delete;

  const Qwen3Config& config() const { return config_; }
  int64_t parameter_count() const { return parameter_count_; }
  // The bytes the loaded weights take on the host (packed weights count their blocks).
  int64_t weight_bytes() const;
  // The weights as held on the host, in the graph's input order (f32 parameters and packed
  // blocks; tensors over the checkpoint's mapping where the file's bytes serve as they are).
  const std::vector<Tensor>& host_weights() const { return weights_; }

  // The logits of every position of ids (one prefill program), f32 [P, vocab] on the host.
  Tensor prefill_logits(const std::vector<int64_t>& ids, Device& d);
  // The same logits through the cache: a prefill of the first `prefill` ids, then one decode
  // step per remaining id; row i is the logits after ids[0..i]. cache_len 0: ids.size().
  Tensor decode_logits(const std::vector<int64_t>& ids, int64_t prefill, Device& d, int64_t cache_len = 0);
  // The same for a batch of sequences of one length, decoded together: [B, n, vocab].
  Tensor decode_logits_batch(const std::vector<std::vector<int64_t>>& batch, int64_t prefill, Device& d, int64_t cache_len = 0);
  // prompt followed by max_new tokens (prompt + max_new within the model's positions), or
  // up to the first stop id.
  GenerationResult generate(const std::vector<int64_t>& prompt, int64_t max_new, const SamplingOptions& s, Device& d);
  // B prompts, each followed by max_new tokens (fewer where it yields a stop id), sampled
  // per sequence as generate samples one (the same seed: the same draws as the prompt
  // alone). Prompts of different lengths are padded on the left to the longest, each row's
  // padding masked out of attention (prefill_tokens counts the padded B x P).
  BatchGenerationResult generate_batch(const std::vector<std::vector<int64_t>>& prompts, int64_t max_new, const SamplingOptions& s,
                                 Device& d);
  // The dispatch report of the decode step for a cache of cache_len positions.
  // ragged: the step of a batch of prompts of different lengths (which takes each row's start).
  std::string explain_decode(int64_t cache_len, Device& d, int64_t batch = 1, bool ragged = false);
  // Whether the last generate on d replayed a captured decode step.
  bool replays(Device& d);

 private:
  struct Program_;
  struct Session;
  // ragged: the programs take each row's start (prompts of different lengths, left-padded).
  Program_& prefill_program(int64_t batch, int64_t length, int64_t cache_len, bool all_logits, Device& d, bool ragged = false);
  Session& session(int64_t batch, int64_t cache_len, Device& d, bool ragged = false);
  const std::vector<Tensor>& weights_on(Device& d);
  void check_ids(const std::vector<int64_t>& ids, const char* what) const;
  // check_ids on each sequence, and one length for all when one_length.
  void check_batch(const std::vector<std::vector<int64_t>>& batch, const char* what, bool one_length = true) const;
  // Runs the prefill of the batch's ids into the session's cache set 0; returns its logits (device).
  Tensor run_prefill(const std::vector<std::vector<int64_t>>& batch, Session& s, bool all_logits, Device& d);
  // One decode step (a token per sequence) from set `step % 2`, leaving the logits [B, 1, vocab]
  // and their greedy choice [B, 1] in the session's tensors (device).
  void run_step(const std::vector<int64_t>& tokens, int64_t pos, int64_t step, Session& s, Device& d);

  Qwen3Config config_;
  std::vector<Tensor> weights_;  // host: f32 parameters and packed blocks, in the graph's input order
  int64_t parameter_count_ = 0;
  std::map<std::string, std::vector<Tensor>> device_weights_;  // by device name
  std::map<std::string, std::unique_ptr<Program_>> programs_;  // by device/batch/length/cache
  std::map<std::string, std::unique_ptr<Session>> sessions_;   // by device/batch/cache
};

}  // namespace rlx::nn
