#include "io/camera_json.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/file_bytes.hpp"
#include "io/json_text.hpp"

namespace rlx::io {

namespace {

using Json = nlohmann::json;

// A camera takes about 300 bytes; these bound a file of many thousands of views.
constexpr size_t kMaxFileBytes = 64 << 20;
constexpr size_t kMaxCameras = 1'000'000;
// Rotation entries as tools print them (six or more digits) pass; a scaled, sheared or
// transposed-with-translation matrix does not.
constexpr double kRotationTolerance = 1e-3;

const char* const kKeys[] = {"width", "height", "fx", "fy", "cx", "cy", "world_to_camera", "image"};

// Parses, refusing what the DOM would hide (a key given twice keeps one value) and nesting
// deeper than list -> camera -> matrix -> row.
Json parse_json(std::string_view text, const std::string& path) {
  StrictJsonCheck<Json> check(path, 3, "camera JSON nests deeper than a list of cameras does");
  return parse_untrusted_json<Json>(text, path, "camera JSON", "byte", check);
}

double finite_number(const Json& v, const std::string& what) {
  if (!v.is_number()) throw InputError(what + " is " + describe_json(v) + ", not a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw InputError(what + " is not finite");
  return d;
}

Camera camera_from(const Json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + " is " + describe_json(j) + ", not a camera object");
  for (const auto& [k, v] : j.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), k) == std::end(kKeys))
      throw InputError(where + ": unknown key " + shown(k) + " (a camera has width, height, fx, fy, cx, cy, world_to_camera, image)");
  auto field = [&](const char* name) -> const Json& {
    auto it = j.find(name);
    if (it == j.end()) throw InputError(where + ": no \"" + std::string(name) + "\"");
    return *it;
  };
  Camera c;
  for (auto [name, out] : {std::pair{"width", &c.width}, std::pair{"height", &c.height}}) {
    const Json& v = field(name);
    const std::string what = where + ": \"" + name + "\"";
    if (!v.is_number_integer()) throw InputError(what + " is " + describe_json(v) + ", not an integer");
    // (the lexer gives non-negative literals as unsigned, "-0" and negatives as signed)
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > uint64_t(kMaxCameraPixels))
      throw InputError(what + " is " + v.dump() + ", outside [1, " + std::to_string(kMaxCameraPixels) + "]");
    *out = int64_t(v.get<uint64_t>());
  }
  c.fx = finite_number(field("fx"), where + ": \"fx\"");
  c.fy = finite_number(field("fy"), where + ": \"fy\"");
  c.cx = finite_number(field("cx"), where + ": \"cx\"");
  c.cy = finite_number(field("cy"), where + ": \"cy\"");
  if (!(c.fx > 0) || !(c.fy > 0))
    throw InputError(where + ": \"" + (c.fx > 0 ? "fy" : "fx") + "\" must be positive (focal length in pixels)");

  const Json& m = field("world_to_camera");
  const std::string mw = where + ": \"world_to_camera\"";
  if (!m.is_array() || m.size() != 4)
    throw InputError(mw + " is " + (m.is_array() ? "an array of " + std::to_string(m.size()) + " rows" : describe_json(m)) +
                     ", not 4 rows of 4 numbers");
  for (size_t i = 0; i < 4; ++i) {
    const Json& row = m[i];
    const std::string rw = mw + " row " + std::to_string(i);
    if (!row.is_array() || row.size() != 4)
      throw InputError(rw + " is " + (row.is_array() ? "an array of " + std::to_string(row.size()) + " numbers" : describe_json(row)) +
                       ", not 4 numbers");
    for (size_t k = 0; k < 4; ++k) c.world_to_camera[4 * i + k] = finite_number(row[k], rw + " column " + std::to_string(k));
  }
  const double* w = c.world_to_camera.data();
  if (w[12] != 0 || w[13] != 0 || w[14] != 0 || w[15] != 1)
    throw InputError(mw + ": the last row is not [0, 0, 0, 1]");
  double worst = 0;  // max |R Rᵀ − I|
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k) {
      double d = 0;
      for (int l = 0; l < 3; ++l) d += w[4 * i + l] * w[4 * k + l];
      worst = std::max(worst, std::abs(d - (i == k ? 1.0 : 0.0)));
    }
  if (worst > kRotationTolerance)
    throw InputError(mw + ": its 3 x 3 part is not a rotation (|R Rᵀ − I| reaches " + std::to_string(worst) + ")");
  const double det = w[0] * (w[5] * w[10] - w[6] * w[9]) - w[1] * (w[4] * w[10] - w[6] * w[8]) + w[2] * (w[4] * w[9] - w[5] * w[8]);
  if (det < 0) throw InputError(mw + ": its 3 x 3 part is a reflection (determinant " + std::to_string(det) + "), not a rotation");

  if (auto it = j.find("image"); it != j.end()) {
    const bool name = it->is_string() && !it->get_ref<const std::string&>().empty() &&
                      std::none_of(it->get_ref<const std::string&>().begin(), it->get_ref<const std::string&>().end(),
                                   [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; });
    if (!name) throw InputError(where + ": \"image\" is " + describe_json(*it) + ", not a file name");
    c.image = it->get<std::string>();
  }
  return c;
}

}  // namespace

std::vector<Camera> parse_cameras(std::string_view text, const std::string& path) {
  if (text.size() > kMaxFileBytes)
    throw InputError(path + ": " + std::to_string(text.size()) + " bytes, more than a camera file may have (" +
                     std::to_string(kMaxFileBytes) + ")");
  const Json j = parse_json(text, path);
  std::vector<Camera> cams;
  if (j.is_array()) {
    if (j.empty()) throw InputError(path + ": an empty list of cameras");
    if (j.size() > kMaxCameras) throw InputError(path + ": more than " + std::to_string(kMaxCameras) + " cameras");
    for (size_t i = 0; i < j.size(); ++i) cams.push_back(camera_from(j[i], path + ": camera " + std::to_string(i)));
  } else {
    cams.push_back(camera_from(j, path));
  }
  return cams;
}

std::vector<Camera> read_cameras(const std::string& path) {
  const std::shared_ptr<const FileBytes> f = FileBytes::map(path, "a camera .json file");
  return parse_cameras(std::string_view(reinterpret_cast<const char*>(f->data()), f->size()), path);
}

void write_cameras(const std::string& path, const std::vector<Camera>& cameras) {
  if (cameras.empty()) throw InputError(path + ": no cameras to write");
  Json list = Json::array();
  for (const Camera& c : cameras) {
    Json m = Json::array();
    for (int i = 0; i < 4; ++i)
      m.push_back({c.world_to_camera[4 * i], c.world_to_camera[4 * i + 1], c.world_to_camera[4 * i + 2], c.world_to_camera[4 * i + 3]});
    Json o = {{"width", c.width}, {"height", c.height}, {"fx", c.fx}, {"fy", c.fy}, {"cx", c.cx}, {"cy", c.cy}, {"world_to_camera", m}};
    if (!c.image.empty()) o["image"] = c.image;
    list.push_back(std::move(o));
  }
  const std::string text = (cameras.size() == 1 ? list[0] : list).dump(1) + "\n";
  AtomicFile out(path);
  {
    std::ofstream f(out.temp(), std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw InputError(path + ": writing " + out.temp() + " failed (" + std::strerror(errno) + ")");
  }
  out.commit();
}

}  // namespace rlx::io
