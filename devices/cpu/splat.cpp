// Gaussian splatting on the cpu device (docs/splat.md), in the inputs' dtype: the tiled
// pipeline — projection and SH colour per Gaussian (threaded), one (tile << 32 | f32 depth
// bits) key per Gaussian and tile it reaches, a stable LSD radix sort of the keys, each
// tile's range of the sorted list, then tiles composited in parallel, front to back. The
// backward reruns the binning, walks each pixel back to front into per-thread gradient
// buffers over a fixed split of the tiles, sums them in thread order (the result does not
// depend on scheduling), then takes each Gaussian's cotangents through its projection
// and colour. The arithmetic is ir/ops/splat_math.hpp's.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/ops/splat_math.hpp"

namespace rlx::cpu {
namespace {

// Stable LSD radix sort of (key, id) pairs by the low `bits` bits of key, 8 bits a pass.
void radix_sort(std::vector<uint64_t>& keys, std::vector<int32_t>& ids, int bits) {
  const size_t n = keys.size();
  std::vector<uint64_t> k2(n);
  std::vector<int32_t> i2(n);
  for (int shift = 0; shift < bits; shift += 8) {
    size_t count[257] = {};
    for (uint64_t k : keys) ++count[((k >> shift) & 0xFF) + 1];
    bool one_bucket = false;
    for (int d = 1; d <= 256; ++d) one_bucket |= count[d] == n;
    if (one_bucket) continue;
    for (int d = 1; d <= 256; ++d) count[d] += count[d - 1];
    for (size_t i = 0; i < n; ++i) {
      const size_t at = count[(keys[i] >> shift) & 0xFF]++;
      k2[at] = keys[i], i2[at] = ids[i];
    }
    keys.swap(k2), ids.swap(i2);
  }
}

template <class T>
struct Binned {
  splat::Scene<T> scene;
  splat::Camera cam;
  std::vector<T> view;
  std::vector<splat::Splat2D<T>> splats;  // per Gaussian (valid where visible)
  std::vector<uint8_t> visible;
  std::vector<int32_t> ids;        // Gaussians by (tile, depth)
  std::vector<int64_t> tile_start;  // tiles + 1 offsets into ids
  std::vector<Tensor> held;         // contiguous copies of the inputs

  Binned(const ir::Node& n, std::span<const Tensor> in) {
    for (size_t k = 0; k < 7; ++k) held.push_back(in[k].contiguous());
    const ir::Attrs& a = n.attrs;
    cam = splat::make_camera(a.get_float("fx"), a.get_float("fy"), a.get_float("cx"), a.get_float("cy"),
                             a.get_int("width"), a.get_int("height"), held[5].data<T>());
    scene = {held[0].data<T>(), held[1].data<T>(), held[2].data<T>(), held[3].data<T>(), held[4].data<T>(),
             in[0].shape()[0], int(in[4].shape()[1])};
    const int64_t count = scene.count;
    if (count > INT32_MAX) throw InputError("splat_render on cpu: at most 2^31 - 1 Gaussians, got " + std::to_string(count));
    splats.resize(size_t(count));
    visible.assign(size_t(count), 0);
    std::vector<splat::TileRect> rects(static_cast<size_t>(count));
    parallel_for(count, 256, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) visible[size_t(i)] = splat::prepare(scene, i, cam, splats[size_t(i)], rects[size_t(i)]);
    });
    std::vector<int64_t> offset(size_t(count) + 1, 0);
    for (int64_t i = 0; i < count; ++i) {
      const splat::TileRect& r = rects[size_t(i)];
      offset[size_t(i) + 1] = offset[size_t(i)] + (visible[size_t(i)] ? int64_t(r.x1 - r.x0) * (r.y1 - r.y0) : 0);
    }
    const int64_t pairs = offset[size_t(count)];
    std::vector<uint64_t> keys(static_cast<size_t>(pairs));
    ids.resize(size_t(pairs));
    const int64_t tx = cam.tiles_x(), tiles = tx * cam.tiles_y();
    parallel_for(count, 256, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (!visible[size_t(i)]) continue;
        const splat::TileRect& r = rects[size_t(i)];
        const float depth = float(splats[size_t(i)].depth);
        uint32_t bits;
        std::memcpy(&bits, &depth, 4);  // depth > 0.2: the bits order as the values
        int64_t at = offset[size_t(i)];
        for (int32_t y = r.y0; y < r.y1; ++y)
          for (int32_t x = r.x0; x < r.x1; ++x, ++at) {
            keys[size_t(at)] = uint64_t(y * tx + x) << 32 | bits;
            ids[size_t(at)] = int32_t(i);
          }
      }
    });
    int tile_bits = 0;
    while ((int64_t(1) << tile_bits) < tiles) ++tile_bits;
    radix_sort(keys, ids, 32 + tile_bits);
    tile_start.assign(size_t(tiles) + 1, pairs);
    for (int64_t k = pairs - 1; k >= 0; --k) tile_start[size_t(keys[size_t(k)] >> 32)] = k;
    for (int64_t t = tiles - 1; t >= 0; --t) tile_start[size_t(t)] = std::min(tile_start[size_t(t)], tile_start[size_t(t) + 1]);
  }
  int64_t tiles() const { return int64_t(tile_start.size()) - 1; }

  // f(i, j, pixel out, list getter, list length) for every pixel of tile t.
  template <class F>
  void for_pixels(int64_t t, F f) const {
    const int64_t tx = cam.tiles_x(), x0 = (t % tx) * splat::kTile, y0 = (t / tx) * splat::kTile;
    const int64_t b = tile_start[size_t(t)], len = tile_start[size_t(t) + 1] - b;
    auto get = [&](int64_t k) -> const splat::Splat2D<T>& { return splats[size_t(ids[size_t(b + k)])]; };
    for (int64_t i = y0; i < std::min(y0 + splat::kTile, cam.height); ++i)
      for (int64_t j = x0; j < std::min(x0 + splat::kTile, cam.width); ++j) {
        const T px = T(j) + T(0.5), py = T(i) + T(0.5);
        f(i, j, px, py, splat::composite(px, py, len, get), get, b);
      }
  }
};

