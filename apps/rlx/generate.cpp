// rlx generate: token generation with a Qwen3 model (nn/models/qwen3.hpp) from a model folder
// (config.json + model.safetensors) or a .gguf file. --prompt TEXT goes through the model's
// byte-level BPE tokenizer (its folder's tokenizer.json, a .gguf file's tokenizer.ggml keys,
// or --tokenizer FILE: a tokenizer.json or a .gguf) and the new text
// comes out on stdout, generation ending at the model's end-of-text ids (--stop auto:
// generation_config.json's eos_token_id, else config.json's, or a GGUF file's
// tokenizer.ggml.eos_token_id and eot_token_id); --prompts FILE generates a prompt a line as
// one batch (a JSON line each); --chat makes each prompt a user turn of Qwen3's chat
// template; --prompt-ids ID,... gives the ids themselves and prints the
// new ids, a line per sequence (--stop none unless given). Prefill and decode throughput go
// to stderr. --batch B decodes B copies of the prompt together (one cache [B, ...]): the
// batched path at the cost of B sequences, for measuring it; the API
// (Qwen3Generator::generate_batch) takes distinct prompts. --weights stored|f32|bf16 holds the
// projections and embedding as the file stores them (the default), decoded to f32, or as bf16
// (nn::Qwen3Weights).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "args.hpp"
#include "io/file_bytes.hpp"
#include "io/gguf.hpp"
#include "nn/models/bpe.hpp"
#include "nn/models/model_files.hpp"
#include "nn/models/qwen3.hpp"
#include "runtime/device.hpp"

namespace rlx::cli {

namespace {

namespace fs = std::filesystem;

// --prompts FILE: mapped, at most 64 MiB, its lines as model_files::prompt_lines reads them.
std::vector<std::pair<int64_t, std::string>> prompt_lines(const std::string& path) {
  const auto bytes = io::FileBytes::map(path, "a text file of prompts");
  if (bytes->size() > (size_t(64) << 20))
    throw InputError(path + ": " + std::to_string(bytes->size()) + " bytes, more than a prompts file takes (64 MiB)");
  return nn::model_files::prompt_lines(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), path);
}

// --tokenizer FILE (a tokenizer.json, or a .gguf file's keys), else a .gguf model's own
// tokenizer.ggml.* keys (the file's own tokenizer first: a tokenizer.json that happens to lie
// beside it may be another model's), else tokenizer.json in the model's folder or beside it.
nn::BpeTokenizer load_tokenizer(const Args& a, const std::string& model) {
  if (a.has("tokenizer")) {
    const std::string t = a.get("tokenizer", "");
    return nn::model_files::is_gguf_path(t) ? nn::BpeTokenizer::from_gguf(io::GgufFile(t)) : nn::BpeTokenizer::from_file(t);
  }
  std::error_code ec;
  const bool dir = fs::is_directory(model, ec);
  if (!dir && nn::model_files::is_gguf_path(model)) {
    const io::GgufFile f(model);
    if (f.contains_key("tokenizer.ggml.model")) return nn::BpeTokenizer::from_gguf(f);
  }
  const fs::path folder = dir ? fs::path(model) : fs::path(model).parent_path();
  const fs::path p = (folder.empty() ? fs::path(".") : folder) / "tokenizer.json";
  if (fs::exists(p, ec)) return nn::BpeTokenizer::from_file(p.string());
  throw UsageError("the model's tokenizer: " + p.string() + " does not exist" +
                   (dir ? "" : " and the file has no tokenizer.ggml keys") + " (give --tokenizer FILE)");
}

// An eos_token_id field: an id or a list of ids.
std::vector<int64_t> eos_of(const nlohmann::json& v, const std::string& path) {
  std::vector<int64_t> out;
  for (const nlohmann::json& x : v.is_array() ? v : nlohmann::json::array({v})) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      throw InputError(path + ": eos_token_id must be an id or a list of ids, got " + v.dump());
    out.push_back(x.get<int64_t>());
  }
  return out;
}

