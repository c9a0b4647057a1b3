// The edge cases docs/ir.md spells out, checked against hand-computed values on every
// device (the random table in test_ops.cpp compares devices with each other; this
// file pins the reference itself down).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "harness.hpp"
#include "ir/op_registry.hpp"

namespace rlx::test {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Tensor ints(DType t, Shape s, const std::vector<int64_t>& v) {
  Tensor x = Tensor::zeros(t, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::I64)
      x.data<int64_t>()[i] = v[i];
    else
      put(x, int64_t(i), double(v[i]));
  }
  return x;
}

// Expects the single result to be exactly `want` (NaN meets NaN).
void expect_values(const std::string& what, Build& b, Var y, const std::vector<cd>& want, double tol = 0) {
  rlx::output(b.g, {y});
  on_every_device(what, b, [&](const std::string& ctx, const std::vector<Tensor>& got) {
    std::string m = mismatch(got[0], want, tol);
    BOOST_CHECK_MESSAGE(m.empty(), ctx << ": " << m);
  });
}

void expect_ints(const std::string& what, Build& b, Var y, const std::vector<int64_t>& want) {
  rlx::output(b.g, {y});
  on_every_device(what, b, [&](const std::string& ctx, const std::vector<Tensor>& got) {
    BOOST_REQUIRE_EQUAL(got[0].numel(), int64_t(want.size()));
    for (size_t i = 0; i < want.size(); ++i)
      BOOST_CHECK_MESSAGE(int_at(got[0], int64_t(i)) == want[i],
                          ctx << " element " << i << ": got " << int_at(got[0], int64_t(i)) << ", want " << want[i]);
  });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(semantics)

BOOST_AUTO_TEST_CASE(integer_division_truncates_and_x_over_0_is_0) {
  for (DType t : {DType::I8, DType::I32, DType::I64}) {
    Build b(1);
    Var q = div(b.fixed(ints(t, {6}, {7, -7, 7, -7, 3, 0})), b.fixed(ints(t, {6}, {2, 2, -2, -2, 0, 0})));
    expect_ints(std::string("div ") + dtype_name(t), b, q, {3, -3, -3, 3, 0, 0});
  }
  Build b(1);
  Var q = div(b.fixed(ints(DType::U8, {3}, {7, 200, 3})), b.fixed(ints(DType::U8, {3}, {2, 7, 0})));
  expect_ints("div u8", b, q, {3, 28, 0});
}

BOOST_AUTO_TEST_CASE(integer_arithmetic_wraps) {
  {
    Build b(1);
    Var y = add(b.fixed(ints(DType::I8, {2}, {100, -100})), b.fixed(ints(DType::I8, {2}, {100, -100})));
    expect_ints("add i8", b, y, {-56, 56});
  }
  {
    Build b(1);
    Var y = sub(b.fixed(ints(DType::U8, {1}, {3})), b.fixed(ints(DType::U8, {1}, {10})));
    expect_ints("sub u8", b, y, {249});
  }
  {
    Build b(1);
    Var y = mul(b.fixed(ints(DType::I32, {1}, {65536})), b.fixed(ints(DType::I32, {1}, {65537})));
    expect_ints("mul i32", b, y, {65536});
  }
  {
    const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
    Build b(1);
    Var y = add(b.fixed(ints(DType::I64, {2}, {big, small})), b.fixed(ints(DType::I64, {2}, {1, -1})));
    expect_ints("add i64", b, y, {small, big});
    Build c(1);
    Var q = div(c.fixed(ints(DType::I64, {1}, {small})), c.fixed(ints(DType::I64, {1}, {-1})));
    expect_ints("div i64 min / -1", c, q, {small});
  }
  {
    Build b(1);
    Var y = cast(b.fixed(ints(DType::I32, {4}, {300, -200, 255, 128})), DType::I8);
    expect_ints("cast i32->i8 wraps", b, y, {44, 56, -1, -128});
  }
}

BOOST_AUTO_TEST_CASE(round_is_half_to_even) {
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    Build b(1);
    Var y = round(b.fixed(make_tensor(t, {9}, {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.25, 2.75, -2.75})));
    expect_values(std::string("round ") + dtype_name(t), b, y, {0, 2, 2, -0.0, -2, -2, 2, 3, -3});
  }
}

