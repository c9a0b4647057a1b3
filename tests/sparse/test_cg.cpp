// The conjugate-gradient op (cg_csr, through sparse::cg): the solution against a dense solve
// and krylov_solve, what it reports when it does not converge, its gradient (the adjoint
// solve) against central finite differences and against the VJP of the dense LU solve, and
// the cpu device against the reference device.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <map>
#include <random>

#include "tests/sparse/test_sparse.hpp"
#include "passes/autodiff.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/operator.hpp"
#include "solvers/sparse/ops.hpp"
#include "solvers/sparse/precond.hpp"

namespace {

// A random Hermitian positive definite n x n matrix (symmetric for real t): about 2 k
// off-diagonal entries a row, each part uniform in [-1, 1], entry (j, i) the conjugate of
// (i, j), and a real diagonal `margin` more than its row's sum of magnitudes.
CsrMatrix random_hpd(std::mt19937_64& rng, int64_t n, int64_t k, double margin, DType t = DType::F64,
                     DType index = DType::I64) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::map<std::pair<int64_t, int64_t>, cd> e;
  for (int64_t i = 1; i < n; ++i)
    for (int64_t q = 0; q < k; ++q) {
      const auto j = int64_t(rng() % uint64_t(i));
      if (e.count({i, j})) continue;
      const cd v(u(rng), t == DType::C64 ? u(rng) : 0.0);
      e[{i, j}] = v;
      e[{j, i}] = std::conj(v);
    }
  std::vector<double> sum(size_t(n), margin);
  for (auto& [ij, v] : e) sum[size_t(ij.first)] += std::abs(v);
  for (int64_t i = 0; i < n; ++i) e[{i, i}] = sum[size_t(i)];
  std::vector<int64_t> I, J;
  std::vector<cd> V;
  for (auto& [ij, v] : e) I.push_back(ij.first), J.push_back(ij.second), V.push_back(v);
  if (t == DType::C64) return CsrMatrix::from_coo(n, n, I, J, V, index);
  std::vector<double> re;
  for (cd v : V) re.push_back(v.real());
  return CsrMatrix::from_coo(n, n, I, J, re, t, index);
}

std::vector<cd> values_of(const Tensor& t) {
  std::vector<cd> r;
  for (int64_t k = 0; k < t.numel(); ++k) r.push_back(at(t, k));
  return r;
}
std::vector<cd> random_values(std::mt19937_64& rng, DType t, int64_t n) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<cd> r;
  for (int64_t k = 0; k < n; ++k) r.push_back(cd(u(rng), t == DType::C64 ? u(rng) : 0.0));
  return r;
}
double norm(const std::vector<cd>& v) {
  double s = 0;
  for (cd z : v) s += std::norm(z);
  return std::sqrt(s);
}
// max |got - want| / max |want|
double worst(const std::vector<cd>& got, const std::vector<cd>& want) {
  double err = 0, scale = 0;
  for (size_t k = 0; k < want.size(); ++k) err = std::max(err, std::abs(got[k] - want[k])), scale = std::max(scale, std::abs(want[k]));
  return err / std::max(scale, 1e-300);
}
// A x and A^-1 b (Gaussian elimination, A Hermitian positive definite) in double.
std::vector<cd> times(const CsrMatrix& A, const std::vector<cd>& x) {
  const std::vector<cd> D = dense_of(A);
  const int64_t n = A.rows();
  std::vector<cd> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) y[size_t(i)] += D[size_t(i * n + j)] * x[size_t(j)];
  return y;
}
std::vector<cd> dense_solve(const CsrMatrix& A, const std::vector<cd>& b) {
  return test::solve_without_pivoting(dense_of(A), b);
}

// The graph of x = cg(A, b) with A, b inputs: results x, iterations, residual, converged.
struct CgGraph {
  ir::Graph g;
  CsrVars A;
  Var b;
  CgVars r;
  CgGraph(const CsrMatrix& M, const CgOptions& o) {
    A = M.ir_inputs(g, "A");
    b = rlx::input(g, "b", M.values().dtype(), {M.rows()});
    r = cg(A, b, o);
    rlx::output(g, {r.x, r.iterations, r.residual, r.converged});
  }
};

std::vector<Tensor> run_on(const std::string& device, const ir::Graph& g, const std::vector<Tensor>& in) {
  Device& d = DeviceRegistry::get().at(device);
  return run(compile(g, d), d, in);
}

int64_t iterations(const Tensor& t) { return t.data<int64_t>()[0]; }

}  // namespace

BOOST_AUTO_TEST_SUITE(cg_op)

