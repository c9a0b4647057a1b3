// Data movement: strided copies (permute, broadcast_to, slice, concat, pad), gather
// and scatter_add.
#include <algorithm>
#include <complex>
#include <cstring>
#include <string>

#include "core/collapse_dims.hpp"
#include "core/error.hpp"
#include "devices/cpu/ew_kernels.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"

namespace rlx::cpu {

namespace {

constexpr int64_t kParallelBytes = 1 << 16;  // below this a copy runs on one thread

template <class E>
void copy_range(const E* src, const int64_t* ss, E* dst, const int64_t* ds, const int64_t* sh, int r, int64_t f0,
                int64_t f1) {
  if (r == 0) {
    if (f0 < f1) dst[0] = src[0];
    return;
  }
  int64_t idx[32];
  int64_t rem = f0, so = 0, dof = 0;
  for (int k = r - 1; k >= 0; --k) {
    idx[k] = rem % sh[k];
    rem /= sh[k];
    so += idx[k] * ss[k];
    dof += idx[k] * ds[k];
  }
  const int last = r - 1;
  const int64_t s1 = ss[last], d1 = ds[last];
  int64_t f = f0;
  while (f < f1) {
    int64_t run = std::min(sh[last] - idx[last], f1 - f);
    const E* p = src + so;
    E* q = dst + dof;
    if (s1 == 1 && d1 == 1)
      std::memcpy(q, p, size_t(run) * sizeof(E));
    else if (s1 == 0) {
      E v = p[0];
      for (int64_t j = 0; j < run; ++j) q[j * d1] = v;
    } else
      for (int64_t j = 0; j < run; ++j) q[j * d1] = p[j * s1];
    f += run;
    so += run * s1;
    dof += run * d1;
    idx[last] += run;
    for (int k = last; k > 0 && idx[k] == sh[k]; --k) {
      so -= idx[k] * ss[k];
      dof -= idx[k] * ds[k];
      idx[k] = 0;
      ++idx[k - 1];
      so += ss[k - 1];
      dof += ds[k - 1];
    }
  }
}

// Transpose-like copies (src unit stride on the second-to-last dim, dst on the last):
// 32 x 32 tiles so that both sides touch whole cache lines.
template <class E>
void copy_tiled(const E* src, const int64_t* ss, E* dst, const int64_t* ds, const int64_t* sh, int r) {
  constexpr int64_t T = 32;
  const int64_t R = sh[r - 2], C = sh[r - 1];
  int64_t outer = 1;
  for (int k = 0; k < r - 2; ++k) outer *= sh[k];
  const int64_t rb = (R + T - 1) / T;
  const int64_t total = outer * rb;
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t o = t / rb, i0 = (t % rb) * T;
      int64_t so = 0, dof = 0, rem = o;
      for (int k = r - 3; k >= 0; --k) {
        int64_t ix = rem % sh[k];
        rem /= sh[k];
        so += ix * ss[k];
        dof += ix * ds[k];
      }
      const int64_t i1 = std::min(R, i0 + T);
      for (int64_t j0 = 0; j0 < C; j0 += T) {
        const int64_t j1 = std::min(C, j0 + T);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j)
            dst[dof + i * ds[r - 2] + j * ds[r - 1]] = src[so + i * ss[r - 2] + j * ss[r - 1]];
      }
    }
  };
  if (R * C * outer * int64_t(sizeof(E)) < kParallelBytes)
    body(0, total);
  else
    parallel_for(total, 1, body);
}

