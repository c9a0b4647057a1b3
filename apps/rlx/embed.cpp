// rlx embed: sentence embeddings of a BERT sentence-transformers model folder
// (all-MiniLM-L6-v2 and its kin, nn/models/bert.hpp), of its ONNX export inside such a
// folder (onnx/model.onnx), or of a GGUF file of a BERT model, printed and optionally
// written as .npy.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "args.hpp"
#include "io/npy.hpp"
#include "nn/models/bert.hpp"
#include "runtime/device.hpp"

namespace rlx::cli {

int cmd_embed(const Args& a) {
  namespace fs = std::filesystem;
  const std::string model = a.get("model", "");
  if (model.empty())
    throw UsageError("embed needs --model PATH (a sentence-transformers model folder, its onnx/model.onnx, or a BERT .gguf)");
  if (a.pos.empty()) throw UsageError("embed needs at least one sentence");
  // The output is checked before the model loads: a bad --out fails fast.
  const std::string out = a.get("out", "");
  if (!out.empty()) {
    std::error_code ec;
    const fs::path parent = fs::path(out).parent_path();
    if (fs::is_directory(out, ec)) throw UsageError("--out " + out + ": is a folder");
    if (!parent.empty() && !fs::is_directory(parent, ec)) throw UsageError("--out " + out + ": the folder " + parent.string() + " does not exist");
  }
  Device& dev = DeviceRegistry::get().at(a.get("device", "cpu"));
  if (!dev.unavailable().empty()) throw UsageError("device " + dev.name() + " is not available here: " + dev.unavailable());
  nn::SentenceEmbedder e(model, a.integer("max-length", 0, 2, int64_t(1) << 20));
  if (a.flag("explain")) {
    const nn::TokenBatch b = e.tokenizer().encode_batch(a.pos);
    std::cout << e.explain(b.ids.shape()[0], e.padded_length(b.ids.shape()[1]), dev);
  }
  const Tensor emb = e.embed(a.pos, dev);
  const int64_t n = emb.shape()[0], h = emb.shape()[1];
  std::cout << "rlx embed: " << n << " sentence" << (n == 1 ? "" : "s") << " -> " << emb.type().str() << " on " << dev.name()
            << " (" << e.config().num_layers << " layers, hidden " << h << ", " << e.parameter_count() << " parameters)\n";
  for (int64_t i = 0; i < n; ++i) {
    std::printf("%lld:", (long long)i);
    for (int64_t j = 0; j < std::min<int64_t>(h, 6); ++j) std::printf(" %+.6f", double(emb.data<float>()[i * h + j]));
    std::printf("%s  %s\n", h > 6 ? " ..." : "", a.pos[size_t(i)].substr(0, 60).c_str());
  }
  if (!out.empty()) {
    io::write_npy(out, emb);
    std::cout << out << "\t" << emb.type().str() << "\n";
  }
  return kOk;
}

}  // namespace rlx::cli
