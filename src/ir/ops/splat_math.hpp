// The arithmetic of Gaussian splatting (docs/splat.md) that every device's splat kernels
// share: per-Gaussian projection and SH colour, tile keys and ranges, per-pixel compositing
// and its backward, and the per-element bodies of the stage ops (splat_stages.cpp), which
// the fused kernels and the stage kernels both call.
// Written once as templates over the number type (float, double, or Dual for derivatives),
// callable from host and CUDA device code. The pipeline around it (tiles, sort, threads)
// belongs to each device. Internal to the kernels; the op declarations are in splat.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define RLX_SPLAT_HD __host__ __device__
#else
#define RLX_SPLAT_HD
#endif

namespace rlx::splat {

inline constexpr int kTile = 16;
inline constexpr double kNearZ = 0.2;
inline constexpr double kBlur = 0.3;
inline constexpr double kMaxAlpha = 0.99;
inline constexpr double kMinAlpha = 1.0 / 255.0;
inline constexpr double kMinTransmittance = 1e-4;
inline constexpr double kMaxDet = 1e30;
inline constexpr double kMinQuatNorm = 1e-12;

// ---------------------------------------------------------------- forward-mode numbers
// A value and its partial derivatives with respect to N seeded inputs. The backward of the
// per-Gaussian stages (projection, SH direction) runs them on Dual and contracts the
// Jacobian with the cotangents, which keeps one definition of the math for both passes.
template <class T, int N>
struct Dual {
  T v{};
  T d[N]{};
  RLX_SPLAT_HD Dual() = default;
  RLX_SPLAT_HD Dual(T x) : v(x) {}  // NOLINT: constants convert implicitly
};
template <class T>
RLX_SPLAT_HD inline T value_of(T x) { return x; }
template <class T, int N>
RLX_SPLAT_HD inline T value_of(const Dual<T, N>& x) { return x.v; }

template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> chain(const Dual<T, N>& a, T v, T da) {  // f(a) with f' = da
  Dual<T, N> r(v);
  for (int i = 0; i < N; ++i) r.d[i] = da * a.d[i];
  return r;
}
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> operator+(const Dual<T, N>& a, const Dual<T, N>& b) {
  Dual<T, N> r(a.v + b.v);
  for (int i = 0; i < N; ++i) r.d[i] = a.d[i] + b.d[i];
  return r;
}
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> operator-(const Dual<T, N>& a, const Dual<T, N>& b) {
  Dual<T, N> r(a.v - b.v);
  for (int i = 0; i < N; ++i) r.d[i] = a.d[i] - b.d[i];
  return r;
}
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> operator-(const Dual<T, N>& a) {
  return chain(a, -a.v, T(-1));
}
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> operator*(const Dual<T, N>& a, const Dual<T, N>& b) {
  Dual<T, N> r(a.v * b.v);
  for (int i = 0; i < N; ++i) r.d[i] = a.d[i] * b.v + a.v * b.d[i];
  return r;
}
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> operator/(const Dual<T, N>& a, const Dual<T, N>& b) {
  const T q = a.v / b.v;
  Dual<T, N> r(q);
  for (int i = 0; i < N; ++i) r.d[i] = (a.d[i] - q * b.d[i]) / b.v;
  return r;
}
#define RLX_SPLAT_MIXED(op)                                                                     \
  template <class T, int N>                                                                     \
  RLX_SPLAT_HD inline Dual<T, N> operator op(const Dual<T, N>& a, T b) { return a op Dual<T, N>(b); } \
  template <class T, int N>                                                                     \
  RLX_SPLAT_HD inline Dual<T, N> operator op(T a, const Dual<T, N>& b) { return Dual<T, N>(a) op b; }
RLX_SPLAT_MIXED(+)
RLX_SPLAT_MIXED(-)
RLX_SPLAT_MIXED(*)
RLX_SPLAT_MIXED(/)
#undef RLX_SPLAT_MIXED
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> exp(const Dual<T, N>& a) {
  using std::exp;
  const T e = exp(a.v);
  return chain(a, e, e);
}
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> sqrt(const Dual<T, N>& a) {
  using std::sqrt;
  const T s = sqrt(a.v);
  return chain(a, s, T(0.5) / s);
}
template <class T, int N>
RLX_SPLAT_HD inline Dual<T, N> seed(T v, int i) {
  Dual<T, N> r(v);
  r.d[i] = T(1);
  return r;
}

template <class S>
RLX_SPLAT_HD inline S sigmoid(const S& x) {
  using std::exp;
  return S(1) / (S(1) + exp(-x));
}

// ---------------------------------------------------------------- camera

// Intrinsics, image size and the world-to-camera transform (rows of [R | t]).
struct Camera {
  double fx = 1, fy = 1, cx = 0, cy = 0;
  int64_t width = 0, height = 0;
  double r[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, t[3] = {0, 0, 0};
  RLX_SPLAT_HD int64_t tiles_x() const { return (width + kTile - 1) / kTile; }
  RLX_SPLAT_HD int64_t tiles_y() const { return (height + kTile - 1) / kTile; }
  // C = -R^T t
  RLX_SPLAT_HD double centre(int k) const { return -(r[k] * t[0] + r[3 + k] * t[1] + r[6 + k] * t[2]); }
};

// The camera of a 4 x 4 row-major world-to-camera matrix (its last row is not read).
template <class T>
RLX_SPLAT_HD inline Camera make_camera(double fx, double fy, double cx, double cy, int64_t width, int64_t height,
                                       const T* view) {
  Camera c;
  c.fx = fx, c.fy = fy, c.cx = cx, c.cy = cy, c.width = width, c.height = height;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) c.r[3 * i + j] = double(view[4 * i + j]);
    c.t[i] = double(view[4 * i + 3]);
  }
  return c;
}