template <class E>
void copy_typed(const void* src, const int64_t* ss, void* dst, const int64_t* ds, const Shape& shape) {
  int64_t sh[32], s[32], d[32];
  if (shape.size() > 32) throw InternalError("cpu copy: rank above 32");
  const int rank = int(shape.size());
  std::copy(shape.begin(), shape.end(), sh);
  std::copy(ss, ss + rank, s);
  std::copy(ds, ds + rank, d);
  const int r = collapse_dims(rank, sh, {s, d});
  const E* S = static_cast<const E*>(src);
  E* D = static_cast<E*>(dst);
  if (r >= 2 && s[r - 1] != 1 && s[r - 2] == 1 && d[r - 1] == 1 && sh[r - 1] >= 8 && sh[r - 2] >= 8) {
    copy_tiled<E>(S, s, D, d, sh, r);
    return;
  }
  int64_t n = 1;
  for (int k = 0; k < r; ++k) n *= sh[k];
  if (n * int64_t(sizeof(E)) < kParallelBytes)
    copy_range<E>(S, s, D, d, sh, r, 0, n);
  else
    parallel_for(n, 4096, [&](int64_t f0, int64_t f1) { copy_range<E>(S, s, D, d, sh, r, f0, f1); });
}

// Element size -> a trivially copyable type of that size.
template <class F>
void by_size(size_t esize, F&& f) {
  switch (esize) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
  }
  throw InternalError("cpu copy: element size " + std::to_string(esize));
}

void require_whole_bytes(const Tensor& t, const char* op) {
  if (t.dtype() == DType::I4) throw InternalError(std::string("cpu ") + op + ": i4 operand");
}

// Writes one element of dtype t holding `value` (float rules of cast) into dst.
void scalar_of(DType t, double value, void* dst) {
  double v = value;
  DType src = DType::F64;
  ew_cast(ck_of(src), t, &v, dst, 1);  // into the compute kind of t
  store_convert(t, dst, dst, 1);       // f16/bf16: compute f32 -> storage bits (in place is fine for n=1)
}

int64_t index_of(const Tensor& idx, int64_t j) {
  return idx.dtype() == DType::I32 ? int64_t(idx.data<int32_t>()[j]) : idx.data<int64_t>()[j];
}

[[noreturn]] void bad_index(int64_t v, int64_t extent, int axis) {
  throw InputError("index " + std::to_string(v) + " is out of range for axis " + std::to_string(axis) +
                   " of extent " + std::to_string(extent));
}

}  // namespace

void copy_view(const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides, const Shape& shape,
               size_t esize) {
  for (int64_t d : shape)
    if (d == 0) return;
  by_size(esize, [&](auto e) { copy_typed<decltype(e)>(src, src_strides, dst, dst_strides, shape); });
}

void permute(const Tensor& x, const std::vector<int64_t>& perm, Tensor& out) {
  require_whole_bytes(x, "permute");
  std::vector<int64_t> ss(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) ss[d] = x.strides()[size_t(perm[d])];
  copy_view(x.raw(), ss.data(), out.raw(), out.strides().data(), out.shape(), dtype_size(x.dtype()));
}

void broadcast_to(const Tensor& x, Tensor& out) {
  require_whole_bytes(x, "broadcast_to");
  const int r = out.rank(), xr = x.rank();
  std::vector<int64_t> ss(size_t(r), 0);
  for (int d = 0; d < r; ++d) {
    int xd = d - (r - xr);
    if (xd >= 0 && x.shape()[size_t(xd)] != 1) ss[size_t(d)] = x.strides()[size_t(xd)];
  }
  copy_view(x.raw(), ss.data(), out.raw(), out.strides().data(), out.shape(), dtype_size(x.dtype()));
}

void slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps, Tensor& out) {
  require_whole_bytes(x, "slice");
  if (out.numel() == 0) return;
  const size_t es = dtype_size(x.dtype());
  int64_t off = 0;
  std::vector<int64_t> ss(size_t(x.rank()));
  for (int d = 0; d < x.rank(); ++d) {
    off += starts[size_t(d)] * x.strides()[size_t(d)];
    ss[size_t(d)] = x.strides()[size_t(d)] * steps[size_t(d)];
  }
  copy_view(static_cast<const char*>(x.raw()) + off * int64_t(es), ss.data(), out.raw(), out.strides().data(),
            out.shape(), es);
}

