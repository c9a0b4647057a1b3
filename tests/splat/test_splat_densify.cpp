// Densification (solvers/splat/densify.hpp, docs/splat.md "Densification") on hand-made
// Gaussians with known gradient statistics: which are cloned, which split, where the split
// copies go and at what scale, which are pruned, and the optimiser state carried over.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <random>

#include "core/error.hpp"
#include "solvers/splat/densify.hpp"
#include "tests/support/seed.hpp"

namespace rlx::test {
namespace {

struct Hand {
  float mean[3];
  float scale[3];  // standard deviations
  float quat[4];
  float opacity;
  float grad_sum, seen, radius;
};

io::SplatScene scene_of(const std::vector<Hand>& h) {
  const int64_t n = int64_t(h.size());
  io::SplatScene s{Tensor::empty(DType::F32, {n, 3}), Tensor::empty(DType::F32, {n, 3}), Tensor::empty(DType::F32, {n, 4}),
                   Tensor::empty(DType::F32, {n}), Tensor::empty(DType::F32, {n, 1, 3})};
  for (int64_t i = 0; i < n; ++i) {
    const Hand& g = h[size_t(i)];
    for (int k = 0; k < 3; ++k) {
      s.means.data<float>()[3 * i + k] = g.mean[k];
      s.log_scales.data<float>()[3 * i + k] = std::log(g.scale[k]);
      s.sh.data<float>()[3 * i + k] = float(i) + 0.1f * float(k);  // names the Gaussian
    }
    for (int k = 0; k < 4; ++k) s.quats.data<float>()[4 * i + k] = g.quat[k];
    s.opacity_logits.data<float>()[i] = std::log(g.opacity / (1 - g.opacity));
  }
  return s;
}
Tensor stat(const std::vector<Hand>& h, float Hand::*field) {
  Tensor t = Tensor::empty(DType::F32, {int64_t(h.size())});
  for (size_t i = 0; i < h.size(); ++i) t.data<float>()[i] = h[i].*field;
  return t;
}
splat::Densified run(const std::vector<Hand>& h, const splat::DensifyOptions& o, std::mt19937_64& rng) {
  return splat::densify(scene_of(h), stat(h, &Hand::grad_sum), stat(h, &Hand::seen), stat(h, &Hand::radius), o, rng);
}

const float kIdentity[4] = {1, 0, 0, 0};
// A quarter turn about z: the local x axis is the world's y.
const float kQuarterZ[4] = {float(std::sqrt(0.5)), 0, 0, float(std::sqrt(0.5))};

Hand make(std::initializer_list<float> mean, float scale_x, float scale_yz, const float* q, float opacity, float grad_sum,
          float seen, float radius = 3) {
  Hand h{};
  std::copy(mean.begin(), mean.end(), h.mean);
  h.scale[0] = scale_x, h.scale[1] = h.scale[2] = scale_yz;
  std::copy(q, q + 4, h.quat);
  h.opacity = opacity, h.grad_sum = grad_sum, h.seen = seen, h.radius = radius;
  return h;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(splat_densify)

// extent 10, percent_dense 0.01: a Gaussian is small (cloned) up to a largest scale of 0.1.
// Threshold 2e-4 on the mean gradient (sum / views seen).
BOOST_AUTO_TEST_CASE(clones_small_splits_large_and_prunes_faint_gaussians) {
  std::mt19937_64 rng(run_seed("test_splat_densify"));
  splat::DensifyOptions o;
  o.extent = 10;
  const std::vector<Hand> h = {
      make({0, 0, 5}, 0.05f, 0.05f, kIdentity, 0.5f, 0.003f, 3),   // 0: mean 1e-3, small: cloned
      make({1, 2, 5}, 1.0f, 0.01f, kQuarterZ, 0.6f, 0.004f, 4),    // 1: mean 1e-3, large: split
      make({2, 0, 5}, 0.05f, 0.05f, kIdentity, 0.5f, 0.0001f, 1),  // 2: mean 1e-4: kept
      make({3, 0, 5}, 0.05f, 0.05f, kIdentity, 0.001f, 0, 0),      // 3: opacity 0.001: pruned
      make({4, 0, 5}, 1.0f, 1.0f, kIdentity, 0.5f, 0.001f, 10),    // 4: mean 1e-4 (large): kept
      make({5, 0, 5}, 1.0f, 1.0f, kIdentity, 0.004f, 0.01f, 1),    // 5: split, both copies faint: pruned
      make({6, 0, 5}, 0.05f, 0.05f, kIdentity, 0.5f, 0.0002f, 1),  // 6: exactly at the threshold: cloned
  };
  const splat::Densified d = run(h, o, rng);
  BOOST_TEST(d.stats.before == 7);
  BOOST_TEST(d.stats.cloned == 2);
  BOOST_TEST(d.stats.split == 2);
  BOOST_TEST(d.stats.pruned == 3);  // 3, and 5's two copies
  BOOST_TEST(d.stats.after == 8);  // 0 2 4 6, clones of 0 and 6, two copies of 1
  BOOST_TEST(d.from == (std::vector<int64_t>{0, 2, 4, 6, 0, 6, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(d.fresh == (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1}), boost::test_tools::per_element());
  const io::SplatScene& s = d.scene;
  BOOST_REQUIRE(s.size() == 8 && d.from.size() == 8);
  // Kept Gaussians and clones are exact copies of their source.
  const io::SplatScene in = scene_of(h);
  for (size_t j = 0; j < 6; ++j) {
    const int64_t i = d.from[j];
    for (int k = 0; k < 3; ++k) {
      BOOST_TEST(s.means.data<float>()[3 * j + k] == in.means.data<float>()[3 * i + k]);
      BOOST_TEST(s.log_scales.data<float>()[3 * j + k] == in.log_scales.data<float>()[3 * i + k]);
      BOOST_TEST(s.sh.data<float>()[3 * j + k] == in.sh.data<float>()[3 * i + k]);
    }
    BOOST_TEST(s.opacity_logits.data<float>()[j] == in.opacity_logits.data<float>()[i]);
  }
  // Split copies: 1's rotation, opacity and colour, scales / 1.6, means within 6 sigma of 1's
  // mean along its long axis (world y after the quarter turn), within 6 x 0.01 across it.
  for (size_t j = 6; j < 8; ++j) {
    BOOST_TEST(s.sh.data<float>()[3 * j] == 1.0f);
    BOOST_TEST(s.opacity_logits.data<float>()[j] == in.opacity_logits.data<float>()[1]);
    for (int k = 0; k < 4; ++k) BOOST_TEST(s.quats.data<float>()[4 * j + k] == kQuarterZ[k]);
    BOOST_TEST(std::exp(s.log_scales.data<float>()[3 * j]) == 1.0 / 1.6, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(std::exp(s.log_scales.data<float>()[3 * j + 1]) == 0.01 / 1.6, boost::test_tools::tolerance(1e-5));
    const float* m = s.means.data<float>() + 3 * j;
    BOOST_TEST(std::abs(m[0] - 1) <= 0.06);
    BOOST_TEST(std::abs(m[1] - 2) <= 6.0);
    BOOST_TEST(std::abs(m[2] - 5) <= 0.06);
  }
  BOOST_TEST(s.means.data<float>()[3 * 6 + 1] != s.means.data<float>()[3 * 7 + 1]);  // two samples
}

// The split copies are samples of the Gaussian: over many splits their offsets have mean 0
// and covariance R diag(s^2) R^T (here variance 1 along world y, 1e-4 along x and z).
BOOST_AUTO_TEST_CASE(split_copies_are_samples_of_the_gaussian) {
  std::mt19937_64 rng(run_seed("test_splat_densify") + 1);
  splat::DensifyOptions o;
  o.extent = 10;
  const std::vector<Hand> h(2000, make({1, 2, 5}, 1.0f, 0.01f, kQuarterZ, 0.6f, 1, 1));
  const splat::Densified d = run(h, o, rng);
  BOOST_REQUIRE(d.scene.size() == 4000);
  double mean[3] = {}, var[3] = {};
  const double centre[3] = {1, 2, 5};
  for (int64_t j = 0; j < 4000; ++j)
    for (int k = 0; k < 3; ++k) {
      const double e = d.scene.means.data<float>()[3 * j + k] - centre[k];
      mean[k] += e / 4000, var[k] += e * e / 4000;
    }
  BOOST_TEST(std::abs(mean[1]) < 0.08);  // 5 standard errors of 1/sqrt(4000)
  BOOST_TEST(var[1] == 1.0, boost::test_tools::tolerance(0.1));
  BOOST_TEST(var[0] == 1e-4, boost::test_tools::tolerance(0.15));
  BOOST_TEST(var[2] == 1e-4, boost::test_tools::tolerance(0.15));
}

// Large Gaussians are pruned only when asked (the fit asks after its first opacity reset):
// on screen above max_screen_radius pixels, in the world above max_world_scale x extent.
BOOST_AUTO_TEST_CASE(large_gaussians_are_pruned_when_asked) {
  std::mt19937_64 rng(run_seed("test_splat_densify") + 2);
  const std::vector<Hand> h = {
      make({0, 0, 5}, 0.5f, 0.5f, kIdentity, 0.5f, 0, 1, 25),  // 25 px on screen
      make({0, 0, 5}, 2.0f, 0.5f, kIdentity, 0.5f, 0, 1, 10),  // 2 > 0.1 x 10 in the world
      make({0, 0, 5}, 0.5f, 0.5f, kIdentity, 0.5f, 0, 1, 10),  // neither
  };
  splat::DensifyOptions o;
  o.extent = 10;
  BOOST_TEST(run(h, o, rng).stats.after == 3);
  o.max_screen_radius = 20, o.max_world_scale = 0.1;
  const splat::Densified d = run(h, o, rng);
  BOOST_TEST(d.stats.pruned == 2);
  BOOST_TEST(d.from == (std::vector<int64_t>{2}), boost::test_tools::per_element());
}

// The optimiser state follows the Gaussians: kept rows are copied, new ones are zero.
BOOST_AUTO_TEST_CASE(optimiser_state_rows_follow_the_gaussians) {
  Tensor t = Tensor::empty(DType::F32, {3, 2});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = float(i + 1);
  const Tensor r = splat::take_rows(t, {2, 0, 0}, {0, 0, 1});
  BOOST_TEST(r.shape() == (Shape{3, 2}));
  const std::vector<float> want = {5, 6, 1, 2, 0, 0};
  for (int i = 0; i < 6; ++i) BOOST_TEST(r.data<float>()[i] == want[size_t(i)]);
  BOOST_CHECK_THROW(splat::take_rows(t, {3}, {0}), InputError);
  // Statistics of another length are refused.
  std::mt19937_64 rng(1);
  const std::vector<Hand> h(2, make({0, 0, 5}, 0.5f, 0.5f, kIdentity, 0.5f, 0, 1));
  BOOST_CHECK_THROW(splat::densify(scene_of(h), Tensor::zeros(DType::F32, {3}), stat(h, &Hand::seen),
                                   stat(h, &Hand::radius), {}, rng),
                    InputError);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace rlx::test
