// A BERT model read from GGUF bytes (nn/models/bert.hpp: BertConfig::from_gguf, the
// vocabulary with llama.cpp's spelling undone, the tokenizer over it, the encoder built and its
// weights loaded), as `rlx embed --model FILE.gguf` reads a file. A model that reads must be
// one the encoder can run: sizes in their ranges, heads dividing the hidden size, one token per
// table row, [CLS] [SEP] [PAD] [UNK] in the vocabulary, one weight per graph input.
#include <cstdint>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "ir/frontend.hpp"
#include "nn/model.hpp"
#include "nn/models/bert.hpp"
#include "nn/models/tokenizer.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RLX_FUZZ_GUARD({
    const io::GgufFile f = io::GgufFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "input");
    const nn::BertConfig c = nn::BertConfig::from_gguf(f);
    if (c.vocab_size < 1 || c.hidden_size < 1 || c.num_layers < 1 || c.num_heads < 1 || c.intermediate_size < 1 ||
        c.max_positions < 2 || c.type_vocab_size < 1)
      fuzz::finding("a size out of range read without an error");
    if (c.hidden_size % c.num_heads) fuzz::finding("heads that do not divide the hidden size");
    if (!(c.layer_norm_eps > 0 && c.layer_norm_eps < 1)) fuzz::finding("layer_norm_eps out of (0, 1)");
    const nn::WordPieceTokenizer t(nn::bert_gguf_vocab(f), "input", {.max_length = 8});
    if (t.vocab_size() != c.vocab_size) return 0;  // (the embedder refuses this: the fuzz stops where it would)
    if (t.cls_id() < 0 || t.sep_id() < 0 || t.pad_id() < 0 || t.unk_id() < 0) fuzz::finding("a special token missing");
    // The encoder for a [1, 2] batch, its weights from the file (small models only: the fuzzer
    // does not need large graphs to reach the loader's checks).
    if (c.num_layers > 4 || c.hidden_size > 256 || c.intermediate_size > 1024) return 0;
    ir::Graph g;
    nn::Model m(g);
    const Var ids = m.input("input_ids", DType::I64, {1, 2});
    nn::bert_encoder(m, c, ids, ids, ids);
    const std::vector<Tensor> w = nn::load_bert_gguf_weights(m, f, c);
    if (w.size() + 1 != g.params.size()) fuzz::finding("not one weight per weight input");
    for (size_t i = 0; i < w.size(); ++i)
      if (w[i].numel() != numel(g.type(g.params[i + 1]).shape)) fuzz::finding("a weight of another size than its input");
  })
  return 0;
}