// ---------------------------------------------------------------- projection

// One Gaussian on screen: mean (u, v), conic (A, B, C), camera depth z, opacity.
template <class S>
struct Projected {
  S u, v, a, b, c, depth, opacity;
};

// Its tile rectangle [x0, x1) x [y0, y1); empty when culled.
struct TileRect {
  int32_t x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  RLX_SPLAT_HD bool empty() const { return x0 >= x1 || y0 >= y1; }
  RLX_SPLAT_HD bool contains(int64_t tx, int64_t ty) const { return tx >= x0 && tx < x1 && ty >= y0 && ty < y1; }
};

template <class T>
RLX_SPLAT_HD inline bool finite(T x) {
  return x - x == x - x;  // false for NaN and +-inf, and cheap on every device
}

// The rotation of a quaternion (w, x, y, z), normalised here; a (near) zero one is the
// identity and gets no derivative.
template <class S>
RLX_SPLAT_HD inline void rotation(const S q[4], S rot[9]) {
  using std::sqrt;
  const S n2 = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3];
  S w(1), x(0), y(0), z(0);
  if (value_of(n2) >= kMinQuatNorm * kMinQuatNorm) {
    const S inv = S(1) / sqrt(n2);
    w = q[0] * inv, x = q[1] * inv, y = q[2] * inv, z = q[3] * inv;
  }
  rot[0] = S(1) - S(2) * (y * y + z * z), rot[1] = S(2) * (x * y - w * z), rot[2] = S(2) * (x * z + w * y);
  rot[3] = S(2) * (x * y + w * z), rot[4] = S(1) - S(2) * (x * x + z * z), rot[5] = S(2) * (y * z - w * x);
  rot[6] = S(2) * (x * z - w * y), rot[7] = S(2) * (y * z + w * x), rot[8] = S(1) - S(2) * (x * x + y * y);
}