// x against Gaussian elimination and krylov_solve's CG (rtol 1e-12: both within 1e-10 of
// the largest |x|, the matrix's condition number being below 20); the residual it reports
// is the true one and meets the tolerance.
BOOST_AUTO_TEST_CASE(solution_matches_dense_solve_and_krylov_solve) {
  std::mt19937_64 rng(seed() ^ 0xc6);
  for (DType index : {DType::I32, DType::I64}) {
    BOOST_TEST_CONTEXT("index " << index) {
      CsrMatrix A = random_hpd(rng, 200, 3, 0.5, DType::F64, index);
      const std::vector<cd> b = random_values(rng, DType::F64, 200);
      CgGraph G(A, {.rtol = 1e-12, .max_it = 1000});
      std::vector<Tensor> in = A.arrays();
      in.push_back(test::host_values(DType::F64, b));
      std::vector<Tensor> r = run_on("cpu", G.g, in);
      const std::vector<cd> x = values_of(r[0]);
      BOOST_TEST(worst(x, dense_solve(A, b)) <= 1e-10);
      CsrOperator op(A);
      KrylovOptions ko;
      ko.rtol = 1e-12;
      ko.device = "cpu";
      KrylovResult k = krylov_solve(op, in.back(), *make_preconditioner("none", op), ko);
      BOOST_TEST(converged(k.reason));
      BOOST_TEST(worst(x, values_of(k.x)) <= 1e-10);
      BOOST_TEST(iterations(r[1]) > 0);
      BOOST_TEST(iterations(r[1]) <= 1000);
      const std::vector<cd> Ax = times(A, x);
      std::vector<cd> res(b.size());
      for (size_t i = 0; i < b.size(); ++i) res[i] = b[i] - Ax[i];
      const double reported = r[2].data<double>()[0];
      BOOST_TEST(reported <= kTrueResidualSlack * 1e-12 * norm(b));
      BOOST_TEST(std::abs(reported - norm(res)) <= 1e-14 * norm(b));
      BOOST_TEST(r[3].data<bool>()[0]);
      BOOST_CHECK_NO_THROW(check_converged(r[0], r[1], r[2], r[3], {.rtol = 1e-12, .max_it = 1000}));
    }
  }
}

// Stopped by max_it: the iterations say so, the residual is the true one of the x returned
// (1e-10 relative: it is far above rounding here), converged is false and check_converged
// throws with the reason. A zero matrix breaks down at once (a NaN step): diverged-nan.
BOOST_AUTO_TEST_CASE(reports_a_solve_that_did_not_converge) {
  std::mt19937_64 rng(seed() ^ 0xc7);
  CsrMatrix A = random_hpd(rng, 300, 4, 0.01);
  const std::vector<cd> b = random_values(rng, DType::F64, 300);
  const CgOptions o{.rtol = 1e-12, .max_it = 3};
  CgGraph G(A, o);
  std::vector<Tensor> in = A.arrays();
  in.push_back(test::host_values(DType::F64, b));
  std::vector<Tensor> r = run_on("cpu", G.g, in);
  BOOST_TEST(iterations(r[1]) == 3);
  const std::vector<cd> Ax = times(A, values_of(r[0]));
  std::vector<cd> res(b.size());
  for (size_t i = 0; i < b.size(); ++i) res[i] = b[i] - Ax[i];
  const double reported = r[2].data<double>()[0];
  BOOST_TEST(std::abs(reported - norm(res)) <= 1e-10 * norm(res));
  BOOST_TEST(reported > 1e-3 * norm(b));
  BOOST_TEST(!r[3].data<bool>()[0]);
  try {
    check_converged(r[0], r[1], r[2], r[3], o);
    BOOST_ERROR("check_converged did not throw");
  } catch (const SolveError& e) {
    BOOST_TEST(stop_reason_name(e.result.reason) == std::string("diverged-max-it"));
    BOOST_TEST(e.result.iterations == 3);
    BOOST_TEST(std::string(e.what()).find("diverged-max-it after 3 iterations") != std::string::npos);
  }

  CsrMatrix Z = CsrMatrix::from_coo(3, 3, std::vector<int64_t>{0, 1, 2}, std::vector<int64_t>{0, 1, 2},
                                    std::vector<double>{0, 0, 0});
  CgGraph H(Z, {});
  std::vector<Tensor> zin = Z.arrays();
  zin.push_back(f64s({1, 2, 3}));
  std::vector<Tensor> z = run_on("cpu", H.g, zin);
  BOOST_TEST(iterations(z[1]) == 1);
  BOOST_TEST(std::isnan(z[2].data<double>()[0]));
  BOOST_TEST(!z[3].data<bool>()[0]);
  try {
    check_converged(z[0], z[1], z[2], z[3], {});
    BOOST_ERROR("check_converged did not throw");
  } catch (const SolveError& e) {
    BOOST_TEST(stop_reason_name(e.result.reason) == std::string("diverged-nan"));
  }
}

