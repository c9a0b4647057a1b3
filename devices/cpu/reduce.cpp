// Reductions (sum, prod, max, min), argmax and cumsum. Sums and products accumulate
// in f64 (floats), i64 (integers, wrapping) or complex<f64> (c64) and round once.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "devices/cpu/ew_kernels.hpp"
#include "devices/cpu/kernels.hpp"
#include "devices/cpu/thread_pool.hpp"

namespace rlx::cpu {

namespace {

// How a storage type is read, accumulated and written back.
template <class T>
struct Num {
  using wide = std::conditional_t<std::is_integral_v<T>, int64_t, double>;  // sum/prod
  using cmp = T;                                                            // max/min
  static wide to_wide(T v) { return wide(v); }
  static cmp to_cmp(T v) { return v; }
  static T from_wide(wide a) { return T(a); }
  static T from_cmp(cmp a) { return a; }
};
template <class H>
struct NumHalf {
  using wide = double;
  using cmp = float;
  static double to_wide(H v) { return double(float(v)); }
  static float to_cmp(H v) { return float(v); }
  static H from_wide(double a) { return H(f64_to_f32_odd(a)); }
  static H from_cmp(float a) { return H(a); }
};
template <> struct Num<f16> : NumHalf<f16> {};
template <> struct Num<bf16> : NumHalf<bf16> {};
template <> struct Num<c64> {
  using wide = std::complex<double>;
  using cmp = c64;
  static wide to_wide(c64 v) { return {v.real(), v.imag()}; }
  static cmp to_cmp(c64 v) { return v; }
  static c64 from_wide(wide a) { return {float(a.real()), float(a.imag())}; }
  static c64 from_cmp(cmp a) { return a; }
};

// NaN propagates; otherwise the first operand wins ties (as the reference kernels).
template <class C>
inline C nan_max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return (a != a || b != b) ? a + b : (a < b ? b : a);
  else return a < b ? b : a;
}
template <class C>
inline C nan_min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return (a != a || b != b) ? a + b : (b < a ? b : a);
  else return b < a ? b : a;
}

// The operation on the accumulator type A.
template <ReduceOp OP, class A>
struct Red {
  static A identity() {
    if constexpr (OP == ReduceOp::Sum) return A(0);
    else if constexpr (OP == ReduceOp::Prod) return A(1);
    else if constexpr (OP == ReduceOp::Max) {
      if constexpr (std::numeric_limits<A>::has_infinity) return -std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::lowest();
    } else {
      if constexpr (std::numeric_limits<A>::has_infinity) return std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::max();
    }
  }
  static A apply(A a, A b) {
    if constexpr (OP == ReduceOp::Sum) return a + b;
    else if constexpr (OP == ReduceOp::Prod) return a * b;
    else if constexpr (OP == ReduceOp::Max) return nan_max(a, b);
    else return nan_min(a, b);
  }
};

template <class T, ReduceOp OP>
struct Traits {
  static constexpr bool wide_op = OP == ReduceOp::Sum || OP == ReduceOp::Prod;
  using A = std::conditional_t<wide_op, typename Num<T>::wide, typename Num<T>::cmp>;
  using R = Red<OP, A>;
  static A load(T v) {
    if constexpr (wide_op) return Num<T>::to_wide(v);
    else return Num<T>::to_cmp(v);
  }
  static T store(A a) {
    if constexpr (wide_op) return Num<T>::from_wide(a);
    else return Num<T>::from_cmp(a);
  }
};

