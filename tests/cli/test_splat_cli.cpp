// rlx splat render and fit end to end: the example scene of data/splat (written by
// data/splat/make_scene.py, not by rlx) renders to a PNG of the camera's size that is not
// blank, whose pixels are the reference device's render of the same files, with the
// background where nothing was drawn and the sphere where the camera looks; depth and alpha
// as .npy; malformed files and options exit 2 naming the file or option.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "io/camera_json.hpp"
#include "io/npy.hpp"
#include "io/ply.hpp"
#include "ir/frontend.hpp"
#include "runtime/runtime.hpp"
#include "tests/support/cli.hpp"

#ifdef RLX_TEST_PNG
#include <png.h>
#endif

using namespace rlx;
namespace fs = std::filesystem;

namespace {

using rlx::test::has;

fs::path scratch() {
  static fs::path dir = rlx::test::scratch_dir("rlx_splat_cli_test_");
  return dir;
}
rlx::test::CliResult rlx_cli(const std::string& args) { return rlx::test::run_cli(RLX_CLI, args, scratch()); }

const std::string kScene = std::string(RLX_DATA) + "/splat/scene.ply";
const std::string kCamera = std::string(RLX_DATA) + "/splat/camera.json";

std::string out(const std::string& name) { return (scratch() / name).string(); }

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

#ifdef RLX_TEST_PNG
// The PNG through libpng's own simplified reader, as 8-bit RGB.
struct Png {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int64_t row, int64_t col) const { return rgb.data() + 3 * (row * width + col); }
};
Png read_png(const std::string& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  BOOST_REQUIRE_MESSAGE(png_image_begin_read_from_file(&img, path.c_str()), path << ": " << img.message);
  BOOST_TEST(img.format == PNG_FORMAT_RGB, "an RGB PNG without alpha");
  img.format = PNG_FORMAT_RGB;
  Png r{img.width, img.height, std::vector<uint8_t>(PNG_IMAGE_SIZE(img))};
  BOOST_REQUIRE(png_image_finish_read(&img, nullptr, r.rgb.data(), 0, nullptr));
  return r;
}
#endif

}  // namespace

BOOST_AUTO_TEST_SUITE(splat_cli)

#ifdef RLX_TEST_PNG
BOOST_AUTO_TEST_CASE(the_example_scene_renders_as_the_reference_device_does) {
  const auto r = rlx_cli("splat render " + kScene + " --camera " + kCamera + " --background 0,0,1 -o " + out("x.png") +
                         " --depth " + out("depth.npy") + " --alpha " + out("alpha.npy"));
  BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
  BOOST_TEST(has(r.out, "400 Gaussians (SH degree 1)"), r.out);
  BOOST_TEST(has(r.out, "160x120 on cpu"), r.out);
  const Png png = read_png(out("x.png"));
  BOOST_REQUIRE(png.width == 160u);
  BOOST_REQUIRE(png.height == 120u);

  // Not blank: many colours, a good share of the image drawn, the rest the background.
  std::set<uint32_t> colours;
  int64_t background = 0;
  for (size_t i = 0; i < png.rgb.size(); i += 3) {
    colours.insert(uint32_t(png.rgb[i]) << 16 | uint32_t(png.rgb[i + 1]) << 8 | png.rgb[i + 2]);
    background += png.rgb[i] == 0 && png.rgb[i + 1] == 0 && png.rgb[i + 2] == 255;
  }
  BOOST_TEST(colours.size() > 200u);
  BOOST_TEST(background > 160 * 120 / 20);
  BOOST_TEST(background < 160 * 120 * 3 / 4);

  // Where the camera looks: the origin, the sphere's centre, projects to (fx·x/z + cx,
  // fy·y/z + cy) with (x, y, z) = t; the sphere covers it, its near surface about one unit
  // in front of the centre.
  const io::Camera cam = io::read_cameras(kCamera).at(0);
  const double* t = &cam.world_to_camera[0];
  const int64_t col = int64_t(cam.fx * t[3] / t[11] + cam.cx), row = int64_t(cam.fy * t[7] / t[11] + cam.cy);
  const Tensor alpha = io::read_npy(out("alpha.npy")), depth = io::read_npy(out("depth.npy"));
  BOOST_REQUIRE(alpha.shape() == (Shape{120, 160}));
  BOOST_REQUIRE(depth.shape() == (Shape{120, 160}));
  BOOST_TEST(alpha.data<float>()[row * 160 + col] > 0.9f);
  BOOST_TEST(std::abs(depth.data<float>()[row * 160 + col] - (t[11] - 1)) < 0.3);
  for (int64_t i = 0; i < alpha.numel(); ++i) {
    const float a = alpha.data<float>()[i];
    BOOST_REQUIRE(a >= 0.0f);
    BOOST_REQUIRE(a <= 1.0f);
    // The background shows through exactly where nothing was drawn (blue = 255·(1 − α) + drawn).
    if (a == 0.0f) BOOST_REQUIRE(png.rgb[size_t(3 * i + 2)] == 255);
  }

  // The same files through splat_render on the reference device (double precision inside):
  // every byte within one step of rounding.
  const io::SplatScene s = io::read_splat_ply(kScene);
  ir::Graph g;
  const int64_t n = s.size();
  std::vector<Var> in = {input(g, "means", DType::F32, {n, 3}), input(g, "log_scales", DType::F32, {n, 3}),
                         input(g, "quats", DType::F32, {n, 4}), input(g, "opacity_logits", DType::F32, {n}),
                         input(g, "sh", DType::F32, {n, 4, 3}), input(g, "viewmat", DType::F32, {4, 4}),
                         input(g, "background", DType::F32, {3})};
  output(g, op_multi("splat_render", in,
                     {{"width", cam.width}, {"height", cam.height}, {"fx", cam.fx}, {"fy", cam.fy}, {"cx", cam.cx}, {"cy", cam.cy}}));
  Tensor view = Tensor::empty(DType::F32, {4, 4}), bg = Tensor::zeros(DType::F32, {3});
  for (int i = 0; i < 16; ++i) view.data<float>()[i] = float(cam.world_to_camera[size_t(i)]);
  bg.data<float>()[2] = 1;
  Device& ref = DeviceRegistry::get().at("reference");
  const std::vector<Tensor> want = run(compile(g, ref), ref, {s.means, s.log_scales, s.quats, s.opacity_logits, s.sh, view, bg});
  int worst = 0;
  for (int64_t i = 0; i < want[0].numel(); ++i) {
    const double v = std::clamp(double(want[0].data<float>()[i]), 0.0, 1.0) * 255;
    worst = std::max(worst, int(std::abs(v - png.rgb[size_t(i)]) + 0.5));
  }
  BOOST_TEST(worst <= 1);
}