BOOST_AUTO_TEST_CASE(float_to_int_casts_truncate_and_saturate) {
  const std::vector<cd> x = {300.7, -300.2, 12.9, -12.9, kNaN, kInf, -kInf, 0.0, -0.7};
  const int64_t i32max = std::numeric_limits<int32_t>::max(), i32min = std::numeric_limits<int32_t>::min();
  const int64_t i64max = std::numeric_limits<int64_t>::max(), i64min = std::numeric_limits<int64_t>::min();
  const std::pair<DType, std::vector<int64_t>> cases[] = {
      {DType::I8, {127, -128, 12, -12, 0, 127, -128, 0, 0}},
      {DType::U8, {255, 0, 12, 0, 0, 255, 0, 0, 0}},
      {DType::I32, {300, -300, 12, -12, 0, i32max, i32min, 0, 0}},
      {DType::I64, {300, -300, 12, -12, 0, i64max, i64min, 0, 0}},
      {DType::I4, {7, -8, 7, -8, 0, 7, -8, 0, 0}},
      {DType::Bool, {1, 1, 1, 1, 1, 1, 1, 0, 1}},  // != 0; NaN != 0
  };
  for (DType from : {DType::F32, DType::F64})
    for (const auto& [to, want] : cases) {
      Build b(1);
      Var y = cast(b.fixed(make_tensor(from, {9}, x)), to);
      expect_ints(std::string("cast ") + dtype_name(from) + "->" + dtype_name(to), b, y, want);
    }
}

BOOST_AUTO_TEST_CASE(other_casts) {
  {
    Build b(1);
    Var y = cast(b.fixed(ints(DType::I32, {6}, {-20, -8, -1, 0, 7, 20})), DType::I4);
    expect_ints("cast i32->i4 saturates", b, y, {-8, -8, -1, 0, 7, 7});
  }
  {
    Build b(1);
    Var y = cast(b.fixed(ints(DType::I4, {5}, {-8, 7, -1, 0, 3})), DType::F32);
    expect_values("cast i4->f32", b, y, {-8, 7, -1, 0, 3});
  }
  {
    Build b(1);
    Var y = cast(b.fixed(make_tensor(DType::C64, {2}, {cd(1.5, 2), cd(-3, 4)})), DType::F32);
    expect_values("cast c64->f32 takes the real part", b, y, {1.5, -3});
  }
  {
    Build b(1);
    Var y = cast(b.fixed(make_tensor(DType::C64, {3}, {cd(0, 0), cd(0, 1), cd(2, 0)})), DType::Bool);
    expect_ints("cast c64->bool", b, y, {0, 1, 1});
  }
}

BOOST_AUTO_TEST_CASE(nan_propagates_through_max_and_min) {
  Build b(1);
  Var x = b.fixed(make_tensor(DType::F32, {3}, {kNaN, 1, 2})), y = b.fixed(make_tensor(DType::F32, {3}, {0, kNaN, 1}));
  rlx::output(b.g, {maximum(x, y), minimum(x, y), max(y), min(y)});
  on_every_device("nan", b, [](const std::string& ctx, const std::vector<Tensor>& got) {
    const std::vector<std::vector<cd>> want = {{kNaN, kNaN, 2}, {kNaN, kNaN, 1}, {kNaN}, {kNaN}};
    for (size_t r = 0; r < want.size(); ++r) {
      std::string m = mismatch(got[r], want[r], 0);
      BOOST_CHECK_MESSAGE(m.empty(), ctx << " result " << r << ": " << m);
    }
  });
}

BOOST_AUTO_TEST_CASE(sign_keeps_nan) {
  Build b(1);
  expect_values("sign", b, sign(b.fixed(make_tensor(DType::F32, {4}, {kNaN, -3, 0, 0.5}))), {kNaN, -1, 0, 1});
}