// L = Re sum conj(w) x for x = cg(A, b): grad with respect to A's values and b against
//  - central finite differences (f64, h = 1e-6, 1e-6 of the largest gradient), each
//    perturbation keeping A symmetric: an off-diagonal pair moves together, so the
//    directional derivative is the sum of the pair's two entries of the gradient;
//  - the VJP of the dense LU solve (lu_factor, lu_solve) on A densified: d values[k] is
//    dA[row(k), col(k)] (f64 1e-9, c64 2e-4 of the largest: the conjugates included).
BOOST_AUTO_TEST_CASE(gradient_matches_finite_differences_and_the_dense_solve_vjp) {
  std::mt19937_64 rng(seed() ^ 0xc8);
  for (DType t : {DType::F64, DType::C64}) {
    BOOST_TEST_CONTEXT(t) {
      const int64_t n = 30;
      CsrMatrix A = random_hpd(rng, n, 3, 1.0, t);
      const std::vector<cd> b = random_values(rng, t, n), w = random_values(rng, t, n);
      const CgOptions o{.rtol = t == DType::F64 ? 1e-14 : 1e-7, .max_it = 500};
      ir::Graph g;
      CsrVars V = A.ir_inputs(g, "A");
      Var bv = rlx::input(g, "b", t, {n});
      Var wv = rlx::constant(g, test::host_values(t, w));
      Var x = cg(V, bv, o).x;
      Var prod = t == DType::C64 ? rlx::real(rlx::conj(wv) * x) : wv * x;
      Var loss = rlx::sum(prod);
      std::vector<Var> d = rlx::grad(loss, {V.values, bv});
      rlx::output(g, {loss, d[0], d[1]});
      std::vector<Tensor> in = A.arrays();
      in.push_back(test::host_values(t, b));
      const std::vector<Tensor> r = run_on("reference", g, in);
      const std::vector<cd> gv = values_of(r[1]), gb = values_of(r[2]);

      // The dense solve's VJP.
      ir::Graph h;
      Var Ad = rlx::input(h, "A", t, {n, n}), bd = rlx::input(h, "b", t, {n});
      std::vector<Var> f = rlx::op_multi("lu_factor", {Ad});
      Var xd = rlx::op("lu_solve", {f[0], f[1], bd});
      Var wd = rlx::constant(h, test::host_values(t, w));
      Var ld = rlx::sum(t == DType::C64 ? rlx::real(rlx::conj(wd) * xd) : wd * xd);
      std::vector<Var> dd = rlx::grad(ld, {Ad, bd});
      rlx::output(h, {dd[0], dd[1]});
      const std::vector<Tensor> rd = run_on("reference", h, {A.to_dense(), in.back()});
      const Coo c = A.to_coo();
      std::vector<cd> dense_gv;
      for (int64_t k = 0; k < A.nnz(); ++k) dense_gv.push_back(at(rd[0], idx(c.row, k) * n + idx(c.col, k)));
      const double tol = t == DType::F64 ? 1e-9 : 2e-4;
      BOOST_TEST(worst(gv, dense_gv) <= tol);
      BOOST_TEST(worst(gb, values_of(rd[1])) <= tol);
      if (t != DType::F64) continue;

      // Finite differences of the loss, computed by the same graph.
      auto loss_at = [&](const std::vector<Tensor>& at_in) { return run_on("reference", g, at_in)[0].data<double>()[0]; };
      const double h6 = 1e-6;
      double scale = 0;
      for (cd z : gv) scale = std::max(scale, std::abs(z));
      for (cd z : gb) scale = std::max(scale, std::abs(z));
      std::map<std::pair<int64_t, int64_t>, int64_t> pos;
      for (int64_t k = 0; k < A.nnz(); ++k) pos[{idx(c.row, k), idx(c.col, k)}] = k;
      for (int q = 0; q < 12; ++q) {
        const auto k = int64_t(rng() % uint64_t(A.nnz()));
        const int64_t i = idx(c.row, k), j = idx(c.col, k), m = pos.at({j, i});
        double side[2];
        for (int s = 0; s < 2; ++s) {
          std::vector<Tensor> p = in;
          Tensor copy = Tensor::empty(DType::F64, {A.nnz()});
          std::memcpy(copy.raw(), in[2].raw(), copy.nbytes());
          copy.data<double>()[k] += s ? -h6 : h6;
          if (m != k) copy.data<double>()[m] += s ? -h6 : h6;
          p[2] = copy;
          side[s] = loss_at(p);
        }
        const double fd = (side[0] - side[1]) / (2 * h6), got = (gv[size_t(k)] + (m != k ? gv[size_t(m)] : 0.0)).real();
        BOOST_TEST(std::abs(fd - got) <= 1e-6 * scale, "values (" << i << ", " << j << "): vjp " << got << ", fd " << fd);
      }
      for (int q = 0; q < 8; ++q) {
        const auto i = int64_t(rng() % uint64_t(n));
        double side[2];
        for (int s = 0; s < 2; ++s) {
          std::vector<Tensor> p = in;
          Tensor copy = Tensor::empty(DType::F64, {n});
          std::memcpy(copy.raw(), in[3].raw(), copy.nbytes());
          copy.data<double>()[i] += s ? -h6 : h6;
          p[3] = copy;
          side[s] = loss_at(p);
        }
        const double fd = (side[0] - side[1]) / (2 * h6), got = gb[size_t(i)].real();
        BOOST_TEST(std::abs(fd - got) <= 1e-6 * scale, "b[" << i << "]: vjp " << got << ", fd " << fd);
      }
    }
  }
}