BOOST_AUTO_TEST_CASE(a_scene_without_gaussians_is_the_background) {
  const std::string empty = out("empty.ply");
  std::string header = read_bytes(kScene);
  header = header.substr(0, header.find("end_header\n") + 11);
  header.replace(header.find("vertex 400"), 10, "vertex 0");
  write_bytes(empty, header);
  const auto r = rlx_cli("splat render " + empty + " --camera " + kCamera + " --background 0.2,0.4,0.6 -o " + out("empty.png"));
  BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
  BOOST_TEST(has(r.out, "0 Gaussians"), r.out);
  BOOST_TEST(has(r.out, "0 visible"), r.out);
  const Png png = read_png(out("empty.png"));
  for (size_t i = 0; i < png.rgb.size(); i += 3) {
    BOOST_REQUIRE(png.rgb[i] == 51);
    BOOST_REQUIRE(png.rgb[i + 1] == 102);
    BOOST_REQUIRE(png.rgb[i + 2] == 153);
  }
}

const std::string kRing = std::string(RLX_DATA) + "/splat/ring.json";
// The example scene's four ring views (data/splat/ring.json: 64x48 cameras that name their
// pictures) rendered by rlx splat render into the scratch folder `name`; returns its path.
std::string ring_views(const std::string& name) {
  const std::string views = out(name);
  fs::create_directories(views);
  for (int i = 0; i < 4; ++i) {
    const auto r = rlx_cli("splat render " + kScene + " --camera " + kRing + " --view " + std::to_string(i) + " -o " + views +
                           "/view" + std::to_string(i) + ".png");
    BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
  }
  return views;
}