void concat(std::span<const Tensor> xs, int axis, Tensor& out) {
  const size_t es = dtype_size(out.dtype());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    require_whole_bytes(x, "concat");
    char* dst = static_cast<char*>(out.raw()) + at * out.strides()[size_t(axis)] * int64_t(es);
    copy_view(x.raw(), x.strides().data(), dst, out.strides().data(), x.shape(), es);
    at += x.shape()[size_t(axis)];
  }
}

void pad(const Tensor& x, const std::vector<int64_t>& low, double value, Tensor& out) {
  require_whole_bytes(x, "pad");
  const size_t es = dtype_size(out.dtype());
  alignas(8) unsigned char v[16];
  scalar_of(out.dtype(), value, v);
  Tensor one = Tensor::view_of(v, host_allocator(), out.dtype(), {});
  broadcast_to(one, out);
  int64_t off = 0;
  for (int d = 0; d < out.rank(); ++d) off += low[size_t(d)] * out.strides()[size_t(d)];
  copy_view(x.raw(), x.strides().data(), static_cast<char*>(out.raw()) + off * int64_t(es), out.strides().data(),
            x.shape(), es);
}

// In place (out is x's buffer, update_slice's inplace_input) only the block is written.
void update_slice(const Tensor& x, const Tensor& block, const Tensor& start, int axis, Tensor& out) {
  require_whole_bytes(x, "update_slice");
  const int64_t s = index_of(start, 0), room = x.shape()[size_t(axis)] - block.shape()[size_t(axis)];
  if (s < 0 || s > room)
    throw InputError(update_slice_bad_start(s, x.shape()[size_t(axis)], block.shape()[size_t(axis)], axis));
  const size_t es = dtype_size(x.dtype());
  if (out.raw() != x.raw())
    copy_view(x.raw(), x.strides().data(), out.raw(), out.strides().data(), out.shape(), es);
  copy_view(block.raw(), block.strides().data(),
            static_cast<char*>(out.raw()) + s * out.strides()[size_t(axis)] * int64_t(es), out.strides().data(),
            block.shape(), es);
}

void gather(const Tensor& x_in, const Tensor& idx_in, int axis, Tensor& out) {
  require_whole_bytes(x_in, "gather");
  Tensor x = x_in.contiguous(), idx = idx_in.contiguous();
  const size_t es = dtype_size(x.dtype());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  const int64_t A = x.shape()[size_t(axis)], J = idx.numel();
  // i64 indices already in [0, A) (a halo's send order, embedding ids) are read in place after
  // one pass for their range; others (i32, negative ones counting from the end) are
  // converted first.
  std::vector<int64_t> converted;
  const int64_t* ix = nullptr;
  if (idx.dtype() == DType::I64) {
    const int64_t* p = idx.data<int64_t>();
    int64_t lo = 0, hi = -1;
    if (J > 0) lo = hi = p[0];
    for (int64_t j = 1; j < J; ++j) lo = std::min(lo, p[j]), hi = std::max(hi, p[j]);
    if (lo >= 0 && hi < A) ix = p;
  }
  if (!ix) {
    converted.resize(size_t(J));
    for (int64_t j = 0; j < J; ++j) {
      int64_t v = index_of(idx, j);
      if (v < -A || v >= A) bad_index(v, A, axis);
      converted[size_t(j)] = v < 0 ? v + A : v;
    }
    ix = converted.data();
  }
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(out.raw());
  const size_t row = size_t(inner) * es;
  // Single elements (im2col's windows, embedding rows of width 1): typed loads and stores,
  // walking (o, j) without a division per element, instead of a memcpy call per element.
  auto elements = [&](auto tag, int64_t t0, int64_t t1) {
    using T = decltype(tag);
    const T* s = reinterpret_cast<const T*>(src);
    T* d = reinterpret_cast<T*>(dst);
    int64_t o = t0 / J, j = t0 % J;
    for (int64_t t = t0; t < t1; ++t) {
      d[t] = s[o * A + ix[j]];
      if (++j == J) j = 0, ++o;
    }
  };
  auto body = [&](int64_t t0, int64_t t1) {
    if (inner == 1 && es == 4) return elements(uint32_t{}, t0, t1);
    if (inner == 1 && es == 8) return elements(uint64_t{}, t0, t1);
    if (inner == 1 && es == 2) return elements(uint16_t{}, t0, t1);
    for (int64_t t = t0; t < t1; ++t) {
      int64_t o = t / J, j = t % J;
      std::memcpy(dst + size_t(t) * row, src + (size_t(o) * size_t(A) + size_t(ix[j])) * row, row);
    }
  };
  const int64_t total = outer * J;
  if (int64_t(row) * total < kParallelBytes)
    body(0, total);
  else
    parallel_for(total, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)), body);
}

