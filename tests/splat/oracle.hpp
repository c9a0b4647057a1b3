// The test oracle for splat_render (docs/splat.md), written plainly and apart from the
// kernels' shared arithmetic (src/ir/ops/splat_math.hpp): double precision, the covariance
// by explicit 3 x 3 matrix products, every pixel against every Gaussian in depth order,
// no tiles (a Gaussian counts for a pixel when its tile rectangle holds the pixel's tile).
// Also the random scenes the splat tests and the op suite's row draw.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace rlx::test::splat_oracle {

struct Scene {
  int64_t n = 0, k = 1;  // Gaussians, SH coefficients per channel
  std::vector<double> means, log_scales, quats, opacity_logits, sh;  // [n,3] [n,3] [n,4] [n] [n,k,3]
  std::array<double, 16> view{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::array<double, 3> background{0, 0, 0};
  int64_t width = 1, height = 1;
  double fx = 1, fy = 1, cx = 0, cy = 0;
};

struct Image {
  std::vector<double> rgb, alpha, depth;  // [h,w,3] [h,w] [h,w]
};

using M3 = std::array<std::array<double, 3>, 3>;

inline M3 mul(const M3& a, const M3& b) {
  M3 r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) r[i][j] += a[i][k] * b[k][j];
  return r;
}
inline M3 transposed(const M3& a) {
  M3 r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r[i][j] = a[j][i];
  return r;
}

inline std::vector<double> sh_basis(double x, double y, double z) {
  const double xx = x * x, yy = y * y, zz = z * z;
  return {0.28209479177387814,
          -0.4886025119029199 * y,
          0.4886025119029199 * z,
          -0.4886025119029199 * x,
          1.0925484305920792 * x * y,
          -1.0925484305920792 * y * z,
          0.31539156525252005 * (2 * zz - xx - yy),
          -1.0925484305920792 * x * z,
          0.5462742152960396 * (xx - yy),
          -0.5900435899266435 * y * (3 * xx - yy),
          2.890611442640554 * x * y * z,
          -0.4570457994644658 * y * (4 * zz - xx - yy),
          0.3731763325901154 * z * (2 * zz - 3 * xx - 3 * yy),
          -0.4570457994644658 * x * (4 * zz - xx - yy),
          1.445305721320277 * z * (xx - yy),
          -0.5900435899266435 * x * (xx - 3 * yy)};
}

