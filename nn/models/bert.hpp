// A BERT encoder on the nn/ layers, and the sentence embedder of all-MiniLM-L6-v2 around it:
// token ids -> word + position + token-type embeddings -> LayerNorm -> N post-LN layers of
// (self-attention with the padding mask, residual, LayerNorm; GELU (erf) feed-forward,
// residual, LayerNorm) -> mean over the attention mask -> L2 normalisation.
//
// Parameters are declared under the checkpoint's names with '/' for '.'
// (`encoder/layer/0/attention/self/query/weight` is `encoder.layer.0.attention.self.query.weight`),
// so loading a safetensors file is a lookup per parameter.
//
//   nn::SentenceEmbedder e("path/to/all-MiniLM-L6-v2");   // config.json, vocab.txt, model.safetensors
//   Tensor emb = e.embed({"A man is eating food."}, DeviceRegistry::get().at("cpu"));  // f32 [1, 384]
//   nn::SentenceEmbedder o("path/to/all-MiniLM-L6-v2/onnx/model.onnx");  // the encoder from ONNX
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/model.hpp"
#include "nn/models/tokenizer.hpp"

namespace rlx {
namespace io {
class GgufFile;
class OnnxModelFile;
class SafetensorsFile;
}
class Device;
struct Program;
class Executor;
}  // namespace rlx

namespace rlx::nn {

// config.json of a Hugging Face BERT checkpoint (the fields the encoder uses).
struct BertConfig {
  int64_t vocab_size = 30522, hidden_size = 768, num_layers = 12, num_heads = 12, intermediate_size = 3072;
  int64_t max_positions = 512, type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  // The projections whose weights stay packed (their checkpoint scope, e.g.
  // "encoder/layer/0/intermediate/dense" -> "Q8_0"): each is nn::linear_packed with an f32 bias.
  std::map<std::string, std::string> packed;
  // Reads and checks config.json: model_type "bert", hidden_act "gelu", absolute positions,
  // positive sizes, heads dividing the hidden size. InputError naming the file and the field.
  static BertConfig from_file(const std::string& path);
  // The same from a GGUF file as llama.cpp's converter writes a BERT model (docs/models.md):
  // general.architecture "bert", the bert.* sizes, the token and position tables' shapes, mean
  // pooling when bert.pooling_type is given, no causal attention. Every projection stored in
  // a quantized format (Q8_0, Q4_0, ..., Q6_K) is listed in `packed`; float tensors are read
  // as f32. InputError naming the file and the key or tensor.
  static BertConfig from_gguf(const io::GgufFile& f);
};

// The encoder's last hidden states [B, L, hidden] for ids, token_type_ids and attention_mask
// (each i64 [B, L]; the mask 1 for tokens, 0 for padding, which no token attends to).
// Each node's location is its module's checkpoint name ("embeddings", "encoder.layer.0.attention",
// "encoder.layer.0.intermediate", "encoder.layer.0.output", "attention_mask").
Var bert_encoder(Model& m, const BertConfig& c, const Var& ids, const Var& token_type_ids, const Var& attention_mask);
// The mean of hidden [B, L, H] over the positions where mask [B, L] (i64) is 1.
Var mean_pool(const Var& hidden, const Var& mask, SrcLoc loc = SrcLoc::current());
// Each row of x [B, H] divided by its Euclidean norm (at least 1e-12, as torch's F.normalize).
Var l2_normalize(const Var& x, SrcLoc loc = SrcLoc::current());

// The checkpoint name of a parameter ('/' -> '.').
std::string checkpoint_name(const std::string& parameter);
// Parameter p's value from f, where the checkpoint calls it `name`: the tensor with p's shape,
// f32 over the file's mapping (no copy) or f16/bf16 widened exactly. InputError naming the
// file and the tensor when it is missing, of another shape or of another dtype.
Tensor load_parameter(const io::SafetensorsFile& f, const std::string& name, const Parameter& p);
// The values of m's parameters, in m.parameters() order, from a safetensors file: each tensor
// must be there with the parameter's shape (f32, or f16/bf16 widened exactly); `prefix` is put
// before every name ("bert." for checkpoints of BertFor* heads). InputError naming the file and
// the tensor otherwise.
std::vector<Tensor> load_parameters(const Model& m, const std::string& safetensors_path, const std::string& prefix = "");
// The same from a sharded checkpoint: its index (model.safetensors.index.json) maps each
// tensor name to a file beside it ("weight_map"), each opened once. InputError naming the
// index and the tensor when the map lacks it or names anything but a file in that folder.
std::vector<Tensor> load_sharded_parameters(const Model& m, const std::string& index_path, const std::string& prefix = "");

// GGUF's name of a BERT parameter (llama.cpp's: `encoder/layer/3/attention/self/query/bias` is
// `blk.3.attn_q.bias`, `embeddings/word_embeddings/weight` is `token_embd.weight`, a packed
// layer's `.../weight` input likewise). InputError for a name BERT does not have.
std::string bert_gguf_tensor_name(const std::string& parameter);
// m's weight inputs from f in the graph's order (the parameters, f32 — quantized embedding
// tables decoded —, and the packed projections' blocks over the file's mapping). InputError
// naming the file and the tensor when one is missing or of another shape or format.
std::vector<Tensor> load_bert_gguf_weights(Model& m, const io::GgufFile& f, const BertConfig& c);
// The WordPiece vocabulary of a GGUF BERT model, in id order: tokenizer.ggml.tokens as
// llama.cpp rewrites them undone (control tokens as they are; a token that starts a word
// carries U+2581 there, a continuation none, here "##"). tokenizer.ggml.model must be "bert";
// InputError naming the file otherwise.
std::vector<std::string> bert_gguf_vocab(const io::GgufFile& f);

// all-MiniLM-L6-v2 and its kin: a sentence-transformers model folder with config.json,
// vocab.txt, model.safetensors, and optionally sentence_bert_config.json (max_seq_length),
// 1_Pooling/config.json (which must ask for mean pooling) and modules.json (Transformer,
// Pooling, Normalize and nothing else). Programs are compiled per device
// and per [batch, length] and kept; the weights are uploaded to a device once.
// Given an .onnx file instead of a folder, the encoder is that model imported (io/onnx.hpp:
// inputs input_ids, attention_mask and optionally token_type_ids, [batch, sequence]; output
// last_hidden_state, else its only rank-3 output), the folder being the file's own or the one
// above it (sentence-transformers' onnx/model.onnx); pooling and normalisation are the same.
// Given a .gguf file, the model, its sizes and its vocabulary all come from that file
// (BertConfig::from_gguf, bert_gguf_vocab); texts are cut at the model's positions unless
// max_length says otherwise, as the file records no shorter maximum (all-MiniLM-L6-v2's
// sentence-transformers cuts at 256 of its 512).
class SentenceEmbedder {
 public:
  // max_length: the ids a text is cut to, [CLS] and [SEP] included (2 to the model's
  // positions); 0 for the model's own (sentence_bert_config.json's max_seq_length, else the
  // positions).
  explicit SentenceEmbedder(const std::string& model, int64_t max_length = 0);
  ~SentenceEmbedder();
  SentenceEmbedder(const SentenceEmbedder&) = delete;
  SentenceEmbedder& operator=(const SentenceEmbedder&) = delete;

