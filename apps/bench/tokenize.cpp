// rlx-bench tokenize: the byte-level BPE tokenizer (nn/models/bpe.hpp) on one text: the time to
// read the tokenizer.json, and encode's throughput on the whole text in one call (one thread),
// median of --reps after a warm-up; the ids' count and sum as a RESULT line, so a peer's ids
// can be checked against the same work (apps/bench/peers_tokenize.py runs Hugging Face
// tokenizers beside it).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "apps/bench/common.hpp"
#include "core/error.hpp"
#include "nn/models/bpe.hpp"

using namespace rlx;
using namespace rlx::bench;

int bench_tokenize(int argc, char** argv) {
  std::string tokenizer, text_path;
  int reps = 5;
  Args args("rlx-bench tokenize", "Encode --text with the byte-level BPE --tokenizer (a tokenizer.json): load time, MB/s.\n");
  args.option("--tokenizer", "FILE", tokenizer).option("--text", "FILE", text_path).option("--reps", "N", reps, 1);
  args.parse(argc, argv);
  return run_bench("rlx-bench tokenize", [&] {
    if (tokenizer.empty() || text_path.empty()) throw InputError("pass --tokenizer FILE and --text FILE");
    std::ifstream f(text_path, std::ios::binary);
    if (!f) throw InputError(text_path + ": cannot read the text");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    Stopwatch sw;
    const nn::BpeTokenizer tok = nn::BpeTokenizer::from_file(tokenizer);
    const double load = sw.lap();
    std::vector<int64_t> ids;
    const double s = median_seconds(reps, [&] { ids = tok.encode(text); });
    int64_t sum = 0;
    for (int64_t id : ids) sum += id;
    std::printf("tokenizer %s (%lld tokens) read in %.3f s; %zu bytes -> %zu ids in %.4f s (%.2f MB/s)\n", tokenizer.c_str(),
                (long long)tok.vocab_size(), load, text.size(), ids.size(), s, double(text.size()) / s / 1e6);
    Result("tokenize")
        .add("load_s", load, "%.4f")
        .add("encode_s", s, "%.5f")
        .add("bytes", int64_t(text.size()))
        .add("ids", int64_t(ids.size()))
        .add("id_sum", sum)
        .print();
    return 0;
  });
}
