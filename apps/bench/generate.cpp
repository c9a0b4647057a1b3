// rlx-bench generate: Qwen3 generation throughput (nn/models/qwen3.hpp) at batch B (--batch,
// B copies of the prompt decoded together): prefill tokens/s for B prompts of P tokens (one
// compiled program: the prompts' cache and the last position's logits) and decode tokens/s
// over --new tokens (B tokens per step; one replayed step per token where the device records,
// greedy, the cache on the device). The prompt ids are (i * 37 + 11) mod vocab, as
// apps/bench/peers_qwen3.py feeds transformers. A .gguf model keeps its quantized weights
// packed, a folder its BF16/F16 ones; --weights f32|bf16 holds them decoded or as bf16 (the
// weight bytes printed are those the model holds). Medians of --reps runs after one warm-up run
// (which compiles); the model is a folder or .gguf (apps/bench/make_qwen3_random.py makes a
// random Qwen3-0.6B-shaped folder).
#include <cstdio>

#include "apps/bench/common.hpp"
#include "core/error.hpp"
#include "nn/models/qwen3.hpp"
#include "runtime/device.hpp"

using namespace rlx;
using namespace rlx::bench;

int bench_generate(int argc, char** argv) {
  std::string model, device = "cpu", weights = "stored";
  int64_t prompt = 512, fresh = 64, batch = 1;
  int reps = 3;
  Args args("rlx-bench generate",
            "Qwen3 prefill and decode tokens/s at batch --batch (greedy): --prompt tokens, then --new tokens.\n"
            "--model: a Qwen3 folder (config.json + model.safetensors) or .gguf file; --weights stored|f32|bf16: the\n"
            "projections and embedding as stored, decoded to f32, or held as bf16 (nn::Qwen3Weights).\n");
  args.option("--model", "PATH", model)
      .option("--prompt", "512", prompt, 1)
      .option("--new", "64", fresh, 2)
      .option("--batch", "1", batch, 1)
      .option("--reps", "N", reps, 1)
      .option("--device", "cpu", device)
      .option("--weights", "stored", weights, {"stored", "f32", "bf16"});
  args.parse(argc, argv);
  return run_bench("rlx-bench generate", [&] {
    if (model.empty()) throw InputError("no model: pass --model PATH (apps/bench/make_qwen3_random.py makes one)");
    Device& dev = DeviceRegistry::get().at(device);
    print_device(dev);
    Stopwatch sw;
    nn::Qwen3Generator gen(model, nn::qwen3_weights_named(weights));
    const double load = sw.lap();
    const nn::Qwen3Config& c = gen.config();
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < prompt; ++i) ids.push_back((i * 37 + 11) % c.vocab_size);
    const std::vector<std::vector<int64_t>> prompts(size_t(batch), ids);
    gen.generate_batch(prompts, fresh, {}, dev);  // compiles both programs, records the step, runs once
    const double first = sw.lap();
    std::vector<double> prefill, decode;
    for (int i = 0; i < reps; ++i) {
      const nn::BatchGenerationResult r = gen.generate_batch(prompts, fresh, {}, dev);
      prefill.push_back(double(r.prefill_tokens) / r.prefill_seconds);
      decode.push_back(double(batch * r.decode_steps) / r.decode_seconds);
    }
    const double pre = median(prefill), dec = median(decode);
    std::printf("qwen3 (%lld layers, hidden %lld, %lld parameters, %.1f MB of weights) on %s, batch %lld: prefill %lld tokens "
                "%.1f tokens/s, decode %lld tokens %.2f tokens/s (%.1f ms/step)%s; load %.2f s, compile + first run %.2f s\n",
                (long long)c.num_layers, (long long)c.hidden_size, (long long)gen.parameter_count(), gen.weight_bytes() / 1e6,
                dev.name().c_str(), (long long)batch, (long long)prompt, pre, (long long)fresh, dec, 1e3 * double(batch) / dec,
                gen.replays(dev) ? ", decode replayed" : "", load, first);
    Result("generate")
        .add("model", std::string("qwen3"))
        .add("peer", std::string("rlx"))
        .add("weights", weights)
        .add("device", dev.name())
        .add("prompt", prompt)
        .add("new", fresh)
        .add("batch", batch)
        .add("weight_bytes", gen.weight_bytes())
        .add("prefill_tokens_per_s", pre, "%.2f")
        .add("decode_tokens_per_s", dec, "%.3f")
        .add("reps", int64_t(reps))
        .print();
    return 0;
  });
}
