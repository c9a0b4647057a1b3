// splat_render and splat_render_backward on the cuda device (docs/splat.md, "On cuda"): the
// tiled pipeline of the GPU rasterizers, with the per-Gaussian and per-pixel arithmetic of
// ir/ops/splat_math.hpp.
//
//   1. preprocess (a thread per Gaussian): projection, SH colour, culling, tile rectangle,
//      and the number of tiles it touches;
//   2. an exclusive scan of those counts (CUB): each Gaussian's first slot in the list of
//      (Gaussian, tile) intersections; the total is read back to the host to size the sort
//      (so a render cannot be recorded into a CUDA graph: it is refused while recording);
//   3. emit_keys (a thread per Gaussian): one 64-bit key (tile << 32 | f32 depth bits) per
//      tile it touches, in Gaussian order, so that the stable radix sort (CUB, over the
//      32 + tile bits in use) orders each tile's list by depth, ties by Gaussian index;
//   4. tile_ranges: each tile's [start, end) in the sorted list;
//   5. rasterize: a 16 x 16 thread block per tile, a thread per pixel; the tile's list is
//      staged in shared memory 256 Gaussians at a time and composited front to back; the
//      block stops loading when all its pixels have stopped.
// The backward reruns 1-4 (the sort's values are then list slots, not Gaussian indices), then
// per tile recomputes the forward pass in registers and walks its list back to front
// (splat::BackwardWalk). Each Gaussian's share of a tile is summed over the tile's 256 pixels
// in a fixed order (warp shuffles over the entries a warp touched, two entries at a time, then
// the 8 warps in order) and stored in the Gaussian's own list slot; a per-Gaussian kernel then
// sums its slots in order (its tiles, row by row)
// and takes the sum through its projection and colour (splat::gaussian_backward, forward-mode
// numbers). No float atomics: the gradients are the same bits from run to run.
// (RLX_CUDA_SPLAT_ATOMICS=1 switches to float atomics into one row per Gaussian, to measure
// what that costs.)
//
// Device memory per call: 80 bytes per Gaussian in f32, 112 in f64 (screen parameters,
// rectangle, count, offset), 24 bytes per intersection (keys and values, double-buffered) plus CUB's
// temporary storage; the backward adds 4 bytes (Gaussian of each slot) and the per-slot
// cotangents, 10 values of the dtype per intersection of which the first 16 bytes live in the
// key buffers once the sort is done (so 24 more bytes in f32, 64 in f64), and 3 values per
// tile. All from Scratch.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.hpp"
#include "devices/cuda/common.hpp"
#include "devices/cuda/device_util.cuh"
#include "devices/cuda/library.hpp"
#include "ir/graph.hpp"
#include "ir/ops/splat_math.hpp"

namespace rlx::cuda {
namespace {

using i64 = long long;
constexpr int kThreads = splat::kTile * splat::kTile;  // a block per tile, a thread per pixel
constexpr int kBatch = kThreads;                         // Gaussians staged in shared memory at once
constexpr int kWarps = kThreads / 32;
// Entries whose per-warp shares the backward holds in shared memory at once (the block
// synchronizes twice per chunk, each time waiting for its busiest warp). 64 in f32 (20 KB of
// shares); 32 in f64, whose shares at 64 would pass the 48 KB of static shared memory with
// the batch.
template <class T>
constexpr int kChunk = sizeof(T) == 4 ? 64 : 32;
constexpr int kFields = 10;  // a SplatGrad's values: u v a b c opacity depth r g b

// What every kernel needs to rebuild the camera on the device (the view matrix is a device
// tensor; splat::make_camera reads it there).
struct CameraArgs {
  double fx, fy, cx, cy;
  int width, height;
};

template <class T>
__device__ splat::Camera camera(const CameraArgs& a, const T* view) {
  return splat::make_camera(a.fx, a.fy, a.cx, a.cy, a.width, a.height, view);
}

template <class T>
__global__ void __launch_bounds__(256) preprocess(splat::Scene<T> sc, CameraArgs ca, const T* __restrict__ view,
                                                  splat::Splat2D<T>* __restrict__ splats,
                                                  splat::TileRect* __restrict__ rects, i64* __restrict__ counts) {
  const splat::Camera cam = camera(ca, view);
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < sc.count; i += i64(gridDim.x) * blockDim.x) {
    splat::Splat2D<T> s;
    splat::TileRect r;
    i64 c = 0;
    if (splat::prepare(sc, i, cam, s, r)) {
      splats[i] = s;
      rects[i] = r;
      c = i64(r.x1 - r.x0) * (r.y1 - r.y0);
    }
    counts[i] = c;
  }
}

// Keys of Gaussian i's tiles at its slots [offsets[i], offsets[i+1]); the values are Gaussian
// indices (forward) or the slots themselves with slot_gaussian[slot] = i (backward).
template <class T>
__global__ void __launch_bounds__(256) emit_keys(const splat::Splat2D<T>* __restrict__ splats,
                                                 const splat::TileRect* __restrict__ rects,
                                                 const i64* __restrict__ offsets, i64 count, int tiles_x,
                                                 uint64_t* __restrict__ keys, int* __restrict__ values,
                                                 int* __restrict__ slot_gaussian) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += i64(gridDim.x) * blockDim.x) {
    i64 at = offsets[i];
    if (offsets[i + 1] == at) continue;
    splat::for_tile_keys(rects[i], tiles_x, float(splats[i].depth), [&](i64 k, uint64_t key) {
      keys[at + k] = key;
      if (slot_gaussian) {
        values[at + k] = int(at + k);
        slot_gaussian[at + k] = int(i);
      } else {
        values[at + k] = int(i);
      }
    });
  }
}