// Reduces a contiguous run of n elements, 16 independent lanes (vectorizable, and a
// fixed summation order).
template <class T, ReduceOp OP>
typename Traits<T, OP>::A reduce_run(const T* p, int64_t n) {
  using Tr = Traits<T, OP>;
  using A = typename Tr::A;
  constexpr int W = 16;
  A lane[W];
  for (int j = 0; j < W; ++j) lane[j] = Tr::R::identity();
  int64_t i = 0;
  for (; i + W <= n; i += W)
    for (int j = 0; j < W; ++j) lane[j] = Tr::R::apply(lane[j], Tr::load(p[i + j]));
  for (; i < n; ++i) lane[0] = Tr::R::apply(lane[0], Tr::load(p[i]));
  for (int w = W / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lane[j] = Tr::R::apply(lane[j], lane[j + w]);
  return lane[0];
}

template <class T, ReduceOp OP>
void reduce_typed(const Tensor& x, const std::vector<int>& axes, Tensor& out) {
  using Tr = Traits<T, OP>;
  using A = typename Tr::A;
  const int64_t on = out.numel();
  T* o = out.data<T>();
  // Collapsed groups of (extent, reduced).
  std::vector<int64_t> ext;
  std::vector<bool> red;
  for (int d = 0; d < x.rank(); ++d) {
    int64_t e = x.shape()[size_t(d)];
    bool r = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (e == 1) continue;
    if (!ext.empty() && red.back() == r)
      ext.back() *= e;
    else {
      ext.push_back(e);
      red.push_back(r);
    }
  }
  const T* p = x.data<T>();
  if (x.numel() == 0 || ext.empty()) {  // nothing to combine: identity, or a copy
    for (int64_t i = 0; i < on; ++i) o[i] = Tr::store(x.numel() == 0 ? Tr::R::identity() : Tr::load(p[i]));
    return;
  }
  const int g = int(ext.size());
  std::vector<int64_t> ostride(size_t(g), 0);
  {
    int64_t acc = 1;
    for (int k = g - 1; k >= 0; --k)
      if (!red[size_t(k)]) {
        ostride[size_t(k)] = acc;
        acc *= ext[size_t(k)];
      }
  }
  const int64_t L = ext.back();
  const bool inner_red = red.back();
  const int64_t rows = x.numel() / L;

  // rows [r0, r1) into acc (which starts at identity)
  auto run_rows = [&](int64_t r0, int64_t r1, A* acc) {
    if (r0 >= r1) return;
    int64_t idx[64];
    int64_t rem = r0, off = 0;
    for (int k = g - 2; k >= 0; --k) {
      idx[k] = rem % ext[size_t(k)];
      rem /= ext[size_t(k)];
      off += idx[k] * ostride[size_t(k)];
    }
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = p + r * L;
      if (inner_red) {
        acc[off] = Tr::R::apply(acc[off], reduce_run<T, OP>(row, L));
      } else {
        A* a = acc + off;
        for (int64_t j = 0; j < L; ++j) a[j] = Tr::R::apply(a[j], Tr::load(row[j]));
      }
      for (int k = g - 2; k >= 0; --k) {
        off += ostride[size_t(k)];
        if (++idx[k] < ext[size_t(k)]) break;
        off -= idx[k] * ostride[size_t(k)];
        idx[k] = 0;
      }
    }
  };

  std::vector<A> acc(static_cast<size_t>(on), Tr::R::identity());
  ThreadPool& pool = ThreadPool::instance();
  const bool big = x.numel() >= (1 << 16) && !ThreadPool::in_task() && pool.size() > 1;
  if (big && g >= 2 && !red[0]) {
    // The outermost group is kept: threads own disjoint outputs.
    const int64_t per = rows / ext[0];
    parallel_for(ext[0], 1, [&](int64_t e0, int64_t e1) { run_rows(e0 * per, e1 * per, acc.data()); });
  } else if (big && on <= (1 << 20)) {
    // Private partial results per thread, combined in thread order.
    int nt = int(std::min<int64_t>(pool.size(), rows));
    std::vector<std::vector<A>> part(static_cast<size_t>(nt));
    pool.run(nt, [&](int t, int ntt) {
      part[size_t(t)].assign(static_cast<size_t>(on), Tr::R::identity());
      run_rows(rows * t / ntt, rows * (t + 1) / ntt, part[size_t(t)].data());
    });
    for (int t = 0; t < nt; ++t)
      for (int64_t i = 0; i < on; ++i) acc[size_t(i)] = Tr::R::apply(acc[size_t(i)], part[size_t(t)][size_t(i)]);
  } else {
    run_rows(0, rows, acc.data());
  }
  for (int64_t i = 0; i < on; ++i) o[i] = Tr::store(acc[size_t(i)]);
}

