// Host-side scalar helpers shared by the solvers: compute types per value dtype.
#pragma once
#include <complex>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace rlx::sparse {

inline double conj_of(double x) { return x; }
inline std::complex<double> conj_of(std::complex<double> x) { return std::conj(x); }
inline double real_of(double x) { return x; }
inline double real_of(std::complex<double> x) { return x.real(); }
inline double abs2(double x) { return x * x; }
inline double abs2(std::complex<double> x) { return std::norm(x); }
template <class T, class S> T widen(S s) {
  if constexpr (std::is_same_v<S, c64>) return T(std::complex<double>(s.real(), s.imag()));
  else return T(s);
}
template <class S, class T> S narrow(T t) {
  if constexpr (std::is_same_v<S, c64>) return c64(float(t.real()), float(t.imag()));
  else return S(t);
}

// Calls f(T{}, S{}): setup arithmetic runs in T (double, or complex<double> for c64)
// whatever the storage type S (float, double, c64).
template <class F>
void dispatch_value(DType t, F&& f) {
  if (t == DType::F64) return f(double{}, double{});
  if (t == DType::F32) return f(double{}, float{});
  if (t == DType::C64) return f(std::complex<double>{}, c64{});
  throw InputError(std::string("sparse solvers support f32, f64 and c64 values, not ") + dtype_name(t));
}

}  // namespace rlx::sparse
