// rlx generate: token generation with a Qwen3 model (nn/models/qwen3.hpp) from a model folder
// (config.json + model.safetensors) or a .gguf file, on token ids (no tokenizer yet): the new
// ids on stdout (a line per sequence), prefill and decode throughput on stderr. --batch B decodes
// B copies of the prompt together (one cache [B, ...]): the batched path at the cost of B
// sequences, for measuring it; the API (Qwen3Generator::generate_batch) takes distinct prompts.
// --weights stored|f32|bf16 holds the projections and embedding as the file stores them (the
// default), decoded to f32, or as bf16 (nn::Qwen3Weights).
#include <cstdio>
#include <iostream>

#include "args.hpp"
#include "nn/models/qwen3.hpp"
#include "runtime/device.hpp"

namespace rlx::cli {

int cmd_generate(const Args& a) {
  const std::string model = a.get("model", "");
  if (model.empty()) throw UsageError("generate needs --model PATH (a Qwen3 model folder or .gguf file)");
  if (!a.pos.empty()) throw UsageError("generate takes no positional arguments, got '" + a.pos[0] + "'");
  if (!a.has("prompt-ids")) throw UsageError("generate needs --prompt-ids ID,ID,... (the prompt's token ids)");
  // (ids past the vocabulary are refused once the model has loaded)
  const std::vector<int64_t> prompt = a.id_list("prompt-ids", int64_t(1) << 30);
  const int64_t max_new = a.integer("max-new", 16, 1, int64_t(1) << 24);
  const int64_t batch = a.integer("batch", 1, 1, 4096);
  nn::SamplingOptions s;
  s.temperature = a.number("temperature", 0.0, 0.0, 1e6);
  s.top_k = a.integer("top-k", 0, 0, int64_t(1) << 30);
  s.top_p = a.number("top-p", 1.0, 0.0, 1.0);
  if (a.has("top-p") && !(s.top_p > 0)) throw UsageError("--top-p must be in (0, 1], got '" + a.get("top-p", "") + "'");
  s.seed = uint64_t(a.integer("seed", 0, 0, INT64_MAX));
  if (s.temperature == 0 && (a.has("top-k") || a.has("top-p") || a.has("seed")))
    std::cerr << "rlx generate: --temperature 0 (the default) is greedy; --top-k, --top-p and --seed have no effect\n";
  const std::string weights = a.get("weights", "stored");
  if (weights != "stored" && weights != "f32" && weights != "bf16")
    throw UsageError("--weights must be stored, f32 or bf16, got '" + weights + "'");
  Device& dev = DeviceRegistry::get().at(a.get("device", "cpu"));
  if (!dev.unavailable().empty()) throw UsageError("device " + dev.name() + " is not available here: " + dev.unavailable());
  nn::Qwen3Generator gen(model, nn::qwen3_weights_named(weights));
  const nn::Qwen3Config& c = gen.config();
  if (a.flag("explain"))
    std::cout << gen.explain_decode(std::min<int64_t>(c.max_positions, (int64_t(prompt.size()) + max_new + 63) / 64 * 64), dev, batch);
  const nn::BatchGenerationResult r = gen.generate_batch(std::vector<std::vector<int64_t>>(size_t(batch), prompt), max_new, s, dev);
  for (const std::vector<int64_t>& ids : r.ids) {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << "\n";
  }
  std::fprintf(stderr,
               "rlx generate: qwen3 (%lld layers, hidden %lld, %lld parameters, %.1f MB of weights) on %s, batch %lld: prefill "
               "%lld tokens in %.3f s (%.1f tokens/s), decode %lld steps in %.3f s (%.1f tokens/s)%s\n",
               (long long)c.num_layers, (long long)c.hidden_size, (long long)gen.parameter_count(), gen.weight_bytes() / 1e6,
               dev.name().c_str(), (long long)batch, (long long)r.prefill_tokens, r.prefill_seconds,
               double(r.prefill_tokens) / r.prefill_seconds, (long long)r.decode_steps, r.decode_seconds,
               r.decode_steps ? double(batch * r.decode_steps) / r.decode_seconds : 0.0,
               gen.replays(dev) ? ", decode replayed as a captured graph" : "");
  return kOk;
}

}  // namespace rlx::cli
