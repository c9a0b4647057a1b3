// The host loops of the splat stage ops (docs/splat.md, "The stages as ops"), written once
// for the reference device (in double, one thread) and the cpu device (in the dtype,
// threaded): each loop calls the per-Gaussian, per-entry or per-pixel function of
// splat_math.hpp, and an Exec says how the loop runs. Exec provides
//   for_range(n, grain, f(begin, end))  -- f over a split of [0, n), in any order;
//   threads(work)                       -- how many buffers run() will use for `work` items;
//   run(nt, f(th, nt))                  -- f for th = 0..nt-1, at once or in turn.
// The cpu device's fused splat_render uses the compositing loops too. Internal to kernels.
#pragma once
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ir/ops/splat_math.hpp"

namespace rlx::splat::host {

struct SerialExec {
  template <class F>
  void for_range(int64_t n, int64_t, F&& f) const {
    if (n > 0) f(int64_t(0), n);
  }
  int threads(int64_t) const { return 1; }
  template <class F>
  void run(int, F&& f) const {
    f(0, 1);
  }
};

template <class T, class Exec>
void project(const Exec& ex, int64_t n, const T* means, const T* log_scales, const T* quats, const T* ologit,
             const Camera& cam, T* xy, T* conic, T* depth, T* opacity, int64_t* radius) {
  ex.for_range(n, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      project_stage(means + 3 * i, log_scales + 3 * i, quats + 4 * i, ologit[i], cam, xy + 2 * i, conic + 3 * i,
                    depth + i, opacity + i, radius + i);
  });
}

template <class T, class Exec>
void project_backward(const Exec& ex, int64_t n, const T* means, const T* log_scales, const T* quats,
                      const T* ologit, const Camera& cam, const T* g_xy, const T* g_conic, const T* g_depth,
                      const T* g_opacity, T* g_means, T* g_log_scales, T* g_quats, T* g_ologit) {
  ex.for_range(n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      project_stage_backward(means + 3 * i, log_scales + 3 * i, quats + 4 * i, ologit[i], cam, g_xy + 2 * i,
                             g_conic + 3 * i, g_depth[i], g_opacity[i], g_means + 3 * i, g_log_scales + 3 * i,
                             g_quats + 4 * i, g_ologit + i);
  });
}

template <class T, class Exec>
void sh_to_rgb(const Exec& ex, int64_t n, int k_count, const T* means, const T* sh, const Camera& cam, T* rgb) {
  ex.for_range(n, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sh_stage(k_count, means + 3 * i, sh + int64_t(3) * k_count * i, cam, rgb + 3 * i);
  });
}

template <class T, class Exec>
void sh_to_rgb_backward(const Exec& ex, int64_t n, int k_count, const T* means, const T* sh, const Camera& cam,
                        const T* g_rgb, T* g_means, T* g_sh) {
  ex.for_range(n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      sh_stage_backward(k_count, means + 3 * i, sh + int64_t(3) * k_count * i, cam, g_rgb + 3 * i, g_means + 3 * i,
                        g_sh + int64_t(3) * k_count * i);
  });
}

template <class T, class Exec>
void tile_counts(const Exec& ex, int64_t n, const T* xy, const int64_t* radius, const Camera& cam, int64_t* counts) {
  ex.for_range(n, 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) counts[i] = rect_area(stage_rect(xy[2 * i], xy[2 * i + 1], radius[i], cam));
  });
}

// The list's length from the inclusive offsets `ends` (a cumsum of the counts); throws when
// they are not the counts' running sum or exceed the capacity.
template <class T>
int64_t check_ends(int64_t n, const T* xy, const int64_t* radius, const int64_t* ends, const Camera& cam,
                   int64_t capacity) {
  int64_t prev = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t count = rect_area(stage_rect(xy[2 * i], xy[2 * i + 1], radius[i], cam));
    if (ends[i] - count != prev)
      throw InputError("splat_tile_keys: offsets[" + std::to_string(i) + "] = " + std::to_string(ends[i]) +
                       " is not the running sum of the tile counts (expected " + std::to_string(prev + count) +
                       "; pass cumsum(splat_tile_counts(...)))");
    prev = ends[i];
  }
  if (prev > capacity)
    throw InputError("splat_tile_keys: the scene has " + std::to_string(prev) +
                     " (Gaussian, tile) intersections, more than the capacity " + std::to_string(capacity) +
                     "; give the render (splat_render's capacity attribute, or render_staged's) a capacity of at least " +
                     std::to_string(prev));
  return prev;
}

