// Gaussian splatting on the cpu device (docs/splat.md), in the inputs' dtype: the tiled
// pipeline — projection and SH colour per Gaussian (threaded), one (tile << 32 | f32 depth
// bits) key per Gaussian and tile it reaches, a stable LSD radix sort of the keys, each
// tile's range of the sorted list, then tiles composited in parallel, front to back. The
// backward reruns the binning, walks each pixel back to front into per-thread gradient
// buffers over a fixed split of the tiles, sums them in thread order (the result does not
// depend on scheduling), then takes each Gaussian's cotangents through its projection
// and colour. The arithmetic is ir/ops/splat_math.hpp's; the compositing loops and the stage
// ops' loops are ir/ops/splat_host.hpp's, run on the thread pool.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/ops/splat_host.hpp"
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

// How splat_host.hpp's loops run here: over the thread pool.
struct CpuExec {
  template <class F>
  void for_range(int64_t n, int64_t grain, F&& f) const {
    if (n > 0) parallel_for(n, grain, f);
  }
  int threads(int64_t) const { return num_threads(); }
  template <class F>
  void run(int nt, F&& f) const {
    ThreadPool::instance().run(nt, f);
  }
};
const CpuExec kExec;

template <class T>
struct Binned {
  splat::Scene<T> scene;
  splat::Camera cam;
  std::vector<splat::Splat2D<T>> splats;  // per Gaussian (valid where visible)
  std::vector<uint8_t> visible;
  std::vector<int32_t> ids;      // Gaussians by (tile, depth)
  std::vector<int64_t> ranges;   // [tiles][2]: each tile's [begin, end) in ids
  std::vector<Tensor> held;      // contiguous copies of the inputs

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
    kExec.for_range(count, 256, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) visible[size_t(i)] = splat::prepare(scene, i, cam, splats[size_t(i)], rects[size_t(i)]);
    });
    std::vector<int64_t> offset(size_t(count) + 1, 0);
    for (int64_t i = 0; i < count; ++i)
      offset[size_t(i) + 1] = offset[size_t(i)] + (visible[size_t(i)] ? splat::rect_area(rects[size_t(i)]) : 0);
    const int64_t pairs = offset[size_t(count)];
    std::vector<uint64_t> keys(static_cast<size_t>(pairs));
    ids.resize(size_t(pairs));
    const int64_t tx = cam.tiles_x(), tiles = tx * cam.tiles_y();
    kExec.for_range(count, 256, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (!visible[size_t(i)]) continue;
        const int64_t at = offset[size_t(i)];
        splat::for_tile_keys(rects[size_t(i)], tx, float(splats[size_t(i)].depth), [&](int64_t k, uint64_t key) {
          keys[size_t(at + k)] = key;
          ids[size_t(at + k)] = int32_t(i);
        });
      }
    });
    int tile_bits = 0;
    while ((int64_t(1) << tile_bits) < tiles) ++tile_bits;
    radix_sort(keys, ids, 32 + tile_bits);
    ranges.resize(size_t(2 * tiles));
    splat::host::tile_ranges(kExec, pairs, keys.data(), tiles, ranges.data());
  }
};

template <class T>
void render(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Binned<T> s(n, in);
  splat::host::composite_tiles(kExec, s.cam, s.splats.data(), s.ids.data(), s.ranges.data(),
                               s.held[6].template data<T>(), out[0].data<T>(), out[1].data<T>(), out[2].data<T>());
}

template <class T>
void render_backward(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Binned<T> s(n, in);
  const Tensor gi = in[7].contiguous(), ga = in[8].contiguous(), gd = in[9].contiguous();
  const int64_t count = s.scene.count;
  std::vector<splat::SplatGrad<T>> grads;
  T g_bg[3];
  splat::host::composite_tiles_backward(kExec, s.cam, count, s.splats.data(), s.ids.data(), s.ranges.data(),
                                        s.held[6].template data<T>(), gi.data<T>(), ga.data<T>(), gd.data<T>(), grads,
                                        g_bg);
  for (Tensor& o : out) std::memset(o.raw(), 0, o.nbytes());
  const int kc = s.scene.k_count;
  kExec.for_range(count, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (!s.visible[size_t(i)]) continue;
      splat::gaussian_backward(s.scene, i, s.cam, grads[size_t(i)], out[0].data<T>() + 3 * i, out[1].data<T>() + 3 * i,
                               out[2].data<T>() + 4 * i, out[3].data<T>() + i, out[4].data<T>() + 3 * kc * i);
    }
  });
  for (int ch = 0; ch < 3; ++ch) out[5].data<T>()[ch] = g_bg[ch];
}

