// Qwen3 on rlx (nn/models/qwen3.hpp) against transformers: the tiny random model of
// data/qwen3 (make_qwen3_tiny.py) — prompt logits within 1e-4 and the same top-1 at every
// position, transformers' greedy continuation, on every runnable device; the decode step
// through the on-device cache equal to the full prefill at each position; the GGUF copies
// (F16, Q8_0, Q4_0) within the tolerances measured for them, quantized and F16 weights kept packed
// and equal to the same file decoded at load; bf16 weights (a BF16 checkpoint, or the f32 one
// held as bf16) kept packed and equal to an f32 model of the rounded values; a batch of sequences decoded together equal
// to each alone; seeded sampling repeatable; bad
// configurations, missing tensors and bad ids refused with the file and the field named.
#define BOOST_TEST_MODULE models_qwen3
#include <boost/test/unit_test.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "nn/models/bpe.hpp"
#include "nn/models/model_files.hpp"
#include "nn/models/qwen3.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/errors.hpp"

namespace rlx::nn {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const std::string kDir = std::string(RLX_DATA) + "/qwen3";

struct Reference {
  std::vector<int64_t> prompt, greedy;
  Tensor logits;  // f32 [P, vocab]
};

Reference reference() {
  std::ifstream f(kDir + "/reference.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  return {j.at("prompt").get<std::vector<int64_t>>(), j.at("greedy").get<std::vector<int64_t>>(),
          io::read_npy(kDir + "/logits.npy")};
}

std::vector<Device*> devices() { return DeviceRegistry::get().runnable(); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE(a.shape() == b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

std::vector<int64_t> top1(const Tensor& logits) {
  const int64_t n = logits.shape()[0], v = logits.shape()[1];
  std::vector<int64_t> r;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data<float>() + i * v;
    r.push_back(int64_t(std::max_element(row, row + v) - row));
  }
  return r;
}

BOOST_AUTO_TEST_CASE(config_json_is_read_field_by_field) {
  const Qwen3Config c = Qwen3Config::from_file(kDir + "/config.json");
  BOOST_TEST(c.vocab_size == 512);
  BOOST_TEST(c.hidden_size == 64);
  BOOST_TEST(c.intermediate_size == 128);
  BOOST_TEST(c.num_layers == 2);
  BOOST_TEST(c.num_heads == 4);
  BOOST_TEST(c.num_kv_heads == 2);
  BOOST_TEST(c.head_dim == 16);
  BOOST_TEST(c.max_positions == 128);
  BOOST_TEST(c.rms_norm_eps == 1e-6);
  BOOST_TEST(c.rope_theta == 10000.0);  // (from rope_parameters, as transformers 5 writes it)
  BOOST_TEST(c.tie_word_embeddings);
  // The older form: rope_theta at the top level.
  const Qwen3Config o = Qwen3Config::from_text(
      R"({"model_type": "qwen3", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 4, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 16, "rope_theta": 1000000.0,
          "rope_scaling": null, "rms_norm_eps": 1e-5})",
      "old.json");
  BOOST_TEST(o.rope_theta == 1e6);
  // The hub's Qwen3-0.6B config.json (kept as a fuzz corpus input).
  const Qwen3Config hub = Qwen3Config::from_file(std::string(RLX_DATA) + "/../tests/fuzz/corpus/qwen3_config/qwen3_0_6b_hub_form");
  BOOST_TEST((hub.vocab_size == 151936 && hub.hidden_size == 1024 && hub.num_layers == 28 && hub.num_heads == 16 &&
              hub.num_kv_heads == 8 && hub.head_dim == 128 && hub.intermediate_size == 3072 && hub.max_positions == 40960 &&
              hub.rope_theta == 1e6 && hub.tie_word_embeddings));
  BOOST_TEST(o.head_dim == 4);  // (hidden / heads when absent)
  BOOST_TEST(!o.tie_word_embeddings);
}