// ranges[t] = [first, end) of tile t in the sorted keys (zeroed before: empty tiles stay [0, 0)).
template <class Key, class Range>
__global__ void __launch_bounds__(256) tile_ranges(const Key* __restrict__ keys, i64 total, i64 tiles,
                                                   Range* __restrict__ ranges) {
  for (i64 k = i64(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += i64(gridDim.x) * blockDim.x)
    splat::tile_range_entry(
        keys, total, k, tiles, [&](i64 t, i64 at) { ranges[t].x = decltype(ranges[t].x)(at); },
        [&](i64 t, i64 at) { ranges[t].y = decltype(ranges[t].y)(at); });
}

// The pixel of this thread in its tile's block.
struct PixelOfThread {
  int tile, tid;
  i64 i, j;  // row, column
  bool inside;
  __device__ PixelOfThread(int tiles_x, int width, int height) {
    tile = int(blockIdx.x);
    tid = int(threadIdx.y) * splat::kTile + int(threadIdx.x);
    i = i64(tile / tiles_x) * splat::kTile + threadIdx.y;
    j = i64(tile % tiles_x) * splat::kTile + threadIdx.x;
    inside = i < height && j < width;
  }
  __device__ i64 index(int width) const { return i * width + j; }
};

// The forward pass of one pixel over its tile's list [r.x, r.y), staged through `batch`;
// `taken` is the number of list entries visited before the stop (PixelOut::taken), and
// *last (where asked) one past the last entry added to the pixel (the entries between it and
// `taken` were skipped: the backward need not walk them). Every thread of the block calls it
// (it synchronizes the block).
template <class T>
__device__ splat::PixelOut<T> composite_tile(const splat::Splat2D<T>* __restrict__ splats, const int* __restrict__ ids,
                                             const int* __restrict__ slot_gaussian, int2 r, const PixelOfThread& p,
                                             splat::Splat2D<T>* batch, int* last = nullptr) {
  const T px = T(p.j) + T(0.5), py = T(p.i) + T(0.5);
  splat::PixelOut<T> o;
  bool done = !p.inside;
  int taken = 0, added = 0;
  for (int start = r.x; start < r.y; start += kBatch) {
    // (also the barrier after which the previous batch may be overwritten)
    if (__syncthreads_count(done) == kThreads) break;
    if (start + p.tid < r.y) {
      const int v = ids[start + p.tid];
      batch[p.tid] = splats[slot_gaussian ? slot_gaussian[v] : v];
    }
    __syncthreads();
    const int n = min(kBatch, r.y - start);
    for (int q = 0; q < n && !done; ++q) {
      const T before = o.transmittance;  // (an added entry lowers it: α >= 1/255, T >= 1e-4)
      if (!splat::composite_step(batch[q], px, py, o)) done = true;
      else {
        ++taken;
        if (last && o.transmittance < before) added = taken;
      }
    }
  }
  o.taken = taken;
  if (last) *last = added;
  return o;
}

template <class T>
__global__ void __launch_bounds__(kThreads) rasterize(const splat::Splat2D<T>* __restrict__ splats,
                                                      const int* __restrict__ ids, const int2* __restrict__ ranges,
                                                      int tiles_x, int width, int height, const T* __restrict__ bg,
                                                      T* __restrict__ image, T* __restrict__ alpha,
                                                      T* __restrict__ depth) {
  __shared__ splat::Splat2D<T> batch[kBatch];
  const PixelOfThread p(tiles_x, width, height);
  const splat::PixelOut<T> o = composite_tile<T>(splats, ids, nullptr, ranges[p.tile], p, batch);
  if (!p.inside) return;
  const i64 at = p.index(width);
  for (int ch = 0; ch < 3; ++ch) image[3 * at + ch] = o.rgb[ch] + o.transmittance * bg[ch];
  alpha[at] = T(1) - o.transmittance;
  depth[at] = splat::expected_depth(o);
}

template <class T>
__device__ void pack(const splat::SplatGrad<T>& g, T f[kFields]) {
  f[0] = g.u, f[1] = g.v, f[2] = g.a, f[3] = g.b, f[4] = g.c, f[5] = g.opacity, f[6] = g.depth;
  f[7] = g.rgb[0], f[8] = g.rgb[1], f[9] = g.rgb[2];
}
template <class T>
__device__ splat::SplatGrad<T> unpack(const T f[kFields]) {
  splat::SplatGrad<T> g;
  g.u = f[0], g.v = f[1], g.a = f[2], g.b = f[3], g.c = f[4], g.opacity = f[5], g.depth = f[6];
  g.rgb[0] = f[7], g.rgb[1] = f[8], g.rgb[2] = f[9];
  return g;
}

// Lane 0 gets the sum of v over the warp, added in a fixed tree order.
template <class T, int N>
__device__ void warp_sum(T (&v)[N]) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int f = 0; f < N; ++f) v[f] += __shfl_down_sync(0xffffffffu, v[f], off);
}

// Lane 0 gets the sum over the warp of a (entry A), lane 16 that of b (entry B), each added in
// a fixed order: first the two halves of the warp trade (a lane of the low half keeps A and
// adds its partner's A, a lane of the high half keeps B and adds its partner's B), then a
// shuffle tree within each half. 5 shuffles per field for the two entries, against 10 for two
// warp_sum calls.
template <class T, int N>
__device__ void pair_sum(T (&a)[N], const T (&b)[N], int lane) {
  const bool low = lane < 16;
#pragma unroll
  for (int f = 0; f < N; ++f) {
    const T send = low ? b[f] : a[f];
    a[f] = (low ? a[f] : b[f]) + __shfl_xor_sync(0xffffffffu, send, 16);
  }
#pragma unroll
  for (int off = 8; off > 0; off >>= 1)
#pragma unroll
    for (int f = 0; f < N; ++f) a[f] += __shfl_down_sync(0xffffffffu, a[f], off);
}

// The rows of screen cotangents the backward sums into (a row per list slot, or per Gaussian
// in the atomics variant): fields [0, n_lo) of row r at lo[r * n_lo ...], the rest at
// hi[r * (kFields - n_lo) ...]. Two blocks, so that the deterministic backward can put the
// first fields in the sort's key buffers, which are dead once the tile ranges are known
// (docs/splat.md, "On cuda": memory).
template <class T>
struct GradRows {
  T* lo;
  T* hi;
  int n_lo;
  __device__ T& at(i64 row, int k) const {
    return k < n_lo ? lo[row * n_lo + k] : hi[row * (kFields - n_lo) + (k - n_lo)];
  }
};