// EWA projection of one Gaussian (docs/splat.md). Returns false when it is culled (behind
// z = 0.2, non-finite, degenerate); `radius` is the screen radius in pixels.
template <class S, class T = decltype(value_of(S()))>
RLX_SPLAT_HD bool project(const S m[3], const S ls[3], const S q[4], const S& ologit, const Camera& cam,
                          Projected<S>& p, T& radius) {
  using std::exp;
  using std::sqrt;
  for (int k = 0; k < 3; ++k)
    if (!finite(value_of(m[k])) || !(value_of(ls[k]) < T(INFINITY))) return false;  // -inf: scale 0
  for (int k = 0; k < 4; ++k)
    if (!finite(value_of(q[k]))) return false;
  if (!finite(value_of(ologit))) return false;
  S cp[3];
  for (int k = 0; k < 3; ++k)
    cp[k] = T(cam.r[3 * k]) * m[0] + T(cam.r[3 * k + 1]) * m[1] + T(cam.r[3 * k + 2]) * m[2] + T(cam.t[k]);
  if (!(value_of(cp[2]) > T(kNearZ)) || !finite(value_of(cp[0])) || !finite(value_of(cp[1])) ||
      !finite(value_of(cp[2])))
    return false;
  S rot[9], s[3];
  rotation(q, rot);
  for (int k = 0; k < 3; ++k) s[k] = exp(ls[k]);
  // T = J R_V (2 x 3), then Σ' = (T R_q S)(T R_q S)^T + 0.3 I.
  const S iz = S(1) / cp[2];
  const S j00 = T(cam.fx) * iz, j02 = -(T(cam.fx) * cp[0]) * iz * iz;
  const S j11 = T(cam.fy) * iz, j12 = -(T(cam.fy) * cp[1]) * iz * iz;
  S tm[6];
  for (int k = 0; k < 3; ++k) {
    tm[k] = j00 * T(cam.r[k]) + j02 * T(cam.r[6 + k]);
    tm[3 + k] = j11 * T(cam.r[3 + k]) + j12 * T(cam.r[6 + k]);
  }
  S g[6];  // (T R_q) S, 2 x 3
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 3; ++k)
      g[3 * i + k] = (tm[3 * i] * rot[k] + tm[3 * i + 1] * rot[3 + k] + tm[3 * i + 2] * rot[6 + k]) * s[k];
  const S a = g[0] * g[0] + g[1] * g[1] + g[2] * g[2] + T(kBlur);
  const S b = g[0] * g[3] + g[1] * g[4] + g[2] * g[5];
  const S c = g[3] * g[3] + g[4] * g[4] + g[5] * g[5] + T(kBlur);
  const S det = a * c - b * b;
  const T detv = value_of(det);
  if (!(detv > T(0)) || !(detv <= T(kMaxDet))) return false;
  p.u = T(cam.fx) * cp[0] * iz + T(cam.cx);
  p.v = T(cam.fy) * cp[1] * iz + T(cam.cy);
  p.a = c / det;
  p.b = -b / det;
  p.c = a / det;
  p.depth = cp[2];
  p.opacity = sigmoid(ologit);
  const T mid = T(0.5) * (value_of(a) + value_of(c));
  const T disc = mid * mid - detv;
  const T lambda = mid + sqrt(disc > T(0.1) ? disc : T(0.1));
  radius = std::ceil(T(3) * sqrt(lambda));
  return finite(value_of(p.u)) && finite(value_of(p.v));
}

template <class T>
RLX_SPLAT_HD inline int32_t clamp_tile(T x, int64_t hi) {
  using std::floor;
  const T f = floor(x);
  return f < T(0) ? 0 : f > T(hi) ? int32_t(hi) : int32_t(f);  // NaN never reaches here (u finite)
}
template <class T>
RLX_SPLAT_HD inline TileRect tile_rect(T u, T v, T radius, const Camera& cam) {
  TileRect r;
  r.x0 = clamp_tile((u - radius) / T(kTile), cam.tiles_x());
  r.x1 = clamp_tile((u + radius) / T(kTile) + T(1), cam.tiles_x());
  r.y0 = clamp_tile((v - radius) / T(kTile), cam.tiles_y());
  r.y1 = clamp_tile((v + radius) / T(kTile) + T(1), cam.tiles_y());
  return r;
}

// EWA projection and the tile rectangle together: false when culled, off-screen included.
template <class T>
RLX_SPLAT_HD bool project_on_screen(const T m[3], const T ls[3], const T q[4], T ologit, const Camera& cam,
                                    Projected<T>& p, T& radius, TileRect& rect) {
  if (!project(m, ls, q, ologit, cam, p, radius)) return false;
  rect = tile_rect(p.u, p.v, radius, cam);
  return !rect.empty();
}

// The sort key of one (Gaussian, tile) intersection: tile << 32 | the bits of the f32 depth.
// Depths of drawn Gaussians exceed 0.2, and the bits of a positive float order as its values.
RLX_SPLAT_HD inline uint64_t tile_key(int64_t tile, float depth) {
  uint32_t bits;
  memcpy(&bits, &depth, 4);
  return uint64_t(tile) << 32 | bits;
}

// f(k, key) for the k-th tile of rectangle r, row by row: the order every device emits keys
// in, so that a stable sort leaves a tile's ties in Gaussian order.
template <class F>
RLX_SPLAT_HD void for_tile_keys(const TileRect& r, int64_t tiles_x, float depth, F f) {
  int64_t k = 0;
  for (int32_t y = r.y0; y < r.y1; ++y)
    for (int32_t x = r.x0; x < r.x1; ++x, ++k) f(k, tile_key(int64_t(y) * tiles_x + x, depth));
}

// Entry k of `total` keys sorted by tile: begin(tile, k) where a tile's run starts, end(tile,
// k + 1) where it ends. Keys of tile >= tiles (the padding of a list sized by a capacity) are
// no tile's.
template <class Key, class Begin, class End>
RLX_SPLAT_HD void tile_range_entry(const Key* keys, int64_t total, int64_t k, int64_t tiles, Begin begin, End end) {
  const uint64_t t = uint64_t(keys[k]) >> 32;
  if (t >= uint64_t(tiles)) return;
  if (k == 0 || uint64_t(keys[k - 1]) >> 32 != t) begin(int64_t(t), k);
  if (k == total - 1 || uint64_t(keys[k + 1]) >> 32 != t) end(int64_t(t), k + 1);
}