  const BertConfig& config() const { return config_; }
  const WordPieceTokenizer& tokenizer() const { return tokenizer_; }
  int64_t max_length() const { return tokenizer_.options().max_length; }
  int64_t parameter_count() const { return parameter_count_; }

  // L2-normalised embeddings f32 [texts, hidden] (host), the texts padded to the longest,
  // rounded up to a multiple of 16 tokens (within the model's positions).
  Tensor embed(const std::vector<std::string>& texts, Device& d);
  // The same for ids already tokenized (TokenBatch of any [B, L], L <= max positions); the
  // result stays on the device.
  Tensor embed(const TokenBatch& batch, Device& d);
  // The length embed(texts) pads a batch whose longest text has `length` ids to.
  int64_t padded_length(int64_t length) const;
  // The dispatch report of the program for [batch, length] on d (compiled if need be): each
  // op's route, located by its module's checkpoint name (then "pooling", "normalize").
  std::string explain(int64_t batch, int64_t length, Device& d);

 private:
  struct Compiled;
  Compiled& compiled(int64_t batch, int64_t length, Device& d);
  const std::vector<Tensor>& weights_on(Device& d);
  void import_onnx(Compiled& c, int64_t batch, int64_t length);
  std::string folder_;
  std::shared_ptr<const io::OnnxModelFile> onnx_;  // the encoder, when read from ONNX
  std::shared_ptr<const io::GgufFile> gguf_;       // the model, when read from GGUF
  std::vector<std::string> weight_names_;         // ONNX: the initializer behind each of weights_
  BertConfig config_;
  WordPieceTokenizer tokenizer_;
  std::vector<Tensor> weights_;  // host, in parameter order
  int64_t parameter_count_ = 0;
  std::map<std::string, std::vector<Tensor>> device_weights_;
  std::map<std::string, std::unique_ptr<Compiled>> programs_;  // "device/BxL"
};

}  // namespace rlx::nn