BOOST_AUTO_TEST_CASE(bad_configurations_name_the_file_and_the_field) {
  std::ifstream f(kDir + "/config.json");
  const nlohmann::json good = nlohmann::json::parse(f);
  auto refuse = [&](const std::function<void(nlohmann::json&)>& edit, std::vector<std::string> parts) {
    nlohmann::json j = good;
    edit(j);
    parts.insert(parts.begin(), "bad.json");
    expect_error([&] { Qwen3Config::from_text(j.dump(), "bad.json"); }, parts);
  };
  refuse([](auto& j) { j["model_type"] = "llama"; }, {"model_type \"llama\""});
  refuse([](auto& j) { j.erase("model_type"); }, {"\"model_type\" is missing"});
  refuse([](auto& j) { j["hidden_act"] = "gelu"; }, {"hidden_act \"gelu\""});
  refuse([](auto& j) { j.erase("vocab_size"); }, {"\"vocab_size\" is missing"});
  refuse([](auto& j) { j["hidden_size"] = -64; }, {"\"hidden_size\" must lie in"});
  refuse([](auto& j) { j["num_hidden_layers"] = "2"; }, {"\"num_hidden_layers\" must be an integer"});
  refuse([](auto& j) { j["num_key_value_heads"] = 3; }, {"3 key/value heads do not divide 4"});
  refuse([](auto& j) { j["num_key_value_heads"] = 8; }, {"\"num_key_value_heads\" must lie in [1, 4]"});
  refuse([](auto& j) { j["head_dim"] = 15; }, {"head_dim 15 is odd"});
  refuse([](auto& j) { j["rms_norm_eps"] = 0; }, {"\"rms_norm_eps\" must lie in"});
  refuse([](auto& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, {"rope_type \"yarn\""});
  refuse([](auto& j) { j["rope_parameters"].erase("rope_theta"); }, {"rope_parameters", "\"rope_theta\" is missing"});
  refuse([](auto& j) { j["rope_scaling"] = {{"type", "linear"}}; }, {"rope_scaling"});
  refuse([](auto& j) { j["attention_bias"] = true; }, {"attention_bias"});
  refuse([](auto& j) { j["use_sliding_window"] = true; }, {"use_sliding_window"});
  refuse([](auto& j) { j["tie_word_embeddings"] = 1; }, {"\"tie_word_embeddings\" must be true or false"});
  expect_error([] { Qwen3Config::from_text("{\"model_type\": ", "trunc.json"); }, {"trunc.json:1", "not valid JSON"});
  expect_error([] { Qwen3Config::from_text("[1]", "arr.json"); }, {"arr.json", "must be a JSON object"});
  expect_error([] { Qwen3Config::from_text(R"({"a": 1, "a": 2})", "dup.json"); }, {"dup.json", "'a' appears twice"});
  expect_error([] { Qwen3Config::from_text(std::string(40, '[') + std::string(40, ']'), "deep.json"); }, {"deep.json", "16 levels"});
  expect_error([] { Qwen3Config::from_file("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
}

BOOST_AUTO_TEST_CASE(prompt_logits_match_transformers_on_every_device) {
  const Reference ref = reference();
  Qwen3Generator gen(kDir);
  BOOST_TEST(gen.parameter_count() == 512 * 64 + 64 + 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 2 * 64 + 2 * 16));
  for (Device* d : devices()) {
    const Tensor l = gen.prefill_logits(ref.prompt, *d);
    const double diff = max_abs_diff(l, ref.logits);
    BOOST_TEST_MESSAGE(d->name() << ": max |logit - transformers| = " << diff);
    BOOST_TEST(diff <= 1e-4, d->name() << ": " << diff);
    BOOST_TEST(top1(l) == top1(ref.logits), d->name());
  }
}

// Every device, runnable here or not (cuda compiles without a GPU): the prefill and the
// decode step legalize with each node native or lowered — nothing host-staged, nothing
// unsupported — so the decode step can be recorded where the device records.
// The decode step of `batch` sequences over a cache of 8 positions, its outputs set.
Qwen3Outputs decode_graph(Model& m, const Qwen3Config& c, int64_t batch) {
  Var ids = m.input("ids", DType::I64, {batch, 1}), pos = m.input("pos", DType::I64, {});
  std::vector<Var> cache;
  for (int64_t i = 0; i < 2 * c.num_layers; ++i)
    cache.push_back(m.input("cache" + std::to_string(i), DType::F32, {batch, c.num_kv_heads, 8, c.head_dim}));
  Qwen3Outputs o = qwen3_decode(m, c, ids, pos, cache);
  std::vector<Var> res{o.logits};
  res.insert(res.end(), o.cache.begin(), o.cache.end());
  output(m.graph(), res);
  return o;
}

BOOST_AUTO_TEST_CASE(prefill_and_decode_compile_on_every_device_without_host_staging_and_decode_writes_the_cache_in_place) {
  const Qwen3Config c = Qwen3Config::from_file(kDir + "/config.json");
  for (Device* d : DeviceRegistry::get().all()) {
    ir::Graph pg;
    Model pm(pg);
    Qwen3Outputs p = qwen3_prefill(pm, c, pm.input("ids", DType::I64, {1, 5}), 8, false);
    std::vector<Var> pres{p.logits};
    pres.insert(pres.end(), p.cache.begin(), p.cache.end());
    output(pg, pres);
    BOOST_TEST((p.logits.shape() == Shape{1, 1, c.vocab_size}));
    BOOST_TEST(p.cache.size() == size_t(2 * c.num_layers));
    ir::Graph dg;
    Model dm(dg);
    decode_graph(dm, c, 1);
    BOOST_TEST(dm.parameters().size() == pm.parameters().size());
    for (size_t k = 0; k < dm.parameters().size(); ++k) BOOST_TEST(dm.parameters()[k].name == pm.parameters()[k].name);
    for (const ir::Graph* g : {&pg, &dg}) {
      const Program prog = compile(*g, *d);
      BOOST_TEST(prog.report.count(Route::HostStaged) == 0, d->name());
      BOOST_TEST(prog.report.count(Route::Unsupported) == 0, d->name());
      // The decode step writes every cache result over its cache input (inputs: ids, pos,
      // the cache; results: the logits, the cache): the generator then keeps one set.
      if (g == &dg)
        for (size_t i = 0; i < size_t(2 * c.num_layers); ++i)
          BOOST_TEST(prog.donates(2 + i, 1 + i), d->name() << " cache " << i);
    }
  }
}

// Packed Q4_0 weights at batch 2 on every registered device (cuda included where it is only
// compiled): the projections and the tied lm_head as matmul_packed, the embedding as a u8
// gather and dequantize, all native or rewritten, nothing host-staged.
BOOST_AUTO_TEST_CASE(packed_batched_programs_compile_on_every_device_without_host_staging) {
  Qwen3Config c = Qwen3Config::from_file(kDir + "/config.json");
  c.packed["model/embed_tokens"] = "Q4_0";
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (const char* p : {"self_attn/q_proj", "self_attn/k_proj", "self_attn/v_proj", "self_attn/o_proj", "mlp/gate_proj",
                          "mlp/up_proj", "mlp/down_proj"})
      c.packed["model/layers/" + std::to_string(i) + "/" + p] = "Q4_0";
  for (Device* d : DeviceRegistry::get().all()) {
    ir::Graph dg;
    Model dm(dg);
    BOOST_TEST((decode_graph(dm, c, 2).logits.shape() == Shape{2, 1, c.vocab_size}));
    // (the norms are the only parameters left)
    BOOST_TEST(dm.parameters().size() == size_t(4 * c.num_layers + 1));
    const Program prog = compile(dg, *d);
    BOOST_TEST(prog.report.count(Route::HostStaged) == 0, d->name());
    BOOST_TEST(prog.report.count(Route::Unsupported) == 0, d->name());
    int64_t packed = 0;
    for (const NodeReport& n : prog.report.nodes) packed += n.op == "matmul_packed";
    BOOST_TEST(packed == int64_t(c.packed.size()), d->name());
  }
}

BOOST_AUTO_TEST_CASE(decode_through_the_cache_equals_the_full_prefill) {
  const Reference ref = reference();
  Qwen3Generator gen(kDir);
  std::vector<int64_t> ids = ref.prompt;
  ids.insert(ids.end(), ref.greedy.begin(), ref.greedy.begin() + 8);
  for (Device* d : devices()) {
    const Tensor full = gen.prefill_logits(ids, *d);
    // From a one-token prefill (every later position decoded), and from the prompt, with a
    // cache longer than the sequence (positions past pos hold zeros and are masked).
    for (auto [prefill, cache_len] : {std::pair<int64_t, int64_t>{1, 0}, {int64_t(ref.prompt.size()), 64}}) {
      const Tensor dec = gen.decode_logits(ids, prefill, *d, cache_len);
      const double diff = max_abs_diff(dec, full);
      BOOST_TEST_MESSAGE(d->name() << ": prefill " << prefill << ", cache " << cache_len << ": max |decode - prefill| = " << diff);
      BOOST_TEST(diff <= 1e-4, d->name() << " prefill " << prefill << ": " << diff);
    }
  }
}

BOOST_AUTO_TEST_CASE(greedy_generation_equals_transformers_and_sampling_repeats_per_seed) {
  const Reference ref = reference();
  Qwen3Generator gen(kDir);
  const int64_t n = int64_t(ref.greedy.size());
  std::vector<int64_t> first;
  for (Device* d : devices()) {
    const GenerationResult g = gen.generate(ref.prompt, n, {}, *d);
    BOOST_TEST(g.ids == ref.greedy, d->name());
    BOOST_TEST(g.prefill_tokens == int64_t(ref.prompt.size()));
    BOOST_TEST(g.decode_steps == n - 1);
    // cuda records the decode step once per direction and replays it per token; the host
    // devices run it.
    BOOST_TEST(gen.replays(*d) == (d->name() == "cuda"), d->name());
    const SamplingOptions s{.temperature = 0.9, .top_k = 40, .top_p = 0.95, .seed = 7};
    const std::vector<int64_t> a = gen.generate(ref.prompt, n, s, *d).ids, b = gen.generate(ref.prompt, n, s, *d).ids;
    BOOST_TEST(a == b, d->name());
    if (first.empty()) first = a;
    BOOST_TEST(a == first, d->name() << ": the same seed draws the same tokens on every device");
    SamplingOptions other = s;
    other.seed = 8;
    BOOST_TEST(gen.generate(ref.prompt, n, other, *d).ids != a, d->name() << ": another seed, other tokens");
  }
}

BOOST_AUTO_TEST_CASE(sampling_keeps_top_k_and_top_p_and_follows_the_softmax) {
  const std::vector<float> l{1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  BOOST_TEST(sample_token(l.data(), 5, {}, 0) == 1);  // greedy: the first maximum
  // A NaN counts as the largest, as in the decode step's argmax on the device.
  const std::vector<float> with_nan{1.0f, 3.0f, std::nanf(""), 5.0f, std::nanf("")};
  BOOST_TEST(sample_token(with_nan.data(), 5, {}, 0) == 2);
  for (uint64_t step = 0; step < 50; ++step) {
    BOOST_TEST(sample_token(l.data(), 5, {.temperature = 1, .top_k = 1, .seed = 3}, step) == 1);
    const int64_t t = sample_token(l.data(), 5, {.temperature = 1, .top_k = 2, .seed = 3}, step);
    BOOST_TEST((t == 1 || t == 3));
    BOOST_TEST(sample_token(l.data(), 5, {.temperature = 1, .top_p = 0.01, .seed = 3}, step) == 1);
  }
  // With two tokens at logits 0 and log 3 and temperature 1, the second comes 3 times in 4.
  const std::vector<float> two{0.0f, float(std::log(3.0))};
  int hits = 0;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) hits += sample_token(two.data(), 2, {.temperature = 1, .seed = 11}, uint64_t(i)) == 1;
  BOOST_TEST(std::abs(double(hits) / draws - 0.75) < 0.015, hits);
  // top_p = 0.7 keeps only the most probable token of the two (0.75 >= 0.7).
  for (int i = 0; i < 20; ++i) BOOST_TEST(sample_token(two.data(), 2, {.temperature = 1, .top_p = 0.7, .seed = 1}, uint64_t(i)) == 1);
  expect_error([&] { sample_token(l.data(), 5, {.temperature = -1}, 0); }, {"temperature"});
  expect_error([&] { sample_token(l.data(), 5, {.temperature = 1, .top_k = -2}, 0); }, {"top_k"});
  expect_error([&] { sample_token(l.data(), 5, {.temperature = 1, .top_p = 0}, 0); }, {"top_p"});
}

BOOST_AUTO_TEST_CASE(gguf_copies_load_and_stay_within_their_measured_tolerances) {
  const Reference ref = reference();
  const Qwen3Config want = Qwen3Config::from_file(kDir + "/config.json");
  // Against transformers run on the weights each file holds (decoded to f32 by gguf-py):
  // 1e-4, as for safetensors. Against the f32 model: F16 weights (11-bit mantissas) move
  // the logits (|logit| <= 2.3 here) by at most 1.96e-3, Q8_0 (8 bits per weight and an f16
  // scale per block of 32) by 5.7e-2 (measured in make_qwen3_tiny.py); the bounds leave room.
  struct Case {
    const char* file;
    const char* logits;
    double vs_f32;
  };
  for (const Case& k : {Case{"qwen3-tiny-f16.gguf", "logits_f16.npy", 2.5e-3}, Case{"qwen3-tiny-q8_0.gguf", "logits_q8_0.npy", 8e-2}}) {
    Qwen3Generator gen(kDir + "/" + k.file);
    const Qwen3Config& c = gen.config();
    BOOST_TEST((c.vocab_size == want.vocab_size && c.hidden_size == want.hidden_size && c.num_layers == want.num_layers &&
                c.num_heads == want.num_heads && c.num_kv_heads == want.num_kv_heads && c.head_dim == want.head_dim &&
                c.intermediate_size == want.intermediate_size && c.max_positions == want.max_positions &&
                c.rope_theta == want.rope_theta && c.tie_word_embeddings),
               k.file);
    BOOST_TEST(std::abs(c.rms_norm_eps - want.rms_norm_eps) < 1e-12);
    const Tensor same_weights = io::read_npy(kDir + "/" + k.logits);
    for (Device* d : devices()) {
      const Tensor l = gen.prefill_logits(ref.prompt, *d);
      const double exact = max_abs_diff(l, same_weights), drift = max_abs_diff(l, ref.logits);
      BOOST_TEST_MESSAGE(k.file << " on " << d->name() << ": max |logit - transformers on the file's weights| = " << exact
                                << ", max |logit - f32 model| = " << drift);
      BOOST_TEST(exact <= 1e-4, k.file << " on " << d->name() << ": " << exact);
      BOOST_TEST(drift <= k.vs_f32, k.file << " on " << d->name() << ": " << drift);
      BOOST_TEST(top1(l) == top1(ref.logits), k.file << " on " << d->name());
    }
  }
  BOOST_TEST(gguf_tensor_name("model/layers/1/self_attn/k_norm/weight") == "blk.1.attn_k_norm.weight");
  BOOST_TEST(gguf_tensor_name("model/layers/0/mlp/down_proj/weight") == "blk.0.ffn_down.weight");
  BOOST_TEST(gguf_tensor_name("lm_head/weight") == "output.weight");
  expect_error([] { gguf_tensor_name("model/layers/x/mlp/down_proj/weight"); }, {"not a Qwen3 parameter"});
}

// Each occurrence of `what` in `text`.
int64_t occurrences(const std::string& text, const std::string& what) {
  int64_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A GGUF file's quantized and F16 weights kept packed (matmul_packed over the blocks, the embedding
// rows gathered and decoded) against the same file decoded to f32 when it is read: the same
// f32 weights times the same activations, summed in another order, so the logits agree to
// f32 rounding (measured: 0 on reference and cpu; the bound 2e-5 leaves room for another order); the same top-1 at
// every position; transformers on the file's weights within 1e-4 (as for every GGUF copy);
// the loaded model holds the blocks (the byte count the format implies), not f32.
BOOST_AUTO_TEST_CASE(packed_gguf_weights_give_the_dequantized_logits_and_keep_their_bytes) {
  const Reference ref = reference();
  std::vector<int64_t> ids = ref.prompt;
  ids.insert(ids.end(), ref.greedy.begin(), ref.greedy.begin() + 6);
  struct Case {
    const char* file;
    const char* logits;
    const char* type;
    int64_t block, bytes;  // elements and bytes of one block
    double vs_f32;         // against the f32 model: the file's own quantization error (measured 5.7e-2 for Q8_0, 0.76 for Q4_0)
  };
  for (const Case& k : {Case{"qwen3-tiny-q8_0.gguf", "logits_q8_0.npy", "Q8_0", 32, 34, 8e-2},
                        Case{"qwen3-tiny-q4_0.gguf", "logits_q4_0.npy", "Q4_0", 32, 18, 1.0},
                        Case{"qwen3-tiny-f16.gguf", "logits_f16.npy", "F16", 1, 2, 2.5e-3}}) {
    Qwen3Generator packed(kDir + "/" + k.file), plain(kDir + "/" + k.file, Qwen3Weights::F32);
    const Qwen3Config& c = packed.config();
    BOOST_TEST(plain.config().packed.empty());
    // Every projection of every layer and the (tied) embedding.
    BOOST_TEST(c.packed.size() == size_t(7 * c.num_layers + 1), k.file);
    for (const auto& [scope, type] : c.packed) BOOST_TEST(type == k.type, scope);
    BOOST_TEST(c.packed.count("model/embed_tokens") == 1);
    BOOST_TEST(packed.parameter_count() == plain.parameter_count());
    const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, in = c.intermediate_size;
    auto blocks = [&](int64_t rows, int64_t cols) { return rows * cols / k.block * k.bytes; };
    const int64_t norms = 4 * (c.num_layers * (2 * h + 2 * c.head_dim) + h);
    const int64_t want = blocks(c.vocab_size, h) + norms +
                         c.num_layers * (blocks(q, h) + 2 * blocks(kv, h) + blocks(h, q) + 2 * blocks(in, h) + blocks(h, in));
    BOOST_TEST(packed.weight_bytes() == want, k.file);
    BOOST_TEST(plain.weight_bytes() == 4 * plain.parameter_count(), k.file);
    const Tensor file_weights = io::read_npy(kDir + "/" + k.logits);
    for (Device* d : devices()) {
      const Tensor a = packed.prefill_logits(ids, *d), b = plain.prefill_logits(ids, *d);
      const double diff = max_abs_diff(a, b);
      const Tensor prompt_logits = packed.prefill_logits(ref.prompt, *d);
      const double exact = max_abs_diff(prompt_logits, file_weights), drift = max_abs_diff(prompt_logits, ref.logits);
      BOOST_TEST_MESSAGE(k.file << " on " << d->name() << ": max |packed - dequantized at load| = " << diff
                                << ", max |packed - transformers on the file's weights| = " << exact
                                << ", max |packed - f32 model| = " << drift);
      BOOST_TEST(diff <= 2e-5, k.file << " on " << d->name() << ": " << diff);
      BOOST_TEST(top1(a) == top1(b), k.file << " on " << d->name());
      BOOST_TEST(exact <= 1e-4, k.file << " on " << d->name() << ": " << exact);
      BOOST_TEST(drift <= k.vs_f32, k.file << " on " << d->name() << ": " << drift);
      // Through the cache too: the decode step reads the same blocks.
      const double cached = max_abs_diff(packed.decode_logits(ids, 3, *d), b);
      BOOST_TEST(cached <= 1e-4, k.file << " on " << d->name() << ": " << cached);
      const std::string report = packed.explain_decode(32, *d);
      BOOST_TEST(occurrences(report, "matmul_packed") == int64_t(c.packed.size()), d->name() << "\n" << report);
      BOOST_TEST(occurrences(plain.explain_decode(32, *d), "matmul_packed") == 0, d->name());
    }
  }
}

// Q4_K (256-value super-blocks: a model of its own, hidden 256; data/qwen3/make_qwen3_q4k.py):
// every projection and the tied embedding kept packed as Q4_K and run natively; the logits
// within 1e-4 of transformers on the file's weights (decoded by gguf-py) with the same top-1
// everywhere, within 2e-5 of the same file decoded to f32 at load, and through the cache.
BOOST_AUTO_TEST_CASE(a_q4_k_model_runs_packed_as_transformers_runs_its_weights) {
  const Reference ref = reference();
  const std::string file = kDir + "/qwen3-q4k.gguf";
  Qwen3Generator packed(file), plain(file, Qwen3Weights::F32);
  const Qwen3Config& c = packed.config();
  BOOST_TEST(c.packed.size() == size_t(7 * c.num_layers + 1));
  for (const auto& [scope, type] : c.packed) BOOST_TEST(type == "Q4_K", scope);
  const Tensor want = io::read_npy(kDir + "/logits_q4k.npy");
  for (Device* d : devices()) {
    const Tensor a = packed.prefill_logits(ref.prompt, *d), b = plain.prefill_logits(ref.prompt, *d);
    const double exact = max_abs_diff(a, want), diff = max_abs_diff(a, b);
    BOOST_TEST_MESSAGE("qwen3-q4k.gguf on " << d->name() << ": max |packed - transformers on the file's weights| = " << exact
                                             << ", max |packed - dequantized at load| = " << diff);
    BOOST_TEST(exact <= 1e-4, d->name() << ": " << exact);
    BOOST_TEST(diff <= 2e-5, d->name() << ": " << diff);
    BOOST_TEST(top1(a) == top1(want), d->name());
    BOOST_TEST(max_abs_diff(packed.decode_logits(ref.prompt, 3, *d), b) <= 1e-4, d->name());
    const std::string report = packed.explain_decode(32, *d);
    BOOST_TEST(occurrences(report, "matmul_packed") == int64_t(c.packed.size()), d->name() << "\n" << report);
  }
}

// Sequences generated together (one cache [B, ...]) against each alone: the logits of every
// position through the batched cache within 1e-4 of the sequence's own, the greedy tokens
// identical, seeded sampling drawing what the sequence alone draws; on the f32 folder and
// on packed Q4_0 weights.
BOOST_AUTO_TEST_CASE(a_batch_decodes_each_sequence_as_it_decodes_alone) {
  const Reference ref = reference();
  std::vector<std::vector<int64_t>> batch{ref.prompt, ref.prompt, ref.prompt};
  std::reverse(batch[1].begin(), batch[1].end());
  for (int64_t& t : batch[2]) t = (t * 7 + 3) % 512;
  for (const std::string& model : {kDir, kDir + "/qwen3-tiny-q4_0.gguf"}) {
    Qwen3Generator gen(model);
    for (Device* d : devices()) {
      std::vector<std::vector<int64_t>> longer = batch;
      for (auto& s : longer) s.insert(s.end(), ref.greedy.begin(), ref.greedy.begin() + 5);
      const Tensor together = gen.decode_logits_batch(longer, 4, *d);
      const int64_t n = int64_t(longer[0].size()), v = gen.config().vocab_size;
      BOOST_TEST((together.shape() == Shape{3, n, v}));
      for (size_t b = 0; b < longer.size(); ++b) {
        const Tensor alone = gen.decode_logits(longer[b], 4, *d);
        Tensor row = Tensor::empty(DType::F32, {n, v});
        std::copy(together.data<float>() + int64_t(b) * n * v, together.data<float>() + int64_t(b + 1) * n * v, row.data<float>());
        const double diff = max_abs_diff(row, alone);
        BOOST_TEST_MESSAGE(model << " on " << d->name() << ", sequence " << b << ": max |batched - alone| = " << diff);
        BOOST_TEST(diff <= 1e-4, model << " on " << d->name() << " sequence " << b << ": " << diff);
      }
      const BatchGenerationResult g = gen.generate_batch(batch, 8, {}, *d);
      BOOST_TEST(g.ids.size() == batch.size());
      BOOST_TEST(g.prefill_tokens == int64_t(3 * ref.prompt.size()));
      BOOST_TEST(g.decode_steps == 7);
      for (size_t b = 0; b < batch.size(); ++b) BOOST_TEST(g.ids[b] == gen.generate(batch[b], 8, {}, *d).ids, d->name() << " " << b);
      if (model == kDir) BOOST_TEST(g.ids[0] == std::vector<int64_t>(ref.greedy.begin(), ref.greedy.begin() + 8), d->name());
      BOOST_TEST(g.ids[1] != g.ids[0]);  // (the sequences are not one sequence three times)
      const SamplingOptions s{.temperature = 0.9, .top_k = 40, .seed = 3};
      const BatchGenerationResult sampled = gen.generate_batch(batch, 6, s, *d);
      for (size_t b = 0; b < batch.size(); ++b) BOOST_TEST(sampled.ids[b] == gen.generate(batch[b], 6, s, *d).ids, d->name() << " " << b);
    }
    Device& cpu = DeviceRegistry::get().at("cpu");
    expect_error([&] { gen.decode_logits_batch({{1, 2, 3}, {4, 5}}, 1, cpu); }, {"sequence 1 has 2 ids", "one length"});
    expect_error([&] { gen.generate_batch({}, 2, {}, cpu); }, {"no sequences"});
    expect_error([&] { gen.generate_batch({{1, 2}, {3, 999}}, 2, {}, cpu); }, {"token id 999"});
  }
}

// Prompts of different lengths in one batch (padded on the left, each row's padding masked):
// every sequence generates what it generates alone, greedy and seeded, on every device, on
// the f32 folder and on packed Q4_0 weights; stop ids end rows independently.
BOOST_AUTO_TEST_CASE(prompts_of_different_lengths_generate_as_each_alone) {
  const Reference ref = reference();
  const std::vector<int64_t>& p = ref.prompt;
  std::vector<std::vector<int64_t>> batch{p, std::vector<int64_t>(p.begin(), p.begin() + 4), {7}, {}};
  batch[3] = std::vector<int64_t>(p.rbegin(), p.rbegin() + 9);
  for (const std::string& model : {kDir, kDir + "/qwen3-tiny-q4_0.gguf"}) {
    Qwen3Generator gen(model);
    for (Device* d : devices()) {
      const BatchGenerationResult g = gen.generate_batch(batch, 8, {}, *d);
      BOOST_TEST(g.prefill_tokens == int64_t(4 * p.size()));  // (padded to the longest)
      for (size_t b = 0; b < batch.size(); ++b)
        BOOST_TEST(g.ids[b] == gen.generate(batch[b], 8, {}, *d).ids, model << " on " << d->name() << ", sequence " << b);
      // Sampling at a high temperature draws from the whole distribution: a masking error
      // would show in some draw.
      for (uint64_t seed : {11, 12, 13}) {
        const SamplingOptions s{.temperature = 1.5, .seed = seed};
        const BatchGenerationResult sampled = gen.generate_batch(batch, 6, s, *d);
        for (size_t b = 0; b < batch.size(); ++b)
          BOOST_TEST(sampled.ids[b] == gen.generate(batch[b], 6, s, *d).ids,
                     model << " on " << d->name() << ", seed " << seed << ", sampled " << b);
      }
      // A stop id one row yields ends that row only.
      const int64_t stop = g.ids[1][2];
      const BatchGenerationResult stopped = gen.generate_batch(batch, 8, {.stop_ids = {stop}}, *d);
      for (size_t b = 0; b < batch.size(); ++b) {
        const std::vector<int64_t>& full = g.ids[b];
        const auto at = std::find(full.begin(), full.end(), stop);
        BOOST_TEST(stopped.ids[b] == std::vector<int64_t>(full.begin(), at == full.end() ? full.end() : at + 1),
                   model << " on " << d->name() << ", stopped " << b);
      }
    }
  }
  Qwen3Generator gen(kDir);
  Device& cpu = DeviceRegistry::get().at("cpu");
  expect_error([&] { gen.generate_batch({{1, 2, 3}, {}}, 2, {}, cpu); }, {"no token ids"});
  expect_error([&] { gen.generate_batch({{1, 2}, std::vector<int64_t>(120, 1)}, 9, {}, cpu); }, {"exceed the model's 128 positions"});
}

// qwen3_chat_prompt writes what jinja2 renders from Qwen3's own chat template for one user
// turn (data/bpe/qwen3_chat_reference.json, make_bpe_reference.py): with and without a system
// turn (an empty one included), with thinking on (the default) and off, multi-line and
// non-ASCII text.
BOOST_AUTO_TEST_CASE(the_chat_prompt_is_what_qwen3s_template_renders) {
  std::ifstream f(std::string(RLX_DATA) + "/bpe/qwen3_chat_reference.json");
  BOOST_TEST_REQUIRE(bool(f));
  const nlohmann::json ref = nlohmann::json::parse(f);
  BOOST_TEST_REQUIRE(ref.at("cases").size() >= 6u);
  for (const auto& c : ref.at("cases")) {
    const std::optional<std::string> system =
        c.at("system").is_null() ? std::nullopt : std::optional(c.at("system").get<std::string>());
    BOOST_TEST(qwen3_chat_prompt(c.at("user").get<std::string>(), system, c.at("thinking").get<bool>()) ==
                   c.at("text").get<std::string>(),
               c.at("user").get<std::string>());
  }
}

// A prompts file's lines: LF and CR LF ends, blank lines skipped, numbers of the file's lines;
// a line that is not UTF-8, too many prompts or none refused naming the file.
BOOST_AUTO_TEST_CASE(a_prompts_file_reads_a_prompt_a_line) {
  using model_files::prompt_lines;
  const auto l = prompt_lines("first\r\n\r\n\nsecond\r\nthird", "p.txt");
  BOOST_TEST_REQUIRE(l.size() == 3u);
  BOOST_TEST((l[0] == std::pair<int64_t, std::string>{1, "first"}));
  BOOST_TEST((l[1] == std::pair<int64_t, std::string>{4, "second"}));
  BOOST_TEST((l[2] == std::pair<int64_t, std::string>{5, "third"}));
  BOOST_TEST(prompt_lines("a\rb\n", "p.txt").at(0).second == "a\rb");  // (a CR inside a line is text)
  expect_error([] { prompt_lines("ok\n\xff\n", "p.txt"); }, {"p.txt:2: the line is not valid UTF-8"});
  expect_error([] { prompt_lines("a\nb\nc\n", "p.txt", 2); }, {"p.txt: more than 2 prompts"});
  expect_error([] { prompt_lines("\n\r\n", "p.txt"); }, {"p.txt: no prompts"});
}

// A model path names a GGUF file by its extension, in any case; a folder or another file does not.
BOOST_AUTO_TEST_CASE(a_gguf_path_is_known_by_its_extension) {
  using model_files::is_gguf_path;
  BOOST_TEST(is_gguf_path("models/qwen3-0.6b-q8_0.gguf"));
  BOOST_TEST(is_gguf_path("MODEL.GGUF"));
  BOOST_TEST(!is_gguf_path("models/qwen3-0.6b"));
  BOOST_TEST(!is_gguf_path("model.gguf.json"));
  BOOST_TEST(!is_gguf_path("gguf"));
}

// Stop ids end a sequence at the first one it yields (kept as its last token), alone and in
// a batch where the other sequences go on; the steps taken are the ones needed.
BOOST_AUTO_TEST_CASE(generation_ends_at_a_stop_id) {
  const Reference ref = reference();
  Qwen3Generator gen(kDir);
  Device& cpu = DeviceRegistry::get().at("cpu");
  const std::vector<int64_t>& g = ref.greedy;
  BOOST_TEST_REQUIRE(g.size() >= 6u);
  const int64_t stop = g[3];
  const size_t first = size_t(std::find(g.begin(), g.end(), stop) - g.begin());
  const GenerationResult r = gen.generate(ref.prompt, int64_t(g.size()), {.stop_ids = {stop}}, cpu);
  BOOST_TEST(r.ids == std::vector<int64_t>(g.begin(), g.begin() + std::ptrdiff_t(first) + 1));
  BOOST_TEST(r.decode_steps == int64_t(first));
  // Never yielded: max_new tokens.
  BOOST_TEST(gen.generate(ref.prompt, 6, {.stop_ids = {100000}}, cpu).ids == std::vector<int64_t>(g.begin(), g.begin() + 6));
  std::vector<int64_t> other = ref.prompt;
  std::reverse(other.begin(), other.end());
  const std::vector<int64_t> free_other = gen.generate(other, 10, {}, cpu).ids;
  const BatchGenerationResult b = gen.generate_batch({ref.prompt, other}, 10, {.stop_ids = {stop}}, cpu);
  auto cut = [&](const std::vector<int64_t>& ids) {
    auto it = std::find(ids.begin(), ids.end(), stop);
    return std::vector<int64_t>(ids.begin(), it == ids.end() ? ids.end() : it + 1);
  };
  BOOST_TEST(b.ids[0] == cut(gen.generate(ref.prompt, 10, {}, cpu).ids));
  BOOST_TEST(b.ids[1] == cut(free_other));
  BOOST_TEST(b.decode_steps == int64_t(std::max(b.ids[0].size(), b.ids[1].size())) - 1);
}

// rlx generate --prompt: the text through the tokenizer, the new text out, ending at the
// model's eos_token_id (config.json's 2, the tokenizer's <|im_end|>); the same tokens as the
// ids path gives.
BOOST_AUTO_TEST_CASE(rlx_generate_takes_and_prints_text_through_the_tokenizer) {
  const fs::path dir = test::scratch_dir("rlx-qwen3-text-");
  auto cli = [&](const std::string& args) { return test::run_cli(RLX_CLI, args, dir); };
  const std::string tokfile = std::string(RLX_DATA) + "/bpe/qwen2.json";
  const BpeTokenizer tok = BpeTokenizer::from_file(tokfile);
  const std::string text = "The solver converged";
  const std::vector<int64_t> prompt = tok.encode(text);
  Qwen3Generator gen(kDir);
  Device& cpu = DeviceRegistry::get().at("cpu");
  const std::vector<int64_t> want = gen.generate(prompt, 12, {.stop_ids = {2}}, cpu).ids;
  test::CliResult r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt '" + text + "' --max-new 12");
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(r.out == tok.decode(want, true) + "\n", r.out);
  // --stop none: all 12; an explicit stop id: up to it.
  const std::vector<int64_t> all = gen.generate(prompt, 12, {}, cpu).ids;
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt '" + text + "' --max-new 12 --stop none");
  BOOST_TEST((r.code == 0 && r.out == tok.decode(all, true) + "\n"), r.out << r.err);
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt '" + text + "' --max-new 12 --stop " +
          std::to_string(all[1]));
  const std::vector<int64_t> upto(all.begin(), std::find(all.begin(), all.end(), all[1]) + 1);
  BOOST_TEST((r.code == 0 && r.out == tok.decode(upto, true) + "\n"), r.out << r.err);
  // Ids in, with a tokenizer: the ids, then their text.
  std::string ids;
  for (int64_t t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt-ids " + ids + " --max-new 12");
  std::string want_ids;
  for (int64_t t : all) want_ids += (want_ids.empty() ? "" : ",") + std::to_string(t);
  BOOST_TEST((r.code == 0 && r.out == want_ids + "\n" + tok.decode(all, true) + "\n"), r.out << r.err);
  // --chat: the prompt as Qwen3's chat template renders a user turn (checked below).
  const std::vector<int64_t> chat_ids = tok.encode(qwen3_chat_prompt(text, "Be brief.", false));
  const std::vector<int64_t> chat_want = gen.generate(chat_ids, 12, {.stop_ids = {2}}, cpu).ids;
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt '" + text +
          "' --max-new 12 --chat --system 'Be brief.' --no-think");
  BOOST_TEST((r.code == 0 && r.out == tok.decode(chat_want, true) + "\n"), r.out << r.err);
  r = cli("generate --model " + kDir + " --tokenizer " + std::string(RLX_DATA) + "/bpe/gpt2.json --prompt x --chat");
  BOOST_TEST((r.code == 2 && test::has(r.err, "no <|im_start|>")), r.err);
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt x --system s");
  BOOST_TEST((r.code == 2 && test::has(r.err, "go with --chat")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1 --chat");
  BOOST_TEST((r.code == 2 && test::has(r.err, "apply to --prompt")), r.err);
  // --prompts FILE: a prompt a line (different lengths, one batch), a JSON line each with its
  // line number and the ids and text the prompt generates alone.
  {
    const std::vector<std::string> lines{"The solver converged", "x", "A longer prompt about sparse matrices"};
    const fs::path pf = dir / "prompts.txt";
    std::ofstream(pf) << lines[0] << "\n" << lines[1] << "\r\n\n" << lines[2] << "\n";
    r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompts " + pf.string() + " --max-new 6");
    BOOST_TEST(r.code == 0, r.err);
    std::istringstream out(r.out);
    std::string line;
    for (size_t k = 0; k < lines.size(); ++k) {
      BOOST_TEST_REQUIRE(bool(std::getline(out, line)), "line " << k);
      const nlohmann::json j = nlohmann::json::parse(line);
      const std::vector<int64_t> alone = gen.generate(tok.encode(lines[k]), 6, {.stop_ids = {2}}, cpu).ids;
      const int64_t line_no[] = {1, 2, 4};  // (line 3 is empty)
      BOOST_TEST(j.at("line").get<int64_t>() == line_no[k]);
      BOOST_TEST(j.at("ids").get<std::vector<int64_t>>() == alone, "prompt " << k);
      BOOST_TEST(j.at("text").get<std::string>() == tok.decode(alone, true), "prompt " << k);
    }
    BOOST_TEST(!std::getline(out, line));
    r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompts " + pf.string() + " --batch 2");
    BOOST_TEST((r.code == 2 && test::has(r.err, "the file's lines are the batch")), r.err);
    std::ofstream(dir / "empty.txt") << "\n\n";
    r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompts " + (dir / "empty.txt").string());
    BOOST_TEST((r.code == 2 && test::has(r.err, "no prompts")), r.err);
    std::ofstream(dir / "bad.txt") << "ok\n\xff\xfe\n";
    r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompts " + (dir / "bad.txt").string());
    BOOST_TEST((r.code == 2 && test::has(r.err, "bad.txt:2: the line is not valid UTF-8")), r.err);
    r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompts " + pf.string() + " --prompt x");
    BOOST_TEST((r.code == 2 && test::has(r.err, "one of --prompt TEXT, --prompts FILE")), r.err);
  }
  // rlx tokenize: a JSON line per text with its pieces and ids; --decode the ids' text.
  r = cli("tokenize --tokenizer " + tokfile + " 'Hello, world!' 'x<|im_end|>y'");
  BOOST_TEST(r.code == 0, r.err);
  {
    std::istringstream out(r.out);
    std::string line;
    for (const std::string t : {"Hello, world!", "x<|im_end|>y"}) {
      BOOST_TEST_REQUIRE(bool(std::getline(out, line)));
      const nlohmann::json j = nlohmann::json::parse(line);
      BOOST_TEST((j.at("pieces").get<std::vector<std::string>>() == tok.pieces(t)), t);
      BOOST_TEST((j.at("ids").get<std::vector<int64_t>>() == tok.encode(t)), t);
    }
  }
  std::string prompt_list;
  for (int64_t t : prompt) prompt_list += (prompt_list.empty() ? "" : ",") + std::to_string(t);
  r = cli("tokenize --tokenizer " + tokfile + " --decode " + prompt_list);
  BOOST_TEST((r.code == 0 && nlohmann::json::parse(r.out).at("text").get<std::string>() == text), r.out << r.err);
  r = cli("tokenize --tokenizer " + tokfile + " --decode 1,2 --skip-special");
  BOOST_TEST((r.code == 0 && nlohmann::json::parse(r.out).at("text").get<std::string>().empty()), r.out << r.err);
  r = cli("tokenize --tokenizer " + tokfile + " --decode 99999");
  BOOST_TEST((r.code == 2 && test::has(r.err, "the id 99999 names no token")), r.err);
  r = cli("tokenize --tokenizer " + tokfile);
  BOOST_TEST((r.code == 2 && test::has(r.err, "tokenize takes texts")), r.err);
  r = cli("tokenize 'x'");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--model PATH or --tokenizer FILE")), r.err);
  // The same tokenizer from a GGUF file's keys: the same text.
  r = cli("generate --model " + kDir + " --tokenizer " + std::string(RLX_DATA) + "/bpe/qwen2.gguf --prompt '" + text +
          "' --max-new 12");
  BOOST_TEST((r.code == 0 && r.out == tok.decode(want, true) + "\n"), r.out << r.err);
  r = cli("generate --model " + kDir + "/qwen3-tiny-q8_0.gguf --prompt hello");
  BOOST_TEST((r.code == 2 && test::has(r.err, "no tokenizer.ggml keys")), r.err);
  // Refused: no tokenizer beside the model, both prompts, a bad tokenizer, a bad stop list.
  r = cli("generate --model " + kDir + " --prompt hello");
  BOOST_TEST((r.code == 2 && test::has(r.err, "tokenizer.json does not exist")), r.err);
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt hello --prompt-ids 1");
  BOOST_TEST((r.code == 2 && test::has(r.err, "one of --prompt")), r.err);
  r = cli("generate --model " + kDir + " --tokenizer " + kDir + "/config.json --prompt hello");
  BOOST_TEST((r.code == 2 && test::has(r.err, "config.json") && test::has(r.err, "has no \"model\"")), r.err);
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt hello --stop 1,x");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--stop expects integers")), r.err);
  r = cli("generate --model " + kDir + " --tokenizer " + tokfile + " --prompt ''");
  BOOST_TEST((r.code == 2 && test::has(r.err, "gives no tokens")), r.err);
}

// A copy of the tiny model folder in a scratch folder, for breaking.
struct Scratch {
  fs::path dir = test::scratch_dir("rlx-qwen3-");
  Scratch() {
    fs::copy_file(kDir + "/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
    fs::copy_file(kDir + "/model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// Untied: lm_head.weight is a parameter of its own. The tiny model's embedding copied into it
// must give the tied model's logits; without it the folder is refused naming the tensor.
BOOST_AUTO_TEST_CASE(an_untied_lm_head_loads_from_its_own_tensor) {
  const Reference ref = reference();
  Scratch s;
  {
    std::ifstream f(kDir + "/config.json");
    nlohmann::json j = nlohmann::json::parse(f);
    j["tie_word_embeddings"] = false;
    std::ofstream(s.dir / "config.json") << j.dump(1);
  }
  expect_error([&] { Qwen3Generator g(s.dir.string()); }, {"model.safetensors", "'lm_head.weight' is missing"});
  std::vector<std::pair<std::string, Tensor>> all;
  {
    const io::SafetensorsFile f((s.dir / "model.safetensors").string());
    for (const io::SafetensorsEntry& e : f.tensors()) all.emplace_back(e.name, f.tensor(e.name));
    all.emplace_back("lm_head.weight", f.tensor("model.embed_tokens.weight"));
  }
  io::write_safetensors((s.dir / "model.safetensors").string(), all);
  Qwen3Generator g(s.dir.string());
  BOOST_TEST(!g.config().tie_word_embeddings);
  BOOST_TEST(g.parameter_count() == Qwen3Generator(kDir).parameter_count() + 512 * 64);
  const double diff = max_abs_diff(g.prefill_logits(ref.prompt, DeviceRegistry::get().at("cpu")), ref.logits);
  BOOST_TEST_MESSAGE("untied, cpu: max |logit - transformers| = " << diff);
  BOOST_TEST(diff <= 1e-4, diff);
}

// A sharded checkpoint: the tensors split over two files listed by model.safetensors.index.json.
BOOST_AUTO_TEST_CASE(a_sharded_checkpoint_loads_through_its_index) {
  const Reference ref = reference();
  Scratch s;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  {
    const io::SafetensorsFile f((s.dir / "model.safetensors").string());
    std::vector<std::pair<std::string, Tensor>> shard[2];
    for (const io::SafetensorsEntry& e : f.tensors()) {
      const int k = e.name.find("layers.1.") != std::string::npos ? 1 : 0;
      shard[k].emplace_back(e.name, f.tensor(e.name));
      index["weight_map"][e.name] = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
    }
    for (int k = 0; k < 2; ++k)
      io::write_safetensors((s.dir / ("model-0000" + std::to_string(k + 1) + "-of-00002.safetensors")).string(), shard[k]);
  }
  fs::remove(s.dir / "model.safetensors");
  auto write_index = [&](const nlohmann::json& j) { std::ofstream(s.dir / "model.safetensors.index.json") << j.dump(1); };
  write_index(index);
  Qwen3Generator g(s.dir.string());
  const double diff = max_abs_diff(g.prefill_logits(ref.prompt, DeviceRegistry::get().at("cpu")), ref.logits);
  BOOST_TEST_MESSAGE("sharded, cpu: max |logit - transformers| = " << diff);
  BOOST_TEST(diff <= 1e-4, diff);
  nlohmann::json bad = index;
  bad["weight_map"]["model.norm.weight"] = "../model.safetensors";
  write_index(bad);
  expect_error([&] { Qwen3Generator q(s.dir.string()); }, {"model.safetensors.index.json", "model.norm.weight", "not the name of a file beside the index"});
  bad = index;
  bad["weight_map"].erase("model.layers.0.mlp.up_proj.weight");
  write_index(bad);
  expect_error([&] { Qwen3Generator q(s.dir.string()); }, {"model.safetensors.index.json", "model.layers.0.mlp.up_proj.weight", "missing from weight_map"});
  bad = index;
  bad["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
  write_index(bad);
  expect_error([&] { Qwen3Generator q(s.dir.string()); }, {"model-00003-of-00002.safetensors"});
  write_index({{"weights", 1}});
  expect_error([&] { Qwen3Generator q(s.dir.string()); }, {"model.safetensors.index.json", "no \"weight_map\""});
}

// The tiny model with its projections and embedding rounded to bf16, three ways: a checkpoint
// storing them as BF16 (kept packed as stored), the f32 folder held as bf16 on request
// (Qwen3Weights::BF16: rounded to nearest even on load, packed), and an f32 checkpoint of the
// rounded values (plain f32 parameters). The packed models multiply the same values, widened
// exactly to f32, into the same f32 activations, summed in another order: logits within 1e-5
// of the largest logit (measured: see the messages), the same top-1 at every position, on every
// device, through the cache too; the packed models hold 2 bytes per weight (norms in f32).
BOOST_AUTO_TEST_CASE(bf16_weights_stay_packed_and_give_the_rounded_f32_models_logits) {
  const Reference ref = reference();
  std::vector<int64_t> ids = ref.prompt;
  ids.insert(ids.end(), ref.greedy.begin(), ref.greedy.begin() + 6);
  Scratch s;  // (one scratch folder per process: the two models in folders inside it)
  const fs::path stored = s.dir / "bf16", rounded = s.dir / "rounded";
  for (const fs::path& p : {stored, rounded}) {
    fs::create_directories(p);
    fs::copy_file(kDir + "/config.json", p / "config.json", fs::copy_options::overwrite_existing);
  }
  {
    const io::SafetensorsFile f(kDir + "/model.safetensors");
    std::vector<std::pair<std::string, Tensor>> b16, r32;
    for (const io::SafetensorsEntry& e : f.tensors()) {
      const Tensor t = f.tensor(e.name);
      BOOST_TEST_REQUIRE((t.dtype() == DType::F32));
      if (e.name.find("norm") != std::string::npos) {  // (norm weights stay f32 in every model)
        b16.emplace_back(e.name, t);
        r32.emplace_back(e.name, t);
        continue;
      }
      Tensor h = Tensor::empty(DType::BF16, t.shape()), r = Tensor::empty(DType::F32, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) {
        h.data<bf16>()[i] = bf16(t.data<float>()[i]);
        r.data<float>()[i] = float(h.data<bf16>()[i]);
      }
      b16.emplace_back(e.name, h);
      r32.emplace_back(e.name, r);
    }
    io::write_safetensors((stored / "model.safetensors").string(), b16);
    io::write_safetensors((rounded / "model.safetensors").string(), r32);
  }
  Qwen3Generator from_bf16(stored.string()), asked(kDir, Qwen3Weights::BF16), plain(rounded.string());
  const Qwen3Config& c = from_bf16.config();
  BOOST_TEST(plain.config().packed.empty());
  BOOST_TEST(Qwen3Generator(stored.string(), Qwen3Weights::F32).config().packed.empty());
  const int64_t h = c.hidden_size, norms = c.num_layers * (2 * h + 2 * c.head_dim) + h;
  for (const Qwen3Generator* g : {&from_bf16, &asked}) {
    BOOST_TEST(g->config().packed.size() == size_t(7 * c.num_layers + 1));
    for (const auto& [scope, type] : g->config().packed) BOOST_TEST(type == "BF16", scope);
    BOOST_TEST(g->weight_bytes() == 2 * (g->parameter_count() - norms) + 4 * norms);
  }
  BOOST_TEST(plain.weight_bytes() == 4 * plain.parameter_count());
  for (Device* d : devices()) {
    const Tensor want = plain.prefill_logits(ids, *d);
    double largest = 0;
    for (int64_t i = 0; i < want.numel(); ++i) largest = std::max(largest, double(std::abs(want.data<float>()[i])));
    for (Qwen3Generator* g : {&from_bf16, &asked}) {
      const Tensor got = g->prefill_logits(ids, *d);
      const double rel = max_abs_diff(got, want) / largest;
      BOOST_TEST_MESSAGE("bf16 " << (g == &asked ? "on request" : "as stored") << " on " << d->name()
                                 << ": max |packed - rounded f32| / max |logit| = " << rel);
      BOOST_TEST(rel <= 1e-5, d->name() << ": " << rel);
      BOOST_TEST(top1(got) == top1(want), d->name());
      const double cached = max_abs_diff(g->decode_logits(ids, 3, *d), want) / largest;
      BOOST_TEST(cached <= 1e-5, d->name() << " through the cache: " << cached);
      const std::string report = g->explain_decode(32, *d);
      BOOST_TEST(occurrences(report, "matmul_packed") == int64_t(c.packed.size()), d->name() << "\n" << report);
      BOOST_TEST(occurrences(report, "dequant-then-matmul") == 0, d->name() << "\n" << report);
    }
    BOOST_TEST(asked.generate(ref.prompt, 6, {}, *d).ids == plain.generate(ref.prompt, 6, {}, *d).ids, d->name());
  }
  // An F16 GGUF file held as bf16: its values rounded again, within bf16's rounding of the f32 model.
  Qwen3Generator f16_as_bf16(kDir + "/qwen3-tiny-f16.gguf", Qwen3Weights::BF16);
  for (const auto& [scope, type] : f16_as_bf16.config().packed) BOOST_TEST(type == "BF16", scope);
  const double drift = max_abs_diff(f16_as_bf16.prefill_logits(ref.prompt, DeviceRegistry::get().at("cpu")), ref.logits);
  BOOST_TEST_MESSAGE("F16 GGUF held as bf16, cpu: max |logit - f32 model| = " << drift);
  BOOST_TEST(drift <= 3e-2, drift);  // (measured 1.93e-2: bf16 keeps 8 significant bits)
  // What cannot be held as bf16, and names that are not a way to hold weights.
  expect_error([] { Qwen3Generator g(kDir + "/qwen3-tiny-q8_0.gguf", Qwen3Weights::BF16); },
               {"qwen3-tiny-q8_0.gguf", "bf16 weights requested", "Q8_0"});
  expect_error([] { qwen3_weights_named("fp8"); }, {"fp8", "stored, f32 or bf16"});
  BOOST_TEST((qwen3_weights_named("bf16") == Qwen3Weights::BF16 && qwen3_weights_named("f32") == Qwen3Weights::F32 &&
              qwen3_weights_named("stored") == Qwen3Weights::AsStored));
  // A BF16 projection of the wrong shape is refused naming the file and the tensor.
  {
    const io::SafetensorsFile f((stored / "model.safetensors").string());
    std::vector<std::pair<std::string, Tensor>> all;
    for (const io::SafetensorsEntry& e : f.tensors())
      all.emplace_back(e.name, e.name == "model.layers.1.mlp.up_proj.weight" ? Tensor::zeros(DType::BF16, {3, 64}) : f.tensor(e.name));
    io::write_safetensors((stored / "model.safetensors").string(), all);
  }
  expect_error([&] { Qwen3Generator g(stored.string()); }, {"model.safetensors", "model.layers.1.mlp.up_proj.weight", "[3,64]"});
}

BOOST_AUTO_TEST_CASE(missing_files_tensors_and_bad_ids_are_refused_by_name) {
  {
    Scratch s;
    const io::SafetensorsFile f((s.dir / "model.safetensors").string());
    std::vector<std::pair<std::string, Tensor>> kept;
    for (const io::SafetensorsEntry& e : f.tensors())
      if (e.name != "model.layers.1.self_attn.q_norm.weight") kept.emplace_back(e.name, f.tensor(e.name));
    io::write_safetensors((s.dir / "model.safetensors").string(), kept);
    expect_error([&] { Qwen3Generator g(s.dir.string()); }, {"model.safetensors", "model.layers.1.self_attn.q_norm.weight", "missing"});
    fs::remove(s.dir / "model.safetensors");
    expect_error([&] { Qwen3Generator g(s.dir.string()); }, {"model.safetensors", "missing", "model.safetensors.index.json"});
    fs::remove(s.dir / "config.json");
    expect_error([&] { Qwen3Generator g(s.dir.string()); }, {"config.json", "missing"});
  }
  {
    // The F16 file with one name or value changed in place (same length): a missing tensor,
    // another architecture.
    Scratch s;
    std::ifstream in(kDir + "/qwen3-tiny-f16.gguf", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto broken = [&](const std::string& from, const std::string& to) {
      std::string b = bytes;
      const size_t at = b.find(from);
      BOOST_REQUIRE(at != std::string::npos);
      b.replace(at, from.size(), to);
      const std::string path = (s.dir / "broken.gguf").string();
      std::ofstream(path, std::ios::binary) << b;
      return path;
    };
    expect_error([&] { Qwen3Generator g(broken("blk.1.attn_k_norm.weight", "blk.1.attn_k_norX.weight")); },
                 {"broken.gguf", "'blk.1.attn_k_norm.weight'", "model.layers.1.self_attn.k_norm.weight", "missing"});
    expect_error([&] { Qwen3Generator g(broken(std::string("\x05\0\0\0\0\0\0\0qwen3", 13), std::string("\x05\0\0\0\0\0\0\0llama", 13))); },
                 {"broken.gguf", "general.architecture", "\"llama\""});
  }
  expect_error([] { Qwen3Generator g("/nonexistent/qwen3"); }, {"/nonexistent/qwen3", "not a model folder"});
  expect_error([] { Qwen3Generator g("/nonexistent/q.gguf"); }, {"/nonexistent/q.gguf"});
  expect_error([] { Qwen3Generator g(kDir + "/logits.npy"); }, {"logits.npy"});
  Qwen3Generator gen(kDir);
  Device& cpu = DeviceRegistry::get().at("cpu");
  expect_error([&] { gen.generate({1, 512, 3}, 4, {}, cpu); }, {"token id 512 at 1", "[0, 512)"});
  expect_error([&] { gen.generate({}, 4, {}, cpu); }, {"no token ids"});
  expect_error([&] { gen.generate({1, 2}, 127, {}, cpu); }, {"exceed the model's 128 positions"});
  expect_error([&] { gen.generate({1, 2}, 3, {.temperature = 1, .top_p = 2}, cpu); }, {"top_p"});
  expect_error([&] { gen.prefill_logits({-1}, cpu); }, {"token id -1"});
}

BOOST_AUTO_TEST_CASE(rlx_generate_prints_the_greedy_ids_and_refuses_bad_input) {
  const Reference ref = reference();
  const fs::path dir = test::scratch_dir("rlx-qwen3-cli-");
  auto cli = [&](const std::string& args) { return test::run_cli(RLX_CLI, args, dir); };
  std::string prompt, greedy;
  for (int64_t t : ref.prompt) prompt += (prompt.empty() ? "" : ",") + std::to_string(t);
  for (int64_t t : ref.greedy) greedy += (greedy.empty() ? "" : ",") + std::to_string(t);
  test::CliResult r = cli("generate --model " + kDir + " --prompt-ids " + prompt + " --max-new " + std::to_string(ref.greedy.size()));
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(r.out == greedy + "\n", r.out);
  BOOST_TEST((test::has(r.err, "prefill 12 tokens") && test::has(r.err, "tokens/s")), r.err);
  r = cli("generate --model " + kDir + "/qwen3-tiny-q8_0.gguf --prompt-ids " + prompt +
          " --max-new 4 --temperature 0.8 --top-k 20 --top-p 0.9 --seed 5");
  BOOST_TEST(r.code == 0, r.err);
  const std::string sampled = r.out;
  r = cli("generate --model " + kDir + "/qwen3-tiny-q8_0.gguf --prompt-ids " + prompt +
          " --max-new 4 --temperature 0.8 --top-k 20 --top-p 0.9 --seed 5 --device reference");
  BOOST_TEST((r.code == 0 && r.out == sampled), r.out << r.err);
  r = cli("generate --model " + kDir + " --prompt-ids " + prompt + " --max-new " + std::to_string(ref.greedy.size()) + " --batch 3");
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(r.out == greedy + "\n" + greedy + "\n" + greedy + "\n", r.out);
  BOOST_TEST((test::has(r.err, "batch 3") && test::has(r.err, "prefill 36 tokens")), r.err);
  r = cli("generate --model " + kDir + "/qwen3-tiny-q4_0.gguf --prompt-ids 1,2 --max-new 2 --batch 2 --explain");
  BOOST_TEST((r.code == 0 && test::has(r.out, "matmul_packed") && test::has(r.out, "f32,u8[2,1,64]")), r.out << r.err);
  r = cli("generate --model " + kDir + " --prompt-ids " + prompt + " --max-new 6 --weights bf16");
  const BatchGenerationResult held = Qwen3Generator(kDir, Qwen3Weights::BF16).generate_batch({ref.prompt}, 6, {}, DeviceRegistry::get().at("cpu"));
  std::string want_bf16;
  for (int64_t t : held.ids[0]) want_bf16 += (want_bf16.empty() ? "" : ",") + std::to_string(t);
  BOOST_TEST((r.code == 0 && r.out == want_bf16 + "\n"), r.out << r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1 --weights fp8");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--weights")), r.err);
  r = cli("generate --model " + kDir + "/qwen3-tiny-q4_0.gguf --prompt-ids 1 --weights bf16");
  BOOST_TEST((r.code == 2 && test::has(r.err, "bf16 weights requested")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1 --batch 0");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--batch")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1,2 --max-new 2 --explain");
  BOOST_TEST((r.code == 0 && test::has(r.out, "dispatch report") && test::has(r.out, "model.layers.1.self_attn") &&
              test::has(r.out, "lm_head")),
             r.out);
  r = cli("generate --model " + kDir + " --prompt-ids 1,512");
  BOOST_TEST((r.code == 2 && test::has(r.err, "token id 512")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1,x");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--prompt-ids expects integers")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1,,2");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--prompt-ids")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1 --max-new 0");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--max-new")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1 --temperature -1");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--temperature")), r.err);
  r = cli("generate --model " + kDir + " --prompt-ids 1 --temperature 1 --top-p 0");
  BOOST_TEST((r.code == 2 && test::has(r.err, "--top-p")), r.err);
  r = cli("generate --model /nonexistent/qwen3 --prompt-ids 1");
  BOOST_TEST((r.code == 2 && test::has(r.err, "/nonexistent/qwen3")), r.err);
  r = cli("generate --prompt-ids 1");
  BOOST_TEST((r.code == 2 && test::has(r.err, "generate needs --model")), r.err);
  r = cli("generate --model " + kDir);
  BOOST_TEST((r.code == 2 && test::has(r.err, "--prompt-ids")), r.err);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace rlx::nn
