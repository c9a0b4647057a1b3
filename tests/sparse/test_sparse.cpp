// solvers/sparse: CSR validation and COO assembly, and the front-end functions
// (spmv/spmm/sptrsv) compiled on every device against dense arithmetic done here. The
// other files of this suite: test_matrix_market.cpp (Matrix Market read/write),
// test_poisson.cpp (the Poisson generators), test_tiled.cpp (the tiled layout), test_cg.cpp
// (the conjugate-gradient op and its gradient); test_sparse.hpp holds what they share.
#define BOOST_TEST_MODULE sparse
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <random>

#include "devices/cpu/isa.hpp"
#include "ir/op_registry.hpp"
#include "tests/sparse/test_sparse.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/ops.hpp"
#include "solvers/sparse/poisson.hpp"

// ------------------------------------------------------------------ CSR

BOOST_AUTO_TEST_SUITE(csr)

BOOST_AUTO_TEST_CASE(valid_matrix_and_accessors) {
  for (DType it : {DType::I32, DType::I64}) {
    // [[1 0 2], [0 0 0], [0 3 0]]: an empty middle row.
    CsrMatrix A(3, 3, host_tensor(it, {0, 2, 2, 3}), host_tensor(it, {0, 2, 1}), f64s({1, 2, 3}));
    BOOST_TEST(A.rows() == 3);
    BOOST_TEST(A.cols() == 3);
    BOOST_TEST(A.nnz() == 3);
    BOOST_TEST(A.index_type() == it);
    BOOST_TEST(A.value_type() == DType::F64);
    BOOST_TEST(A.sorted_unique());
    BOOST_TEST(A.is_host());
    std::vector<cd> want = {1, 0, 2, 0, 0, 0, 0, 3, 0};
    BOOST_TEST(dense_of(A) == want, boost::test_tools::per_element());
    CsrMatrix B(2, 3, host_tensor(it, {0, 2, 3}), host_tensor(it, {2, 0, 1}), f64s({1, 2, 3}));
    BOOST_TEST(!B.sorted_unique());
  }
  CsrMatrix empty(0, 0, host_tensor(DType::I32, {0}), host_tensor(DType::I32, {}), f64s({}));
  BOOST_TEST(empty.nnz() == 0);
}

BOOST_AUTO_TEST_CASE(invalid_structure_names_the_row) {
  auto I = [](std::vector<int64_t> v) { return host_tensor(DType::I32, v); };
  expect_error([&] { CsrMatrix(3, 3, I({1, 2, 2, 3}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row_ptr[0]", "0"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 1, 3}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row 1", "decreases"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 2}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row_ptr[3]", "nnz = 3"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 4}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row 2", "exceeds nnz"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 3, 1}), f64s({1, 2, 3})); },
               {"row 0", "column index 3", "[0, 3)"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 2, -1}), f64s({1, 2, 3})); }, {"row 2", "column index -1"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 3}), I({0, 2, 1}), f64s({1, 2, 3})); }, {"row_ptr must be [4]"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), host_tensor(DType::I64, {0, 2, 1}), f64s({1, 2, 3})); },
               {"col_idx dtype i64", "row_ptr's i32"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 2, 1}), I({1, 2, 3})); }, {"values must be f32, f64 or c64"});
  expect_error([&] { CsrMatrix(3, 3, I({0, 2, 2, 3}), I({0, 2, 1}), f64s({1, 2})); }, {"[nnz]"});
  expect_error([&] { CsrMatrix(-1, 3, I({0}), I({}), f64s({})); }, {">= 0"});
}