// ---------------------------------------------------------------- the stage ops

splat::Camera camera_of(const ir::Node& n, const Tensor& view) {
  const ir::Attrs& a = n.attrs;
  const Tensor v = view.contiguous();
  double m[16];
  for (int k = 0; k < 16; ++k) m[k] = v.dtype() == DType::F64 ? v.data<double>()[k] : double(v.data<float>()[k]);
  if (!a.has("fx")) return splat::make_camera(1.0, 1.0, 0.0, 0.0, 1, 1, m);  // the centre alone
  return splat::make_camera(a.get_float("fx"), a.get_float("fy"), a.get_float("cx"), a.get_float("cy"),
                            a.get_int("width"), a.get_int("height"), m);
}
splat::Camera image_of(const ir::Node& n) {
  splat::Camera c;
  c.width = n.attrs.get_int("width"), c.height = n.attrs.get_int("height");
  return c;
}

template <class T>
void project(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor m = in[0].contiguous(), ls = in[1].contiguous(), q = in[2].contiguous(), o = in[3].contiguous();
  splat::host::project(kExec, m.shape()[0], m.data<T>(), ls.data<T>(), q.data<T>(), o.data<T>(), camera_of(n, in[4]),
                       out[0].data<T>(), out[1].data<T>(), out[2].data<T>(), out[3].data<T>(), out[4].data<int64_t>());
}

template <class T>
void project_backward(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  std::vector<Tensor> c;
  for (size_t k = 0; k < 9; ++k) c.push_back(in[k].contiguous());
  splat::host::project_backward(kExec, c[0].shape()[0], c[0].data<T>(), c[1].data<T>(), c[2].data<T>(), c[3].data<T>(),
                                camera_of(n, in[4]), c[5].data<T>(), c[6].data<T>(), c[7].data<T>(), c[8].data<T>(),
                                out[0].data<T>(), out[1].data<T>(), out[2].data<T>(), out[3].data<T>());
}

template <class T>
void sh_to_rgb(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor m = in[0].contiguous(), sh = in[1].contiguous();
  splat::host::sh_to_rgb(kExec, m.shape()[0], int(sh.shape()[1]), m.data<T>(), sh.data<T>(), camera_of(n, in[2]),
                         out[0].data<T>());
}

template <class T>
void sh_to_rgb_backward(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor m = in[0].contiguous(), sh = in[1].contiguous(), g = in[3].contiguous();
  splat::host::sh_to_rgb_backward(kExec, m.shape()[0], int(sh.shape()[1]), m.data<T>(), sh.data<T>(),
                                  camera_of(n, in[2]), g.data<T>(), out[0].data<T>(), out[1].data<T>());
}

template <class T>
void tile_counts(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor xy = in[0].contiguous(), r = in[1].contiguous();
  splat::host::tile_counts(kExec, xy.shape()[0], xy.data<T>(), r.data<int64_t>(), image_of(n), out[0].data<int64_t>());
}

template <class T>
void tile_keys(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor xy = in[0].contiguous(), d = in[1].contiguous(), r = in[2].contiguous(), e = in[3].contiguous();
  splat::host::tile_keys(kExec, xy.shape()[0], xy.data<T>(), d.data<T>(), r.data<int64_t>(), e.data<int64_t>(),
                         image_of(n), n.attrs.get_int("capacity"), out[0].data<int64_t>(), out[1].data<int64_t>());
}

