#include "nn/models/model_files.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "io/file_bytes.hpp"
#include "io/gguf.hpp"
#include "io/json_text.hpp"
#include "runtime/device.hpp"

namespace rlx::nn::model_files {

nlohmann::json parse_config(std::string_view text, const std::string& path) {
  using Json = nlohmann::json;
  io::StrictJsonCheck<Json> check(path, 16, "the JSON nests deeper than 16 levels");
  return io::parse_untrusted_json<Json>(text, path, "not valid JSON", "byte", check);
}

std::vector<std::pair<int64_t, std::string>> prompt_lines(std::string_view text, const std::string& source,
                                                          size_t max_prompts) {
  std::vector<std::pair<int64_t, std::string>> out;
  int64_t n = 0;
  for (size_t at = 0; at < text.size();) {
    ++n;
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (!io::valid_utf8(line)) throw InputError(source + ":" + std::to_string(n) + ": the line is not valid UTF-8");
    if (out.size() == max_prompts)
      throw InputError(source + ": more than " + std::to_string(max_prompts) + " prompts (the largest batch)");
    out.emplace_back(n, std::string(line));
  }
  if (out.empty()) throw InputError(source + ": no prompts (one a line)");
  return out;
}

bool is_gguf_path(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".gguf";
}

nlohmann::json read_config(const std::string& path) {
  const auto bytes = io::FileBytes::map(path, "a JSON file");
  constexpr size_t kMax = size_t(16) << 20;
  if (bytes->size() > kMax)
    throw InputError(path + ": " + std::to_string(bytes->size()) + " bytes, more than a configuration file holds (16 MiB)");
  return parse_config(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()), path);
}

std::map<std::string, std::string> shard_index(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    throw InputError(path + ": no \"weight_map\" object (a sharded checkpoint's index maps tensor names to files)");
  std::map<std::string, std::string> out;
  for (const auto& [name, v] : j.at("weight_map").items()) {
    const std::string file = v.is_string() ? v.get<std::string>() : "";
    if (file.empty() || file == "." || file == ".." || file.find_first_of(std::string("/\\\0", 3)) != std::string::npos)
      throw InputError(path + ": weight_map gives " + io::describe_json(v) + " for '" + name +
                       "', not the name of a file beside the index");
    out.emplace(name, file);
  }
  return out;
}

int64_t int_field(const nlohmann::json& j, const std::string& path, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!j.contains(key)) {
    if (def < 0) throw InputError(path + ": the field \"" + key + "\" is missing");
    return def;
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) throw InputError(path + ": \"" + key + "\" must be an integer, got " + io::describe_json(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi))
    throw InputError(path + ": \"" + key + "\" must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                     v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw InputError(path + ": \"" + key + "\" must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                     std::to_string(x));
  return x;
}

std::string string_field(const nlohmann::json& j, const std::string& path, const char* key, const std::string& def) {
  if (!j.contains(key)) return def;
  if (!j.at(key).is_string()) throw InputError(path + ": \"" + key + "\" must be a string, got " + io::describe_json(j.at(key)));
  return j.at(key).get<std::string>();
}

double number_field(const nlohmann::json& j, const std::string& path, const char* key, double def, double lo, double hi,
                    bool required) {
  if (!j.contains(key) || (!required && j.at(key).is_null())) {
    if (required) throw InputError(path + ": the field \"" + key + "\" is missing");
    return def;
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) throw InputError(path + ": \"" + key + "\" must be a number, got " + io::describe_json(v));
  const double x = v.get<double>();
  if (!(x > lo && x < hi))
    throw InputError(path + ": \"" + key + "\" must lie in (" + io::printable(nlohmann::json(lo).dump()) + ", " +
                     io::printable(nlohmann::json(hi).dump()) + "), got " + v.dump());
  return x;
}

const std::vector<Tensor>& weights_on(std::map<std::string, std::vector<Tensor>>& uploaded, const std::vector<Tensor>& host,
                                     Device& d) {
  auto it = uploaded.find(d.name());
  if (it != uploaded.end()) return it->second;
  std::vector<Tensor> w;
  for (const Tensor& t : host) w.push_back(d.allocator()->host_accessible() ? t : t.to(d.allocator()));
  return uploaded.emplace(d.name(), std::move(w)).first->second;
}

int64_t gguf_int(const io::GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi)
    throw InputError(f.path() + ": " + key + " must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                     std::to_string(v));
  return v;
}

std::vector<Tensor> gguf_weights(Model& m, const io::GgufFile& f, const std::function<std::string(const std::string&)>& tensor_name,
                                 const std::function<bool(const std::string&)>& packed,
                                 const std::function<Tensor(const std::string&, const std::string&, const Var&)>& load_packed) {
  std::map<std::string, const Parameter*> params;
  for (const Parameter& p : m.parameters()) params.emplace(p.name, &p);
  const ir::Graph& g = m.graph();
  const std::string weight = "/weight";
  std::vector<Tensor> out;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const std::string pname = g.param_name(i);
    const auto p = params.find(pname);
    const bool is_packed = p == params.end() && pname.size() > weight.size() &&
                           pname.compare(pname.size() - weight.size(), weight.size(), weight) == 0 &&
                           packed(pname.substr(0, pname.size() - weight.size()));
    if (p == params.end() && !is_packed) continue;
    const std::string name = tensor_name(pname);
    if (!f.contains(name)) {
      std::string checkpoint = pname;
      std::replace(checkpoint.begin(), checkpoint.end(), '/', '.');
      throw InputError(f.path() + ": the tensor '" + name + "' (" + checkpoint + ") is missing");
    }
    if (is_packed) {
      out.push_back(load_packed(name, pname.substr(0, pname.size() - weight.size()), Var(&m.graph(), g.params[i])));
      continue;
    }
    const io::GgufTensor& info = f.tensor_info(name);
    if (info.shape != p->second->type.shape)
      throw InputError(f.path() + ": the tensor '" + name + "' is " + shape_str(info.shape) + ", the model needs " +
                       shape_str(p->second->type.shape));
    out.push_back(info.type == uint32_t(io::GgmlType::F32) ? f.view(name) : f.dequantize(name));  // (f32: no copy)
  }
  return out;
}

bool bool_field(const nlohmann::json& j, const std::string& path, const char* key, bool def) {
  if (!j.contains(key)) return def;
  if (!j.at(key).is_boolean()) throw InputError(path + ": \"" + key + "\" must be true or false, got " + io::describe_json(j.at(key)));
  return j.at(key).get<bool>();
}

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::F32) return t;
  if (t.dtype() != DType::F16 && t.dtype() != DType::BF16)
    throw InputError(std::string("to_f32: a ") + dtype_name(t.dtype()) + " tensor is not a float tensor");
  Tensor r = Tensor::empty(DType::F32, t.shape());
  float* out = r.data<float>();
  if (t.dtype() == DType::F16)
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = float(t.data<f16>()[i]);
  else
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = float(t.data<bf16>()[i]);
  return r;
}

}  // namespace rlx::nn::model_files