// ---------------------------------------------------------------- spherical harmonics

inline constexpr int kMaxShCoeffs = 16;
RLX_SPLAT_HD inline int sh_coeffs(int degree) { return (degree + 1) * (degree + 1); }

// The real SH basis of degrees 0..3 at the unit direction (x, y, z): f(k, basis_k) for the
// K = (degree+1)^2 values in turn, in straight-line code (a caller that folds them as they
// come keeps no array, which on cuda would live in local memory: the loop bound is K).
template <class S, class F>
RLX_SPLAT_HD void sh_basis_each(int k_count, const S& x, const S& y, const S& z, F&& f) {
  using T = decltype(value_of(S()));
  f(0, S(T(0.28209479177387814)));
  if (k_count <= 1) return;
  const T c1 = T(0.4886025119029199);
  f(1, -(c1 * y)), f(2, c1 * z), f(3, -(c1 * x));
  if (k_count <= 4) return;
  const S xx = x * x, yy = y * y, zz = z * z;
  f(4, T(1.0925484305920792) * (x * y));
  f(5, T(-1.0925484305920792) * (y * z));
  f(6, T(0.31539156525252005) * (T(2) * zz - xx - yy));
  f(7, T(-1.0925484305920792) * (x * z));
  f(8, T(0.5462742152960396) * (xx - yy));
  if (k_count <= 9) return;
  f(9, T(-0.5900435899266435) * y * (T(3) * xx - yy));
  f(10, T(2.890611442640554) * (x * y * z));
  f(11, T(-0.4570457994644658) * y * (T(4) * zz - xx - yy));
  f(12, T(0.3731763325901154) * z * (T(2) * zz - T(3) * xx - T(3) * yy));
  f(13, T(-0.4570457994644658) * x * (T(4) * zz - xx - yy));
  f(14, T(1.445305721320277) * z * (xx - yy));
  f(15, T(-0.5900435899266435) * x * (xx - T(3) * yy));
}

// The basis as an array of K values.
template <class S>
RLX_SPLAT_HD void sh_basis(int k_count, const S& x, const S& y, const S& z, S out[kMaxShCoeffs]) {
  sh_basis_each(k_count, x, y, z, [&](int k, const S& b) { out[k] = b; });
}

// The unit direction from the camera centre to the mean; a mean at the centre looks along +z.
template <class S>
RLX_SPLAT_HD void view_direction(const S m[3], const Camera& cam, S dir[3]) {
  using std::sqrt;
  using T = decltype(value_of(S()));
  S d[3];
  for (int k = 0; k < 3; ++k) d[k] = m[k] - T(cam.centre(k));
  const S n2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
  if (!(value_of(n2) > T(0))) {
    dir[0] = S(T(0)), dir[1] = S(T(0)), dir[2] = S(T(1));
    return;
  }
  const S inv = S(T(1)) / sqrt(n2);
  for (int k = 0; k < 3; ++k) dir[k] = d[k] * inv;
}

// RGB before the clamp: sum_k basis_k * coeff(k, c) + 0.5.
template <class S, class Coeff>
RLX_SPLAT_HD void sh_colour(int k_count, const S dir[3], Coeff coeff, S rgb[3]) {
  using T = decltype(value_of(S()));
  S basis[kMaxShCoeffs];
  sh_basis(k_count, dir[0], dir[1], dir[2], basis);
  for (int ch = 0; ch < 3; ++ch) {
    S acc = S(T(0.5));
    for (int k = 0; k < k_count; ++k) acc = acc + basis[k] * T(coeff(k, ch));
    rgb[ch] = acc;
  }
}

// ---------------------------------------------------------------- compositing

// A visible Gaussian as the rasterizer reads it. 16-byte aligned (48 bytes in f32, 80 in
// f64) so that cuda reads it from shared memory in 16-byte loads (4 loads per list entry in
// f32 instead of 10): the compositing loops read one per pixel per entry.
template <class T>
struct alignas(16) Splat2D {
  T u, v, a, b, c, opacity, depth, rgb[3];
};

template <class T>
struct PixelOut {
  T rgb[3] = {0, 0, 0};
  T transmittance = 1;
  T weight = 0;       // sum of w
  T depth_sum = 0;    // sum of w z
  int64_t taken = 0;  // how many list entries were visited before the stop
};