template <class T, class F>
void with_ops(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::Sum: f(std::integral_constant<ReduceOp, ReduceOp::Sum>{}); return;
    case ReduceOp::Prod: f(std::integral_constant<ReduceOp, ReduceOp::Prod>{}); return;
    case ReduceOp::Max: f(std::integral_constant<ReduceOp, ReduceOp::Max>{}); return;
    case ReduceOp::Min: f(std::integral_constant<ReduceOp, ReduceOp::Min>{}); return;
  }
}

void three_dims(const Tensor& x, int axis, int64_t& outer, int64_t& A, int64_t& inner) {
  outer = inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[size_t(d)];
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[size_t(d)];
  A = x.shape()[size_t(axis)];
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x_in, const std::vector<int>& axes, Tensor& out) {
  Tensor x = x_in.contiguous();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw InternalError("cpu reduce: bool operand");
    } else {
      with_ops<T>(op, [&](auto opc) {
        constexpr ReduceOp OP = decltype(opc)::value;
        if constexpr (std::is_same_v<T, c64> && (OP == ReduceOp::Max || OP == ReduceOp::Min))
          throw InternalError("cpu reduce: no c64 max/min");
        else
          reduce_typed<T, OP>(x, axes, out);
      });
    }
  });
}

void argmax(const Tensor& x_in, int axis, Tensor& out) {
  Tensor x = x_in.contiguous();
  int64_t outer, A, inner;
  three_dims(x, axis, outer, A, inner);
  int64_t* o = out.data<int64_t>();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, c64>) {
      throw InternalError("cpu argmax: unsupported dtype");
    } else {
      using C = typename Num<T>::cmp;
      const T* p = x.data<T>();
      // NaN counts as the largest value; ties and repeated NaNs keep the first index.
      auto better = [](C v, C best) {
        if constexpr (std::is_floating_point_v<C>) return v > best || (v != v && best == best);
        else return v > best;
      };
      auto body = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {  // t = (outer, inner) pair
          int64_t ob = t / inner, in = t % inner;
          const T* q = p + ob * A * inner + in;
          C best = Num<T>::to_cmp(q[0]);
          int64_t bi = 0;
          for (int64_t a = 1; a < A; ++a) {
            C v = Num<T>::to_cmp(q[a * inner]);
            if (better(v, best)) {
              best = v;
              bi = a;
            }
          }
          o[t] = bi;
        }
      };
      if (x.numel() < (1 << 16))
        body(0, outer * inner);
      else
        parallel_for(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(A, 1)), body);
    }
  });
}

void cumsum(const Tensor& x_in, int axis, bool exclusive, bool reverse, Tensor& out) {
  Tensor x = x_in.contiguous();
  int64_t outer, A, inner;
  three_dims(x, axis, outer, A, inner);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw InternalError("cpu cumsum: bool operand");
    } else {
      using W = typename Num<T>::wide;
      const T* p = x.data<T>();
      T* o = out.data<T>();
      constexpr int64_t kBlock = 256;  // columns per task
      const int64_t cb = (inner + kBlock - 1) / kBlock;
      auto body = [&](int64_t t0, int64_t t1) {
        W acc[kBlock];
        for (int64_t t = t0; t < t1; ++t) {
          int64_t ob = t / cb, c0 = (t % cb) * kBlock, c1 = std::min(inner, c0 + kBlock);
          for (int64_t c = c0; c < c1; ++c) acc[c - c0] = W(0);
          for (int64_t s = 0; s < A; ++s) {
            int64_t a = reverse ? A - 1 - s : s;
            const T* src = p + (ob * A + a) * inner;
            T* dst = o + (ob * A + a) * inner;
            for (int64_t c = c0; c < c1; ++c) {
              W v = Num<T>::to_wide(src[c]);
              if (exclusive) {
                dst[c] = Num<T>::from_wide(acc[c - c0]);
                acc[c - c0] += v;
              } else {
                acc[c - c0] += v;
                dst[c] = Num<T>::from_wide(acc[c - c0]);
              }
            }
          }
        }
      };
      if (x.numel() < (1 << 16))
        body(0, outer * cb);
      else
        parallel_for(outer * cb, 1, body);
    }
  });
}

}  // namespace rlx::cpu