// rlx splat fit on views of the example scene rendered by rlx splat render (data/splat/ring.json:
// four 64x48 cameras that name their pictures): from random Gaussians the PSNR over the views
// rises, the snapshots are the camera's size, and the fitted scene is a PLY of --count Gaussians.
BOOST_AUTO_TEST_CASE(fit_raises_the_psnr_of_a_known_scene) {
  const std::string ring = kRing, views = ring_views("views");
  const auto r = rlx_cli("splat fit --images " + views + " --cameras " + ring + " --count 100 --iters 80 --report-every 40" +
                         " --snapshots " + out("snaps") + " --snapshot-every 40 --seed 3 -o " + out("fit.ply"));
  BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
  // "iter 0/80  PSNR a dB" ... "iter 80/80  loss l  PSNR b dB"
  auto psnr_at = [&](const std::string& iter) {
    const size_t at = r.out.find("iter " + iter + "/80");
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, r.out);
    const size_t p = r.out.find("PSNR ", at);
    return std::stod(r.out.substr(p + 5));
  };
  const double first = psnr_at("0"), middle = psnr_at("40"), last = psnr_at("80");
  BOOST_TEST(middle > first + 1.5, r.out);
  BOOST_TEST(last > middle, r.out);
  BOOST_TEST(last > first + 4, r.out);
  const io::SplatScene fitted = io::read_splat_ply(out("fit.ply"));
  BOOST_TEST(fitted.size() == 100);
  for (const char* snap : {"iter_000040.png", "iter_000080.png"}) {
    const Png png = read_png(out("snaps") + "/" + snap);
    BOOST_TEST(png.width == 64u);
    BOOST_TEST(png.height == 48u);
  }

  // From the scene that made the pictures the fit starts at their 8-bit rounding (PSNR
  // above 50 dB): its renders and the render command's agree.
  const auto exact = rlx_cli("splat fit --images " + views + " --cameras " + ring + " --init " + kScene + " --iters 1 -o " +
                             out("again.ply"));
  BOOST_REQUIRE_MESSAGE(exact.code == 0, exact.err);
  BOOST_TEST(has(exact.out, "fitting 400 Gaussians (SH degree 1) to 4 views of 64x48"), exact.out);
  BOOST_TEST(std::stod(exact.out.substr(exact.out.find("iter 0/1  PSNR ") + 15)) > 50, exact.out);
  BOOST_TEST(io::read_splat_ply(out("again.ply")).sh.shape() == (Shape{400, 4, 3}));

  // Views that do not match their cameras exit 2 naming the file.
  BOOST_REQUIRE(rlx_cli("splat render " + kScene + " --camera " + kCamera + " -o " + views + "/view2.png").code == 0);
  const auto bad = rlx_cli("splat fit --images " + views + " --cameras " + ring + " --iters 5 -o " + out("bad.ply"));
  BOOST_TEST(bad.code == 2);
  BOOST_TEST(has(bad.err, "view2.png: 160x120 pixels, but camera 2 of " + ring + " is 64x48"), bad.err);
  const auto unnamed = rlx_cli("splat fit --images " + views + " --cameras " + kCamera + " --iters 5 -o " + out("bad.ply"));
  BOOST_TEST(unnamed.code == 2);
  BOOST_TEST(has(unnamed.err, "4 PNG files for the 1 cameras of " + kCamera), unnamed.err);
  BOOST_TEST(has(rlx_cli("splat fit --images " + views + " --cameras " + ring + " -o " + out("bad.ply")).err,
                 "splat fit needs --iters N"));
  // A cut PNG and a file that is no PNG: exit 2 naming the file (libpng's reason).
  const std::string png0 = read_bytes(views + "/view0.png");
  write_bytes(views + "/view0.png", png0.substr(0, 300));
  const auto cut = rlx_cli("splat fit --images " + views + " --cameras " + ring + " --iters 5 -o " + out("bad.ply"));
  BOOST_TEST(cut.code == 2);
  BOOST_TEST(has(cut.err, views + "/view0.png: cannot read the PNG (libpng: "), cut.err);
  write_bytes(views + "/view0.png", "GIF89a");
  BOOST_TEST(has(rlx_cli("splat fit --images " + views + " --cameras " + ring + " --iters 5 -o " + out("bad.ply")).err,
                 views + "/view0.png: not a PNG file"));
  BOOST_TEST(has(rlx_cli("splat fit --images " + views + " --cameras " + ring + " --init " + kScene + " --count 5 --iters 1 -o " +
                         out("bad.ply")).err,
                 "--count sets the size of --init random only"));
  BOOST_TEST(!fs::exists(out("bad.ply")));
}

// rlx splat fit --densify on the cpu device, end to end: the count changes at the
// densification steps (every 10 iterations from 1 until 30 at --iters 60), the fitted scene
// has the last count, the PSNR still rises; an opacity reset dims the renders; the
// densification options need --densify.
BOOST_AUTO_TEST_CASE(fit_with_densification_changes_the_count) {
  const std::string ring = kRing, views = ring_views("dviews");
  const auto r = rlx_cli("splat fit --images " + views + " --cameras " + ring + " --count 50 --iters 60 --report-every 30" +
                         " --densify --seed 5 --device cpu -o " + out("dense.ply"));
  BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);
  BOOST_TEST(has(r.out, "densifying from iteration 1 until 30 every 10"), r.out);
  BOOST_TEST(has(r.out, "iter 10/60  densified: 50 -> "), r.out);
  const size_t last = r.out.rfind("(", r.out.find("iter 60/60"));
  BOOST_REQUIRE_MESSAGE(last != std::string::npos, r.out);
  const int64_t count = std::stoll(r.out.substr(last + 1));
  BOOST_TEST(count != 50, r.out);
  BOOST_TEST(io::read_splat_ply(out("dense.ply")).size() == count);
  const double first = std::stod(r.out.substr(r.out.find("iter 0/60  PSNR ") + 16));
  const double end = std::stod(r.out.substr(r.out.find("PSNR ", r.out.find("iter 60/60")) + 5));
  BOOST_TEST(end > first + 3, r.out);

  // An opacity reset (at iteration 20 of 40) lowers every opacity to at most 0.01: the
  // renders, over a black background, lose most of their light and the PSNR falls.
  const auto reset = rlx_cli("splat fit --images " + views + " --cameras " + ring + " --count 50 --iters 40" +
                             " --report-every 10 --densify --densify-until 40 --opacity-reset-every 20 --seed 5 -o " +
                             out("reset.ply"));
  BOOST_REQUIRE_MESSAGE(reset.code == 0, reset.err);
  BOOST_TEST(has(reset.out, "iter 20/40  opacities reset to at most 0.01"), reset.out);
  const auto psnr_at = [&](const std::string& iter) {
    return std::stod(reset.out.substr(reset.out.find("PSNR ", reset.out.find("iter " + iter + "/40  loss")) + 5));
  };
  BOOST_TEST(psnr_at("20") < psnr_at("10") - 1, reset.out);

  const auto bad = rlx_cli("splat fit --images " + views + " --cameras " + ring + " --iters 5 --densify-every 5 -o " +
                           out("bad.ply"));
  BOOST_TEST(bad.code == 2);
  BOOST_TEST(has(bad.err, "--densify-every needs --densify"), bad.err);
}