// The solve and its gradient on the cpu device against the reference device, per value and
// index dtype, from x0: x and both gradients within 1e-10 (f64) or 1e-4 (f32, c64) of the
// largest element; both devices converge.
BOOST_AUTO_TEST_CASE(cpu_matches_reference) {
  std::mt19937_64 rng(seed() ^ 0xc9);
  for (DType t : {DType::F32, DType::F64, DType::C64})
    for (DType index : {DType::I32, DType::I64}) {
      BOOST_TEST_CONTEXT(t << " " << index) {
        const int64_t n = 257;
        CsrMatrix A = random_hpd(rng, n, 5, 1.0, t, index);
        const CgOptions o{.rtol = t == DType::F64 ? 1e-12 : 1e-6, .max_it = 500};
        ir::Graph g;
        CsrVars V = A.ir_inputs(g, "A");
        Var bv = rlx::input(g, "b", t, {n}), x0 = rlx::input(g, "x0", t, {n});
        Var wv = rlx::constant(g, test::host_values(t, random_values(rng, t, n)));
        CgVars s = cg(V, bv, o, x0);
        Var loss = rlx::sum(t == DType::C64 ? rlx::real(rlx::conj(wv) * s.x) : wv * s.x);
        std::vector<Var> d = rlx::grad(loss, {V.values, bv, x0});
        rlx::output(g, {s.x, s.converged, d[0], d[1], d[2]});
        std::vector<Tensor> in = A.arrays();
        in.push_back(test::host_values(t, random_values(rng, t, n)));
        in.push_back(test::host_values(t, random_values(rng, t, n)));
        const std::vector<Tensor> want = run_on("reference", g, in), got = run_on("cpu", g, in);
        const double tol = t == DType::F64 ? 1e-10 : 1e-4;
        BOOST_TEST(want[1].data<bool>()[0]);
        BOOST_TEST(got[1].data<bool>()[0]);
        for (int k : {0, 2, 3}) BOOST_TEST(worst(values_of(got[size_t(k)]), values_of(want[size_t(k)])) <= tol, "result " << k);
        for (cd z : values_of(got[4])) BOOST_TEST(z == cd(0));  // x0: no gradient
      }
    }
}

BOOST_AUTO_TEST_CASE(cg_errors) {
  ir::Graph g;
  CsrMatrix R = CsrMatrix::from_coo(2, 3, std::vector<int64_t>{0}, std::vector<int64_t>{2}, std::vector<double>{1.0});
  CsrVars RV = R.ir_inputs(g, "R");
  expect_error<InputError>([&] { cg(RV, rlx::input(g, "b2", DType::F64, {2})); }, {"square matrix", "2 x 3"});
  CsrMatrix A = CsrMatrix::from_coo(2, 2, std::vector<int64_t>{0, 1}, std::vector<int64_t>{0, 1}, std::vector<double>{1, 1});
  CsrVars AV = A.ir_inputs(g, "A");
  expect_error<InputError>([&] { cg(AV, rlx::input(g, "b3", DType::F64, {3})); }, {"b must be f64[2]"});
  expect_error<InputError>([&] { cg(AV, rlx::input(g, "bf", DType::F32, {2})); }, {"b must be f64[2]"});
  Var b = rlx::input(g, "b", DType::F64, {2});
  expect_error<InputError>([&] { cg(AV, b, {.rtol = -1}); }, {"rtol and atol must be >= 0"});
  expect_error<InputError>([&] { cg(AV, b, {.max_it = -1}); }, {"max_it must be >= 0"});
  expect_error<InputError>([&] { cg(AV, b, {}, rlx::input(g, "x0", DType::F64, {3})); }, {"x0 must be f64[2]"});
  // The iteration count has no gradient: a loss that reads it is refused by name.
  CgVars s = cg(AV, b);
  Var loss = rlx::sum(s.x) + rlx::cast(s.iterations, DType::F64);
  expect_error<InputError>([&] { rlx::grad(loss, {b}); }, {"cg_csr", "i64, which has no gradient"});
}

BOOST_AUTO_TEST_SUITE_END()
