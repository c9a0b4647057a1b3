// h5_compare A.h5 B.h5 TOL RANKS: the solution files of two `rlx solve --out` runs agree:
// datasets x and b within TOL (relative, in the 2-norm), the same root attributes converged,
// method and pc, both residuals at most 10 * TOL, and B's root attribute `ranks` is RANKS.
// Exit 0 when they agree, 1 with the differences on stderr otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "io/hdf5.hpp"

using namespace rlx;

namespace {

double rel_diff(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = a.data<double>()[i] - b.data<double>()[i];
    num += d * d, den += b.data<double>()[i] * b.data<double>()[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: h5_compare A.h5 B.h5 TOL RANKS\n");
    return 2;
  }
  const double tol = std::atof(argv[3]);
  const int64_t ranks = std::atoll(argv[4]);
  int bad = 0;
  try {
    io::H5Reader a(argv[1]), b(argv[2]);
    for (const char* name : {"x", "b"}) {
      const Tensor ta = a.read(name), tb = b.read(name);
      if (ta.dtype() != DType::F64 || tb.dtype() != DType::F64 || ta.shape() != tb.shape()) {
        std::fprintf(stderr, "%s: shapes or dtypes differ\n", name);
        ++bad;
        continue;
      }
      const double d = rel_diff(ta, tb);
      std::printf("%s: %lld entries, relative difference %.3e\n", name, (long long)ta.numel(), d);
      if (!(d <= tol)) ++bad;
    }
    for (const char* name : {"converged", "method", "pc"})
      if (a.attr("/", name) != b.attr("/", name)) {
        std::fprintf(stderr, "attribute %s differs\n", name);
        ++bad;
      }
    const double ra = std::get<double>(a.attr("/", "residual")), rb = std::get<double>(b.attr("/", "residual"));
    std::printf("residual: %.3e and %.3e\n", ra, rb);
    if (!(ra <= 10 * tol && rb <= 10 * tol)) ++bad;
    if (!b.has("residual_history") || b.read("residual_history").numel() < 1) ++bad;
    const int64_t got = std::get<int64_t>(b.attr("/", "ranks"));
    std::printf("ranks: %lld\n", (long long)got);
    if (got != ranks) {
      std::fprintf(stderr, "ranks is %lld, expected %lld\n", (long long)got, (long long)ranks);
      ++bad;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "h5_compare: %s\n", e.what());
    return 1;
  }
  return bad ? 1 : 0;
}
