// Gaussian splatting on the reference device (docs/splat.md), in double whatever the
// dtype, one thread. splat_render: no tiles, no radix sort. Each pixel walks every visible Gaussian in
// depth order and keeps those whose tile rectangle holds the pixel's tile, which is what
// the tiled rasterizers compute by binning. The per-Gaussian and per-pixel arithmetic is
// ir/ops/splat_math.hpp's. The stage ops run splat_host.hpp's loops.
#include <algorithm>
#include <vector>

#include "devices/reference/access.hpp"
#include "ir/ops/splat_host.hpp"
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

// ---------------------------------------------------------------- the stage ops
// The loops of ir/ops/splat_host.hpp, in double and one thread, on copies of the inputs.

std::vector<int64_t> ints(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<int64_t> r(size_t(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) r[size_t(i)] = load_int(c, i);
  return r;
}
template <class V>
void put(const Tensor& out, const std::vector<V>& v) {
  for (size_t e = 0; e < v.size(); ++e) store(out, int64_t(e), v[e]);
}
std::vector<double> zeros(int64_t n) { return std::vector<double>(size_t(n), 0.0); }

splat::Camera camera_of(const ir::Node& n, const std::vector<double>& view) {
  const ir::Attrs& a = n.attrs;
  return splat::make_camera(a.get_float("fx"), a.get_float("fy"), a.get_float("cx"), a.get_float("cy"),
                            a.get_int("width"), a.get_int("height"), view.data());
}
splat::Camera image_of(const ir::Node& n) {
  splat::Camera c;
  c.width = n.attrs.get_int("width"), c.height = n.attrs.get_int("height");
  return c;
}
const splat::host::SerialExec kSerial;

void project_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::vector<double> m = doubles(in[0]), ls = doubles(in[1]), q = doubles(in[2]), o = doubles(in[3]);
  const int64_t count = in[0].shape()[0];
  std::vector<double> xy = zeros(2 * count), conic = zeros(3 * count), depth = zeros(count), opacity = zeros(count);
  std::vector<int64_t> radius(static_cast<size_t>(count));
  splat::host::project(kSerial, count, m.data(), ls.data(), q.data(), o.data(), camera_of(n, doubles(in[4])),
                       xy.data(), conic.data(), depth.data(), opacity.data(), radius.data());
  put(out[0], xy), put(out[1], conic), put(out[2], depth), put(out[3], opacity), put(out[4], radius);
}

void project_backward_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::vector<double> m = doubles(in[0]), ls = doubles(in[1]), q = doubles(in[2]), o = doubles(in[3]);
  const std::vector<double> gxy = doubles(in[5]), gc = doubles(in[6]), gd = doubles(in[7]), go = doubles(in[8]);
  const int64_t count = in[0].shape()[0];
  std::vector<double> g_m = zeros(3 * count), g_ls = zeros(3 * count), g_q = zeros(4 * count), g_o = zeros(count);
  splat::host::project_backward(kSerial, count, m.data(), ls.data(), q.data(), o.data(), camera_of(n, doubles(in[4])),
                                gxy.data(), gc.data(), gd.data(), go.data(), g_m.data(), g_ls.data(), g_q.data(),
                                g_o.data());
  put(out[0], g_m), put(out[1], g_ls), put(out[2], g_q), put(out[3], g_o);
}

// The camera centre is all splat_sh_to_rgb reads of the view matrix.
splat::Camera view_camera(const Tensor& view) {
  const std::vector<double> v = doubles(view);
  return splat::make_camera(1.0, 1.0, 0.0, 0.0, 1, 1, v.data());
}

void sh_kernel(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::vector<double> m = doubles(in[0]), sh = doubles(in[1]);
  const int64_t count = in[0].shape()[0];
  std::vector<double> rgb = zeros(3 * count);
  splat::host::sh_to_rgb(kSerial, count, int(in[1].shape()[1]), m.data(), sh.data(), view_camera(in[2]), rgb.data());
  put(out[0], rgb);
}

void sh_backward_kernel(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::vector<double> m = doubles(in[0]), sh = doubles(in[1]), g = doubles(in[3]);
  const int64_t count = in[0].shape()[0];
  std::vector<double> g_m = zeros(3 * count), g_sh = zeros(int64_t(sh.size()));
  splat::host::sh_to_rgb_backward(kSerial, count, int(in[1].shape()[1]), m.data(), sh.data(), view_camera(in[2]),
                                  g.data(), g_m.data(), g_sh.data());
  put(out[0], g_m), put(out[1], g_sh);
}

void tile_counts_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::vector<double> xy = doubles(in[0]);
  const std::vector<int64_t> radius = ints(in[1]);
  std::vector<int64_t> counts(radius.size());
  splat::host::tile_counts(kSerial, int64_t(radius.size()), xy.data(), radius.data(), image_of(n), counts.data());
  put(out[0], counts);
}

