// Gaussian-scene PLY reader (src/io/ply.hpp), on the bytes in memory (parse_splat_ply: the
// checks a mapped file gets), as `rlx splat render SCENE.ply` reads it. A file that reads
// must give a consistent scene (every tensor N rows, K in 1, 4, 9, 16) that writes
// (write_splat_ply) and reads back to the same bits.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/ply.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string out = fuzz::temp_path("ply.out.ply");
  RLX_FUZZ_GUARD({
    const io::SplatScene s = io::parse_splat_ply(std::string_view(reinterpret_cast<const char*>(data), size), "input");
    const int64_t n = s.size(), k = s.sh.shape().at(1);
    if (s.log_scales.shape() != Shape{n, 3} || s.quats.shape() != Shape{n, 4} || s.opacity_logits.shape() != Shape{n} ||
        s.sh.shape() != Shape{n, k, 3} || (k != 1 && k != 4 && k != 9 && k != 16))
      fuzz::finding("inconsistent scene shapes, sh " + shape_str(s.sh.shape()));
    io::write_splat_ply(out, s);
    const io::SplatScene r = io::read_splat_ply(out);
    const Tensor* a[] = {&s.means, &s.log_scales, &s.quats, &s.opacity_logits, &s.sh};
    const Tensor* b[] = {&r.means, &r.log_scales, &r.quats, &r.opacity_logits, &r.sh};
    for (int i = 0; i < 5; ++i)
      if (a[i]->shape() != b[i]->shape() || std::memcmp(a[i]->raw(), b[i]->raw(), a[i]->nbytes()) != 0)
        fuzz::finding("a scene written and read back differs in tensor " + std::to_string(i));
  })
  return 0;
}
