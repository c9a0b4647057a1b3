// The WordPiece tokenizer (nn/models/tokenizer.hpp) against the ids sentence-transformers
// feeds all-MiniLM-L6-v2 (data/minilm/reference.json, made by make_reference.py with the
// model's own vocabulary, data/minilm/vocab.txt), and its refusals of bad vocabularies and text.
#define BOOST_TEST_MODULE models_tokenizer
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/models/tokenizer.hpp"
#include "tests/support/errors.hpp"

namespace rlx::nn {
namespace {

using test::expect_error;

const std::string kDir = std::string(RLX_DATA) + "/minilm";

nlohmann::json reference() {
  std::ifstream f(kDir + "/reference.json");
  BOOST_TEST_REQUIRE(bool(f), kDir << "/reference.json cannot be read");
  return nlohmann::json::parse(f);
}

std::vector<std::string> small_vocab() {
  return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello", ",", "world", "!"};
}

BOOST_AUTO_TEST_CASE(ids_equal_the_reference_on_every_test_sentence) {
  const nlohmann::json ref = reference();
  const int64_t max_len = ref.at("max_seq_length").get<int64_t>();
  const auto tok = WordPieceTokenizer::from_file(kDir + "/vocab.txt", {.max_length = max_len});
  const auto& sentences = ref.at("sentences");
  const auto& ids = ref.at("ids");
  BOOST_TEST_REQUIRE(sentences.size() >= 50u);
  BOOST_TEST_REQUIRE(sentences.size() == ids.size());
  int truncated = 0, unknown = 0;
  for (size_t i = 0; i < sentences.size(); ++i) {
    const std::string s = sentences[i].get<std::string>();
    const auto want = ids[i].get<std::vector<int64_t>>();
    const std::vector<int64_t> got = tok.encode(s);
    BOOST_TEST(got == want, "sentence " << i << " '" << s.substr(0, 60) << "'");
    truncated += int64_t(want.size()) == max_len;
    unknown += std::count(want.begin(), want.end(), tok.unk_id()) > 0;
  }
  // The sentences reach the cases they are there for.
  BOOST_TEST(truncated >= 1);
  BOOST_TEST(unknown >= 3);
}

BOOST_AUTO_TEST_CASE(ids_equal_the_reference_on_random_texts) {
  const nlohmann::json ref = reference();
  const auto tok = WordPieceTokenizer::from_file(kDir + "/vocab.txt", {.max_length = ref.at("max_seq_length").get<int64_t>()});
  const auto& texts = ref.at("random_texts");
  const auto& ids = ref.at("random_ids");
  const auto& words = ref.at("random_words");
  BOOST_TEST_REQUIRE(texts.size() >= 300u);
  BOOST_TEST_REQUIRE((texts.size() == ids.size() && texts.size() == words.size()));
  int differ = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    // The words first: most random texts hold an [UNK] word, which would hide a wrong character in it.
    const bool same = tok.words(text) == words[i].get<std::vector<std::string>>() &&
                      tok.encode(text) == ids[i].get<std::vector<int64_t>>();
    BOOST_TEST(same, "random text " << i);
    differ += !same;
  }
  BOOST_TEST_MESSAGE(texts.size() - size_t(differ) << " of " << texts.size() << " random texts tokenized identically");
}

BOOST_AUTO_TEST_CASE(a_batch_is_padded_with_its_mask) {
  const auto tok = WordPieceTokenizer::from_file(kDir + "/vocab.txt", {.max_length = 256});
  const TokenBatch b = tok.encode_batch({"Hello, world!", "", "unaffable"}, 0);
  BOOST_TEST(b.ids.shape() == (Shape{3, 6}));
  const std::vector<int64_t> ids(b.ids.data<int64_t>(), b.ids.data<int64_t>() + 18);
  const std::vector<int64_t> mask(b.attention_mask.data<int64_t>(), b.attention_mask.data<int64_t>() + 18);
  // (ids from the reference tokenizer: BertTokenizerFast of the model folder)
  const std::vector<int64_t> want_ids{101, 7592, 1010, 2088, 999, 102, 101, 102, 0, 0, 0, 0, 101, 14477, 20961, 3468, 102, 0};
  const std::vector<int64_t> want_mask{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0};
  BOOST_TEST(ids == want_ids, boost::test_tools::per_element());
  BOOST_TEST(mask == want_mask, boost::test_tools::per_element());
  BOOST_TEST(tok.encode_batch({"a"}, 16).ids.shape() == (Shape{1, 16}));
}

BOOST_AUTO_TEST_CASE(word_pieces_take_the_longest_match_first) {
  const WordPieceTokenizer tok(small_vocab(), "small");
  BOOST_TEST(tok.tokenize("Unaffable, HELLO world!") ==
             (std::vector<std::string>{"un", "##aff", "##able", ",", "hello", "world", "!"}));
  BOOST_TEST(tok.tokenize("unaffx hello") == (std::vector<std::string>{"[UNK]", "hello"}));
  BOOST_TEST(tok.tokenize("hello[MASK]world") == (std::vector<std::string>{"hello", "[MASK]", "world"}));
  const WordPieceTokenizer short_words(small_vocab(), "small", {.max_length = 4, .max_chars_per_word = 4});
  BOOST_TEST(short_words.tokenize("hello un") == (std::vector<std::string>{"[UNK]", "un"}));
  BOOST_TEST(short_words.encode("hello hello hello") == (std::vector<int64_t>{2, 1, 1, 3}));
}

BOOST_AUTO_TEST_CASE(bad_vocabularies_and_text_are_refused) {
  auto vocab = small_vocab();
  vocab.push_back("hello");
  expect_error([&] { WordPieceTokenizer(vocab, "v.txt"); }, {"v.txt:13", "'hello'", "line 9"});
  vocab = small_vocab();
  vocab[5] = "";
  expect_error([&] { WordPieceTokenizer(vocab, "v.txt"); }, {"v.txt:6", "empty"});
  vocab = small_vocab();
  vocab[5] = "\xff";
  expect_error([&] { WordPieceTokenizer(vocab, "v.txt"); }, {"v.txt:6", "UTF-8"});
  vocab = small_vocab();
  vocab.erase(vocab.begin() + 2);
  expect_error([&] { WordPieceTokenizer(vocab, "v.txt"); }, {"v.txt", "[CLS]"});
  expect_error([&] { WordPieceTokenizer(small_vocab(), "v.txt", {.max_length = 1}); }, {"max_length"});
  expect_error([&] { WordPieceTokenizer::from_file(kDir + "/no-such-vocab.txt"); }, {"no-such-vocab.txt", "cannot open"});
  const WordPieceTokenizer tok(small_vocab(), "small");
  for (const char* bad : {"\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok \x80"})
    expect_error([&] { tok.encode(bad); }, {"not valid UTF-8"});
  expect_error([&] { tok.encode_batch({"hello", "ok \x80"}); }, {"text 2 of 2", "not valid UTF-8 (at byte 3)"});
}

}  // namespace
}  // namespace rlx::nn