// Per tile: the forward pass again (registers only), then the walk back over the entries some
// pixel of the tile added (each pixel from its last added entry). A warp reduces only the
// entries one of its lanes touched, two at a time (pair_sum: the touched entries of a chunk
// are paired in walk order, a last odd one summed alone), and skips the rest. Deterministic
// (Atomic false): the warps' sums go to shared memory with a bit per (warp, entry) saying which
// were written; the block adds them in warp order into the slot's row (grad.at(slot, f)); rows
// of entries no warp touched keep the zeros they were cleared to. Atomic (for measuring what
// determinism costs): each warp's sum is added to the Gaussian's row with float atomics, in an
// order that varies.
// tile_bg[tile][ch]: the tile's sum of g_image * T_final.
template <class T, bool Atomic>
__global__ void __launch_bounds__(kThreads) rasterize_backward(
    const splat::Splat2D<T>* __restrict__ splats, const int* __restrict__ slots, const int* __restrict__ slot_gaussian,
    const int2* __restrict__ ranges, int tiles_x, int width, int height, const T* __restrict__ bg,
    const T* __restrict__ g_image, const T* __restrict__ g_alpha, const T* __restrict__ g_depth, GradRows<T> grad,
    T* __restrict__ tile_bg) {
  __shared__ splat::Splat2D<T> batch[kBatch];
  __shared__ int row_of[kBatch];  // the row of grad an entry's share goes to
  __shared__ T partial[kWarps][kChunk<T>][kFields];
  __shared__ unsigned long long touched[kWarps];  // bit q: partial[warp][q] holds the warp's share of chunk entry q
  __shared__ int visited;
  const PixelOfThread p(tiles_x, width, height);
  const int2 r = ranges[p.tile];
  int last = 0;  // the walk starts there: the entries after it were skipped by this pixel
  const splat::PixelOut<T> o = composite_tile<T>(splats, slots, slot_gaussian, r, p, batch, &last);
  if (p.tid == 0) visited = 0;
  __syncthreads();
  if (last > 0) atomicMax(&visited, last);
  __syncthreads();

  const T px = T(p.j) + T(0.5), py = T(p.i) + T(0.5);
  const i64 at = p.inside ? p.index(width) : 0;
  T gi[3] = {T(0), T(0), T(0)}, bgv[3] = {bg[0], bg[1], bg[2]};
  T ga = T(0), gd = T(0);
  if (p.inside) {
    for (int ch = 0; ch < 3; ++ch) gi[ch] = g_image[3 * at + ch];
    ga = g_alpha[at], gd = g_depth[at];
  }
  splat::BackwardWalk<T> walk(o, bgv, gi, ga, gd);
  const int lane = p.tid & 31, warp = p.tid >> 5;
  // A warp's sum of chunk entry q, held by lane `by`: to shared memory, or added to its row.
  auto emit = [&](int q, int cstart, int by, const T (&f)[kFields]) {
    if (lane != by) return;
    if constexpr (Atomic) {
      for (int k = 0; k < kFields; ++k) atomicAdd(&grad.at(row_of[q], k), f[k]);
    } else {
      for (int k = 0; k < kFields; ++k) partial[warp][q - cstart][k] = f[k];
    }
  };
  for (int end = r.x + visited; end > r.x; end -= kBatch) {
    const int start = max(r.x, end - kBatch), n = end - start;
    __syncthreads();  // the previous batch is consumed
    if (p.tid < n) {
      const int s = slots[start + p.tid], gaussian = slot_gaussian[s];
      row_of[p.tid] = Atomic ? gaussian : s;
      batch[p.tid] = splats[gaussian];
    }
    __syncthreads();
    for (int cend = n; cend > 0; cend -= kChunk<T>) {
      const int cstart = max(0, cend - kChunk<T>);
      unsigned long long mask = 0;  // (warp-uniform, as is held)
      int held = -1;                // a touched entry waiting for a second one, its values in hf
      T hf[kFields] = {};
      for (int q = cend - 1; q >= cstart; --q) {
        splat::SplatGrad<T> g;
        const bool mine = start + q - r.x < last && walk.step(batch[q], px, py, g);
        if (!__any_sync(0xffffffffu, mine)) continue;
        mask |= 1ull << (q - cstart);
        T f[kFields];
        pack(g, f);
        if (held < 0) {
#pragma unroll
          for (int k = 0; k < kFields; ++k) hf[k] = f[k];
          held = q;
          continue;
        }
        pair_sum(hf, f, lane);
        emit(held, cstart, 0, hf);
        emit(q, cstart, 16, hf);
        held = -1;
      }
      if (held >= 0) {
        warp_sum(hf);
        emit(held, cstart, 0, hf);
      }
      if constexpr (!Atomic) {
        if (lane == 0) touched[warp] = mask;
        __syncthreads();
        for (int e = p.tid; e < (cend - cstart) * kFields; e += kThreads) {
          const int q = e / kFields, k = e % kFields;
          T s = T(0);
          bool any = false;
          for (int w = 0; w < kWarps; ++w)
            if (touched[w] >> q & 1ull) s += partial[w][q][k], any = true;
          if (any) grad.at(row_of[cstart + q], k) = s;
        }
        __syncthreads();  // partial and touched are free again
      }
    }
  }
  // The background's cotangent: sum over the tile's pixels of g_image * T_final.
  T b[3];
  for (int ch = 0; ch < 3; ++ch) b[ch] = gi[ch] * o.transmittance;
  warp_sum(b);
  __syncthreads();
  if (lane == 0)
    for (int ch = 0; ch < 3; ++ch) partial[warp][0][ch] = b[ch];
  __syncthreads();
  if (p.tid < 3) {
    T s = T(0);
    for (int w = 0; w < kWarps; ++w) s += partial[w][0][p.tid];
    tile_bg[i64(p.tile) * 3 + p.tid] = s;
  }
}

// Each visible Gaussian's screen cotangent (its rows of grad summed in order: its slots, or
// its one row when per_gaussian) through its projection and colour. The outputs are zeroed
// before (culled Gaussians keep zeros).
template <class T>
__global__ void __launch_bounds__(128) gaussian_grads(splat::Scene<T> sc, CameraArgs ca, const T* __restrict__ view,
                                                      const i64* __restrict__ offsets, bool per_gaussian,
                                                      const GradRows<T> grad, T* __restrict__ g_means,
                                                      T* __restrict__ g_log_scales,
                                                      T* __restrict__ g_quats, T* __restrict__ g_ologit,
                                                      T* __restrict__ g_sh) {
  const splat::Camera cam = camera(ca, view);
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < sc.count; i += i64(gridDim.x) * blockDim.x) {
    if (offsets[i] == offsets[i + 1]) continue;
    const i64 b = per_gaussian ? i : offsets[i], e = per_gaussian ? i + 1 : offsets[i + 1];
    T f[kFields] = {};
    for (i64 k = b; k < e; ++k)
      for (int q = 0; q < kFields; ++q) f[q] += grad.at(k, q);
    splat::gaussian_backward(sc, i, cam, unpack(f), g_means + 3 * i, g_log_scales + 3 * i, g_quats + 4 * i,
                             g_ologit + i, g_sh + i64(3) * sc.k_count * i);
  }
}

// g_bg[ch] = sum over tiles of tile_bg[tile][ch], in a fixed order: thread t of the block adds
// tiles t, t + 256, ... in turn, then the 256 partial sums are added in a fixed tree (one
// thread per channel looping over every tile took 0.2 ms at 1920 x 1080).
constexpr int kBgThreads = 256;
template <class T>
__global__ void __launch_bounds__(kBgThreads) sum_background(const T* __restrict__ tile_bg, int tiles, T* __restrict__ g_bg) {
  __shared__ T part[3][kBgThreads];
  const int tid = int(threadIdx.x);
  T s[3] = {T(0), T(0), T(0)};
  for (int t = tid; t < tiles; t += kBgThreads)
    for (int ch = 0; ch < 3; ++ch) s[ch] += tile_bg[i64(t) * 3 + ch];
  for (int ch = 0; ch < 3; ++ch) part[ch][tid] = s[ch];
  for (int half = kBgThreads / 2; half > 0; half /= 2) {
    __syncthreads();
    if (tid < half)
      for (int ch = 0; ch < 3; ++ch) part[ch][tid] += part[ch][tid + half];
  }
  __syncthreads();
  if (tid < 3) g_bg[tid] = part[tid][0];
}