BOOST_AUTO_TEST_CASE(coo_sums_duplicates_and_sorts_columns) {
  // Unordered entries with (0,1) three times and (2,0) twice.
  std::vector<int64_t> i = {2, 0, 0, 2, 0, 1, 0};
  std::vector<int64_t> j = {0, 1, 3, 0, 1, 2, 1};
  std::vector<double> v = {1.5, 1, 4, 2.5, 2, 7, 0.25};
  for (DType value : {DType::F32, DType::F64, DType::C64}) {
    CsrMatrix A = CsrMatrix::from_coo(3, 4, i, j, v, value);
    BOOST_TEST(A.nnz() == 4);
    BOOST_TEST(A.sorted_unique());
    BOOST_TEST(A.value_type() == value);
    BOOST_TEST(A.index_type() == DType::I32);
    std::vector<int64_t> rp, ci;
    for (int64_t k = 0; k <= 3; ++k) rp.push_back(idx(A.row_ptr(), k));
    for (int64_t k = 0; k < 4; ++k) ci.push_back(idx(A.col_idx(), k));
    BOOST_TEST(rp == (std::vector<int64_t>{0, 2, 3, 4}), boost::test_tools::per_element());
    BOOST_TEST(ci == (std::vector<int64_t>{1, 3, 2, 0}), boost::test_tools::per_element());
    std::vector<cd> want = {0, 3.25, 0, 4, 0, 0, 7, 0, 4, 0, 0, 0};
    BOOST_TEST(dense_of(A) == want, boost::test_tools::per_element());
  }
  // Tensor form, mixed index dtypes, explicit i64 output.
  CsrMatrix B = CsrMatrix::from_coo(3, 4, host_tensor(DType::I64, i), host_tensor(DType::I32, j), f64s(v), DType::I64);
  BOOST_TEST(B.index_type() == DType::I64);
  BOOST_TEST(B.nnz() == 4);
  std::vector<cd> cv = {cd(1, 2), cd(3, -1)};
  std::vector<int64_t> ci2 = {1, 1}, cj2 = {0, 0};
  CsrMatrix C = CsrMatrix::from_coo(2, 1, ci2, cj2, cv);
  BOOST_TEST(C.value_type() == DType::C64);
  BOOST_TEST(C.nnz() == 1);
  BOOST_TEST(at(C.values(), 0) == cd(4, 1));
}

BOOST_AUTO_TEST_CASE(coo_rejects_bad_entries) {
  std::vector<int64_t> i = {0, 3}, j = {0, 0};
  std::vector<double> v = {1, 2};
  expect_error([&] { CsrMatrix::from_coo(3, 3, i, j, v); }, {"COO entry 1", "row index 3", "[0, 3)"});
  std::vector<int64_t> i2 = {0, 1}, j2 = {0, -2};
  expect_error([&] { CsrMatrix::from_coo(3, 3, i2, j2, v); }, {"COO entry 1", "column index -2"});
  std::vector<double> v1 = {1};
  expect_error([&] { CsrMatrix::from_coo(3, 3, i2, j2, v1); }, {"one length"});
  // i32 cannot address 3e9 columns.
  std::vector<int64_t> e;
  std::vector<double> ev;
  expect_error([&] { CsrMatrix::from_coo(1, 3000000000LL, e, e, ev, DType::F64, DType::I32); }, {"i32"});
  BOOST_TEST((CsrMatrix::from_coo(1, 3000000000LL, e, e, ev).index_type() == DType::I64));
}

