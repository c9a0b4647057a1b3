#include "solvers/splat/densify.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.hpp"

namespace rlx::splat {

namespace {

// Row-major rotation of a quaternion (w, x, y, z), normalised; a zero one is the identity
// (docs/splat.md, "Parameters of a Gaussian").
void rotation(const float* q, double r[9]) {
  double w = q[0], x = q[1], y = q[2], z = q[3];
  const double n = std::sqrt(w * w + x * x + y * y + z * z);
  if (!(n >= 1e-12) || !std::isfinite(n)) w = 1, x = y = z = 0;
  else w /= n, x /= n, y /= n, z /= n;
  const double m[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - w * z),     2 * (x * z + w * y),
                       2 * (x * y + w * z),     1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                       2 * (x * z - w * y),     2 * (y * z + w * x),     1 - 2 * (x * x + y * y)};
  std::copy(m, m + 9, r);
}

void check_stat(const Tensor& t, int64_t n, const char* what) {
  if (t.dtype() != DType::F32 || t.shape() != Shape{n})
    throw InputError(std::string("densify: ") + what + " must be f32[" + std::to_string(n) + "], got " + t.type().str());
}

}  // namespace

Tensor take_rows(const Tensor& t, const std::vector<int64_t>& from, const std::vector<uint8_t>& zero) {
  if (t.dtype() != DType::F32 || t.rank() < 1) throw InputError("take_rows: an f32 tensor of rows, got " + t.type().str());
  const Tensor c = t.contiguous();
  const int64_t n = c.shape()[0], row = n ? c.numel() / n : 0;
  Shape shape = c.shape();
  shape[0] = int64_t(from.size());
  Tensor r = Tensor::zeros(DType::F32, shape);
  for (size_t j = 0; j < from.size(); ++j) {
    if (from[j] < 0 || from[j] >= n) throw InputError("take_rows: row " + std::to_string(from[j]) + " of " + std::to_string(n));
    if (zero[j]) continue;
    std::copy_n(c.data<float>() + from[j] * row, row, r.data<float>() + int64_t(j) * row);
  }
  return r;
}

Densified densify(const io::SplatScene& scene, const Tensor& grad_sum, const Tensor& seen, const Tensor& max_radius,
                  const DensifyOptions& o, std::mt19937_64& rng) {
  const int64_t n = scene.size();
  check_stat(grad_sum, n, "the gradient sums");
  check_stat(seen, n, "the view counts");
  check_stat(max_radius, n, "the largest radii");
  const Tensor means = scene.means.contiguous(), ls = scene.log_scales.contiguous(), quats = scene.quats.contiguous();
  const Tensor logits = scene.opacity_logits.contiguous();
  const float* g = grad_sum.contiguous().data<float>();
  const float* v = seen.contiguous().data<float>();
  const float* rad = max_radius.contiguous().data<float>();

  Densified d;
  d.stats.before = n;
  enum class Fate { Keep, Clone, Split };
  std::vector<Fate> fate(size_t(n), Fate::Keep);
  for (int64_t i = 0; i < n; ++i) {
    // In f32, as the statistics are: a mean exactly at the threshold passes.
    const float mean_grad = v[i] > 0 ? g[i] / v[i] : 0.0f;
    if (!(mean_grad >= float(o.grad_threshold))) continue;
    const float* s = ls.data<float>() + 3 * i;
    const double largest = std::exp(double(std::max({s[0], s[1], s[2]})));
    fate[size_t(i)] = largest <= o.percent_dense * o.extent ? Fate::Clone : Fate::Split;
  }

  // Candidates in the order of the result: kept (and cloned) originals, the clones, the split
  // copies (with their sampled means and reduced scales held aside).
  std::vector<int64_t> from;
  std::vector<uint8_t> fresh;
  std::vector<std::array<float, 6>> placed;  // per candidate: mean, log-scales (split copies only)
  for (int64_t i = 0; i < n; ++i)
    if (fate[size_t(i)] != Fate::Split) from.push_back(i), fresh.push_back(0), placed.push_back({});
  for (int64_t i = 0; i < n; ++i)
    if (fate[size_t(i)] == Fate::Clone) from.push_back(i), fresh.push_back(1), placed.push_back({}), ++d.stats.cloned;
  std::normal_distribution<double> normal;
  const double shrink = std::log(1.6);
  for (int64_t i = 0; i < n; ++i) {
    if (fate[size_t(i)] != Fate::Split) continue;
    ++d.stats.split;
    double r[9];
    rotation(quats.data<float>() + 4 * i, r);
    const float* m = means.data<float>() + 3 * i;
    const float* s = ls.data<float>() + 3 * i;
    for (int copy = 0; copy < 2; ++copy) {
      double z[3];
      for (int k = 0; k < 3; ++k) z[k] = std::exp(double(s[k])) * normal(rng);
      std::array<float, 6> p{};
      for (int k = 0; k < 3; ++k) {
        p[size_t(k)] = float(double(m[k]) + r[3 * k] * z[0] + r[3 * k + 1] * z[1] + r[3 * k + 2] * z[2]);
        p[size_t(3 + k)] = float(double(s[k]) - shrink);
      }
      from.push_back(i), fresh.push_back(2), placed.push_back(p);
    }
  }

  // Pruning, over every candidate: too faint, or (when asked) too large on screen or in the world.
  std::vector<size_t> keep;
  for (size_t c = 0; c < from.size(); ++c) {
    const int64_t i = from[c];
    const double opacity = 1 / (1 + std::exp(-double(logits.data<float>()[i])));
    const float* s = fresh[c] == 2 ? placed[c].data() + 3 : ls.data<float>() + 3 * i;
    const double largest = std::exp(double(std::max({s[0], s[1], s[2]})));
    bool prune = !(opacity >= o.min_opacity);
    if (o.max_screen_radius > 0 && fresh[c] != 2 && double(rad[i]) > o.max_screen_radius) prune = true;
    if (o.max_world_scale > 0 && largest > o.max_world_scale * o.extent) prune = true;
    if (prune) ++d.stats.pruned;
    else keep.push_back(c);
  }

  const int64_t m = int64_t(keep.size()), k = scene.sh.shape()[1];
  d.scene = {Tensor::empty(DType::F32, {m, 3}), Tensor::empty(DType::F32, {m, 3}), Tensor::empty(DType::F32, {m, 4}),
             Tensor::empty(DType::F32, {m}), Tensor::empty(DType::F32, {m, k, 3})};
  const Tensor sh = scene.sh.contiguous();
  for (int64_t j = 0; j < m; ++j) {
    const size_t c = keep[size_t(j)];
    const int64_t i = from[c];
    const bool split = fresh[c] == 2;
    for (int q = 0; q < 3; ++q) {
      d.scene.means.data<float>()[3 * j + q] = split ? placed[c][size_t(q)] : means.data<float>()[3 * i + q];
      d.scene.log_scales.data<float>()[3 * j + q] = split ? placed[c][size_t(3 + q)] : ls.data<float>()[3 * i + q];
    }
    std::copy_n(quats.data<float>() + 4 * i, 4, d.scene.quats.data<float>() + 4 * j);
    d.scene.opacity_logits.data<float>()[j] = logits.data<float>()[i];
    std::copy_n(sh.data<float>() + 3 * k * i, 3 * k, d.scene.sh.data<float>() + 3 * k * j);
    d.from.push_back(i);
    d.fresh.push_back(fresh[c] ? 1 : 0);
  }
  d.stats.after = m;
  return d;
}

}  // namespace rlx::splat