void tile_keys_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::vector<double> xy = doubles(in[0]), depth = doubles(in[1]);
  const std::vector<int64_t> radius = ints(in[2]), ends = ints(in[3]);
  const int64_t cap = n.attrs.get_int("capacity");
  std::vector<int64_t> keys(static_cast<size_t>(cap)), ids(static_cast<size_t>(cap));
  splat::host::tile_keys(kSerial, int64_t(radius.size()), xy.data(), depth.data(), radius.data(), ends.data(),
                         image_of(n), cap, keys.data(), ids.data());
  put(out[0], keys), put(out[1], ids);
}

void tile_ranges_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const std::vector<int64_t> keys = ints(in[0]);
  const splat::Camera cam = image_of(n);
  std::vector<int64_t> ranges(static_cast<size_t>(2 * cam.tiles_x() * cam.tiles_y()));
  splat::host::tile_ranges(kSerial, int64_t(keys.size()), keys.data(), cam.tiles_x() * cam.tiles_y(), ranges.data());
  put(out[0], ranges);
}

// splat_composite's inputs as splats and a checked list.
struct Composite {
  splat::Camera cam;
  std::vector<splat::Splat2D<double>> splats;
  std::vector<int64_t> list, ranges;
  std::vector<double> bg;
  Composite(const ir::Node& n, std::span<const Tensor> in, const char* op)
      : cam(image_of(n)), list(ints(in[5])), ranges(ints(in[6])), bg(doubles(in[7])) {
    const std::vector<double> xy = doubles(in[0]), conic = doubles(in[1]), opacity = doubles(in[2]),
                              rgb = doubles(in[3]), depth = doubles(in[4]);
    const int64_t count = in[0].shape()[0];
    splat::host::check_list(count, list.data(), int64_t(list.size()), ranges.data(), cam.tiles_x() * cam.tiles_y(), op);
    splats = splat::host::splats_of(kSerial, count, xy.data(), conic.data(), opacity.data(), rgb.data(), depth.data());
  }
};

void composite_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Composite c(n, in, "splat_composite");
  const int64_t pixels = c.cam.width * c.cam.height;
  std::vector<double> image = zeros(3 * pixels), alpha = zeros(pixels), depth = zeros(pixels);
  splat::host::composite_tiles(kSerial, c.cam, c.splats.data(), c.list.data(), c.ranges.data(), c.bg.data(),
                               image.data(), alpha.data(), depth.data());
  put(out[0], image), put(out[1], alpha), put(out[2], depth);
}

void composite_backward_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Composite c(n, in, "splat_composite_backward");
  const std::vector<double> gi = doubles(in[8]), ga = doubles(in[9]), gd = doubles(in[10]);
  const int64_t count = in[0].shape()[0];
  std::vector<splat::SplatGrad<double>> g;
  double g_bg[3];
  splat::host::composite_tiles_backward(kSerial, c.cam, count, c.splats.data(), c.list.data(), c.ranges.data(),
                                        c.bg.data(), gi.data(), ga.data(), gd.data(), g, g_bg);
  std::vector<double> gxy = zeros(2 * count), gc = zeros(3 * count), go = zeros(count), grgb = zeros(3 * count),
                      gdp = zeros(count);
  for (int64_t i = 0; i < count; ++i)
    splat::store_grad(g[size_t(i)], i, gxy.data(), gc.data(), go.data(), grgb.data(), gdp.data());
  put(out[0], gxy), put(out[1], gc), put(out[2], go), put(out[3], grgb), put(out[4], gdp);
  put(out[5], std::vector<double>(g_bg, g_bg + 3));
}

constexpr DTypeSet kSplatTypes = bit(DType::F32) | bit(DType::F64);

}  // namespace

void add_splat_kernels(KernelTable& t) {
  t.add({"splat_render", kSplatTypes, 0, render_kernel, {}});
  t.add({"splat_render_backward", kSplatTypes, 0, render_backward_kernel, {}});
  t.add({"splat_project", kSplatTypes, 0, project_kernel, {}});
  t.add({"splat_project_backward", kSplatTypes, 0, project_backward_kernel, {}});
  t.add({"splat_sh_to_rgb", kSplatTypes, 0, sh_kernel, {}});
  t.add({"splat_sh_to_rgb_backward", kSplatTypes, 0, sh_backward_kernel, {}});
  t.add({"splat_tile_counts", kSplatTypes, 0, tile_counts_kernel, {}});
  t.add({"splat_tile_keys", kSplatTypes, 0, tile_keys_kernel, {}});
  t.add({"splat_tile_ranges", bit(DType::I64), 0, tile_ranges_kernel, {}});
  t.add({"splat_composite", kSplatTypes, 0, composite_kernel, {}});
  t.add({"splat_composite_backward", kSplatTypes, 0, composite_backward_kernel, {}});
}

}  // namespace rlx::reference