BOOST_AUTO_TEST_CASE(to_coo_conversions_and_copies) {
  std::mt19937_64 rng(seed());
  std::uniform_int_distribution<int64_t> pos(0, 9);
  std::uniform_real_distribution<double> val(-2, 2);
  std::vector<int64_t> i, j;
  std::vector<double> v;
  for (int k = 0; k < 40; ++k) i.push_back(pos(rng)), j.push_back(pos(rng) % 7), v.push_back(val(rng));
  CsrMatrix A = CsrMatrix::from_coo(10, 7, i, j, v);
  Coo c = A.to_coo();
  BOOST_TEST(c.nnz() == A.nnz());
  CsrMatrix B = CsrMatrix::from_coo(c.rows, c.cols, c.row, c.col, c.values);
  BOOST_TEST(dense_of(A) == dense_of(B), boost::test_tools::per_element());
  CsrMatrix W = A.with_index_type(DType::I64);
  BOOST_TEST(W.index_type() == DType::I64);
  BOOST_TEST(dense_of(W) == dense_of(A), boost::test_tools::per_element());
  BOOST_TEST(dense_of(W.with_index_type(DType::I32)) == dense_of(A), boost::test_tools::per_element());
  CsrMatrix Z = A.with_value_type(DType::C64);
  BOOST_TEST(Z.value_type() == DType::C64);
  expect_error([&] { Z.with_value_type(DType::F64); }, {"imaginary"});
  CsrMatrix D = CsrMatrix::from_dense(A.to_dense());
  BOOST_TEST(dense_of(D) == dense_of(A), boost::test_tools::per_element());
  CsrMatrix H = A.to(host_allocator());
  BOOST_TEST(H.values().raw() != A.values().raw());
  BOOST_TEST(dense_of(H) == dense_of(A), boost::test_tools::per_element());
  // Strided input arrays are made contiguous.
  Tensor wide = Tensor::zeros(DType::F64, {A.nnz() * 2});
  for (int64_t k = 0; k < A.nnz(); ++k) wide.data<double>()[2 * k] = A.values().data<double>()[k];
  Tensor strided = wide.with_strides({A.nnz()}, {2}, 0);
  CsrMatrix S(A.rows(), A.cols(), A.row_ptr(), A.col_idx(), strided);
  BOOST_TEST(dense_of(S) == dense_of(A), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// ------------------------------------------------------------------ front end on every device

BOOST_AUTO_TEST_SUITE(front_end)

double worst(const Tensor& got, const std::vector<cd>& want) {
  double scale = 0, err = 0;
  for (auto& w : want) scale = std::max(scale, std::abs(w));
  for (size_t k = 0; k < want.size(); ++k) err = std::max(err, std::abs(at(got, int64_t(k)) - want[k]));
  return err / std::max(scale, 1e-300);
}

Tensor random_vector(std::mt19937_64& rng, DType t, int64_t n) {
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor r = Tensor::empty(t, {n});
  for (int64_t k = 0; k < n; ++k) {
    if (t == DType::F64) r.data<double>()[k] = u(rng);
    else if (t == DType::F32) r.data<float>()[k] = float(u(rng));
    else r.data<c64>()[k] = c64(float(u(rng)), float(u(rng)));
  }
  return r;
}

std::vector<cd> vec(const Tensor& t) {
  std::vector<cd> r;
  for (int64_t k = 0; k < t.numel(); ++k) r.push_back(at(t, k));
  return r;
}

BOOST_AUTO_TEST_CASE(spmv_spmm_sptrsv_on_every_device) {
  std::mt19937_64 rng(seed() ^ 0xf00d);
  for (DType t : {DType::F32, DType::F64, DType::C64})
    for (DType it : {DType::I32, DType::I64})
      for (bool as_constants : {false, true}) {
        // A shifted 2D Poisson matrix with random values on its pattern (diagonal dominant).
        CsrMatrix P = poisson2d(23, DType::F64, it);
        Coo c = P.to_coo();
        Tensor vals = random_vector(rng, t, P.nnz());
        for (int64_t k = 0; k < P.nnz(); ++k)
          if (idx(c.row, k) == idx(c.col, k)) {
            if (t == DType::F64) vals.data<double>()[k] = 6;
            else if (t == DType::F32) vals.data<float>()[k] = 6;
            else vals.data<c64>()[k] = c64(6, 1);
          }
        CsrMatrix A(P.rows(), P.cols(), P.row_ptr(), P.col_idx(), vals);
        const int64_t n = A.rows();
        Tensor x = random_vector(rng, t, n), y0 = random_vector(rng, t, n), B = Tensor::empty(t, {n, 3});
        Tensor b3 = random_vector(rng, t, n * 3);
        std::memcpy(B.raw(), b3.raw(), b3.nbytes());
        ir::Graph g;
        CsrVars V = as_constants ? A.ir_constants(g) : A.ir_inputs(g, "A");
        Var xv = rlx::input(g, "x", t, {n}), y0v = rlx::input(g, "y0", t, {n}), Bv = rlx::input(g, "B", t, {n, 3});
        rlx::output(g, {spmv(V, xv), spmv(V, xv, -0.5, 2.0, y0v), spmm(V, Bv), sptrsv(V, xv), sptrsv(V, xv, false, true)});
        std::vector<Tensor> inputs = as_constants ? std::vector<Tensor>{} : A.arrays();
        inputs.insert(inputs.end(), {x, y0, B});
        // Dense expectations.
        std::vector<cd> D = dense_of(A), X = vec(x), Y0 = vec(y0), BB = vec(B);
        const size_t un = static_cast<size_t>(n);
        std::vector<cd> ax(un), axpy(un), ab(3 * un), lx(un), ux(un);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            ax[size_t(i)] += D[size_t(i * n + j)] * X[size_t(j)];
            for (int64_t q = 0; q < 3; ++q) ab[size_t(i * 3 + q)] += D[size_t(i * n + j)] * BB[size_t(j * 3 + q)];
          }
          axpy[size_t(i)] = -0.5 * ax[size_t(i)] + 2.0 * Y0[size_t(i)];
        }
        for (int64_t i = 0; i < n; ++i) {
          cd s = X[size_t(i)];
          for (int64_t j = 0; j < i; ++j) s -= D[size_t(i * n + j)] * lx[size_t(j)];
          lx[size_t(i)] = s / D[size_t(i * n + i)];
        }
        for (int64_t i = n; i-- > 0;) {
          cd s = X[size_t(i)];
          for (int64_t j = i + 1; j < n; ++j) s -= D[size_t(i * n + j)] * ux[size_t(j)];
          ux[size_t(i)] = s;  // unit diagonal
        }
        const double tol = t == DType::F64 ? 1e-12 : 1e-5;
        for (Device* d : DeviceRegistry::get().runnable()) {
          BOOST_TEST_CONTEXT(dtype_name(t) << " " << dtype_name(it) << (as_constants ? " constants" : " inputs")
                                           << " on " << d->name()) {
            Program p = compile(g, *d);
            std::vector<Tensor> r = run(p, *d, inputs);
            BOOST_TEST(worst(r[0], ax) <= tol);
            BOOST_TEST(worst(r[1], axpy) <= tol);
            BOOST_TEST(worst(r[2], ab) <= tol);
            BOOST_TEST(worst(r[3], lx) <= tol);
            BOOST_TEST(worst(r[4], ux) <= tol);
          }
        }
      }
}