// The α of splat s at pixel centre (px, py), before the 0.99 clamp.
template <class T>
RLX_SPLAT_HD inline T raw_alpha(const Splat2D<T>& s, T px, T py, T& power) {
  using std::exp;
  const T dx = s.u - px, dy = s.v - py;
  power = T(0.5) * (s.a * dx * dx + s.c * dy * dy) + s.b * dx * dy;
  return s.opacity * exp(-power);
}

// One step of composite(): splat s at pixel centre (px, py) is skipped (α below 1/255), added
// to o, or stops the pixel (returns false; o is unchanged). Devices whose loops stage the list
// in batches (cuda) call it directly.
template <class T>
RLX_SPLAT_HD inline bool composite_step(const Splat2D<T>& s, T px, T py, PixelOut<T>& o) {
  T power;
  T alpha = raw_alpha(s, px, py, power);
  alpha = alpha < T(kMaxAlpha) ? alpha : T(kMaxAlpha);
  if (!(alpha >= T(kMinAlpha))) return true;
  const T next = o.transmittance * (T(1) - alpha);
  if (next < T(kMinTransmittance)) return false;
  const T w = alpha * o.transmittance;
  for (int ch = 0; ch < 3; ++ch) o.rgb[ch] += w * s.rgb[ch];
  o.weight += w;
  o.depth_sum += w * s.depth;
  o.transmittance = next;
  return true;
}

// Front to back over count splats, get(i) giving the i-th in depth order.
template <class T, class Get>
RLX_SPLAT_HD PixelOut<T> composite(T px, T py, int64_t count, Get get) {
  PixelOut<T> o;
  int64_t i = 0;
  for (; i < count; ++i)
    if (!composite_step(get(i), px, py, o)) break;
  o.taken = i;
  return o;
}

template <class T>
RLX_SPLAT_HD inline T expected_depth(const PixelOut<T>& o) {
  return o.weight > T(0) ? o.depth_sum / o.weight : T(0);
}

// Cotangents of one splat's screen parameters.
template <class T>
struct SplatGrad {
  T u = 0, v = 0, a = 0, b = 0, c = 0, opacity = 0, depth = 0, rgb[3] = {0, 0, 0};
};

// The backward of composite() for one pixel, as a walk back from the stop: the state after
// the splats behind the current one. Sums over what lies behind, each carrying a factor
// (1 - α_i): colour (the background's T_final * bg included), w z and w; T_i is recovered as
// T_{i+1} / (1 - α_i) (α <= 0.99).
template <class T>
struct BackwardWalk {
  T tr;                    // transmittance in front of the splat after the current one
  T tf;                    // T_final
  T g_dn, g_w;             // d depth / d (sum w z), d depth / d (sum w), times g_depth
  T after_rgb[3], after_z, after_w;
  T g_rgb[3], g_alpha;     // the pixel's cotangents

  // fwd: the pixel's forward result; g_rgb, g_alpha, g_depth: the cotangents of its image,
  // alpha and depth outputs; bg the background.
  RLX_SPLAT_HD BackwardWalk(const PixelOut<T>& fwd, const T bg[3], const T g_rgb_[3], T g_alpha_, T g_depth) {
    tf = fwd.transmittance;
    const T wsum = fwd.weight;
    const T depth = wsum > T(0) ? fwd.depth_sum / wsum : T(0);
    g_dn = wsum > T(0) ? g_depth / wsum : T(0);
    g_w = wsum > T(0) ? -depth * g_depth / wsum : T(0);
    tr = tf;
    for (int ch = 0; ch < 3; ++ch) after_rgb[ch] = tf * bg[ch], g_rgb[ch] = g_rgb_[ch];
    after_z = T(0), after_w = T(0), g_alpha = g_alpha_;
  }