// ---------------------------------------------------------------- host side

size_t at_least_1(size_t n) { return std::max<size_t>(n, 1); }

// A render cannot be recorded into a CUDA graph: it reads its intersection count back.
bool refuse_recording(const char* op) {
  if (capturing())
    throw InputError(std::string(op) +
                     " on cuda cannot be recorded into a CUDA graph for replay: the number of (Gaussian, tile) "
                     "intersections is read back to the host to size the sort (docs/splat.md)");
  return true;
}

// The binned scene: steps 1-4 of the header, shared by both ops.
template <class T>
struct Binned {
  bool not_recording;  // (first: checked before anything is allocated)
  Tensor held[7];      // contiguous inputs
  splat::Scene<T> scene;
  CameraArgs cam;
  i64 count = 0, total = 0;  // Gaussians, intersections
  int tiles_x = 0, tiles = 0;
  Scratch splats, rects, counts, offsets, ranges;
  std::optional<Scratch> keys, values, slot_gaussian;  // sized once the intersections are counted
  const int* sorted_values = nullptr;  // Gaussian indices (forward) or slots (backward)

  Binned(const char* op, const ir::Node& n, std::span<const Tensor> in, bool by_slot)
      : not_recording(refuse_recording(op)),
        count(in[0].shape()[0]),
        splats(at_least_1(size_t(in[0].shape()[0]) * sizeof(splat::Splat2D<T>))),
        rects(at_least_1(size_t(in[0].shape()[0]) * sizeof(splat::TileRect))),
        counts(size_t(in[0].shape()[0] + 1) * sizeof(i64)),
        offsets(size_t(in[0].shape()[0] + 1) * sizeof(i64)),
        ranges(at_least_1(tiles_of(n) * sizeof(int2))) {
    for (size_t k = 0; k < 7; ++k) held[k] = contiguous(in[k]);
    const ir::Attrs& a = n.attrs;
    cam = {a.get_float("fx"), a.get_float("fy"), a.get_float("cx"), a.get_float("cy"), int(a.get_int("width")),
           int(a.get_int("height"))};
    tiles_x = int((cam.width + splat::kTile - 1) / splat::kTile);
    tiles = int(tiles_of(n));
    scene = {held[0].data<T>(), held[1].data<T>(), held[2].data<T>(), held[3].data<T>(), held[4].data<T>(), count,
             int(in[4].shape()[1])};
    check(cudaMemsetAsync(ranges.get(), 0, size_t(tiles) * sizeof(int2), stream()), "splat: clearing tile ranges");
    if (count == 0) return;
    preprocess<T><<<grid_for(count, 256), 256, 0, stream()>>>(scene, cam, view(), splats.as<splat::Splat2D<T>>(),
                                                              rects.as<splat::TileRect>(), counts.as<i64>());
    check_launch("splat preprocess");
    check(cudaMemsetAsync(counts.as<i64>() + count, 0, sizeof(i64), stream()), "splat: clearing a count");
    cub_call("cub::DeviceScan::ExclusiveSum", [&](void* t, size_t& b) {
      return cub::DeviceScan::ExclusiveSum(t, b, counts.as<i64>(), offsets.as<i64>(), int(count + 1), stream());
    });
    check(cudaMemcpyAsync(&total, offsets.as<i64>() + count, sizeof(i64), cudaMemcpyDeviceToHost, stream()),
          "splat: reading the number of intersections");
    check(cudaStreamSynchronize(stream()), "splat: reading the number of intersections");
    if (total > i64(INT_MAX))
      throw InputError(std::string(op) + " on cuda: " + std::to_string(total) +
                       " (Gaussian, tile) intersections, more than the 2^31 - 1 the sort takes");
    if (total == 0) return;
    keys.emplace(2 * size_t(total) * sizeof(uint64_t));
    values.emplace(2 * size_t(total) * sizeof(int));
    if (by_slot) slot_gaussian.emplace(size_t(total) * sizeof(int));
    uint64_t* k0 = keys->as<uint64_t>();
    int* v0 = values->as<int>();
    emit_keys<T><<<grid_for(count, 256), 256, 0, stream()>>>(splats.as<splat::Splat2D<T>>(), rects.as<splat::TileRect>(),
                                                             offsets.as<i64>(), count, tiles_x, k0, v0,
                                                             by_slot ? slot_gaussian->as<int>() : nullptr);
    check_launch("splat emit_keys");
    int tile_bits = 0;
    while ((i64(1) << tile_bits) < tiles) ++tile_bits;
    cub::DoubleBuffer<uint64_t> kb(k0, k0 + total);
    cub::DoubleBuffer<int> vb(v0, v0 + total);
    cub_call("cub::DeviceRadixSort::SortPairs", [&](void* t, size_t& b) {
      return cub::DeviceRadixSort::SortPairs(t, b, kb, vb, int(total), 0, 32 + tile_bits, stream());
    });
    tile_ranges<<<grid_for(total, 256), 256, 0, stream()>>>(kb.Current(), total, i64(tiles), ranges.as<int2>());
    check_launch("splat tile_ranges");
    sorted_values = vb.Current();
  }

  static size_t tiles_of(const ir::Node& n) {
    const i64 w = n.attrs.get_int("width"), h = n.attrs.get_int("height");
    return size_t((w + splat::kTile - 1) / splat::kTile) * size_t((h + splat::kTile - 1) / splat::kTile);
  }
  const T* view() const { return held[5].data<T>(); }
  const T* background() const { return held[6].data<T>(); }
  const splat::Splat2D<T>* screen() const { return splats.as<splat::Splat2D<T>>(); }
  const int* gaussian_of_slot() const { return slot_gaussian ? slot_gaussian->as<int>() : nullptr; }

  // CUB's calls take their temporary storage size first (a call with no storage), then run.
  template <class Call>
  static void cub_call(const char* what, Call&& call) {
    size_t bytes = 0;
    check(call(nullptr, bytes), std::string(what) + " (sizing)");
    Scratch temp(at_least_1(bytes));
    check(call(temp.get(), bytes), what);
  }
};