// The cpu device's two row forms (RLX_CPU_SPMV: AVX-512 gathers, portable scalar rows) on
// rows of 0 to 40 entries — empty rows, a partial vector step, several full ones, a tail —
// against dense arithmetic, f32 and f64, both index types, with and without y0. The gather
// form is asked for only where the CPU has AVX-512; elsewhere asking is an error naming it.
BOOST_AUTO_TEST_CASE(cpu_spmv_row_forms_agree) {
  Device& cpu = DeviceRegistry::get().at("cpu");
  std::mt19937_64 rng(seed() ^ 0x5e11);
  const int64_t n = 300, m = 257;
  std::vector<int64_t> ri, ci;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t len = r % 7 == 3 ? 0 : int64_t(rng() % 41);
    std::vector<int64_t> cols(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j) cols[size_t(j)] = j;
    std::shuffle(cols.begin(), cols.end(), rng);
    for (int64_t k = 0; k < len; ++k) {
      ri.push_back(r);
      ci.push_back(cols[size_t(k)]);
    }
  }
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx512 = rlx::cpu::cpu_has_x86_64_v4();  // what the kernel asks of the CPU
#else
  const bool avx512 = false;
#endif
  struct Env {
    ~Env() { unsetenv("RLX_CPU_SPMV"); }
  } restore;
  for (DType t : {DType::F32, DType::F64})
    for (DType it : {DType::I32, DType::I64}) {
      CsrMatrix A = CsrMatrix::from_coo(n, m, ri, ci, random_vector(rng, t, int64_t(ri.size())), it);
      Tensor x = random_vector(rng, t, m), y0 = random_vector(rng, t, n);
      ir::Graph g;
      CsrVars V = A.ir_inputs(g, "A");
      Var xv = rlx::input(g, "x", t, {m}), y0v = rlx::input(g, "y0", t, {n});
      rlx::output(g, {spmv(V, xv), spmv(V, xv, -0.5, 2.0, y0v)});
      std::vector<Tensor> inputs = A.arrays();
      inputs.insert(inputs.end(), {x, y0});
      std::vector<cd> D = dense_of(A), X = vec(x), Y0 = vec(y0), ax(static_cast<size_t>(n)), axpy(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < m; ++j) ax[size_t(i)] += D[size_t(i * m + j)] * X[size_t(j)];
        axpy[size_t(i)] = -0.5 * ax[size_t(i)] + 2.0 * Y0[size_t(i)];
      }
      const double tol = t == DType::F64 ? 1e-12 : 1e-5;
      Program p = compile(g, cpu);
      for (const char* mode : {"scalar", "gather", "auto"}) {
        BOOST_TEST_CONTEXT(dtype_name(t) << " " << dtype_name(it) << " RLX_CPU_SPMV=" << mode) {
          setenv("RLX_CPU_SPMV", mode, 1);
          if (std::string(mode) == "gather" && !avx512) {
            expect_error<InputError>([&] { run(p, cpu, inputs); }, {"RLX_CPU_SPMV=gather", "AVX-512"});
            continue;
          }
          std::vector<Tensor> r = run(p, cpu, inputs);
          BOOST_TEST(worst(r[0], ax) <= tol);
          BOOST_TEST(worst(r[1], axpy) <= tol);
        }
      }
      setenv("RLX_CPU_SPMV", "gathers", 1);
      expect_error<InputError>([&] { run(p, cpu, inputs); }, {"RLX_CPU_SPMV", "gathers"});
    }
}