  // The share of splat s, the next one walking back (one the forward pass visited); false
  // when the forward pass skipped it (g untouched).
  RLX_SPLAT_HD bool step(const Splat2D<T>& s, T px, T py, SplatGrad<T>& g) {
    T power;
    const T raw = raw_alpha(s, px, py, power);
    const bool clamped = !(raw < T(kMaxAlpha));
    const T alpha = clamped ? T(kMaxAlpha) : raw;
    if (!(alpha >= T(kMinAlpha))) return false;
    // One division, then products: the seven quotients by (1 - α_i) below cost a correctly
    // rounded division each on cuda (a Newton sequence, not one instruction), and this loop
    // runs per pixel per visited splat.
    const T inv = T(1) / (T(1) - alpha);
    const T t_i = tr * inv;
    const T w = alpha * t_i;
    T g_a = T(0);  // d L / d α_i
    for (int ch = 0; ch < 3; ++ch) {
      g.rgb[ch] = w * g_rgb[ch];
      g_a += g_rgb[ch] * (t_i * s.rgb[ch] - after_rgb[ch] * inv);
    }
    g.depth = w * g_dn;
    g_a += g_dn * (t_i * s.depth - after_z * inv);
    g_a += g_w * (t_i - after_w * inv);
    g_a += g_alpha * tf * inv;  // alpha = 1 - T_final, T_final carries (1 - α_i)
    if (!clamped) {
      using std::exp;
      const T e = exp(-power);
      g.opacity = g_a * e;
      const T g_power = -g_a * alpha;
      const T dx = s.u - px, dy = s.v - py;
      g.u = g_power * (s.a * dx + s.b * dy);
      g.v = g_power * (s.c * dy + s.b * dx);
      g.a = g_power * T(0.5) * dx * dx;
      g.c = g_power * T(0.5) * dy * dy;
      g.b = g_power * dx * dy;
    }
    for (int ch = 0; ch < 3; ++ch) after_rgb[ch] += w * s.rgb[ch];
    after_z += w * s.depth;
    after_w += w;
    tr = t_i;
    return true;
  }
};

// The backward of composite() for one pixel: add(i, grad) receives each visited splat's
// share, walking back from the stop. The background's cotangent is g_rgb * T_final.
template <class T, class Get, class Add>
RLX_SPLAT_HD void composite_backward(T px, T py, const PixelOut<T>& fwd, const T bg[3], const T g_rgb[3], T g_alpha,
                                     T g_depth, Get get, Add add) {
  BackwardWalk<T> walk(fwd, bg, g_rgb, g_alpha, g_depth);
  for (int64_t i = fwd.taken - 1; i >= 0; --i) {
    SplatGrad<T> g;
    if (walk.step(get(i), px, py, g)) add(i, g);
  }
}

// ---------------------------------------------------------------- one Gaussian, both passes

template <class T>
RLX_SPLAT_HD inline bool all_finite(const T* x, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    if (!finite(x[k])) return false;
  return true;
}

// The colour of a Gaussian with mean m and coefficients coeff[K][3], seen from the camera:
// sum_k basis_k(d) coeff[k][c] + 0.5, clamped at 0.
template <class T>
RLX_SPLAT_HD void colour_of(int k_count, const T m[3], const T* coeff, const Camera& cam, T rgb[3]) {
  T dir[3], pre[3];
  view_direction(m, cam, dir);
  sh_colour(k_count, dir, [&](int k, int ch) { return coeff[3 * k + ch]; }, pre);
  for (int ch = 0; ch < 3; ++ch) rgb[ch] = pre[ch] > T(0) ? pre[ch] : T(0);
}

// The parameters of Gaussian i in contiguous arrays (docs/splat.md): means [N,3],
// log_scales [N,3], quats [N,4], opacity_logits [N], sh [N,K,3].
template <class T>
struct Scene {
  const T *means, *log_scales, *quats, *opacity_logits, *sh;
  int64_t count = 0;
  int k_count = 1;
};

// Projection and colour of Gaussian i; false when it is culled (then s and rect are unset).
template <class T>
RLX_SPLAT_HD bool prepare(const Scene<T>& sc, int64_t i, const Camera& cam, Splat2D<T>& s, TileRect& rect) {
  const T* m = sc.means + 3 * i;
  Projected<T> p;
  T radius;
  if (!project_on_screen(m, sc.log_scales + 3 * i, sc.quats + 4 * i, sc.opacity_logits[i], cam, p, radius, rect))
    return false;
  const T* coeff = sc.sh + int64_t(3) * sc.k_count * i;
  if (!all_finite(coeff, 3 * sc.k_count)) return false;
  s = {p.u, p.v, p.a, p.b, p.c, p.opacity, p.depth, {}};
  colour_of(sc.k_count, m, coeff, cam, s.rgb);
  return true;
}