// max/min of nothing has no value: the IR's shape rule refuses it (docs/ir.md), so no
// device ever sees it.
BOOST_AUTO_TEST_CASE(max_over_an_empty_axis_is_an_error) {
  Build b(1);
  Var x = b.fixed(Tensor::zeros(DType::F32, {0, 3}));
  BOOST_CHECK_THROW(max(x, {0}), ShapeError);
  BOOST_CHECK_THROW(min(x, {0}), ShapeError);
  BOOST_CHECK_NO_THROW(max(x, {1}));  // an empty result is fine
}

BOOST_AUTO_TEST_CASE(argmax_takes_the_first_tie_and_nan_is_the_max) {
  {
    Build b(1);
    Var x = b.fixed(make_tensor(DType::F32, {3, 4}, {1, 3, 3, 2, 1, kNaN, 5, kNaN, -1, -1, -1, -1}));
    expect_ints("argmax f32", b, argmax(x, 1), {1, 1, 0});
  }
  {
    Build b(1);
    expect_ints("argmax i32 axis 0", b, argmax(b.fixed(ints(DType::I32, {3, 2}, {4, 1, 4, 9, 2, 9})), 0), {0, 1});
  }
}

BOOST_AUTO_TEST_CASE(half_precision_sums_accumulate_wider) {
  // 2048 + 1 is not an f16 and 256 + 1 is not a bf16: an accumulator in the storage
  // type stalls there.
  for (auto [t, n] : {std::pair{DType::F16, int64_t(4096)}, std::pair{DType::BF16, int64_t(1024)}}) {
    Build b(1);
    Var s = sum(b.fixed(make_tensor(t, {n}, std::vector<cd>(size_t(n), 1.0))));
    expect_values(std::string("sum of ones ") + dtype_name(t), b, s, {double(n)});
  }
}

BOOST_AUTO_TEST_CASE(gather_follows_numpy_take) {
  {
    Build b(1);
    Var x = b.fixed(make_tensor(DType::F32, {3, 2}, {1, 2, 3, 4, 5, 6}));
    Var y = gather(x, b.fixed(ints(DType::I64, {3}, {2, -1, -3})), 0);  // negative: from the end
    expect_values("gather negative indices", b, y, {5, 6, 5, 6, 1, 2});
  }
  for (int64_t bad : {57, -4}) {
    Build b(1);
    Var x = b.fixed(make_tensor(DType::F32, {3, 2}, {1, 2, 3, 4, 5, 6}));
    rlx::output(b.g, {gather(x, b.fixed(ints(DType::I32, {2}, {0, bad})), 0)});
    for (Device* d : DeviceRegistry::get().runnable()) {
      std::string why;
      try {
        compile_and_run(*d, b.g, b.inputs, &why);
        BOOST_CHECK_MESSAGE(!why.empty(), "gather index " << bad << " on " << d->name() << ": no error");
      } catch (const InputError& e) {
        BOOST_CHECK_MESSAGE(std::string(e.what()).find(std::to_string(bad)) != std::string::npos,
                            "the error on " << d->name() << " does not name index " << bad << ": " << e.what());
      }
    }
  }
}

