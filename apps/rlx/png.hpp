// 8-bit RGB PNG files through libpng, for `rlx splat` (images out, and in for fitting).
// Without libpng at build time (RLX_HAVE_PNG unset) every call is an InputError saying so.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rlx::cli {

// Whether this rlx was built with libpng.
bool png_available();

// Writes `rgb` (height rows of width pixels, 3 bytes each, top row first) as an 8-bit RGB
// PNG through a temporary file renamed into place.
void write_png(const std::string& path, int64_t width, int64_t height, const std::vector<uint8_t>& rgb);

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // as write_png takes it
};
// Reads any PNG (gray, palette, alpha, 16-bit: converted to 8-bit RGB, alpha dropped).
// InputError naming the file when it is not a PNG, is damaged, or is larger than
// max_side pixels in either direction (checked before the pixels are allocated).
RgbImage read_png(const std::string& path, int64_t max_side);

}  // namespace rlx::cli
