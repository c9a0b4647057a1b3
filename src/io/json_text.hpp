// How the JSON readers (safetensors headers, camera files) name a JSON value or a parse
// failure in their messages.
#pragma once
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "io/file_bytes.hpp"

namespace rlx::io {

// "a JSON array", "the JSON string \"4\"": the value, cut to fit a message.
template <class Json>
std::string describe_json(const Json& v) {
  if (v.is_object() || v.is_array()) return "a JSON " + std::string(v.type_name());
  return "the JSON " + std::string(v.type_name()) + " " + printable(v.dump(), 40);
}

// nlohmann's message without its "[json.exception.parse_error.101] " tag.
inline std::string json_message(const nlohmann::json::exception& e) {
  std::string m = e.what();
  if (size_t k = m.find("] "); m.rfind("[json.exception.", 0) == 0 && k != std::string::npos) m.erase(0, k + 2);
  return printable(m, 300);
}

// Parses untrusted JSON text with nlohmann's callback parser (`check` sees every event and
// throws to refuse). A NUL byte (`byte_name` says where it counts from: "byte", "header byte")
// and malformed JSON are a ParseError at path:line; a number beyond double's range an
// InputError. `what` names the text in messages ("camera JSON").
template <class Json, class Check>
Json parse_untrusted_json(std::string_view text, const std::string& path, const std::string& what, const char* byte_name,
                          Check check) {
  auto line_at = [&](size_t at) { return 1 + int(std::count(text.begin(), text.begin() + std::ptrdiff_t(at), '\n')); };
  // nlohmann ends its input at a NUL byte; JSON has none outside strings (and inside them
  // only escaped), so one here would hide the bytes after it from every check.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw ParseError(path, line_at(nul), what + ": a NUL byte at " + byte_name + " " + std::to_string(nul));
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const typename Json::parse_error& e) {
    throw ParseError(path, line_at(std::min<size_t>(e.byte, text.size())), what + ": " + json_message(e));
  } catch (const typename Json::exception& e) {  // a number beyond double's range
    throw InputError(path + ": " + what + ": " + json_message(e));
  }
}

// A check for parse_untrusted_json that refuses what a DOM would hide or a reader never
// needs: a key given twice in one object (the DOM keeps one value) and nesting deeper than
// max_depth (nlohmann's parser recurses): InputError "path: key 'k' appears twice in one
// object", "path: " + too_deep.
template <class Json>
class StrictJsonCheck {
 public:
  StrictJsonCheck(std::string path, int max_depth, std::string too_deep)
      : path_(std::move(path)), max_depth_(max_depth), too_deep_(std::move(too_deep)) {}
  bool operator()(int depth, typename Json::parse_event_t ev, Json& parsed) {
    using Event = typename Json::parse_event_t;
    switch (ev) {
      case Event::object_start:
      case Event::array_start:
        if (depth > max_depth_) throw InputError(path_ + ": " + too_deep_);
        if (ev == Event::object_start) keys_.emplace_back();
        break;
      case Event::object_end:
        keys_.pop_back();
        break;
      case Event::key:
        if (!keys_.back().insert(parsed.template get<std::string>()).second)
          throw InputError(path_ + ": key " + shown(parsed.template get<std::string>()) + " appears twice in one object");
        break;
      default:
        break;
    }
    return true;
  }

 private:
  std::string path_;
  int max_depth_;
  std::string too_deep_;
  std::vector<std::set<std::string, std::less<>>> keys_;
};

}  // namespace rlx::io