// update_slice writes its block at the runtime start and leaves the rest; a start that does
// not leave room for the block is an error naming it on every device, not a clamped write.
BOOST_AUTO_TEST_CASE(update_slice_writes_its_block_and_refuses_a_start_without_room) {
  {
    Build b(1);
    Var x = b.fixed(make_tensor(DType::F32, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
    Var y = update_slice(x, b.fixed(make_tensor(DType::F32, {2, 2}, {-1, -2, -3, -4})), b.fixed(ints(DType::I32, {}, {2})), 1);
    expect_values("update_slice", b, y, {1, 2, -1, -2, 5, 6, -3, -4});
  }
  for (int64_t bad : {3, -1}) {
    Build b(1);
    Var x = b.fixed(make_tensor(DType::F32, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
    rlx::output(b.g, {update_slice(x, b.fixed(make_tensor(DType::F32, {2, 2}, {0, 0, 0, 0})),
                                   b.fixed(ints(DType::I64, {}, {bad})), 1)});
    for (Device* d : DeviceRegistry::get().runnable()) {
      std::string why;
      try {
        compile_and_run(*d, b.g, b.inputs, &why);
        BOOST_CHECK_MESSAGE(!why.empty(), "update_slice start " << bad << " on " << d->name() << ": no error");
      } catch (const InputError& e) {
        BOOST_CHECK_MESSAGE(std::string(e.what()).find("start " + std::to_string(bad) + " is outside [0, 2]") != std::string::npos,
                            "the error on " << d->name() << " does not name start " << bad << ": " << e.what());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(scatter_add_sums_repeated_indices) {
  Build b(1);
  Var y = scatter_add(b.fixed(make_tensor(DType::F32, {3}, {10, 20, 30})), b.fixed(ints(DType::I32, {4}, {0, 2, 0, 0})),
                      b.fixed(make_tensor(DType::F32, {4}, {1, 2, 3, 4})), 0);
  expect_values("scatter_add", b, y, {18, 20, 32});
}

BOOST_AUTO_TEST_CASE(iota_counts_along_its_axis) {
  {
    Build b(1);
    expect_ints("iota i32 axis 1", b, iota(b.g, {2, 3}, 1, DType::I32), {0, 1, 2, 0, 1, 2});
  }
  {
    Build b(1);
    expect_values("iota f32 axis 0", b, iota(b.g, {2, 3}, 0, DType::F32), {0, 0, 0, 1, 1, 1});
  }
}

BOOST_AUTO_TEST_CASE(rng_follows_core_rng) {
  const uint64_t seed = 0x5eed1234;
  for (DType t : {DType::F32, DType::F64}) {
    std::vector<cd> u, n;
    for (uint64_t i = 0; i < 32; ++i) {
      u.push_back(-1.0 + 4.0 * rng_unit(seed, i));
      n.push_back(0.5 + 2.0 * rng_std_normal(seed, i));
    }
    Build b(1);
    rlx::output(b.g, {rng_uniform(b.g, {32}, t, seed, -1.0, 3.0), rng_normal(b.g, {32}, t, seed, 0.5, 2.0)});
    on_every_device(std::string("rng ") + dtype_name(t), b,
                    [&](const std::string& ctx, const std::vector<Tensor>& got) {
                      std::string m = mismatch(got[0], u, tolerance(t));
                      BOOST_CHECK_MESSAGE(m.empty(), ctx << " uniform: " << m);
                      m = mismatch(got[1], n, tolerance(t));
                      BOOST_CHECK_MESSAGE(m.empty(), ctx << " normal: " << m);
                    });
  }
}

BOOST_AUTO_TEST_CASE(while_and_if_run_their_regions) {
  Build b(1);
  Var n = b.fixed(ints(DType::I64, {}, {0}));
  Var x = b.fixed(make_tensor(DType::F32, {2}, {1, 2}));
  // while n < 5: (n + 1, x * 2)  ->  (5, x * 32)
  auto r = while_loop(
      {n, x},
      [](const std::vector<Var>& v) { return std::vector<Var>{lt(v[0], scalar(*v[0].graph(), 5, DType::I64))}; },
      [](const std::vector<Var>& v) {
        return std::vector<Var>{v[0] + scalar(*v[0].graph(), 1, DType::I64),
                                v[1] * scalar(*v[1].graph(), 2, DType::F32)};
      });
  Var p = b.fixed(make_tensor(DType::Bool, {}, {0.0}));
  auto e = if_then_else(
      p, {x}, [](const std::vector<Var>& v) { return std::vector<Var>{v[0]}; },
      [](const std::vector<Var>& v) { return std::vector<Var>{-v[0]}; });
  rlx::output(b.g, {r[0], r[1], e[0]});
  on_every_device("control flow", b, [](const std::string& ctx, const std::vector<Tensor>& got) {
    BOOST_CHECK_MESSAGE(int_at(got[0], 0) == 5, ctx << ": counter " << int_at(got[0], 0));
    std::string m = mismatch(got[1], std::vector<cd>{32, 64}, 0);
    BOOST_CHECK_MESSAGE(m.empty(), ctx << " while: " << m);
    m = mismatch(got[2], std::vector<cd>{-1, -2}, 0);
    BOOST_CHECK_MESSAGE(m.empty(), ctx << " if: " << m);
  });
}

Tensor iota_f32(Shape s, double from = 0) {
  std::vector<cd> v(size_t(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = from + double(i);
  return make_tensor(DType::F32, std::move(s), v);
}

BOOST_AUTO_TEST_CASE(movement_by_hand) {
  {
    Build b(1);  // out[k, i, j] = x[i, j, k]
    Var y = permute(b.fixed(iota_f32({2, 3, 4})), {2, 0, 1});
    std::vector<cd> want;
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) want.push_back(double(i * 12 + j * 4 + k));
    expect_values("permute", b, y, want);
  }
  {
    Build b(1);  // rows 1, 3; columns 0, 3
    expect_values("slice", b, slice(b.fixed(iota_f32({5, 6})), {1, 0}, {5, 6}, {2, 3}), {6, 9, 18, 21});
  }
  {
    Build b(1);
    expect_values("pad", b, pad(b.fixed(iota_f32({2, 3}, 1)), {1, 0}, {0, 1}, 9.0),
                  {9, 9, 9, 9, 1, 2, 3, 9, 4, 5, 6, 9});
  }
  {
    Build b(1);
    Var y = concat(
        {b.fixed(make_tensor(DType::F32, {2, 1}, {1, 2})), b.fixed(make_tensor(DType::F32, {2, 2}, {3, 4, 5, 6}))}, 1);
    expect_values("concat", b, y, {1, 3, 4, 2, 5, 6});
  }
  {
    Build b(1);
    Var y = broadcast_to(b.fixed(make_tensor(DType::F32, {3, 1}, {1, 2, 3})), {2, 3, 2});
    expect_values("broadcast_to", b, y, {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  }
  {
    Build b(1);  // out [2, 1, 2] = x[:, idx]
    Var y = gather(b.fixed(iota_f32({2, 3})), b.fixed(ints(DType::I32, {1, 2}, {2, 0})), 1);
    expect_values("gather axis 1", b, y, {2, 0, 5, 3});
  }
  {
    Build b(1);
    Var y = scatter_add(b.fixed(make_tensor(DType::F32, {2, 3}, std::vector<cd>(6, 0.0))),
                        b.fixed(ints(DType::I64, {3}, {2, 2, 0})), b.fixed(iota_f32({2, 3}, 1)), 1);
    expect_values("scatter_add axis 1", b, y, {3, 0, 3, 6, 0, 9});
  }
  {
    Build b(1);
    Var y = where(b.fixed(make_tensor(DType::Bool, {2}, {1.0, 0.0})), b.fixed(iota_f32({2, 2}, 1)),
                  b.fixed(make_tensor(DType::F32, {}, {-1.0})));
    expect_values("where", b, y, {1, -1, 3, -1});
  }
}

BOOST_AUTO_TEST_CASE(reductions_and_scans_by_hand) {
  Build b(1);
  Var x = b.fixed(iota_f32({2, 3}, 1));  // [[1, 2, 3], [4, 5, 6]]
  Var v = b.fixed(iota_f32({4}, 1));     // [1, 2, 3, 4]
  rlx::output(b.g, {sum(x, {1}), prod(x, {0}, true), max(x), min(x), cumsum(v, 0), cumsum(v, 0, true),
                    cumsum(v, 0, false, true), cumsum(v, 0, true, true), cumsum(x, 0)});
  const std::vector<std::vector<cd>> want = {
      {6, 15}, {4, 10, 18}, {6}, {1}, {1, 3, 6, 10}, {0, 1, 3, 6}, {10, 9, 7, 4}, {9, 7, 4, 0}, {1, 2, 3, 5, 7, 9}};
  on_every_device("reductions", b, [&](const std::string& ctx, const std::vector<Tensor>& got) {
    for (size_t r = 0; r < want.size(); ++r) {
      std::string m = mismatch(got[r], want[r], 0);
      BOOST_CHECK_MESSAGE(m.empty(), ctx << " result " << r << ": " << m);
    }
    BOOST_CHECK_MESSAGE(got[1].shape() == Shape({1, 3}), ctx << ": keepdims shape " << shape_str(got[1].shape()));
  });
}

BOOST_AUTO_TEST_CASE(matmul_by_hand) {
  {
    Build b(1);  // a^T b^T with a stored [K=2, M=1], b stored [N=2, K=2]
    Var y = matmul(b.fixed(make_tensor(DType::F64, {2, 1}, {1, 2})),
                   b.fixed(make_tensor(DType::F64, {2, 2}, {3, 4, 5, 6})), true, true);
    expect_values("matmul transposed", b, y, {11, 17});
  }
  {
    Build b(1);  // batch [2] x unbatched
    Var y = matmul(b.fixed(make_tensor(DType::F32, {2, 1, 2}, {1, 2, 3, 4})),
                   b.fixed(make_tensor(DType::F32, {2, 1}, {5, 6})));
    expect_values("matmul batch broadcast", b, y, {17, 39});
  }
  {
    Build b(1);  // (1+2i)(3+4i) + (0+1i)(2+0i)
    Var y = matmul(b.fixed(make_tensor(DType::C64, {1, 2}, {cd(1, 2), cd(0, 1)})),
                   b.fixed(make_tensor(DType::C64, {2, 1}, {cd(3, 4), cd(2, 0)})));
    expect_values("matmul c64", b, y, {cd(-5, 12)});
  }
}

BOOST_AUTO_TEST_CASE(complex_by_hand) {
  Build b(1);
  Var x = b.fixed(make_tensor(DType::C64, {2}, {cd(1, 2), cd(3, -4)}));
  Var y = b.fixed(make_tensor(DType::C64, {2}, {cd(3, 4), cd(3, -4)}));
  rlx::output(b.g,
              {mul(x, y), div(mul(x, y), y), abs(y), real(x), imag(x), conj(x), eq(x, y),
               make_complex(b.fixed(make_tensor(DType::F32, {1}, {2})), b.fixed(make_tensor(DType::F32, {1}, {-1})))});
  const std::vector<std::vector<cd>> want = {{cd(-5, 10), cd(-7, -24)},
                                             {cd(1, 2), cd(3, -4)},
                                             {5, 5},
                                             {1, 3},
                                             {2, -4},
                                             {cd(1, -2), cd(3, 4)},
                                             {0, 1},
                                             {cd(2, -1)}};
  on_every_device("complex", b, [&](const std::string& ctx, const std::vector<Tensor>& got) {
    for (size_t r = 0; r < want.size(); ++r) {
      std::string m = mismatch(got[r], want[r], 1e-7);
      BOOST_CHECK_MESSAGE(m.empty(), ctx << " result " << r << ": " << m);
    }
  });
  Build e(1);
  Var z = exp(e.fixed(make_tensor(DType::C64, {2}, {cd(0, std::numbers::pi), cd(1, 0)})));
  expect_values("exp c64", e, z, {cd(-1, 0), cd(std::exp(1.0), 0)}, 1e-7);
}

BOOST_AUTO_TEST_CASE(unary_math_by_hand) {
  const std::vector<cd> x = {0.25, 1, 4};
  const std::pair<const char*, double (*)(double)> fns[] = {
      {"log", [](double v) { return std::log(v); }},        {"sqrt", [](double v) { return std::sqrt(v); }},
      {"rsqrt", [](double v) { return 1 / std::sqrt(v); }}, {"sin", [](double v) { return std::sin(v); }},
      {"cos", [](double v) { return std::cos(v); }},        {"tanh", [](double v) { return std::tanh(v); }},
      {"erf", [](double v) { return std::erf(v); }},        {"recip", [](double v) { return 1 / v; }},
      {"exp", [](double v) { return std::exp(v); }},        {"neg", [](double v) { return -v; }},
  };
  for (auto [name, f] : fns) {
    Build b(1);
    std::vector<cd> want;
    for (cd v : x) want.push_back(f(v.real()));
    expect_values(std::string(name) + " f64", b, rlx::op(name, {b.fixed(make_tensor(DType::F64, {3}, x))}), want,
                  1e-15);
  }
  {
    Build b(1);
    expect_ints("abs i8 wraps at -128", b, abs(b.fixed(ints(DType::I8, {3}, {-128, -5, 7}))), {-128, 5, 7});
  }
  {
    Build b(1);
    expect_ints("sign i32", b, sign(b.fixed(ints(DType::I32, {3}, {-9, 0, 4}))), {-1, 0, 1});
  }
  {
    Build b(1);
    expect_values("floor/ceil", b, floor(b.fixed(make_tensor(DType::F32, {3}, {-1.5, 0.5, 2.0}))), {-2, 0, 2});
  }
  {
    Build b(1);
    Var t = b.fixed(make_tensor(DType::Bool, {4}, {0.0, 0.0, 1.0, 1.0})),
        u = b.fixed(make_tensor(DType::Bool, {4}, {0.0, 1.0, 0.0, 1.0}));
    rlx::output(b.g, {logical_and(t, u), logical_or(t, u), logical_not(t)});
    on_every_device("logic", b, [](const std::string& ctx, const std::vector<Tensor>& got) {
      const std::vector<std::vector<cd>> want = {{0, 0, 0, 1}, {0, 1, 1, 1}, {1, 1, 0, 0}};
      for (size_t r = 0; r < want.size(); ++r) {
        std::string m = mismatch(got[r], want[r], 0);
        BOOST_CHECK_MESSAGE(m.empty(), ctx << " result " << r << ": " << m);
      }
    });
  }
}

// The reference promises one rounding from f64 to f16/bf16. Through f32 these round
// twice: 1 + 2^-11 + 2^-40 becomes the f16 tie 1 + 2^-11, which goes to even (1.0).
BOOST_AUTO_TEST_CASE(reference_rounds_once) {
  Device& ref = DeviceRegistry::get().at("reference");
  const std::pair<DType, double> cases[] = {{DType::F16, 0x1p-11}, {DType::BF16, 0x1p-8}};
  for (auto [t, half_ulp] : cases) {
    Build b(1);
    Tensor x = make_tensor(DType::F64, {2}, {1 + half_ulp + 0x1p-40, -(1 + half_ulp + 0x1p-40)});
    rlx::output(b.g, {cast(b.fixed(x), t)});
    auto got = compile_and_run(ref, b.g, b.inputs, nullptr);
    BOOST_REQUIRE(got);
    std::string m = mismatch((*got)[0], std::vector<cd>{1 + 2 * half_ulp, -(1 + 2 * half_ulp)}, 0);
    BOOST_CHECK_MESSAGE(m.empty(), "f64 -> " << dtype_name(t) << ": " << m);
  }
}

BOOST_AUTO_TEST_CASE(reference_leaves_l1_ops_to_their_lowering) {
  Device& ref = DeviceRegistry::get().at("reference");
  Build b(1);
  Var y = gelu(b.in(DType::F32, {4}));
  Capability c = ref.supports(b.g.node(y.value()), b.g);
  BOOST_CHECK(!c.ok);
  BOOST_CHECK(!c.why.empty());
  Var z = exp(b.in(DType::F32, {4}));
  BOOST_CHECK(ref.supports(b.g.node(z.value()), b.g).ok);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace rlx::test