// --stop: none, ID,ID,..., or auto (the model's end-of-text ids); auto by default for text.
std::vector<int64_t> stop_ids(const Args& a, bool text, const std::string& model) {
  const std::string spec = a.get("stop", text ? "auto" : "none");
  if (spec == "none") return {};
  if (spec != "auto") return a.id_list("stop", int64_t(1) << 30);
  std::error_code ec;
  if (fs::is_directory(model, ec)) {
    for (const char* name : {"generation_config.json", "config.json"}) {
      const fs::path p = fs::path(model) / name;
      if (!fs::exists(p, ec)) continue;
      const nlohmann::json j = nn::model_files::read_config(p.string());
      if (j.is_object() && j.contains("eos_token_id") && !j.at("eos_token_id").is_null()) return eos_of(j.at("eos_token_id"), p.string());
    }
  } else {
    // (a GGUF file names an end-of-sequence and an end-of-turn id; Qwen's converters write
    // <|im_end|> as the first, while generation_config.json also lists <|endoftext|>)
    const io::GgufFile f(model);
    std::vector<int64_t> ids;
    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
      if (f.contains_key(key) && std::find(ids.begin(), ids.end(), f.get_int(key)) == ids.end()) ids.push_back(f.get_int(key));
    if (!ids.empty()) return ids;
  }
  std::cerr << "rlx generate: " << model << " names no end-of-text id: generating --max-new tokens (--stop ID,... sets them)\n";
  return {};
}

}  // namespace

// rlx tokenize: what the model's tokenizer does to texts (a JSON line each: the text's pieces
// after added-token matching, NFC and the pattern, and its ids), or, with --decode, the text
// of ids: what `rlx generate --prompt` sends the model, shown.
int cmd_tokenize(const Args& a) {
  if (!a.has("model") && !a.has("tokenizer")) throw UsageError("tokenize needs --model PATH or --tokenizer FILE");
  const nn::BpeTokenizer tok = load_tokenizer(a, a.get("model", ""));
  if (a.has("decode")) {
    if (!a.pos.empty()) throw UsageError("tokenize --decode takes the ids, no texts");
    const std::vector<int64_t> ids = a.id_list("decode", int64_t(1) << 30);
    for (int64_t id : ids)
      if (!tok.has_token(id)) throw UsageError("--decode: the id " + std::to_string(id) + " names no token of this tokenizer");
    std::cout << nlohmann::json{{"text", tok.decode(ids, a.flag("skip-special"))}}.dump() << "\n";
    return kOk;
  }
  if (a.pos.empty()) throw UsageError("tokenize takes texts to encode (or --decode ID,...)");
  for (const std::string& text : a.pos)
    std::cout << nlohmann::json{{"pieces", tok.pieces(text)}, {"ids", tok.encode(text)}}.dump() << "\n";
  return kOk;
}