inline Image render(const Scene& s) {
  struct G {
    double u, v, a, b, c, opacity, depth;
    double rgb[3];
    int64_t x0, x1, y0, y1, index;
    float key;
  };
  M3 wr{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) wr[i][j] = s.view[size_t(4 * i + j)];
  const double t[3] = {s.view[3], s.view[7], s.view[11]};
  const int64_t tiles_x = (s.width + 15) / 16, tiles_y = (s.height + 15) / 16;
  std::vector<G> gs;
  for (int64_t n = 0; n < s.n; ++n) {
    const double* m = &s.means[size_t(3 * n)];
    // Any non-finite parameter culls the Gaussian, but a log-scale of -inf (scale 0).
    bool finite = std::isfinite(s.opacity_logits[size_t(n)]);
    for (int i = 0; i < 3; ++i) finite &= std::isfinite(m[i]) && s.log_scales[size_t(3 * n + i)] < INFINITY;
    for (int i = 0; i < 4; ++i) finite &= std::isfinite(s.quats[size_t(4 * n + i)]);
    for (int64_t i = 0; i < 3 * s.k; ++i) finite &= std::isfinite(s.sh[size_t(3 * s.k * n + i)]);
    if (!finite) continue;
    double p[3];
    for (int i = 0; i < 3; ++i) p[i] = wr[i][0] * m[0] + wr[i][1] * m[1] + wr[i][2] * m[2] + t[i];
    if (!(p[2] > 0.2)) continue;
    double q[4];
    for (int i = 0; i < 4; ++i) q[i] = s.quats[size_t(4 * n + i)];
    const double qn = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    if (qn < 1e-12) q[0] = 1, q[1] = q[2] = q[3] = 0;
    else for (double& e : q) e /= qn;
    const double w = q[0], x = q[1], y = q[2], z = q[3];
    const M3 rot{{{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
                  {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
                  {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}}};
    M3 sc{};
    for (int i = 0; i < 3; ++i) sc[i][i] = std::exp(2 * s.log_scales[size_t(3 * n + i)]);
    const M3 sigma = mul(mul(rot, sc), transposed(rot));
    const M3 cam = mul(mul(wr, sigma), transposed(wr));
    const double j[2][3] = {{s.fx / p[2], 0, -s.fx * p[0] / (p[2] * p[2])}, {0, s.fy / p[2], -s.fy * p[1] / (p[2] * p[2])}};
    double cov[2][2] = {};
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c)
        for (int k = 0; k < 3; ++k)
          for (int l = 0; l < 3; ++l) cov[r][c] += j[r][k] * cam[k][l] * j[c][l];
    cov[0][0] += 0.3, cov[1][1] += 0.3;
    const double det = cov[0][0] * cov[1][1] - cov[0][1] * cov[0][1];
    if (!(det > 0) || !(det <= 1e30)) continue;
    G g{};
    g.u = s.fx * p[0] / p[2] + s.cx;
    g.v = s.fy * p[1] / p[2] + s.cy;
    g.a = cov[1][1] / det, g.b = -cov[0][1] / det, g.c = cov[0][0] / det;
    const double mid = 0.5 * (cov[0][0] + cov[1][1]);
    const double radius = std::ceil(3 * std::sqrt(mid + std::sqrt(std::max(0.1, mid * mid - det))));
    auto tile = [](double e, int64_t hi) { return int64_t(std::clamp(std::floor(e), 0.0, double(hi))); };
    g.x0 = tile((g.u - radius) / 16, tiles_x), g.x1 = tile((g.u + radius) / 16 + 1, tiles_x);
    g.y0 = tile((g.v - radius) / 16, tiles_y), g.y1 = tile((g.v + radius) / 16 + 1, tiles_y);
    if (g.x0 >= g.x1 || g.y0 >= g.y1) continue;
    g.opacity = 1 / (1 + std::exp(-s.opacity_logits[size_t(n)]));
    g.depth = p[2];
    g.index = n;
    g.key = float(p[2]);
    // Colour along camera centre -> mean; the centre is -R^T t.
    double d[3], len = 0;
    for (int i = 0; i < 3; ++i) {
      d[i] = m[i] + (wr[0][i] * t[0] + wr[1][i] * t[1] + wr[2][i] * t[2]);
      len += d[i] * d[i];
    }
    len = std::sqrt(len);
    const std::vector<double> basis = sh_basis(d[0] / len, d[1] / len, d[2] / len);
    for (int ch = 0; ch < 3; ++ch) {
      double v = 0.5;
      for (int64_t k = 0; k < s.k; ++k) v += basis[size_t(k)] * s.sh[size_t((n * s.k + k) * 3 + ch)];
      g.rgb[ch] = std::max(v, 0.0);
    }
    gs.push_back(g);
  }
  std::stable_sort(gs.begin(), gs.end(), [](const G& a, const G& b) { return a.key < b.key; });

  Image out;
  out.rgb.resize(size_t(3 * s.width * s.height));
  out.alpha.resize(size_t(s.width * s.height));
  out.depth.resize(size_t(s.width * s.height));
  for (int64_t i = 0; i < s.height; ++i)
    for (int64_t jx = 0; jx < s.width; ++jx) {
      const double px = jx + 0.5, py = i + 0.5;
      const int64_t tx = jx / 16, ty = i / 16;
      double T = 1, rgb[3] = {0, 0, 0}, wz = 0, ws = 0;
      for (const G& g : gs) {
        if (tx < g.x0 || tx >= g.x1 || ty < g.y0 || ty >= g.y1) continue;
        const double dx = g.u - px, dy = g.v - py;
        const double power = 0.5 * (g.a * dx * dx + g.c * dy * dy) + g.b * dx * dy;
        const double alpha = std::min(0.99, g.opacity * std::exp(-power));
        if (alpha < 1.0 / 255) continue;
        if (T * (1 - alpha) < 1e-4) break;
        for (int ch = 0; ch < 3; ++ch) rgb[ch] += alpha * T * g.rgb[ch];
        wz += alpha * T * g.depth;
        ws += alpha * T;
        T *= 1 - alpha;
      }
      const size_t p = size_t(i * s.width + jx);
      for (int ch = 0; ch < 3; ++ch) out.rgb[3 * p + size_t(ch)] = rgb[ch] + T * s.background[size_t(ch)];
      out.alpha[p] = 1 - T;
      out.depth[p] = ws > 0 ? wz / ws : 0;
    }
  return out;
}

// A scene seen by a random camera: Gaussians placed in camera space (on screen or a little
// off it, depth 1..8, a few pixels wide), then moved to the world.
inline Scene random_scene(std::mt19937_64& rng, int64_t n, int64_t k, int64_t w, int64_t h, double logit_lo = -2,
                   double logit_hi = 3) {
  std::uniform_real_distribution<double> u01(0, 1);
  std::normal_distribution<double> normal;
  auto uni = [&](double a, double b) { return a + (b - a) * u01(rng); };
  Scene s;
  s.n = n, s.k = k, s.width = w, s.height = h;
  s.fx = uni(0.8, 1.2) * double(w), s.fy = uni(0.8, 1.2) * double(w);
  s.cx = uni(0.4, 0.6) * double(w), s.cy = uni(0.4, 0.6) * double(h);
  double q[4], qn = 0;
  for (double& e : q) e = normal(rng), qn += e * e;
  for (double& e : q) e /= std::sqrt(qn);
  const double a = q[0], b = q[1], c = q[2], d = q[3];
  const double r[9] = {1 - 2 * (c * c + d * d), 2 * (b * c - a * d), 2 * (b * d + a * c),
                       2 * (b * c + a * d), 1 - 2 * (b * b + d * d), 2 * (c * d - a * b),
                       2 * (b * d - a * c), 2 * (c * d + a * b), 1 - 2 * (b * b + c * c)};
  const double t[3] = {uni(-2, 2), uni(-2, 2), uni(-2, 2)};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) s.view[size_t(4 * i + j)] = r[3 * i + j];
    s.view[size_t(4 * i + 3)] = t[i];
  }
  for (int64_t g = 0; g < n; ++g) {
    const double z = uni(1, 8), px = uni(-8, double(w) + 8), py = uni(-8, double(h) + 8);
    const double p[3] = {(px - s.cx) * z / s.fx, (py - s.cy) * z / s.fy, z};
    for (int i = 0; i < 3; ++i)  // world = R^T (p - t)
      s.means.push_back(r[i] * (p[0] - t[0]) + r[3 + i] * (p[1] - t[1]) + r[6 + i] * (p[2] - t[2]));
    const double size = uni(0.7, 5) * z / s.fx;
    for (int i = 0; i < 3; ++i) s.log_scales.push_back(std::log(size) + uni(-0.7, 0.7));
    for (int i = 0; i < 4; ++i) s.quats.push_back(normal(rng));
    s.opacity_logits.push_back(uni(logit_lo, logit_hi));
    for (int64_t e = 0; e < 3 * k; ++e) s.sh.push_back(e < 3 ? uni(-1, 1.5) : uni(-0.5, 0.5));
  }
  for (double& e : s.background) e = uni(0, 1);
  return s;
}

}  // namespace rlx::test::splat_oracle
