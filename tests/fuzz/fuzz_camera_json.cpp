// Camera JSON reader (src/io/camera_json.hpp), on the text in memory (parse_cameras: the
// checks a mapped file gets), as `rlx splat render --camera CAM.json` reads it. Cameras that
// read must write (write_cameras) and read back equal, field for field.
#include <cstdint>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/camera_json.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string out = fuzz::temp_path("camera.out.json");
  RLX_FUZZ_GUARD({
    const std::vector<io::Camera> c = io::parse_cameras(std::string_view(reinterpret_cast<const char*>(data), size), "input");
    if (c.empty()) fuzz::finding("no cameras and no error");
    io::write_cameras(out, c);
    const std::vector<io::Camera> r = io::read_cameras(out);
    if (r.size() != c.size()) fuzz::finding("a different camera count read back");
    for (size_t i = 0; i < c.size(); ++i)
      if (r[i].width != c[i].width || r[i].height != c[i].height || r[i].fx != c[i].fx || r[i].fy != c[i].fy ||
          r[i].cx != c[i].cx || r[i].cy != c[i].cy || r[i].world_to_camera != c[i].world_to_camera || r[i].image != c[i].image)
        fuzz::finding("camera " + std::to_string(i) + " written and read back differs");
  })
  return 0;
}