template <class T>
void render(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Binned<T> s("splat_render", n, in, false);
  rasterize<T><<<unsigned(s.tiles), dim3(splat::kTile, splat::kTile), 0, stream()>>>(
      s.screen(), s.sorted_values, s.ranges.template as<int2>(), s.tiles_x, s.cam.width, s.cam.height, s.background(),
      out[0].data<T>(), out[1].data<T>(), out[2].data<T>());
  check_launch("splat rasterize");
}

// RLX_CUDA_SPLAT_ATOMICS=1: the backward adds each warp's shares with float atomics into one
// row per Gaussian instead of per-slot sums (faster or not, and not deterministic: kept to
// measure what determinism costs; docs/splat.md).
bool splat_atomics() {
  static const bool on = env_choice("RLX_CUDA_SPLAT_ATOMICS", {"0", "1"}) == 1;
  return on;
}

template <class T>
void render_backward(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Binned<T> s("splat_render_backward", n, in, true);
  const Tensor gi = contiguous(in[7]), ga = contiguous(in[8]), gd = contiguous(in[9]);
  for (Tensor& o : out)
    if (o.nbytes() > 0) check(cudaMemsetAsync(o.raw(), 0, o.nbytes(), stream()), "splat: clearing gradients");
  const bool atomic = splat_atomics();
  const size_t rows = size_t(atomic ? s.count : s.total);
  // Deterministic: a row per slot, its first fields in the sort's key buffers (2 * total
  // 64-bit keys, dead once tile_ranges has run: 4 fields in f32, 2 in f64), the rest in a new
  // block. Atomics: a row per Gaussian in a new block.
  const int n_lo = atomic || s.total == 0 ? 0 : int(2 * sizeof(uint64_t) / sizeof(T));
  Scratch rest(at_least_1(rows * (kFields - n_lo) * sizeof(T)));
  const GradRows<T> grad{n_lo > 0 ? s.keys->template as<T>() : nullptr, rest.as<T>(), n_lo};
  Scratch tile_bg(size_t(s.tiles) * 3 * sizeof(T));
  if (n_lo > 0) check(cudaMemsetAsync(grad.lo, 0, rows * n_lo * sizeof(T), stream()), "splat: clearing gradients");
  if (rows > 0)
    check(cudaMemsetAsync(grad.hi, 0, rows * (kFields - n_lo) * sizeof(T), stream()), "splat: clearing gradients");
  auto launch = [&](auto kernel) {
    kernel<<<unsigned(s.tiles), dim3(splat::kTile, splat::kTile), 0, stream()>>>(
        s.screen(), s.sorted_values, s.gaussian_of_slot(), s.ranges.template as<int2>(), s.tiles_x, s.cam.width,
        s.cam.height, s.background(), gi.data<T>(), ga.data<T>(), gd.data<T>(), grad, tile_bg.as<T>());
  };
  atomic ? launch(rasterize_backward<T, true>) : launch(rasterize_backward<T, false>);
  check_launch("splat rasterize_backward");
  if (s.total > 0) {
    gaussian_grads<T><<<grid_for(s.count, 128), 128, 0, stream()>>>(
        s.scene, s.cam, s.view(), s.offsets.template as<i64>(), atomic, grad, out[0].data<T>(),
        out[1].data<T>(), out[2].data<T>(), out[3].data<T>(), out[4].data<T>());
    check_launch("splat gaussian_grads");
  }
  sum_background<T><<<1, kBgThreads, 0, stream()>>>(tile_bg.as<T>(), s.tiles, out[5].data<T>());
  check_launch("splat sum_background");
}

template <template <class> class Run>
void by_dtype(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  if (in[0].dtype() == DType::F64) Run<double>::go(n, in, out);
  else Run<float>::go(n, in, out);
}
template <class T>
struct Render {
  static void go(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) { render<T>(n, in, out); }
};
template <class T>
struct RenderBackward {
  static void go(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    render_backward<T>(n, in, out);
  }
};

// The limits of the pipeline's index types: Gaussians and list slots are int (CUB's item
// counts), tiles a grid dimension and the 32 high bits of a key.
std::string splat_limits(const ir::Node& n, const ir::Graph& g) {
  const i64 count = g.type(n.inputs.at(0)).shape.at(0);
  if (count >= i64(INT_MAX))
    return n.op->name + " on cuda: at most 2^31 - 2 Gaussians, got " + std::to_string(count);
  const i64 tiles = i64(Binned<float>::tiles_of(n));
  if (tiles > i64(INT_MAX))
    return n.op->name + " on cuda: at most 2^31 - 1 tiles of 16 x 16 pixels, got " + std::to_string(tiles);
  return "";
}

// ---------------------------------------------------------------- the stage ops
// A thread per Gaussian (projection, colour, tile counts, keys), per sorted entry (tile
// ranges), and the rasterizer above for compositing (a block per tile, a thread per pixel),
// with the per-element functions of splat_math.hpp. What a stage op checks of its inputs
// (offsets, lists, ranges) is flagged on the device and read back once, so these ops, like
// splat_render, refuse to be recorded into a CUDA graph.

struct I64Range {  // a row of the [tiles, 2] i64 ranges
  long long x, y;
};

__device__ splat::Camera image_camera(int width, int height) {
  splat::Camera c;
  c.width = width, c.height = height;
  return c;
}

CameraArgs camera_args(const ir::Node& n) {
  const ir::Attrs& a = n.attrs;
  if (!a.has("fx")) return {1.0, 1.0, 0.0, 0.0, 1, 1};  // splat_sh_to_rgb reads only the camera centre
  return {a.get_float("fx"), a.get_float("fy"), a.get_float("cx"), a.get_float("cy"), int(a.get_int("width")),
          int(a.get_int("height"))};
}

#define RLX_SPLAT_FOR_EACH(i, n) for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += i64(gridDim.x) * blockDim.x)

template <class T>
__global__ void __launch_bounds__(128) project_stage(i64 n, CameraArgs ca, const T* view, const T* m, const T* ls,
                                                     const T* q, const T* o, T* xy, T* conic, T* depth, T* opacity,
                                                     int64_t* radius) {
  const splat::Camera cam = camera(ca, view);
  RLX_SPLAT_FOR_EACH(i, n)
  splat::project_stage(m + 3 * i, ls + 3 * i, q + 4 * i, o[i], cam, xy + 2 * i, conic + 3 * i, depth + i, opacity + i,
                       radius + i);
}