#else
BOOST_AUTO_TEST_CASE(without_libpng_render_says_so) {
  const auto r = rlx_cli("splat render " + kScene + " --camera " + kCamera + " -o " + out("x.png"));
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "built without libpng"), r.err);
}
#endif

// Malformed files and options: exit 2, the file or option named, never an internal error,
// and no output file left behind.
BOOST_AUTO_TEST_CASE(bad_files_and_options_exit_2_naming_them) {
  const std::string scene = read_bytes(kScene), camera = read_bytes(kCamera);
  const std::string cut = out("cut.ply"), bad_cam = out("bad_cam.json"), text = out("text.ply"), two = out("two.json");
  write_bytes(cut, scene.substr(0, scene.size() - 100));
  std::string zero_width = camera;
  zero_width.replace(zero_width.find("160"), 3, "0");
  write_bytes(bad_cam, zero_width);
  write_bytes(text, "solid cube\nfacet normal 0 0 1\n");
  write_bytes(two, "[" + camera + "," + camera + "]");
  const std::string png = " -o " + out("never.png");
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"splat render " + cut + " --camera " + kCamera + png, cut + ": truncated"},
      {"splat render " + text + " --camera " + kCamera + png, text + ": not a PLY file"},
      {"splat render " + out("missing.ply") + " --camera " + kCamera + png, "missing.ply: cannot open for reading"},
      {"splat render " + kScene + " --camera " + bad_cam + png, bad_cam + ": \"width\" is 0, outside [1, 16384]"},
      {"splat render " + kScene + " --camera " + kScene + png, kScene + ":31: camera JSON: a NUL byte"},
      {"splat render " + kScene + " --camera " + two + " --view 2" + png, "--view 2: " + two + " holds 2 cameras (views 0..1)"},
      {"splat render " + kScene + " --camera " + kCamera + " --view -1" + png, "--view must be in [0, "},
      {"splat render " + kScene + " --camera " + kCamera + " --background 1,0" + png, "--background expects 3 numbers"},
      {"splat render " + kScene + " --camera " + kCamera + " --background 0,0,2" + png, "--background expects 3 numbers in [0, 1]"},
      {"splat render " + kScene + " --camera " + kCamera + " --device nonesuch" + png, "nonesuch"},
      {"splat render " + kScene + " --camera " + kCamera + " -o " + out("no/such/folder.png"), "folder"},
      {"splat render " + kScene + " --camera " + kCamera + png + " --depth " + out("never.png"), "must name different files"},
      {"splat render " + kScene + png, "splat render needs --camera CAM.json"},
      {"splat render " + kScene + " --camera " + kCamera, "splat render needs -o OUT.png"},
      {"splat render --camera " + kCamera + png, "splat render takes one SCENE.ply"},
      {"splat render " + kScene + " --camera " + kCamera + " --zoom 2" + png, "unknown option --zoom"},
      {"splat paint", "unknown splat sub-command 'paint' (render, fit)"},
      {"splat", "splat needs a sub-command"},
  };
  for (const Case& c : cases) {
    const auto r = rlx_cli(c.args);
    BOOST_TEST(r.code == 2, c.args << " -> " << r.code << ": " << r.err);
    BOOST_TEST(has(r.err, c.expect), c.args << ": " << r.err);
    BOOST_TEST(!has(r.err, "internal error"), r.err);
  }
  BOOST_TEST(!fs::exists(out("never.png")));
}

BOOST_AUTO_TEST_SUITE_END()
