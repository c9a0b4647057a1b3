// rlx-bench generate: Qwen3 generation throughput (nn/models/qwen3.hpp) at batch 1: prefill
// tokens/s for a --prompt of P tokens (one compiled program: the prompt's cache and the last
// position's logits) and decode tokens/s over --new tokens (one replayed step per token,
// greedy, the cache on the device). The prompt ids are (i * 37 + 11) mod vocab, as
// apps/bench/peers_qwen3.py feeds transformers. Medians of --reps runs after one warm-up run
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
  std::string model, device = "cpu";
  int64_t prompt = 512, fresh = 64;
  int reps = 3;
  Args args("rlx-bench generate",
            "Qwen3 prefill and decode tokens/s at batch 1 (f32, greedy): --prompt tokens, then --new tokens.\n"
            "--model: a Qwen3 folder (config.json + model.safetensors) or .gguf file.\n");
  args.option("--model", "PATH", model)
      .option("--prompt", "512", prompt, 1)
      .option("--new", "64", fresh, 2)
      .option("--reps", "N", reps, 1)
      .option("--device", "cpu", device);
  args.parse(argc, argv);
  return run_bench("rlx-bench generate", [&] {
    if (model.empty()) throw InputError("no model: pass --model PATH (apps/bench/make_qwen3_random.py makes one)");
    Device& dev = DeviceRegistry::get().at(device);
    print_device(dev);
    Stopwatch sw;
    nn::Qwen3Generator gen(model);
    const double load = sw.lap();
    const nn::Qwen3Config& c = gen.config();
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < prompt; ++i) ids.push_back((i * 37 + 11) % c.vocab_size);
    gen.generate(ids, fresh, {}, dev);  // compiles both programs, records the step, runs once
    const double first = sw.lap();
    std::vector<double> prefill, decode;
    for (int i = 0; i < reps; ++i) {
      const nn::GenerationResult r = gen.generate(ids, fresh, {}, dev);
      prefill.push_back(double(r.prefill_tokens) / r.prefill_seconds);
      decode.push_back(double(r.decode_steps) / r.decode_seconds);
    }
    const double pre = median(prefill), dec = median(decode);
    std::printf("qwen3 (%lld layers, hidden %lld, %lld parameters) on %s: prefill %lld tokens %.1f tokens/s, decode %lld tokens "
                "%.2f tokens/s (%.1f ms/token)%s; load %.2f s, compile + first run %.2f s\n",
                (long long)c.num_layers, (long long)c.hidden_size, (long long)gen.parameter_count(), dev.name().c_str(),
                (long long)prompt, pre, (long long)fresh, dec, 1e3 / dec, gen.replays(dev) ? ", decode replayed" : "", load, first);
    Result("generate")
        .add("model", std::string("qwen3"))
        .add("peer", std::string("rlx"))
        .add("device", dev.name())
        .add("prompt", prompt)
        .add("new", fresh)
        .add("prefill_tokens_per_s", pre, "%.2f")
        .add("decode_tokens_per_s", dec, "%.3f")
        .add("reps", int64_t(reps))
        .print();
    return 0;
  });
}