template <class T>
__global__ void __launch_bounds__(128) project_stage_backward(i64 n, CameraArgs ca, const T* view, const T* m,
                                                              const T* ls, const T* q, const T* o, const T* gxy,
                                                              const T* gc, const T* gd, const T* go, T* g_m, T* g_ls,
                                                              T* g_q, T* g_o) {
  const splat::Camera cam = camera(ca, view);
  RLX_SPLAT_FOR_EACH(i, n)
  splat::project_stage_backward(m + 3 * i, ls + 3 * i, q + 4 * i, o[i], cam, gxy + 2 * i, gc + 3 * i, gd[i], go[i],
                                g_m + 3 * i, g_ls + 3 * i, g_q + 4 * i, g_o + i);
}

template <class T>
__global__ void __launch_bounds__(128) sh_stage(i64 n, int k_count, const T* view, const T* m, const T* sh, T* rgb) {
  const splat::Camera cam = camera(CameraArgs{1.0, 1.0, 0.0, 0.0, 1, 1}, view);
  RLX_SPLAT_FOR_EACH(i, n) splat::sh_stage(k_count, m + 3 * i, sh + i64(3) * k_count * i, cam, rgb + 3 * i);
}

template <class T>
__global__ void __launch_bounds__(128) sh_stage_backward(i64 n, int k_count, const T* view, const T* m, const T* sh,
                                                         const T* g, T* g_m, T* g_sh) {
  const splat::Camera cam = camera(CameraArgs{1.0, 1.0, 0.0, 0.0, 1, 1}, view);
  RLX_SPLAT_FOR_EACH(i, n)
  splat::sh_stage_backward(k_count, m + 3 * i, sh + i64(3) * k_count * i, cam, g + 3 * i, g_m + 3 * i,
                           g_sh + i64(3) * k_count * i);
}

template <class T>
__global__ void __launch_bounds__(256) tile_counts_stage(i64 n, int width, int height, const T* xy,
                                                         const int64_t* radius, int64_t* counts) {
  const splat::Camera cam = image_camera(width, height);
  RLX_SPLAT_FOR_EACH(i, n) counts[i] = splat::rect_area(splat::stage_rect(xy[2 * i], xy[2 * i + 1], radius[i], cam));
}

// Keys and ids of Gaussian i at [ends[i] - count, ends[i]); bad |= 1 where the offsets are
// not the counts' running sum or pass the capacity (nothing is written for that Gaussian, so
// every write lies in [0, capacity) whatever the offsets).
template <class T>
__global__ void __launch_bounds__(256) tile_keys_stage(i64 n, int width, int height, const T* xy, const T* depth,
                                                       const int64_t* radius, const int64_t* ends, i64 capacity,
                                                       int64_t* keys, int64_t* ids, int* bad) {
  const splat::Camera cam = image_camera(width, height);
  RLX_SPLAT_FOR_EACH(i, n) {
    const splat::TileRect r = splat::stage_rect(xy[2 * i], xy[2 * i + 1], radius[i], cam);
    const i64 at = ends[i] - splat::rect_area(r);
    if (at < 0 || at != (i == 0 ? 0 : ends[i - 1]) || ends[i] > capacity) {
      atomicOr(bad, 1);
      continue;
    }
    splat::for_tile_keys(r, cam.tiles_x(), float(depth[i]), [&](i64 k, uint64_t key) {
      keys[at + k] = int64_t(key);
      ids[at + k] = i;
    });
  }
}

// The list past its count: keys of no tile, no Gaussian.
__global__ void __launch_bounds__(256) pad_keys(i64 n, const int64_t* ends, i64 capacity, int64_t* keys, int64_t* ids) {
  const i64 total = n == 0 ? 0 : ends[n - 1];
  RLX_SPLAT_FOR_EACH(k, capacity) if (k >= total) keys[k] = splat::kPadKey, ids[k] = splat::kPadId;
}

template <class T>
__global__ void __launch_bounds__(256) pack_splats(i64 n, const T* xy, const T* conic, const T* opacity, const T* rgb,
                                                   const T* depth, splat::Splat2D<T>* splats) {
  RLX_SPLAT_FOR_EACH(i, n) splats[i] = splat::splat_of(i, xy, conic, opacity, rgb, depth);
}

// The composite stage's list and ranges as the rasterizer reads them (int), checked: each
// tile's range lies in the list and names Gaussians in [0, n) (bad |= 1 otherwise).
__global__ void __launch_bounds__(256) narrow_lists(i64 n, i64 len, i64 tiles, const int64_t* list,
                                                    const I64Range* ranges, int* list32, int2* ranges32, int* bad) {
  RLX_SPLAT_FOR_EACH(k, len) list32[k] = int(list[k]);
  RLX_SPLAT_FOR_EACH(t, tiles) {
    const I64Range r = ranges[t];
    if (r.x < 0 || r.y < r.x || r.y > len) {
      atomicOr(bad, 1);
      ranges32[t] = make_int2(0, 0);
      continue;
    }
    for (i64 k = r.x; k < r.y; ++k)
      if (list[k] < 0 || list[k] >= n) atomicOr(bad, 1);
    ranges32[t] = make_int2(int(r.x), int(r.y));
  }
}

__global__ void __launch_bounds__(256) iota_int(i64 n, int* out) {
  RLX_SPLAT_FOR_EACH(k, n) out[k] = int(k);
}

// runs[g] = [begin, end) of Gaussian g among the sorted list entries (ids ascending).
__global__ void __launch_bounds__(256) gaussian_runs(const int* ids, i64 len, i64 n, int2* runs) {
  RLX_SPLAT_FOR_EACH(k, len) {
    const int g = ids[k];
    if (g < 0 || g >= n) continue;
    if (k == 0 || ids[k - 1] != g) runs[g].x = int(k);
    if (k == len - 1 || ids[k + 1] != g) runs[g].y = int(k + 1);
  }
}

// Each Gaussian's screen cotangent: its list rows of grad summed in list order.
template <class T>
__global__ void __launch_bounds__(128) sum_gaussian_rows(i64 n, const int2* runs, const int* rows,
                                                         const GradRows<T> grad,
                                                         T* gxy, T* gc, T* go, T* grgb, T* gd) {
  RLX_SPLAT_FOR_EACH(i, n) {
    T f[kFields] = {};
    for (int k = runs[i].x; k < runs[i].y; ++k)
      for (int q = 0; q < kFields; ++q) f[q] += grad.at(rows[k], q);
    splat::store_grad(unpack(f), i, gxy, gc, go, grgb, gd);
  }
}
#undef RLX_SPLAT_FOR_EACH

// A device flag raised by the checks above, read back (one synchronization).
struct Flag {
  Scratch s{sizeof(int)};
  Flag() { check(cudaMemsetAsync(s.get(), 0, sizeof(int), stream()), "splat: clearing a flag"); }
  int* get() const { return s.as<int>(); }
  bool raised() const {
    int v = 0;
    check(cudaMemcpyAsync(&v, s.get(), sizeof(int), cudaMemcpyDeviceToHost, stream()), "splat: reading a flag");
    check(cudaStreamSynchronize(stream()), "splat: reading a flag");
    return v != 0;
  }
};

