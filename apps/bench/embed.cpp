// rlx-bench embed: all-MiniLM-L6-v2 sentence-embedding latency (nn/models/bert.hpp), the
// whole forward from token ids to the L2-normalised embeddings, at each --batches size and
// --length tokens per sentence (no padding: every position is a token, the same ids as
// apps/bench/peers_minilm.py feeds PyTorch and ONNX Runtime). Median and p90 of --reps runs
// after one warm-up run; compile time apart. On a GPU the ids are on the device before the
// clock starts, as the PyTorch peers' are (the upload of three [B, L] i64 arrays is the
// caller's, not the model's).
#include <cstdio>
#include <cstdlib>

#include "apps/bench/common.hpp"
#include "core/error.hpp"
#include "nn/models/bert.hpp"
#include "runtime/device.hpp"

using namespace rlx;
using namespace rlx::bench;

namespace {

struct Options {
  std::string model;
  std::vector<int64_t> batches = {1, 8, 32};
  int64_t length = 128;
  int reps = 20;
  std::string device = "cpu";
};

// Token ids the peers compute by the same formula: [CLS], ordinary word pieces, [SEP].
nn::TokenBatch synthetic_batch(int64_t b, int64_t len) {
  nn::TokenBatch t{Tensor::empty(DType::I64, {b, len}), Tensor::empty(DType::I64, {b, len}), Tensor::zeros(DType::I64, {b, len})};
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < len; ++i) {
      t.ids.data<int64_t>()[r * len + i] = i == 0 ? 101 : i == len - 1 ? 102 : 1996 + (i * 37 + r * 11) % 28000;
      t.attention_mask.data<int64_t>()[r * len + i] = 1;
    }
  return t;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

}  // namespace

int bench_embed(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("RLX_MINILM_DIR")) o.model = env;
  Args args("rlx-bench embed",
            "all-MiniLM-L6-v2 embedding latency (f32): ids [batch, length] -> embeddings, median of --reps.\n"
            "--model: the model folder (default $RLX_MINILM_DIR).\n");
  args.option("--model", "DIR", o.model)
      .option("--batches", "1,8,32", o.batches)
      .option("--length", "128", o.length, 2)
      .option("--reps", "N", o.reps, 1)
      .option("--device", "cpu", o.device);
  args.parse(argc, argv);
  return run_bench("rlx-bench embed", [&] {
    if (o.model.empty()) throw InputError("no model: pass --model DIR or set RLX_MINILM_DIR");
    Device& dev = DeviceRegistry::get().at(o.device);
    print_device(dev);
    nn::SentenceEmbedder e(o.model);
    for (int64_t b : o.batches) {
      nn::TokenBatch batch = synthetic_batch(b, o.length);
      if (!dev.allocator()->host_accessible())
        batch = {batch.ids.to(dev.allocator()), batch.attention_mask.to(dev.allocator()),
                 batch.token_type_ids.to(dev.allocator())};
      Stopwatch sw;
      e.embed(batch, dev);  // compiles, then runs once (the warm-up)
      dev.synchronize();
      const double first = sw.lap();
      std::vector<double> t;
      for (int i = 0; i < o.reps; ++i) {
        const Clock::time_point t0 = Clock::now();
        Tensor r = e.embed(batch, dev);
        dev.synchronize();
        t.push_back(seconds_since(t0));
      }
      const double p50 = median(t), p90 = percentile(t, 0.9);
      std::printf("minilm batch %3lld x %lld tokens: p50 %9.3f ms  p90 %9.3f ms  (%.0f sentences/s; compile + first run %.2f s)\n",
                  (long long)b, (long long)o.length, p50 * 1e3, p90 * 1e3, double(b) / p50, first);
      Result("embed")
          .add("model", std::string("all-MiniLM-L6-v2"))
          .add("peer", std::string("rlx"))
          .add("device", dev.name())
          .add("batch", b)
          .add("length", o.length)
          .add("p50_ms", p50 * 1e3, "%.4f")
          .add("p90_ms", p90 * 1e3, "%.4f")
          .add("reps", int64_t(o.reps))
          .print();
    }
    return 0;
  });
}