void tile_ranges(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor k = in[0].contiguous();
  const splat::Camera cam = image_of(n);
  splat::host::tile_ranges(kExec, k.numel(), k.data<int64_t>(), cam.tiles_x() * cam.tiles_y(), out[0].data<int64_t>());
}

// splat_composite's inputs: contiguous copies, the splats, the checked list.
template <class T>
struct Composite {
  splat::Camera cam;
  std::vector<Tensor> held;
  std::vector<splat::Splat2D<T>> splats;
  Composite(const ir::Node& n, std::span<const Tensor> in, size_t inputs, const char* op) : cam(image_of(n)) {
    for (size_t k = 0; k < inputs; ++k) held.push_back(in[k].contiguous());
    const int64_t count = held[0].shape()[0];
    splat::host::check_list(count, list(), held[5].numel(), ranges(), cam.tiles_x() * cam.tiles_y(), op);
    splats = splat::host::splats_of(kExec, count, held[0].data<T>(), held[1].data<T>(), held[2].data<T>(),
                                    held[3].data<T>(), held[4].data<T>());
  }
  const int64_t* list() const { return held[5].data<int64_t>(); }
  const int64_t* ranges() const { return held[6].data<int64_t>(); }
  const T* bg() const { return held[7].data<T>(); }
};

template <class T>
void composite(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Composite<T> c(n, in, 8, "splat_composite");
  splat::host::composite_tiles(kExec, c.cam, c.splats.data(), c.list(), c.ranges(), c.bg(), out[0].data<T>(),
                               out[1].data<T>(), out[2].data<T>());
}

template <class T>
void composite_backward(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Composite<T> c(n, in, 11, "splat_composite_backward");
  const int64_t count = c.held[0].shape()[0];
  std::vector<splat::SplatGrad<T>> g;
  const std::vector<Tensor>& h = c.held;
  splat::host::composite_tiles_backward(kExec, c.cam, count, c.splats.data(), c.list(), c.ranges(), c.bg(),
                                        h[8].data<T>(), h[9].data<T>(), h[10].data<T>(), g, out[5].data<T>());
  kExec.for_range(count, 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      splat::store_grad(g[size_t(i)], i, out[0].data<T>(), out[1].data<T>(), out[2].data<T>(), out[3].data<T>(),
                        out[4].data<T>());
  });
}

// The kernel of fn<float> or fn<double>, by the dtype of the first input.
#define RLX_SPLAT_BY_DTYPE(fn)                                                      \
  [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {        \
    if (in[0].dtype() == DType::F64) return fn<double>(n, in, out);                 \
    return fn<float>(n, in, out);                                                   \
  }

}  // namespace

void add_splat_kernels(KernelTable& t) {
  const DTypeSet types = bit(DType::F32) | bit(DType::F64);
  t.add({"splat_render", types, 0, RLX_SPLAT_BY_DTYPE(render), {}});
  t.add({"splat_render_backward", types, 0, RLX_SPLAT_BY_DTYPE(render_backward), {}});
  t.add({"splat_project", types, 0, RLX_SPLAT_BY_DTYPE(project), {}});
  t.add({"splat_project_backward", types, 0, RLX_SPLAT_BY_DTYPE(project_backward), {}});
  t.add({"splat_sh_to_rgb", types, 0, RLX_SPLAT_BY_DTYPE(sh_to_rgb), {}});
  t.add({"splat_sh_to_rgb_backward", types, 0, RLX_SPLAT_BY_DTYPE(sh_to_rgb_backward), {}});
  t.add({"splat_tile_counts", types, 0, RLX_SPLAT_BY_DTYPE(tile_counts), {}});
  t.add({"splat_tile_keys", types, 0, RLX_SPLAT_BY_DTYPE(tile_keys), {}});
  t.add({"splat_tile_ranges", bit(DType::I64), 0, tile_ranges, {}});
  t.add({"splat_composite", types, 0, RLX_SPLAT_BY_DTYPE(composite), {}});
  t.add({"splat_composite_backward", types, 0, RLX_SPLAT_BY_DTYPE(composite_backward), {}});
}

}  // namespace rlx::cpu