template <class T>
void project_op(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const i64 count = in[0].shape()[0];
  if (count == 0) return;
  Tensor c[5];
  for (int k = 0; k < 5; ++k) c[k] = contiguous(in[k]);
  project_stage<T><<<grid_for(count, 128), 128, 0, stream()>>>(
      count, camera_args(n), c[4].data<T>(), c[0].data<T>(), c[1].data<T>(), c[2].data<T>(), c[3].data<T>(),
      out[0].data<T>(), out[1].data<T>(), out[2].data<T>(), out[3].data<T>(), out[4].data<int64_t>());
  check_launch("splat_project");
}

template <class T>
void project_backward_op(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const i64 count = in[0].shape()[0];
  if (count == 0) return;
  Tensor c[9];
  for (int k = 0; k < 9; ++k) c[k] = contiguous(in[k]);
  project_stage_backward<T><<<grid_for(count, 128), 128, 0, stream()>>>(
      count, camera_args(n), c[4].data<T>(), c[0].data<T>(), c[1].data<T>(), c[2].data<T>(), c[3].data<T>(),
      c[5].data<T>(), c[6].data<T>(), c[7].data<T>(), c[8].data<T>(), out[0].data<T>(), out[1].data<T>(),
      out[2].data<T>(), out[3].data<T>());
  check_launch("splat_project_backward");
}

template <class T>
void sh_op(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const i64 count = in[0].shape()[0];
  if (count == 0) return;
  const Tensor m = contiguous(in[0]), sh = contiguous(in[1]), v = contiguous(in[2]);
  sh_stage<T><<<grid_for(count, 128), 128, 0, stream()>>>(count, int(sh.shape()[1]), v.data<T>(), m.data<T>(),
                                                          sh.data<T>(), out[0].data<T>());
  check_launch("splat_sh_to_rgb");
}

template <class T>
void sh_backward_op(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const i64 count = in[0].shape()[0];
  if (count == 0) return;
  const Tensor m = contiguous(in[0]), sh = contiguous(in[1]), v = contiguous(in[2]), g = contiguous(in[3]);
  sh_stage_backward<T><<<grid_for(count, 128), 128, 0, stream()>>>(count, int(sh.shape()[1]), v.data<T>(),
                                                                   m.data<T>(), sh.data<T>(), g.data<T>(),
                                                                   out[0].data<T>(), out[1].data<T>());
  check_launch("splat_sh_to_rgb_backward");
}

template <class T>
void tile_counts_op(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const i64 count = in[0].shape()[0];
  if (count == 0) return;
  const Tensor xy = contiguous(in[0]), r = contiguous(in[1]);
  tile_counts_stage<T><<<grid_for(count, 256), 256, 0, stream()>>>(count, int(n.attrs.get_int("width")),
                                                                   int(n.attrs.get_int("height")), xy.data<T>(),
                                                                   r.data<int64_t>(), out[0].data<int64_t>());
  check_launch("splat_tile_counts");
}

template <class T>
void tile_keys_op(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  refuse_recording("splat_tile_keys");
  const i64 count = in[0].shape()[0], cap = n.attrs.get_int("capacity");
  const Tensor xy = contiguous(in[0]), d = contiguous(in[1]), r = contiguous(in[2]), e = contiguous(in[3]);
  Flag bad;
  pad_keys<<<grid_for(cap, 256), 256, 0, stream()>>>(count, e.data<int64_t>(), cap, out[0].data<int64_t>(),
                                                     out[1].data<int64_t>());
  check_launch("splat_tile_keys padding");
  if (count == 0) return;
  tile_keys_stage<T><<<grid_for(count, 256), 256, 0, stream()>>>(
      count, int(n.attrs.get_int("width")), int(n.attrs.get_int("height")), xy.data<T>(), d.data<T>(),
      r.data<int64_t>(), e.data<int64_t>(), cap, out[0].data<int64_t>(), out[1].data<int64_t>(), bad.get());
  check_launch("splat_tile_keys");
  if (bad.raised()) {
    int64_t total = 0;
    check(cudaMemcpy(&total, e.data<int64_t>() + count - 1, sizeof(total), cudaMemcpyDeviceToHost),
          "splat_tile_keys: reading the count");
    throw InputError("splat_tile_keys on cuda: the offsets are not the running sum of the tile counts, or the " +
                     std::to_string(total) + " (Gaussian, tile) intersections exceed the capacity " +
                     std::to_string(cap) + "; build the pipeline with a capacity of at least the count");
  }
}

void tile_ranges_op(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor k = contiguous(in[0]);
  const i64 tiles = out[0].shape()[0];
  check(cudaMemsetAsync(out[0].raw(), 0, out[0].nbytes(), stream()), "splat_tile_ranges: clearing");
  if (k.numel() == 0) return;
  tile_ranges<<<grid_for(k.numel(), 256), 256, 0, stream()>>>(k.data<int64_t>(), k.numel(), tiles,
                                                              reinterpret_cast<I64Range*>(out[0].data<int64_t>()));
  check_launch("splat_tile_ranges");
}

// splat_composite's inputs as the rasterizer reads them: splats, and the list and ranges in
// int, checked.
template <class T>
struct StagedLists {
  Tensor held[8];
  i64 count, len, tiles;
  int tiles_x, width, height;
  Scratch splats, list32, ranges32;

  StagedLists(const char* op, const ir::Node& n, std::span<const Tensor> in)
      : count(in[0].shape()[0]),
        len(in[5].shape()[0]),
        tiles(in[6].shape()[0]),
        width(int(n.attrs.get_int("width"))),
        height(int(n.attrs.get_int("height"))),
        splats(at_least_1(size_t(in[0].shape()[0]) * sizeof(splat::Splat2D<T>))),
        list32(at_least_1(size_t(in[5].shape()[0]) * sizeof(int))),
        ranges32(at_least_1(size_t(in[6].shape()[0]) * sizeof(int2))) {
    refuse_recording(op);
    for (int k = 0; k < 8; ++k) held[k] = contiguous(in[k]);
    tiles_x = int((width + splat::kTile - 1) / splat::kTile);
    if (count > 0)
      pack_splats<T><<<grid_for(count, 256), 256, 0, stream()>>>(count, held[0].data<T>(), held[1].data<T>(),
                                                                 held[2].data<T>(), held[3].data<T>(),
                                                                 held[4].data<T>(), splats.as<splat::Splat2D<T>>());
    Flag bad;
    narrow_lists<<<grid_for(std::max(len, tiles), 256), 256, 0, stream()>>>(
        count, len, tiles, held[5].data<int64_t>(), reinterpret_cast<const I64Range*>(held[6].data<int64_t>()),
        list32.as<int>(), ranges32.as<int2>(), bad.get());
    check_launch(op);
    if (bad.raised())
      throw InputError(std::string(op) + " on cuda: a tile's range lies outside the list of " + std::to_string(len) +
                       " entries or names a Gaussian outside [0, " + std::to_string(count) + ")");
  }
  const T* bg() const { return held[7].data<T>(); }
};