template <class T>
void render(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Binned<T> s(n, in);
  const T* bg = s.held[6].template data<T>();
  T *image = out[0].data<T>(), *alpha = out[1].data<T>(), *depth = out[2].data<T>();
  parallel_for(s.tiles(), 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      s.for_pixels(t, [&](int64_t i, int64_t j, T, T, const splat::PixelOut<T>& o, auto&, int64_t) {
        const int64_t p = i * s.cam.width + j;
        for (int ch = 0; ch < 3; ++ch) image[3 * p + ch] = o.rgb[ch] + o.transmittance * bg[ch];
        alpha[p] = T(1) - o.transmittance;
        depth[p] = splat::expected_depth(o);
      });
  });
}

template <class T>
void render_backward(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Binned<T> s(n, in);
  const Tensor gi = in[7].contiguous(), ga = in[8].contiguous(), gd = in[9].contiguous();
  const T *g_image = gi.data<T>(), *g_alpha = ga.data<T>(), *g_depth = gd.data<T>();
  const T* bg = s.held[6].template data<T>();
  const int64_t count = s.scene.count, tiles = s.tiles();
  // Per-thread cotangents of every Gaussian's screen parameters and of the background.
  const int nt = std::max(1, int(std::min<int64_t>(num_threads(), tiles)));
  std::vector<std::vector<splat::SplatGrad<T>>> part(static_cast<size_t>(nt),
                                                    std::vector<splat::SplatGrad<T>>(static_cast<size_t>(count)));
  std::vector<std::array<T, 3>> part_bg(size_t(nt), {T(0), T(0), T(0)});
  ThreadPool::instance().run(nt, [&](int th, int nth) {
    auto& acc = part[size_t(th)];
    for (int64_t t = tiles * th / nth; t < tiles * (th + 1) / nth; ++t)
      s.for_pixels(t, [&](int64_t i, int64_t j, T px, T py, const splat::PixelOut<T>& o, auto& get, int64_t b) {
        const int64_t p = i * s.cam.width + j;
        for (int ch = 0; ch < 3; ++ch) part_bg[size_t(th)][size_t(ch)] += g_image[3 * p + ch] * o.transmittance;
        splat::composite_backward(px, py, o, bg, g_image + 3 * p, g_alpha[p], g_depth[p], get,
                                  [&](int64_t k, const splat::SplatGrad<T>& g) {
                                    splat::SplatGrad<T>& a = acc[size_t(s.ids[size_t(b + k)])];
                                    a.u += g.u, a.v += g.v, a.a += g.a, a.b += g.b, a.c += g.c;
                                    a.opacity += g.opacity, a.depth += g.depth;
                                    for (int ch = 0; ch < 3; ++ch) a.rgb[ch] += g.rgb[ch];
                                  });
      });
  });
  for (Tensor& o : out) std::memset(o.raw(), 0, o.nbytes());
  const int kc = s.scene.k_count;
  parallel_for(count, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (!s.visible[size_t(i)]) continue;
      splat::SplatGrad<T> g = part[0][size_t(i)];
      for (int th = 1; th < nt; ++th) {
        const splat::SplatGrad<T>& h = part[size_t(th)][size_t(i)];
        g.u += h.u, g.v += h.v, g.a += h.a, g.b += h.b, g.c += h.c, g.opacity += h.opacity, g.depth += h.depth;
        for (int ch = 0; ch < 3; ++ch) g.rgb[ch] += h.rgb[ch];
      }
      splat::gaussian_backward(s.scene, i, s.cam, g, out[0].data<T>() + 3 * i, out[1].data<T>() + 3 * i,
                               out[2].data<T>() + 4 * i, out[3].data<T>() + i, out[4].data<T>() + 3 * kc * i);
    }
  });
  for (int th = 0; th < nt; ++th)
    for (int ch = 0; ch < 3; ++ch) out[5].data<T>()[ch] += part_bg[size_t(th)][size_t(ch)];
}

template <template <class> class F>
KernelFn by_dtype() {
  return [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    if (in[0].dtype() == DType::F64) return F<double>::run(n, in, out);
    return F<float>::run(n, in, out);
  };
}
template <class T>
struct Render {
  static void run(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) { render<T>(n, in, out); }
};
template <class T>
struct RenderBackward {
  static void run(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    render_backward<T>(n, in, out);
  }
};

}  // namespace

void add_splat_kernels(KernelTable& t) {
  const DTypeSet types = bit(DType::F32) | bit(DType::F64);
  t.add({"splat_render", types, 0, by_dtype<Render>(), {}});
  t.add({"splat_render_backward", types, 0, by_dtype<RenderBackward>(), {}});
}

}  // namespace rlx::cpu