// Cotangents of a visible Gaussian's mean, log-scales, quaternion and opacity logit from
// those of its projection (g's u, v, conic, depth, opacity; its rgb is not read): the
// projection's Jacobian by forward-mode numbers, contracted with g. Writes g_means[3],
// g_log_scales[3], g_quats[4], *g_opacity_logit.
template <class T>
RLX_SPLAT_HD void project_backward(const T m[3], const T ls[3], const T q[4], T ologit, const Camera& cam,
                                   const SplatGrad<T>& g, T* g_means, T* g_log_scales, T* g_quats, T* g_opacity_logit) {
  using P = Dual<T, 11>;
  P pm[3], pls[3], pq[4];
  for (int k = 0; k < 3; ++k) pm[k] = seed<T, 11>(m[k], k), pls[k] = seed<T, 11>(ls[k], 3 + k);
  for (int k = 0; k < 4; ++k) pq[k] = seed<T, 11>(q[k], 6 + k);
  const P po = seed<T, 11>(ologit, 10);
  Projected<P> p;
  T radius;
  project(pm, pls, pq, po, cam, p, radius);
  T d[11];
  for (int j = 0; j < 11; ++j)
    d[j] = g.u * p.u.d[j] + g.v * p.v.d[j] + g.a * p.a.d[j] + g.b * p.b.d[j] + g.c * p.c.d[j] +
           g.depth * p.depth.d[j] + g.opacity * p.opacity.d[j];
  for (int k = 0; k < 3; ++k) g_means[k] = d[k], g_log_scales[k] = d[3 + k];
  for (int k = 0; k < 4; ++k) g_quats[k] = d[6 + k];
  *g_opacity_logit = d[10];
}

// Cotangents of colour_of's inputs from g_rgb: the coefficients linearly, the mean through
// the view direction (added to g_means). Writes g_sh[K*3].
template <class T>
RLX_SPLAT_HD void colour_backward(int k_count, const T m[3], const T* coeff, const Camera& cam, const T g_rgb[3],
                                  T* g_means, T* g_sh) {
  using D = Dual<T, 3>;
  D dm[3], dir[3], pre[3];
  for (int k = 0; k < 3; ++k) dm[k] = seed<T, 3>(m[k], k);
  view_direction(dm, cam, dir);
  // sh_colour's sum, folded as the basis comes (no array of dual numbers: gaussian_grads on
  // cuda kept one in local memory).
  for (int ch = 0; ch < 3; ++ch) pre[ch] = D(T(0.5));
  sh_basis_each(k_count, dir[0], dir[1], dir[2], [&](int k, const D& b) {
    for (int ch = 0; ch < 3; ++ch) pre[ch] = pre[ch] + b * T(coeff[3 * k + ch]);
  });
  T g_pre[3];
  for (int ch = 0; ch < 3; ++ch) g_pre[ch] = pre[ch].v > T(0) ? g_rgb[ch] : T(0);
  sh_basis_each(k_count, dir[0].v, dir[1].v, dir[2].v, [&](int k, T b) {
    for (int ch = 0; ch < 3; ++ch) g_sh[3 * k + ch] = b * g_pre[ch];
  });
  for (int k = 0; k < 3; ++k) {
    T dc = 0;
    for (int ch = 0; ch < 3; ++ch) dc += g_pre[ch] * pre[ch].d[k];
    g_means[k] += dc;
  }
}

// Cotangents of Gaussian i's parameters from its screen cotangent g (for a visible Gaussian):
// the projection's and the colour's. Writes g_means[3], g_log_scales[3], g_quats[4],
// *g_opacity_logit, g_sh[K*3].
template <class T>
RLX_SPLAT_HD void gaussian_backward(const Scene<T>& sc, int64_t i, const Camera& cam, const SplatGrad<T>& g,
                                    T* g_means, T* g_log_scales, T* g_quats, T* g_opacity_logit, T* g_sh) {
  const T* m = sc.means + 3 * i;
  project_backward(m, sc.log_scales + 3 * i, sc.quats + 4 * i, sc.opacity_logits[i], cam, g, g_means, g_log_scales,
                   g_quats, g_opacity_logit);
  colour_backward(sc.k_count, m, sc.sh + int64_t(3) * sc.k_count * i, cam, g.rgb, g_means, g_sh);
}

// ---------------------------------------------------------------- the stages as ops

// The largest radius splat_project reports (radii are i64); far beyond any image.
inline constexpr int64_t kMaxRadius = int64_t(1) << 62;

// splat_project for one Gaussian: screen mean, conic, depth, opacity and radius; all zero
// (radius 0) when it is culled (docs/splat.md, "The stages as ops").
template <class T>
RLX_SPLAT_HD void project_stage(const T m[3], const T ls[3], const T q[4], T ologit, const Camera& cam, T xy[2],
                                T conic[3], T* depth, T* opacity, int64_t* radius) {
  Projected<T> p;
  T r;
  TileRect rect;
  if (!project_on_screen(m, ls, q, ologit, cam, p, r, rect)) {
    xy[0] = xy[1] = conic[0] = conic[1] = conic[2] = *depth = *opacity = T(0);
    *radius = 0;
    return;
  }
  xy[0] = p.u, xy[1] = p.v, conic[0] = p.a, conic[1] = p.b, conic[2] = p.c, *depth = p.depth, *opacity = p.opacity;
  *radius = r < T(kMaxRadius) ? int64_t(r) : kMaxRadius;
}