// y = A x; z = alpha O g + beta y with O having entries in few rows (a distributed matrix's
// off-diagonal block): y dies at the second product, so the memory plan gives z y's buffer
// (spmv_csr's inplace_input) and the kernels accumulate in place — rows of O without entries
// keep y's value (scaled by beta). Every device, against a plain dense evaluation.
BOOST_AUTO_TEST_CASE(an_accumulating_spmv_runs_in_place_over_a_dying_y0) {
  std::mt19937_64 rng(seed() ^ 0x1a2b);
  const int64_t n = 600, ng = 40;
  for (DType t : {DType::F32, DType::F64, DType::C64})
    for (double beta : {1.0, -0.75}) {
      CsrMatrix P = poisson2d(30, DType::F64, DType::I32);  // 900 rows
      CsrMatrix A(P.rows(), P.cols(), P.row_ptr(), P.col_idx(), random_vector(rng, t, P.nnz()));
      // O: n x ng, entries in rows 0..9, 300..304 and n-1 only.
      std::vector<int64_t> oi, oj;
      for (int64_t r = 0; r < n; ++r)
        if (r < 10 || (r >= 300 && r < 305) || r == n - 1)
          for (int64_t k = 0; k < 3; ++k) oi.push_back(r), oj.push_back((r * 7 + k * 13) % ng);
      CsrMatrix O = CsrMatrix::from_coo(n, ng, oi, oj, random_vector(rng, t, int64_t(oi.size())));
      // A is 900 x 900: take its first n rows' product through a slice.
      Tensor x = random_vector(rng, t, P.rows()), gh = random_vector(rng, t, ng);
      ir::Graph g;
      CsrVars AV = A.ir_inputs(g, "A"), OV = O.ir_inputs(g, "O");
      Var xv = rlx::input(g, "x", t, {P.rows()}), gv = rlx::input(g, "g", t, {ng});
      Var y = slice(spmv(AV, xv) * 2.0, {0}, {n});
      Var z = spmv(OV, gv, 0.5, beta, y);
      rlx::output(g, {z * 3.0});  // z read by another kernel: an arena value, not the result
      std::vector<Tensor> inputs = A.arrays();
      for (const Tensor& a : O.arrays()) inputs.push_back(a);
      inputs.insert(inputs.end(), {x, gh});
      std::vector<cd> DA = dense_of(A), DO = dense_of(O), X = vec(x), G = vec(gh);
      std::vector<cd> want(static_cast<size_t>(n), cd(0));
      for (int64_t i = 0; i < n; ++i) {
        cd ax = 0, og = 0;
        for (int64_t j = 0; j < P.rows(); ++j) ax += DA[size_t(i * P.rows() + j)] * X[size_t(j)];
        for (int64_t j = 0; j < ng; ++j) og += DO[size_t(i * ng + j)] * G[size_t(j)];
        want[size_t(i)] = 3.0 * (0.5 * og + beta * 2.0 * ax);
      }
      const double tol = t == DType::F64 ? 1e-12 : 1e-5;
      for (Device* d : DeviceRegistry::get().runnable()) {
        BOOST_TEST_CONTEXT(dtype_name(t) << " beta " << beta << " on " << d->name()) {
          Program p = compile(g, *d);
          bool shared = false;
          for (auto& node : p.graph.nodes)
            if (node.op->name == "spmv_csr" && node.inputs.size() == 5 && p.slot(node.inputs[4]).kind == BufferSlot::Arena &&
                p.slot({node.id, 0}).kind == BufferSlot::Arena)
              shared = p.slot(node.inputs[4]).offset == p.slot({node.id, 0}).offset;
          std::vector<Tensor> r = run(p, *d, inputs);
          BOOST_TEST(shared);
          BOOST_TEST(worst(r[0], want) <= tol);
        }
      }
    }
}

