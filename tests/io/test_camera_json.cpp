// Camera files (src/io/camera_json.hpp): one camera or a list read field for field, the
// writer's files read back equal, and every malformed file refused naming the file, the
// camera and the field.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/camera_json.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/errors.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  static const fs::path dir = test::scratch_dir("rlx_camera_test_");
  return dir / name;
}

// A camera looking down +z from (0, 0, -4), rotated 90 degrees about z: R = [[0,-1,0],[1,0,0],[0,0,1]].
const std::string kMatrix = "[[0,-1,0,0],[1,0,0,0],[0,0,1,4],[0,0,0,1]]";
std::string camera(const std::string& replace_key = "", const std::string& with = "") {
  std::string fields[][2] = {{"width", "64"}, {"height", "48"}, {"fx", "60.5"}, {"fy", "61"},
                             {"cx", "32"},    {"cy", "24.25"},  {"world_to_camera", kMatrix}};
  std::string r = "{";
  for (auto& [k, v] : fields) {
    if (k == replace_key && with.empty()) continue;
    r += (r.size() > 1 ? ", \"" : "\"") + k + "\": " + (k == replace_key ? with : v);
  }
  return r + "}";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(camera_json)

BOOST_AUTO_TEST_CASE(one_camera_or_a_list_reads_field_for_field) {
  const std::vector<io::Camera> one = io::parse_cameras(camera(), "cam.json");
  BOOST_REQUIRE_EQUAL(one.size(), 1u);
  const io::Camera& c = one[0];
  BOOST_TEST(c.width == 64);
  BOOST_TEST(c.height == 48);
  BOOST_TEST(c.fx == 60.5);
  BOOST_TEST(c.fy == 61.0);
  BOOST_TEST(c.cx == 32.0);
  BOOST_TEST(c.cy == 24.25);
  const double want[16] = {0, -1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0, 1};
  for (int i = 0; i < 16; ++i) BOOST_TEST(c.world_to_camera[size_t(i)] == want[i]);
  BOOST_TEST(c.image.empty());
  std::string second = camera("width", "16");
  second.insert(second.size() - 1, ", \"image\": \"view1.png\"");
  const std::vector<io::Camera> two = io::parse_cameras("[" + camera() + ",\n " + second + "]", "cams.json");
  BOOST_REQUIRE_EQUAL(two.size(), 2u);
  BOOST_TEST(two[1].width == 16);
  BOOST_TEST(two[1].image == "view1.png");

  // Written and read back: equal (doubles print exactly).
  io::Camera odd = two[1];
  odd.fx = 1.0 / 3.0;
  odd.world_to_camera[3] = -0.1;
  const fs::path p = scratch("written.json");
  io::write_cameras(p.string(), {c, odd});
  const std::vector<io::Camera> back = io::read_cameras(p.string());
  BOOST_REQUIRE_EQUAL(back.size(), 2u);
  BOOST_TEST(back[1].fx == odd.fx);
  BOOST_TEST(back[1].world_to_camera == odd.world_to_camera);
  BOOST_TEST(back[1].image == "view1.png");
  BOOST_TEST(back[0].world_to_camera == c.world_to_camera);
  io::write_cameras(p.string(), {c});
  BOOST_TEST(io::read_cameras(p.string()).size() == 1u);
}

BOOST_AUTO_TEST_CASE(bad_files_name_the_file_the_camera_and_the_field) {
  struct Case {
    const char* name;
    std::string text;
    const char* expect;
  };
  const std::string nested = std::string(50, '[') + std::string(50, ']');
  const std::vector<Case> cases = {
      {"empty", "", "bad.json:1: camera JSON: parse error"},
      {"cut", camera().substr(0, 30), "bad.json:1: camera JSON: parse error at line 1, column 31"},
      {"second_line", "{\n\n\"width\": }", "bad.json:3: camera JSON"},
      {"nul", camera() + std::string(1, '\0'), "camera JSON: a NUL byte at byte"},
      {"number", "5", "bad.json is the JSON number 5, not a camera object"},
      {"empty_list", "[]", "an empty list of cameras"},
      {"list_of_numbers", "[" + camera() + ", 3]", "camera 1 is the JSON number 3, not a camera object"},
      {"missing_fx", camera("fx"), "bad.json: no \"fx\""},
      {"missing_matrix", "[" + camera() + "," + camera("world_to_camera") + "]", "camera 1: no \"world_to_camera\""},
      {"unknown_key", camera("cy", "1, \"fov\": 60"), "unknown key 'fov' (a camera has width, height"},
      {"duplicate_key", camera("cy", "1, \"cx\": 2"), "key 'cx' appears twice in one object"},
      {"width_string", camera("width", "\"64\""), "\"width\" is the JSON string \"64\", not an integer"},
      {"width_float", camera("width", "64.0"), "\"width\" is the JSON number 64.0, not an integer"},
      {"width_zero", camera("width", "0"), "\"width\" is 0, outside [1, 16384]"},
      {"height_negative", camera("height", "-48"), "\"height\" is -48, outside [1, 16384]"},
      {"height_huge", camera("height", "100000"), "\"height\" is 100000, outside [1, 16384]"},
      {"width_2_64", camera("width", "18446744073709551616"), "\"width\" is the JSON number"},
      {"fx_zero", camera("fx", "0"), "\"fx\" must be positive"},
      {"fy_negative", camera("fy", "-3"), "\"fy\" must be positive"},
      {"cx_null", camera("cx", "null"), "\"cx\" is the JSON null null, not a number"},
      {"cy_huge", camera("cy", "1e999"), "camera JSON"},
      {"matrix_3_rows", camera("world_to_camera", "[[1,0,0,0],[0,1,0,0],[0,0,1,0]]"), "\"world_to_camera\" is an array of 3 rows, not 4 rows of 4 numbers"},
      {"matrix_short_row", camera("world_to_camera", "[[1,0,0,0],[0,1,0],[0,0,1,0],[0,0,0,1]]"), "\"world_to_camera\" row 1 is an array of 3 numbers, not 4 numbers"},
      {"matrix_string", camera("world_to_camera", "\"identity\""), "\"world_to_camera\" is the JSON string \"identity\""},
      {"matrix_text_entry", camera("world_to_camera", "[[1,0,0,0],[0,1,0,0],[0,0,1,\"4\"],[0,0,0,1]]"), "\"world_to_camera\" row 2 column 3 is the JSON string \"4\", not a number"},
      {"last_row", camera("world_to_camera", "[[1,0,0,0],[0,1,0,0],[0,0,1,4],[0,0,1,1]]"), "the last row is not [0, 0, 0, 1]"},
      {"scaled", camera("world_to_camera", "[[2,0,0,0],[0,2,0,0],[0,0,2,4],[0,0,0,1]]"), "its 3 x 3 part is not a rotation"},
      {"reflection", camera("world_to_camera", "[[-1,0,0,0],[0,1,0,0],[0,0,1,4],[0,0,0,1]]"), "is a reflection (determinant -1"},
      {"image_number", camera("cy", "1, \"image\": 3"), "\"image\" is the JSON number 3, not a file name"},
      {"nested", nested, "camera JSON nests deeper than a list of cameras does"},
  };
  for (const Case& c : cases) {
    const fs::path p = scratch("bad.json");
    std::ofstream(p, std::ios::binary) << c.text;
    std::string m;
    try {
      io::read_cameras(p.string());
      BOOST_ERROR(c.name << ": read without an error");
    } catch (const InputError& e) {
      m = e.what();
    }
    BOOST_TEST(m.find(p.string()) == 0u, c.name << ": " << m);
    BOOST_TEST(m.find(c.expect) != std::string::npos, c.name << ": " << m);
  }
  test::expect_error([&] { io::read_cameras(scratch("none.json").string()); }, {"none.json: cannot open for reading"});
}

BOOST_AUTO_TEST_SUITE_END()
