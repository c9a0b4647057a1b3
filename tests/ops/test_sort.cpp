// sort: the order pinned down by hand on every device (stability, NaN, -0/+0, integer
// extremes), bad input rejected with errors that say what is wrong, and the VJP of the
// values checked against central finite differences. The random cross-device comparison
// is sort's row in test_ops.cpp.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "harness.hpp"
#include "ir/op_registry.hpp"

namespace rlx::test {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Sorts `values` (shape [n]) on every device that compiles it; check(ctx, values, indices)
// judges each result.
template <class F>
void sort_everywhere(const std::string& what, DType t, const std::vector<cd>& values, bool descending, F&& check) {
  Build b(case_seed(what));
  Sorted r = sort(b.fixed(make_tensor(t, {int64_t(values.size())}, values)), -1, descending);
  rlx::output(b.g, {r.values, r.indices});
  on_every_device(what + " dtype=" + dtype_name(t), b, [&](const std::string& ctx, const std::vector<Tensor>& got) {
    check(ctx, got[0], got[1]);
  });
}

void expect_indices(const std::string& ctx, const Tensor& idx, const std::vector<int64_t>& want) {
  BOOST_REQUIRE_EQUAL(idx.numel(), int64_t(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    BOOST_CHECK_MESSAGE(int_at(idx, int64_t(i)) == want[i],
                        ctx << ": indices[" << i << "] = " << int_at(idx, int64_t(i)) << ", want " << want[i]);
}

// Ties keep their input order in both directions; -0 and +0 tie (and keep their signs in
// the values); NaNs are the largest value.
BOOST_AUTO_TEST_CASE(order_is_stable_with_nan_last_and_signed_zeros_equal) {
  const std::vector<cd> x = {3.0, 1.0, 2.0, 1.0, 0.0, -0.0, kNaN, -kInf, kNaN, 3.0};
  const std::vector<int64_t> up = {7, 4, 5, 1, 3, 2, 0, 9, 6, 8}, down = {6, 8, 0, 9, 2, 1, 3, 4, 5, 7};
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64})
    for (bool descending : {false, true})
      sort_everywhere(descending ? "descending" : "ascending", t, x, descending,
                      [&](const std::string& ctx, const Tensor& v, const Tensor& idx) {
                        const auto& want = descending ? down : up;
                        expect_indices(ctx, idx, want);
                        for (size_t i = 0; i < want.size(); ++i) {
                          double got = value_at(v, int64_t(i)).real(), w = x[size_t(want[i])].real();
                          BOOST_CHECK_MESSAGE(std::isnan(w) ? std::isnan(got)
                                                            : got == w && std::signbit(got) == std::signbit(w),
                                              ctx << ": values[" << i << "] = " << got << ", want " << w);
                        }
                      });
}

BOOST_AUTO_TEST_CASE(integer_extremes_sort_by_signed_value) {
  Build b(case_seed("i64 extremes"));
  Tensor x = Tensor::zeros(DType::I64, {5});
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const int64_t xs[] = {lo, hi, -1, 0, lo};
  for (int i = 0; i < 5; ++i) x.data<int64_t>()[i] = xs[i];
  Sorted r = sort(b.fixed(x));
  rlx::output(b.g, {r.values, r.indices});
  on_every_device("i64 extremes", b, [&](const std::string& ctx, const std::vector<Tensor>& got) {
    expect_indices(ctx, got[1], {0, 4, 2, 3, 1});
    for (int i = 0; i < 5; ++i) BOOST_CHECK_EQUAL(got[0].data<int64_t>()[i], xs[got[1].data<int64_t>()[i]]);
  });
  const std::vector<cd> u = {200.0, 0.0, 255.0, 7.0, 0.0};
  sort_everywhere("u8", DType::U8, u, true, [](const std::string& ctx, const Tensor&, const Tensor& idx) {
    expect_indices(ctx, idx, {2, 0, 3, 1, 4});
  });
  const std::vector<cd> s8 = {-128.0, 127.0, -1.0, 0.0};
  sort_everywhere("i8", DType::I8, s8, false, [](const std::string& ctx, const Tensor&, const Tensor& idx) {
    expect_indices(ctx, idx, {0, 2, 3, 1});
  });
}

template <class F>
void expect_input_error(F&& build, const std::string& says) {
  try {
    build();
    BOOST_ERROR("no error; wanted one saying '" << says << "'");
  } catch (const Error& e) {
    BOOST_CHECK_MESSAGE(std::string(e.what()).find(says) != std::string::npos,
                        "error '" << e.what() << "' does not say '" << says << "'");
  }
}

BOOST_AUTO_TEST_CASE(bad_input_is_an_error_naming_it) {
  ir::Graph g;
  Var m = input(g, "m", DType::F32, {3, 4});
  expect_input_error([&] { sort(m, 2); }, "axis 2 is out of range for rank 2");
  expect_input_error([&] { sort(m, -3); }, "axis -3 is out of range");
  expect_input_error([&] { sort(input(g, "c", DType::C64, {4})); }, "sort input dtype c64 is not one of");
  expect_input_error([&] { sort(input(g, "p", DType::Bool, {4})); }, "sort input dtype bool");
  expect_input_error([&] { sort(input(g, "s", DType::F32, {})); }, "sort needs an input of rank >= 1");
}

// d/dx sum(w * sort(x).values) from sort's VJP against central differences, on distinct
// values (a sort is differentiable away from ties), for an inner and an outer axis.
BOOST_AUTO_TEST_CASE(vjp_matches_finite_differences) {
  const ir::OpDef& def = ir::OpRegistry::get().at("sort");
  BOOST_REQUIRE(def.vjp);
  for (int64_t axis : {-1, 0})
    for (bool descending : {false, true}) {
      const std::string what = "sort vjp axis=" + std::to_string(axis) + (descending ? " descending" : "");
      std::mt19937_64 rng(case_seed(what));
      const Shape s = {4, 5};
      // Values closer than the difference step would make the central difference straddle a
      // swap of two sorted positions; such draws are redrawn rather than compared.
      auto min_gap = [](const Tensor& t) {
        std::vector<double> v(complexes(t).size());
        for (size_t i = 0; i < v.size(); ++i) v[i] = value_at(t, int64_t(i)).real();
        std::sort(v.begin(), v.end());
        double gap = INFINITY;
        for (size_t i = 1; i < v.size(); ++i) gap = std::min(gap, v[i] - v[i - 1]);
        return gap;
      };
      Tensor x = random_tensor(rng, DType::F64, s, {.lo = -3, .hi = 3});
      BOOST_TEST_MESSAGE(what << ": first draw's smallest gap " << min_gap(x));
      while (min_gap(x) < 1e-3) x = random_tensor(rng, DType::F64, s, {.lo = -3, .hi = 3});
      Tensor w = random_tensor(rng, DType::F64, s, {});

      // The gradient graph: sort, then the VJP rule applied to its node.
      ir::Graph g;
      Var xv = input(g, "x", DType::F64, s), wv = input(g, "w", DType::F64, s);
      Sorted r = sort(xv, axis, descending);
      auto grads = def.vjp({xv}, {r.values, r.indices}, {wv, Var()}, g.node(r.values.value()).attrs);
      BOOST_REQUIRE_EQUAL(grads.size(), 1u);
      rlx::output(g, {grads[0]});
      // The objective graph, evaluated at x +- h e_k.
      ir::Graph f;
      Var fx = input(f, "x", DType::F64, s), fw = input(f, "w", DType::F64, s);
      rlx::output(f, {rlx::sum(fw * sort(fx, axis, descending).values)});

      for (Device* d : DeviceRegistry::get().runnable()) {
        const std::string ctx = what + " device=" + d->name();
        std::string why;
        auto got = compile_and_run(*d, g, {x, w}, &why);
        if (!got) {
          BOOST_TEST_MESSAGE("skip " << ctx << ": " << why);
          continue;
        }
        const double h = 1e-6;
        for (int64_t k = 0; k < x.numel(); ++k) {
          auto objective = [&](double dx) {
            Tensor xp = make_tensor(DType::F64, s, complexes(x));
            xp.data<double>()[k] += dx;
            return value_at(compile_and_run(*d, f, {xp, w}, &why)->at(0), 0).real();
          };
          const double fd = (objective(h) - objective(-h)) / (2 * h);
          const double an = value_at((*got)[0], k).real();
          BOOST_CHECK_MESSAGE(std::abs(fd - an) <= 1e-6 * (1 + std::abs(fd)),
                              ctx << ": d/dx[" << k << "] = " << an << ", finite differences " << fd);
        }
      }
    }
}

}  // namespace
}  // namespace rlx::test