int cmd_generate(const Args& a) {
  const std::string model = a.get("model", "");
  if (model.empty()) throw UsageError("generate needs --model PATH (a Qwen3 model folder or .gguf file)");
  if (!a.pos.empty()) throw UsageError("generate takes no positional arguments, got '" + a.pos[0] + "'");
  const bool many = a.has("prompts"), text = a.has("prompt") || many;
  if (int(a.has("prompt")) + int(many) + int(a.has("prompt-ids")) != 1)
    throw UsageError("generate needs one of --prompt TEXT, --prompts FILE (a prompt a line, through the model's tokenizer) "
                     "and --prompt-ids ID,ID,...");
  if (many && a.has("batch")) throw UsageError("--batch repeats one prompt; with --prompts FILE the file's lines are the batch");
  // The tokenizer: for --prompt, and for printing text when given with --prompt-ids.
  std::optional<nn::BpeTokenizer> tok;
  if (text || a.has("tokenizer")) tok.emplace(load_tokenizer(a, model));
  // --chat: the prompt as the user's turn of Qwen3's chat template (ChatML), --system and
  // --no-think as the template takes them.
  const bool chat = a.flag("chat");
  if ((chat || a.has("system") || a.flag("no-think")) && !text)
    throw UsageError("--chat, --system and --no-think apply to --prompt TEXT and --prompts FILE");
  if ((a.has("system") || a.flag("no-think")) && !chat) throw UsageError("--system and --no-think go with --chat");
  if (chat && (tok->id("<|im_start|>") < 0 || tok->id("<|im_end|>") < 0))
    throw UsageError("--chat writes Qwen's chat format, but this tokenizer has no <|im_start|> and <|im_end|> tokens");
  // The prompts: one (--prompt, --prompt-ids) or a file's lines (--prompts), each encoded.
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::pair<int64_t, std::string>> lines;  // (line number, text)
  if (text) {
    const std::optional<std::string> system = a.has("system") ? std::optional(a.get("system", "")) : std::nullopt;
    if (many) {
      lines = prompt_lines(a.get("prompts", ""));
    } else {
      lines = {{0, a.get("prompt", "")}};
    }
    for (const auto& [n, line] : lines) {
      prompts.push_back(tok->encode(chat ? nn::qwen3_chat_prompt(line, system, !a.flag("no-think")) : line));
      if (prompts.back().empty())
        throw UsageError(many ? a.get("prompts", "") + ":" + std::to_string(n) + ": the prompt gives no tokens"
                              : std::string("--prompt: the text gives no tokens"));
    }
  } else {
    // (ids past the vocabulary are refused once the model has loaded)
    prompts.push_back(a.id_list("prompt-ids", int64_t(1) << 30));
  }
  const std::vector<int64_t> stop = stop_ids(a, text, model);
  const int64_t max_new = a.integer("max-new", 16, 1, int64_t(1) << 24);
  const int64_t batch = many ? int64_t(prompts.size()) : a.integer("batch", 1, 1, 4096);
  if (!many) prompts.assign(size_t(batch), prompts[0]);
  size_t longest = 0;
  bool ragged = false;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  for (const auto& p : prompts) ragged = ragged || p.size() != longest;
  nn::SamplingOptions s;
  s.temperature = a.number("temperature", 0.0, 0.0, 1e6);
  s.top_k = a.integer("top-k", 0, 0, int64_t(1) << 30);
  s.top_p = a.number("top-p", 1.0, 0.0, 1.0);
  if (a.has("top-p") && !(s.top_p > 0)) throw UsageError("--top-p must be in (0, 1], got '" + a.get("top-p", "") + "'");
  s.seed = uint64_t(a.integer("seed", 0, 0, INT64_MAX));
  s.stop_ids = stop;
  if (s.temperature == 0 && (a.has("top-k") || a.has("top-p") || a.has("seed")))
    std::cerr << "rlx generate: --temperature 0 (the default) is greedy; --top-k, --top-p and --seed have no effect\n";
  const std::string weights = a.get("weights", "stored");
  if (weights != "stored" && weights != "f32" && weights != "bf16")
    throw UsageError("--weights must be stored, f32 or bf16, got '" + weights + "'");
  Device& dev = DeviceRegistry::get().at(a.get("device", "cpu"));
  if (!dev.unavailable().empty()) throw UsageError("device " + dev.name() + " is not available here: " + dev.unavailable());
  nn::Qwen3Generator gen(model, nn::qwen3_weights_named(weights));
  const nn::Qwen3Config& c = gen.config();
  if (a.flag("explain"))
    std::cout << gen.explain_decode(std::min<int64_t>(c.max_positions, (int64_t(longest) + max_new + 63) / 64 * 64), dev, batch,
                                    ragged);
  const nn::BatchGenerationResult r = gen.generate_batch(prompts, max_new, s, dev);
  // The new text, special tokens (the stop token among them) left out. A model's vocabulary
  // may be larger than its tokenizer's (Qwen3's: 151,936 rows, 151,669 tokens): an id
  // past the tokenizer's is left out of the text and counted on stderr.
  int64_t unnamed = 0;
  auto text_of = [&](const std::vector<int64_t>& ids) {
    std::vector<int64_t> named;
    for (int64_t id : ids) tok->has_token(id) ? named.push_back(id) : void(++unnamed);
    return tok->decode(named, true);
  };
  for (size_t k = 0; k < r.ids.size(); ++k) {
    const std::vector<int64_t>& ids = r.ids[k];
    if (many) {  // a JSON line per prompt, in the file's order: the text may span lines
      std::cout << nlohmann::json{{"line", lines[k].first}, {"text", text_of(ids)}, {"ids", ids}}.dump() << "\n";
      continue;
    }
    if (text) {
      std::cout << text_of(ids) << "\n";
      continue;
    }
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << "\n";
    if (tok) std::cout << text_of(ids) << "\n";
  }
  if (unnamed)
    std::cerr << "rlx generate: " << unnamed << " generated ids name no token of the tokenizer: left out of the text\n";
  // Decode's tokens are the ones the sequences yielded after the first (none once a sequence
  // has ended); the prefill's count the padding of prompts of different lengths.
  int64_t decoded = 0;
  for (const auto& ids : r.ids) decoded += int64_t(ids.size()) - 1;
  std::fprintf(stderr,
               "rlx generate: qwen3 (%lld layers, hidden %lld, %lld parameters, %.1f MB of weights) on %s, batch %lld: prefill "
               "%lld tokens%s in %.3f s (%.1f tokens/s), decode %lld steps, %lld tokens, in %.3f s (%.1f tokens/s)%s\n",
               (long long)c.num_layers, (long long)c.hidden_size, (long long)gen.parameter_count(), gen.weight_bytes() / 1e6,
               dev.name().c_str(), (long long)batch, (long long)r.prefill_tokens, ragged ? " (padding included)" : "",
               r.prefill_seconds, double(r.prefill_tokens) / r.prefill_seconds, (long long)r.decode_steps, (long long)decoded,
               r.decode_seconds, r.decode_steps ? double(decoded) / r.decode_seconds : 0.0,
               gen.replays(dev) ? ", decode replayed as a captured graph" : "");
  return kOk;
}

}  // namespace rlx::cli
