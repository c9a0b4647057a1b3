// rlx-bench load: the time and memory of loading one model file as the CLI does — a Qwen3 .gguf or
// folder into nn::Qwen3Generator (quantized weights kept packed), a sentence-transformers
// folder, a .onnx or a BERT .gguf into nn::SentenceEmbedder — in this process, once: peak memory is the
// process's high-water mark (VmHWM) above its resident size before the load (VmRSS), so run one
// load per process (apps/bench/peers_load.py does, beside the Python loaders).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "apps/bench/common.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "nn/models/bert.hpp"
#include "nn/models/model_files.hpp"
#include "nn/models/qwen3.hpp"

using namespace rlx;
using namespace rlx::bench;

namespace {

// A field of /proc/self/status in kB ("VmRSS", "VmHWM"); -1 where there is none.
int64_t status_kb(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

bool is_qwen3(const std::string& path) {
  namespace fs = std::filesystem;
  if (nn::model_files::is_gguf_path(path))  // (a BERT file is a sentence embedder's)
    return io::GgufFile(path).get_string("general.architecture") != "bert";
  const fs::path config = fs::path(path) / "config.json";
  std::error_code ec;
  if (!fs::is_directory(path, ec) || !fs::exists(config, ec)) return false;
  const auto j = nn::model_files::read_config(config.string());
  return j.is_object() && j.value("model_type", std::string()) == "qwen3";
}

}  // namespace

int bench_load(int argc, char** argv) {
  std::string model;
  std::string read = "no";
  Args args("rlx-bench load",
            "Load --model once (a .gguf or Qwen3 folder, a sentence-transformers folder or .onnx): seconds and peak memory.\n");
  args.option("--model", "PATH", model);
  args.option("--read", "no|yes", read, {"no", "yes"});  // yes: then touch every page of a Qwen3 model's weights
  args.parse(argc, argv);
  return run_bench("rlx-bench load", [&] {
    if (model.empty()) throw InputError("no model: pass --model PATH");
    const int64_t rss0 = status_kb("VmRSS");
    Stopwatch sw;
    std::string kind;
    int64_t params = 0, bytes = -1;
    uint64_t checksum = 0;
    if (is_qwen3(model)) {
      nn::Qwen3Generator gen(model);
      kind = "qwen3";
      params = gen.parameter_count();
      bytes = gen.weight_bytes();
      if (read == "yes") {
        // Weights over the file's mapping are read lazily, as a mapped peer's are: a page comes
        // in on its first read, so one byte of every 4 KiB is read (and summed, so the reads stay).
        for (const Tensor& w : gen.host_weights()) {
          const auto* p = static_cast<const unsigned char*>(w.raw());
          for (size_t i = 0; i < w.nbytes(); i += 4096) checksum += p[i];
        }
        kind += "+read";
      }
    } else {
      nn::SentenceEmbedder emb(model);
      kind = "sentence-embedder";
      params = emb.parameter_count();
    }
    const double s = sw.lap();
    const int64_t hwm = status_kb("VmHWM");
    std::printf("load %s (%s, %lld parameters%s): %.3f s, peak memory %.1f MB above the %.1f MB before\n", model.c_str(),
                kind.c_str(), (long long)params, bytes >= 0 ? (", " + std::to_string(bytes) + " bytes of weights held").c_str() : "",
                s, (hwm - rss0) / 1024.0, rss0 / 1024.0);
    Result("load")
        .add("model", model)
        .add("kind", kind)
        .add("seconds", s, "%.4f")
        .add("peak_mb", (hwm - rss0) / 1024.0, "%.1f")
        .add("weight_bytes", bytes)
        .add("read_checksum", int64_t(checksum))
        .print();
    return 0;
  });
}
