#include "png.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "io/atomic_file.hpp"

#ifdef RLX_HAVE_PNG
#include <png.h>
#endif

namespace rlx::cli {

#ifdef RLX_HAVE_PNG

namespace {

// libpng reports failures by longjmp out of its calls: the functions that call it hold
// nothing with a destructor, and carry the message out in this buffer.
struct PngMessage {
  char text[256] = "";
  char warning[256] = "";  // the last one: it often says why the error came (a size limit)
  std::string what() const { return std::string(text) + (warning[0] ? std::string("; ") + warning : std::string()); }
};

void on_error(png_structp png, png_const_charp msg) {
  auto* m = static_cast<PngMessage*>(png_get_error_ptr(png));
  std::snprintf(m->text, sizeof m->text, "%s", msg);
  png_longjmp(png, 1);
}
void on_warning(png_structp png, png_const_charp msg) {
  auto* m = static_cast<PngMessage*>(png_get_error_ptr(png));
  std::snprintf(m->warning, sizeof m->warning, "%s", msg);
}

bool encode(std::FILE* f, const uint8_t* rgb, uint32_t width, uint32_t height, PngMessage* m) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, m, on_error, on_warning);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    return false;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (uint32_t y = 0; y < height; ++y) png_write_row(png, rgb + size_t(y) * width * 3);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

// Reads the header, then (when both sides are at most max_side) the pixels into out, which
// the caller sized from *width and *height in between: decode is called twice.
bool decode(std::FILE* f, uint32_t* width, uint32_t* height, uint32_t max_side, uint8_t* out, PngMessage* m) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, m, on_error, on_warning);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_init_io(png, f);
  png_set_user_limits(png, max_side, max_side);  // libpng refuses larger headers itself
  png_read_info(png, info);
  *width = png_get_image_width(png, info);
  *height = png_get_image_height(png, info);
  if (out) {
    png_set_expand(png);  // palette and low-bit gray to 8 bits, tRNS to alpha
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    png_set_gray_to_rgb(png);
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != size_t(*width) * 3) {
      std::snprintf(m->text, sizeof m->text, "unexpected row size after conversion to RGB");
      png_destroy_read_struct(&png, &info, nullptr);
      return false;
    }
    for (int p = 0; p < passes; ++p)
      for (uint32_t y = 0; y < *height; ++y) png_read_row(png, out + size_t(y) * *width * 3, nullptr);
    png_read_end(png, nullptr);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

struct File {
  std::FILE* f;
  ~File() {
    if (f) std::fclose(f);
  }
};

}  // namespace

bool png_available() { return true; }

void write_png(const std::string& path, int64_t width, int64_t height, const std::vector<uint8_t>& rgb) {
  if (width < 1 || height < 1 || width > 0x7fffffff || height > 0x7fffffff || rgb.size() != size_t(width * height * 3))
    throw InputError(path + ": cannot write a " + std::to_string(width) + " x " + std::to_string(height) + " PNG from " +
                     std::to_string(rgb.size()) + " bytes");
  io::AtomicFile out(path);
  std::FILE* f = std::fopen(out.temp().c_str(), "wb");
  if (!f) throw InputError(path + ": cannot open " + out.temp() + " for writing (" + std::strerror(errno) + ")");
  PngMessage m;
  const bool encoded = encode(f, rgb.data(), uint32_t(width), uint32_t(height), &m);
  const bool closed = std::fclose(f) == 0;
  if (!encoded) throw InputError(path + ": libpng could not write the image (" + m.what() + ")");
  if (!closed) throw InputError(path + ": writing " + out.temp() + " failed (" + std::strerror(errno) + ")");
  out.commit();
}

RgbImage read_png(const std::string& path, int64_t max_side) {
  File f{std::fopen(path.c_str(), "rb")};
  if (!f.f) throw InputError(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  unsigned char sig[8] = {};
  if (std::fread(sig, 1, 8, f.f) != 8 || png_sig_cmp(sig, 0, 8) != 0)
    throw InputError(path + ": not a PNG file (its first bytes are not the PNG signature)");
  std::rewind(f.f);
  PngMessage m;
  uint32_t w = 0, h = 0;
  const uint32_t side = uint32_t(std::min<int64_t>(max_side, 0x7fffffff));
  auto damaged = [&] { return InputError(path + ": cannot read the PNG (libpng: " + m.what() + ")"); };
  if (!decode(f.f, &w, &h, side, nullptr, &m)) throw damaged();
  RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.resize(size_t(w) * h * 3);
  std::rewind(f.f);
  if (!decode(f.f, &w, &h, side, img.rgb.data(), &m)) throw damaged();
  return img;
}

#else

namespace {
[[noreturn]] void no_png(const std::string& path) {
  throw InputError(path + ": this rlx was built without libpng, so it cannot read or write PNG (install libpng-dev and rebuild)");
}
}  // namespace

bool png_available() { return false; }
void write_png(const std::string& path, int64_t, int64_t, const std::vector<uint8_t>&) { no_png(path); }
RgbImage read_png(const std::string& path, int64_t) { no_png(path); }

#endif

}  // namespace rlx::cli