// A program may write an spmv's result over its accumulated input y0 when y0 is a parameter
// the product reads last (Program::donations) — but not when that parameter is also the
// product's x, which the kernel reads at other rows after writing some of y. Every device.
BOOST_AUTO_TEST_CASE(an_spmv_result_takes_y0s_buffer_only_when_y0_is_not_also_x) {
  CsrMatrix A = poisson2d(6, DType::F64, DType::I32);
  for (bool same : {false, true}) {
    ir::Graph g;
    CsrVars V = A.ir_inputs(g, "A");
    Var xv = rlx::input(g, "x", DType::F64, {A.rows()});
    Var yv = same ? xv : rlx::input(g, "y0", DType::F64, {A.rows()});
    rlx::output(g, {spmv(V, xv, 1.0, 1.0, yv)});
    const size_t y_param = same ? 3 : 4;  // (after row_ptr, col_idx, values and x)
    for (Device* d : DeviceRegistry::get().runnable()) {
      const Program p = compile(g, *d);
      BOOST_TEST(p.donates(y_param, 0) == !same, d->name() << (same ? ": y0 is x" : ": y0 apart"));
    }
  }
}

BOOST_AUTO_TEST_CASE(front_end_errors) {
  CsrMatrix A = poisson2d(3);
  ir::Graph g;
  CsrVars V = A.ir_inputs(g, "A");
  BOOST_TEST(g.param_name(0) == "A.row_ptr");
  BOOST_TEST(g.param_name(2) == "A.values");
  Var wrong = rlx::input(g, "x", DType::F64, {4});
  BOOST_CHECK_THROW(spmv(V, wrong), InputError);
  Var xf = rlx::input(g, "xf", DType::F32, {9});
  BOOST_CHECK_THROW(spmv(V, xf), InputError);
  CsrVars empty;
  Var x = rlx::input(g, "x9", DType::F64, {9});
  BOOST_CHECK_THROW(spmv(empty, x), InputError);
  CsrMatrix R = CsrMatrix::from_coo(2, 3, std::vector<int64_t>{0}, std::vector<int64_t>{2}, std::vector<double>{1.0});
  CsrVars RV = R.ir_inputs(g, "R");
  Var b2 = rlx::input(g, "b2", DType::F64, {2});
  BOOST_CHECK_THROW(sptrsv(RV, b2), InputError);  // not square
}

BOOST_AUTO_TEST_SUITE_END()