namespace {
template <class T>
struct Acc {
  using type = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  static type in(T v) { return type(v); }
  static T out(type a) { return T(a); }
};
template <> struct Acc<f16> {
  using type = double;
  static double in(f16 v) { return double(float(v)); }
  static f16 out(double a) { return f16(f64_to_f32_odd(a)); }
};
template <> struct Acc<bf16> {
  using type = double;
  static double in(bf16 v) { return double(float(v)); }
  static bf16 out(double a) { return bf16(f64_to_f32_odd(a)); }
};
template <> struct Acc<c64> {
  using type = std::complex<double>;
  static type in(c64 v) { return {v.real(), v.imag()}; }
  static c64 out(type a) { return {float(a.real()), float(a.imag())}; }
};
template <> struct Acc<float> {
  using type = double;
  static double in(float v) { return v; }
  static float out(double a) { return float(a); }
};
}  // namespace

void scatter_add(const Tensor& x_in, const Tensor& idx_in, const Tensor& upd_in, int axis, Tensor& out) {
  require_whole_bytes(x_in, "scatter_add");
  Tensor idx = idx_in.contiguous(), upd = upd_in.contiguous();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x_in.shape()[size_t(d)];
  for (int d = axis + 1; d < x_in.rank(); ++d) inner *= x_in.shape()[size_t(d)];
  const int64_t A = x_in.shape()[size_t(axis)], J = idx.numel();
  std::vector<int64_t> ix(static_cast<size_t>(J));
  for (int64_t j = 0; j < J; ++j) {
    int64_t v = index_of(idx, j);
    if (v < -A || v >= A) bad_index(v, A, axis);
    ix[size_t(j)] = v < 0 ? v + A : v;
  }
  copy_view(x_in.raw(), x_in.strides().data(), out.raw(), out.strides().data(), out.shape(), dtype_size(out.dtype()));
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw InternalError("cpu scatter_add: bool operand");
    } else {
      using AT = Acc<T>;
      using W = typename AT::type;
      // Accumulate wide (f64, i64, complex<f64>) and round once per element.
      const int64_t n = out.numel();
      std::vector<W> w(static_cast<size_t>(n));
      T* o = out.data<T>();
      const T* u = upd.data<T>();
      for (int64_t i = 0; i < n; ++i) w[size_t(i)] = AT::in(o[i]);
      // Each (outer, inner) column is independent; its updates apply in index order.
      auto body = [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          int64_t ob = c / inner, in = c % inner;
          for (int64_t j = 0; j < J; ++j)
            w[size_t((ob * A + ix[size_t(j)]) * inner + in)] += AT::in(u[(ob * J + j) * inner + in]);
        }
      };
      if (outer * inner * J < 65536)
        body(0, outer * inner);
      else
        parallel_for(outer * inner, 64, body);
      for (int64_t i = 0; i < n; ++i) o[i] = AT::out(w[size_t(i)]);
    }
  });
}

}  // namespace rlx::cpu
