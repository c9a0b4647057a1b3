// Gaussian splatting on the reference device (docs/splat.md), in double whatever the
// dtype: no tiles, no radix sort, one thread. Each pixel walks every visible Gaussian in
// depth order and keeps those whose tile rectangle holds the pixel's tile, which is what
// the tiled rasterizers compute by binning. The per-Gaussian and per-pixel arithmetic is
// ir/ops/splat_math.hpp's.
#include <algorithm>
#include <vector>

#include "devices/reference/access.hpp"
#include "ir/ops/splat_math.hpp"

namespace rlx::reference {
namespace {

std::vector<double> doubles(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<double> r(size_t(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) r[size_t(i)] = load_real(c, i);
  return r;
}

// The inputs of splat_render as doubles, and the visible Gaussians in compositing order.
struct Render {
  std::vector<double> means, log_scales, quats, ologit, sh, view, bg;
  splat::Scene<double> scene;
  splat::Camera cam;
  std::vector<splat::Splat2D<double>> splats;
  std::vector<splat::TileRect> rects;
  std::vector<int64_t> ids;

  Render(const ir::Node& n, std::span<const Tensor> in)
      : means(doubles(in[0])), log_scales(doubles(in[1])), quats(doubles(in[2])), ologit(doubles(in[3])),
        sh(doubles(in[4])), view(doubles(in[5])), bg(doubles(in[6])) {
    const ir::Attrs& a = n.attrs;
    cam = splat::make_camera(a.get_float("fx"), a.get_float("fy"), a.get_float("cx"), a.get_float("cy"),
                             a.get_int("width"), a.get_int("height"), view.data());
    scene = {means.data(), log_scales.data(), quats.data(), ologit.data(), sh.data(), in[0].shape()[0],
             int(in[4].shape()[1])};
    struct Item {
      float depth;
      int64_t id;
      splat::Splat2D<double> s;
      splat::TileRect r;
    };
    std::vector<Item> items;
    for (int64_t i = 0; i < scene.count; ++i) {
      Item it{0, i, {}, {}};
      if (!splat::prepare(scene, i, cam, it.s, it.r)) continue;
      it.depth = float(it.s.depth);
      items.push_back(it);
    }
    std::stable_sort(items.begin(), items.end(), [](const Item& x, const Item& y) { return x.depth < y.depth; });
    for (const Item& it : items) splats.push_back(it.s), rects.push_back(it.r), ids.push_back(it.id);
  }

  // The positions (into splats) of those that reach pixel (i, j)'s tile, front to back.
  std::vector<size_t> reaching(int64_t i, int64_t j) const {
    std::vector<size_t> r;
    for (size_t k = 0; k < splats.size(); ++k)
      if (rects[k].contains(j / splat::kTile, i / splat::kTile)) r.push_back(k);
    return r;
  }
  splat::PixelOut<double> pixel(const std::vector<size_t>& list, int64_t i, int64_t j) const {
    return splat::composite(j + 0.5, i + 0.5, int64_t(list.size()),
                            [&](int64_t k) -> const splat::Splat2D<double>& { return splats[list[size_t(k)]]; });
  }
};

void render_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Render r(n, in);
  for (int64_t i = 0; i < r.cam.height; ++i)
    for (int64_t j = 0; j < r.cam.width; ++j) {
      const splat::PixelOut<double> o = r.pixel(r.reaching(i, j), i, j);
      const int64_t p = i * r.cam.width + j;
      for (int ch = 0; ch < 3; ++ch) store(out[0], 3 * p + ch, o.rgb[ch] + o.transmittance * r.bg[size_t(ch)]);
      store(out[1], p, 1.0 - o.transmittance);
      store(out[2], p, splat::expected_depth(o));
    }
}

void render_backward_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Render r(n, in);
  const std::vector<double> g_image = doubles(in[7]), g_alpha = doubles(in[8]), g_depth = doubles(in[9]);
  std::vector<splat::SplatGrad<double>> gs(r.splats.size());
  double g_bg[3] = {0, 0, 0};
  for (int64_t i = 0; i < r.cam.height; ++i)
    for (int64_t j = 0; j < r.cam.width; ++j) {
      const std::vector<size_t> list = r.reaching(i, j);
      const splat::PixelOut<double> o = r.pixel(list, i, j);
      const size_t p = size_t(i * r.cam.width + j);
      const double* gi = g_image.data() + 3 * p;
      for (int ch = 0; ch < 3; ++ch) g_bg[ch] += gi[ch] * o.transmittance;
      splat::composite_backward(
          j + 0.5, i + 0.5, o, r.bg.data(), gi, g_alpha[p], g_depth[p],
          [&](int64_t k) -> const splat::Splat2D<double>& { return r.splats[list[size_t(k)]]; },
          [&](int64_t k, const splat::SplatGrad<double>& g) {
            splat::SplatGrad<double>& acc = gs[list[size_t(k)]];
            acc.u += g.u, acc.v += g.v, acc.a += g.a, acc.b += g.b, acc.c += g.c;
            acc.opacity += g.opacity, acc.depth += g.depth;
            for (int ch = 0; ch < 3; ++ch) acc.rgb[ch] += g.rgb[ch];
          });
    }
  const int64_t count = r.scene.count, kc = r.scene.k_count;
  std::vector<double> gm(size_t(3 * count), 0.0), gls(size_t(3 * count), 0.0), gq(size_t(4 * count), 0.0),
      go(size_t(count), 0.0), gsh(size_t(3 * kc * count), 0.0);
  for (size_t k = 0; k < r.splats.size(); ++k) {
    const int64_t id = r.ids[k];
    splat::gaussian_backward(r.scene, id, r.cam, gs[k], &gm[size_t(3 * id)], &gls[size_t(3 * id)],
                             &gq[size_t(4 * id)], &go[size_t(id)], &gsh[size_t(3 * kc * id)]);
  }
  const std::vector<double>* results[] = {&gm, &gls, &gq, &go, &gsh};
  for (size_t k = 0; k < 5; ++k)
    for (size_t e = 0; e < results[k]->size(); ++e) store(out[k], int64_t(e), (*results[k])[e]);
  for (int ch = 0; ch < 3; ++ch) store(out[5], ch, g_bg[ch]);
}

constexpr DTypeSet kSplatTypes = bit(DType::F32) | bit(DType::F64);

}  // namespace

void add_splat_kernels(KernelTable& t) {
  t.add({"splat_render", kSplatTypes, 0, render_kernel, {}});
  t.add({"splat_render_backward", kSplatTypes, 0, render_backward_kernel, {}});
}

}  // namespace rlx::reference