template <class T>
void composite_op(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const StagedLists<T> s("splat_composite", n, in);
  rasterize<T><<<unsigned(s.tiles), dim3(splat::kTile, splat::kTile), 0, stream()>>>(
      s.splats.template as<splat::Splat2D<T>>(), s.list32.template as<int>(), s.ranges32.template as<int2>(),
      s.tiles_x, s.width, s.height, s.bg(), out[0].data<T>(), out[1].data<T>(), out[2].data<T>());
  check_launch("splat_composite");
}

// The rasterizer's deterministic backward with the list positions as slots: each position's
// share in its own row; then the rows of each Gaussian (found by a stable sort of the list by
// Gaussian) summed in list order.
template <class T>
void composite_backward_op(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const StagedLists<T> s("splat_composite_backward", n, in);
  const Tensor gi = contiguous(in[8]), ga = contiguous(in[9]), gd = contiguous(in[10]);
  for (Tensor& o : out)
    if (o.nbytes() > 0) check(cudaMemsetAsync(o.raw(), 0, o.nbytes(), stream()), "splat: clearing gradients");
  const size_t len = size_t(s.len);
  Scratch grad(at_least_1(len * kFields * sizeof(T))), tile_bg(size_t(s.tiles) * 3 * sizeof(T));
  Scratch positions(at_least_1(2 * len * sizeof(int))), ids(at_least_1(2 * len * sizeof(int)));
  Scratch runs(at_least_1(size_t(s.count) * sizeof(int2)));
  check(cudaMemsetAsync(grad.get(), 0, len * kFields * sizeof(T), stream()), "splat: clearing gradients");
  iota_int<<<grid_for(s.len, 256), 256, 0, stream()>>>(s.len, positions.as<int>());
  rasterize_backward<T, false><<<unsigned(s.tiles), dim3(splat::kTile, splat::kTile), 0, stream()>>>(
      s.splats.template as<splat::Splat2D<T>>(), positions.as<int>(), s.list32.template as<int>(),
      s.ranges32.template as<int2>(), s.tiles_x, s.width, s.height, s.bg(), gi.data<T>(), ga.data<T>(), gd.data<T>(),
      GradRows<T>{nullptr, grad.as<T>(), 0}, tile_bg.as<T>());
  check_launch("splat_composite_backward rasterize");
  sum_background<T><<<1, kBgThreads, 0, stream()>>>(tile_bg.as<T>(), int(s.tiles), out[5].data<T>());
  check_launch("splat_composite_backward background");
  if (s.count == 0) return;
  check(cudaMemcpyAsync(ids.get(), s.list32.get(), len * sizeof(int), cudaMemcpyDeviceToDevice, stream()),
        "splat: copying the list");
  cub::DoubleBuffer<int> kb(ids.as<int>(), ids.as<int>() + len), vb(positions.as<int>(), positions.as<int>() + len);
  Binned<T>::cub_call("cub::DeviceRadixSort::SortPairs", [&](void* t, size_t& b) {
    return cub::DeviceRadixSort::SortPairs(t, b, kb, vb, int(len), 0, 32, stream());
  });
  check(cudaMemsetAsync(runs.get(), 0, size_t(s.count) * sizeof(int2), stream()), "splat: clearing runs");
  gaussian_runs<<<grid_for(s.len, 256), 256, 0, stream()>>>(kb.Current(), s.len, s.count, runs.as<int2>());
  check_launch("splat_composite_backward runs");
  sum_gaussian_rows<T><<<grid_for(s.count, 128), 128, 0, stream()>>>(
      s.count, runs.as<int2>(), vb.Current(), GradRows<T>{nullptr, grad.as<T>(), 0}, out[0].data<T>(),
      out[1].data<T>(), out[2].data<T>(), out[3].data<T>(), out[4].data<T>());
  check_launch("splat_composite_backward sums");
}

// Lists and Gaussians are int on the device (CUB's item counts, the rasterizer's slots).
std::string stage_limits(const ir::Node& n, const ir::Graph& g) {
  for (ir::Value v : n.inputs) {
    const TensorType& t = g.type(v);
    if (!t.shape.empty() && t.shape[0] >= i64(INT_MAX))
      return n.op->name + " on cuda: at most 2^31 - 2 Gaussians or list entries, got " + std::to_string(t.shape[0]);
  }
  if (n.attrs.has("capacity") && n.attrs.get_int("capacity") >= i64(INT_MAX))
    return n.op->name + " on cuda: a capacity of at most 2^31 - 2, got " + std::to_string(n.attrs.get_int("capacity"));
  return "";
}

template <void (*F32)(const ir::Node&, std::span<const Tensor>, std::span<Tensor>),
          void (*F64)(const ir::Node&, std::span<const Tensor>, std::span<Tensor>)>
void by_dtype_of(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  if (in[0].dtype() == DType::F64) F64(n, in, out);
  else F32(n, in, out);
}

}  // namespace

void add_splat_kernels(KernelTable& t) {
  const DTypeSet types = bit(DType::F32) | bit(DType::F64);
  t.add({"splat_render", types, 0, by_dtype<Render>, splat_limits});
  t.add({"splat_render_backward", types, 0, by_dtype<RenderBackward>, splat_limits});
#define RLX_SPLAT_STAGE(name, fn) t.add({name, types, 0, by_dtype_of<fn<float>, fn<double>>, stage_limits})
  RLX_SPLAT_STAGE("splat_project", project_op);
  RLX_SPLAT_STAGE("splat_project_backward", project_backward_op);
  RLX_SPLAT_STAGE("splat_sh_to_rgb", sh_op);
  RLX_SPLAT_STAGE("splat_sh_to_rgb_backward", sh_backward_op);
  RLX_SPLAT_STAGE("splat_tile_counts", tile_counts_op);
  RLX_SPLAT_STAGE("splat_tile_keys", tile_keys_op);
  RLX_SPLAT_STAGE("splat_composite", composite_op);
  RLX_SPLAT_STAGE("splat_composite_backward", composite_backward_op);
#undef RLX_SPLAT_STAGE
  t.add({"splat_tile_ranges", bit(DType::I64), 0, tile_ranges_op, stage_limits});
}

}  // namespace rlx::cuda
