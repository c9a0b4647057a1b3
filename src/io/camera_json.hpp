// Pinhole cameras as JSON, the camera files of `rlx splat render|fit` (docs/splat.md):
//   {"width": W, "height": H, "fx": .., "fy": .., "cx": .., "cy": ..,
//    "world_to_camera": [[r00, r01, r02, t0], [r10, r11, r12, t1], [r20, r21, r22, t2], [0, 0, 0, 1]]}
// or a list of such objects, one per view. An optional "image" names the view's picture
// (`rlx splat fit` finds it in --images DIR). OpenCV axes: x right, y down, z forward.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace rlx::io {

struct Camera {
  int64_t width = 0, height = 0;
  double fx = 0, fy = 0, cx = 0, cy = 0;
  std::array<double, 16> world_to_camera{};  // row-major 4 x 4: [R | t] over [0 0 0 1]
  std::string image;                         // empty when the file names none
};

// The largest width or height a camera file may ask for.
inline constexpr int64_t kMaxCameraPixels = 16384;

// Reads one camera or a list of them (never an empty list). InputError naming the file, the
// camera (by its index in a list) and the field: a missing, mistyped, non-finite or unknown
// field; a size outside [1, 16384]; fx or fy not positive; a matrix that is not 4 x 4, whose
// last row is not 0 0 0 1, or whose rotation is not orthonormal with determinant +1.
// Malformed JSON is a ParseError (file:line).
std::vector<Camera> read_cameras(const std::string& path);
std::vector<Camera> parse_cameras(std::string_view text, const std::string& name);

// Writes one camera as an object, several as a list (atomically); the inverse of read_cameras.
void write_cameras(const std::string& path, const std::vector<Camera>& cameras);

}  // namespace rlx::io