template <class T, class Exec>
void tile_keys(const Exec& ex, int64_t n, const T* xy, const T* depth, const int64_t* radius, const int64_t* ends,
               const Camera& cam, int64_t capacity, int64_t* keys, int64_t* ids) {
  const int64_t total = check_ends(n, xy, radius, ends, cam, capacity);
  const int64_t tx = cam.tiles_x();
  ex.for_range(n, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const TileRect r = stage_rect(xy[2 * i], xy[2 * i + 1], radius[i], cam);
      const int64_t at = ends[i] - rect_area(r);
      for_tile_keys(r, tx, float(depth[i]), [&](int64_t k, uint64_t key) {
        keys[at + k] = int64_t(key);
        ids[at + k] = i;
      });
    }
  });
  std::fill(keys + total, keys + capacity, kPadKey);
  std::fill(ids + total, ids + capacity, kPadId);
}

// ranges[t] = {begin, end} of tile t in the sorted keys; {0, 0} for an empty tile.
template <class Key, class Exec>
void tile_ranges(const Exec& ex, int64_t total, const Key* keys, int64_t tiles, int64_t* ranges) {
  std::fill(ranges, ranges + 2 * tiles, int64_t(0));
  ex.for_range(total, 4096, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k)
      tile_range_entry(
          keys, total, k, tiles, [&](int64_t t, int64_t at) { ranges[2 * t] = at; },
          [&](int64_t t, int64_t at) { ranges[2 * t + 1] = at; });
  });
}

// f(i, j, px, py, pixel result, get, begin) for every pixel of tile t, whose list is
// ids[ranges[2t] .. ranges[2t+1]) into splats.
template <class T, class Id, class F>
void for_tile_pixels(const Camera& cam, const Splat2D<T>* splats, const Id* ids, const int64_t* ranges, int64_t t,
                     F&& f) {
  const int64_t tx = cam.tiles_x(), x0 = (t % tx) * kTile, y0 = (t / tx) * kTile;
  const int64_t b = ranges[2 * t], len = ranges[2 * t + 1] - b;
  auto get = [&](int64_t k) -> const Splat2D<T>& { return splats[ids[b + k]]; };
  for (int64_t i = y0; i < std::min(y0 + kTile, cam.height); ++i)
    for (int64_t j = x0; j < std::min(x0 + kTile, cam.width); ++j) {
      const T px = T(j) + T(0.5), py = T(i) + T(0.5);
      f(i, j, px, py, composite(px, py, len, get), get, b);
    }
}

// Every tile front to back: image [H,W,3] over background bg, alpha and depth [H,W].
template <class T, class Id, class Exec>
void composite_tiles(const Exec& ex, const Camera& cam, const Splat2D<T>* splats, const Id* ids,
                     const int64_t* ranges, const T* bg, T* image, T* alpha, T* depth) {
  ex.for_range(cam.tiles_x() * cam.tiles_y(), 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for_tile_pixels(cam, splats, ids, ranges, t,
                      [&](int64_t i, int64_t j, T, T, const PixelOut<T>& o, auto&, int64_t) {
                        const int64_t p = i * cam.width + j;
                        for (int ch = 0; ch < 3; ++ch) image[3 * p + ch] = o.rgb[ch] + o.transmittance * bg[ch];
                        alpha[p] = T(1) - o.transmittance;
                        depth[p] = expected_depth(o);
                      });
  });
}