// splat_project_backward for one Gaussian: zeros for a culled one.
template <class T>
RLX_SPLAT_HD void project_stage_backward(const T m[3], const T ls[3], const T q[4], T ologit, const Camera& cam,
                                         const T g_xy[2], const T g_conic[3], T g_depth, T g_opacity, T* g_means,
                                         T* g_log_scales, T* g_quats, T* g_opacity_logit) {
  Projected<T> p;
  T r;
  TileRect rect;
  if (!project_on_screen(m, ls, q, ologit, cam, p, r, rect)) {
    for (int k = 0; k < 3; ++k) g_means[k] = g_log_scales[k] = T(0);
    for (int k = 0; k < 4; ++k) g_quats[k] = T(0);
    *g_opacity_logit = T(0);
    return;
  }
  SplatGrad<T> g;
  g.u = g_xy[0], g.v = g_xy[1], g.a = g_conic[0], g.b = g_conic[1], g.c = g_conic[2], g.depth = g_depth;
  g.opacity = g_opacity;
  project_backward(m, ls, q, ologit, cam, g, g_means, g_log_scales, g_quats, g_opacity_logit);
}

// splat_sh_to_rgb for one Gaussian: colour_of, or 0 when the mean or a coefficient is not
// finite (such a Gaussian is culled by the pipeline).
template <class T>
RLX_SPLAT_HD void sh_stage(int k_count, const T m[3], const T* coeff, const Camera& cam, T rgb[3]) {
  if (!all_finite(m, 3) || !all_finite(coeff, 3 * k_count)) {
    rgb[0] = rgb[1] = rgb[2] = T(0);
    return;
  }
  colour_of(k_count, m, coeff, cam, rgb);
}

// splat_sh_to_rgb_backward for one Gaussian: writes g_means[3] and g_sh[K*3] (zeros where
// sh_stage gave 0).
template <class T>
RLX_SPLAT_HD void sh_stage_backward(int k_count, const T m[3], const T* coeff, const Camera& cam, const T g_rgb[3],
                                    T* g_means, T* g_sh) {
  for (int k = 0; k < 3; ++k) g_means[k] = T(0);
  if (!all_finite(m, 3) || !all_finite(coeff, 3 * k_count)) {
    for (int k = 0; k < 3 * k_count; ++k) g_sh[k] = T(0);
    return;
  }
  colour_backward(k_count, m, coeff, cam, g_rgb, g_means, g_sh);
}

// The tile rectangle of a Gaussian as the tile stages see it: empty for radius 0 (culled).
template <class T>
RLX_SPLAT_HD inline TileRect stage_rect(T u, T v, int64_t radius, const Camera& cam) {
  if (radius <= 0) return {};
  return tile_rect(u, v, T(radius), cam);
}
RLX_SPLAT_HD inline int64_t rect_area(const TileRect& r) {
  return r.empty() ? 0 : int64_t(r.x1 - r.x0) * (r.y1 - r.y0);
}

// The padding of the intersection list past its count: a key of no tile (it sorts last) and
// no Gaussian.
inline constexpr int64_t kPadKey = INT64_MAX;
inline constexpr int64_t kPadId = -1;

// The Splat2D of Gaussian i from the composite stage's inputs (structure of arrays).
template <class T>
RLX_SPLAT_HD inline Splat2D<T> splat_of(int64_t i, const T* xy, const T* conic, const T* opacity, const T* rgb,
                                        const T* depth) {
  return {xy[2 * i], xy[2 * i + 1], conic[3 * i], conic[3 * i + 1], conic[3 * i + 2], opacity[i], depth[i],
          {rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]}};
}

// The composite stage's cotangents of Gaussian i (structure of arrays) from its SplatGrad.
template <class T>
RLX_SPLAT_HD inline void store_grad(const SplatGrad<T>& g, int64_t i, T* g_xy, T* g_conic, T* g_opacity, T* g_rgb,
                                    T* g_depth) {
  g_xy[2 * i] = g.u, g_xy[2 * i + 1] = g.v;
  g_conic[3 * i] = g.a, g_conic[3 * i + 1] = g.b, g_conic[3 * i + 2] = g.c;
  g_opacity[i] = g.opacity, g_depth[i] = g.depth;
  for (int ch = 0; ch < 3; ++ch) g_rgb[3 * i + ch] = g.rgb[ch];
}

}  // namespace rlx::splat