template <class T>
void add_to(SplatGrad<T>& a, const SplatGrad<T>& g) {
  a.u += g.u, a.v += g.v, a.a += g.a, a.b += g.b, a.c += g.c, a.opacity += g.opacity, a.depth += g.depth;
  for (int ch = 0; ch < 3; ++ch) a.rgb[ch] += g.rgb[ch];
}

// The backward of composite_tiles: grads[g] (n, zeroed here) receives the screen cotangent
// of splat g, g_bg the background's. Each of ex.threads(tiles) buffers takes a fixed
// contiguous range of tiles; the buffers are summed in order, so the result does not depend
// on scheduling.
template <class T, class Id, class Exec>
void composite_tiles_backward(const Exec& ex, const Camera& cam, int64_t n, const Splat2D<T>* splats, const Id* ids,
                              const int64_t* ranges, const T* bg, const T* g_image, const T* g_alpha,
                              const T* g_depth, std::vector<SplatGrad<T>>& grads, T g_bg[3]) {
  const int64_t tiles = cam.tiles_x() * cam.tiles_y();
  const int nt = std::max(1, int(std::min<int64_t>(ex.threads(tiles), tiles)));
  std::vector<std::vector<SplatGrad<T>>> part(size_t(nt - 1), std::vector<SplatGrad<T>>(size_t(n)));
  std::vector<std::array<T, 3>> part_bg(size_t(nt), {T(0), T(0), T(0)});
  grads.assign(size_t(n), SplatGrad<T>{});
  ex.run(nt, [&](int th, int nth) {
    std::vector<SplatGrad<T>>& acc = th == 0 ? grads : part[size_t(th - 1)];
    for (int64_t t = tiles * th / nth; t < tiles * (th + 1) / nth; ++t)
      for_tile_pixels(cam, splats, ids, ranges, t,
                      [&](int64_t i, int64_t j, T px, T py, const PixelOut<T>& o, auto& get, int64_t b) {
                        const int64_t p = i * cam.width + j;
                        for (int ch = 0; ch < 3; ++ch) part_bg[size_t(th)][size_t(ch)] += g_image[3 * p + ch] * o.transmittance;
                        composite_backward(px, py, o, bg, g_image + 3 * p, g_alpha[p], g_depth[p], get,
                                           [&](int64_t k, const SplatGrad<T>& g) { add_to(acc[size_t(ids[b + k])], g); });
                      });
  });
  ex.for_range(n, 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      for (int th = 1; th < nt; ++th) add_to(grads[size_t(i)], part[size_t(th - 1)][size_t(i)]);
  });
  for (int ch = 0; ch < 3; ++ch) {
    g_bg[ch] = T(0);
    for (int th = 0; th < nt; ++th) g_bg[ch] += part_bg[size_t(th)][size_t(ch)];
  }
}

// The composite stage's inputs as splats (structure of arrays to Splat2D per Gaussian).
template <class T, class Exec>
std::vector<Splat2D<T>> splats_of(const Exec& ex, int64_t n, const T* xy, const T* conic, const T* opacity,
                                  const T* rgb, const T* depth) {
  std::vector<Splat2D<T>> s(static_cast<size_t>(n));
  ex.for_range(n, 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) s[size_t(i)] = splat_of(i, xy, conic, opacity, rgb, depth);
  });
  return s;
}

// A composite list must name Gaussians in [0, n) inside tile ranges within the list.
inline void check_list(int64_t n, const int64_t* ids, int64_t len, const int64_t* ranges, int64_t tiles,
                       const char* op) {
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = ranges[2 * t], e = ranges[2 * t + 1];
    if (b < 0 || e < b || e > len)
      throw InputError(std::string(op) + ": tile " + std::to_string(t) + " has the range [" + std::to_string(b) + ", " +
                       std::to_string(e) + ") in a list of " + std::to_string(len));
    for (int64_t k = b; k < e; ++k)
      if (ids[k] < 0 || ids[k] >= n)
        throw InputError(std::string(op) + ": list entry " + std::to_string(k) + " of tile " + std::to_string(t) +
                         " names Gaussian " + std::to_string(ids[k]) + " of " + std::to_string(n));
  }
}

}  // namespace rlx::splat::host
