// The cpu device's threaded sptrsv_csr (the pipelined sweep of devices/cpu/sptrsv.cpp)
// against the reference device and, bit for bit, against the cpu's own sequential sweep:
// 3D Poisson factors large enough for the automatic choice to go threaded (lower, upper,
// unit diagonal), a random structure with unsorted rows, a tridiagonal matrix (the
// model keeps it sequential), zero diagonals, f32/f64/c64 values, i32/i64 indices.
// RLX_CPU_SPTRSV picks the path (seq, pipe, pipe:B with small odd blocks, or automatic);
// a counter inside the kernel shows that the threaded path really ran. ctest runs this
// with RLX_NUM_THREADS=2.
#define BOOST_TEST_MODULE sptrsv_parallel
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "tests/support/seed.hpp"
#include "tests/support/tensors.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/ops.hpp"
#include "solvers/sparse/poisson.hpp"

// Defined in devices/cpu/sptrsv.cpp: threaded sptrsv sweeps run so far.
namespace rlx::cpu {
int64_t sptrsv_pipelined_solves();
}

using namespace rlx;
using namespace rlx::sparse;
using cd = std::complex<double>;

namespace {

uint64_t seed() { return test::run_seed("test_sptrsv_parallel"); }

using test::host_tensor;

int64_t threaded_runs() { return rlx::cpu::sptrsv_pipelined_solves(); }
bool have_threads() { return rlx::cpu::num_threads() >= 2; }

// Sets RLX_CPU_SPTRSV for one scope.
struct Mode {
  explicit Mode(const char* m) {
    if (m) setenv("RLX_CPU_SPTRSV", m, 1);
    else unsetenv("RLX_CPU_SPTRSV");
  }
  ~Mode() { unsetenv("RLX_CPU_SPTRSV"); }
};

using Rows = std::vector<std::vector<std::pair<int64_t, cd>>>;

// A CSR matrix from per-row (column, value) lists, kept in the given order.
CsrMatrix build(int64_t n, const Rows& rows, DType value, DType index) {
  std::vector<int64_t> rp{0}, ci;
  std::vector<cd> v;
  for (const auto& row : rows) {
    for (const auto& [c, x] : row) {
      ci.push_back(c);
      v.push_back(x);
    }
    rp.push_back(int64_t(ci.size()));
  }
  return CsrMatrix(n, n, host_tensor(index, rp), host_tensor(index, ci), test::host_values(value, v));
}

// Off-diagonal entries of size <= 1 (complex for c64); a diagonal of size 6..8 with a
// random sign (unless zero_diag says which rows get an exact zero).
struct Values {
  std::mt19937_64& rng;
  DType t;
  cd off() {
    std::uniform_real_distribution<double> u(-1, 1);
    return cd(u(rng), t == DType::C64 ? u(rng) : 0.0);
  }
  cd diag() {
    std::uniform_real_distribution<double> m(6, 8), ph(0, 6.283);
    if (t == DType::C64) return std::polar(m(rng), ph(rng));
    return m(rng) * (rng() % 2 ? 1.0 : -1.0);
  }
};

// The 7-point stencil pattern on an m^3 grid in natural order (the structure of an IC(0)
// or ILU(0) factor of the 3D Poisson matrix) with random values; `part` < 0 keeps the
// lower triangle, > 0 the upper, 0 both (an ILU(0)-like combined factor).
CsrMatrix stencil(std::mt19937_64& rng, int64_t m, int part, DType value, DType index, int64_t zero_every = 0) {
  CsrMatrix P = poisson3d(m, DType::F64, DType::I64);
  const int64_t n = P.rows();
  const int64_t* rp = P.row_ptr().data<int64_t>();
  const int64_t* ci = P.col_idx().data<int64_t>();
  Values val{rng, value};
  Rows rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = rp[r]; k < rp[r + 1]; ++k) {
      const int64_t c = ci[k];
      if ((part < 0 && c > r) || (part > 0 && c < r)) continue;
      cd x = c == r ? val.diag() : val.off() / 3.0;
      if (c == r && zero_every > 0 && r % zero_every == 5) x = 0;
      rows[size_t(r)].push_back({c, x});
    }
  return build(n, rows, value, index);
}

// Random columns anywhere in the row (both triangles, up to per_row entries), the
// diagonal somewhere among them, each row's entries in shuffled order.
CsrMatrix random_structure(std::mt19937_64& rng, int64_t n, int64_t per_row, DType value, DType index) {
  Values val{rng, value};
  std::uniform_int_distribution<int64_t> col(0, n - 1);
  Rows rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    auto& row = rows[size_t(r)];
    row.push_back({r, val.diag()});
    for (int64_t q = 1; q < per_row; ++q) {
      const int64_t c = col(rng);
      if (std::none_of(row.begin(), row.end(), [&](const auto& e) { return e.first == c; }))
        row.push_back({c, val.off() / double(per_row)});
    }
    std::shuffle(row.begin(), row.end(), rng);
  }
  return build(n, rows, value, index);
}

// Tridiagonal: every row needs the one before (after, for upper) it.
CsrMatrix tridiagonal(std::mt19937_64& rng, int64_t n, DType value, DType index) {
  Values val{rng, value};
  Rows rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    if (r > 0) rows[size_t(r)].push_back({r - 1, val.off() / 2.0});
    rows[size_t(r)].push_back({r, val.diag()});
    if (r + 1 < n) rows[size_t(r)].push_back({r + 1, val.off() / 2.0});
  }
  return build(n, rows, value, index);
}

Tensor random_vector(std::mt19937_64& rng, DType t, int64_t n) {
  Values val{rng, t};
  std::vector<cd> v(static_cast<size_t>(n));
  for (auto& x : v) x = val.off();
  return test::host_values(t, v);
}

cd at(const Tensor& t, int64_t k) {
  switch (t.dtype()) {
    case DType::F32: return double(t.data<float>()[k]);
    case DType::F64: return t.data<double>()[k];
    default: return cd(t.data<c64>()[k].real(), t.data<c64>()[k].imag());
  }
}

// max |a - b| / max |b|
double rel_diff(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t k = 0; k < b.numel(); ++k) {
    num = std::max(num, std::abs(at(a, k) - at(b, k)));
    den = std::max(den, std::abs(at(b, k)));
  }
  return num / std::max(den, 1e-300);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// One sptrsv program for A (arrays as inputs, so every run reads the same buffers).
struct Solve {
  CsrMatrix A;
  Tensor b;
  bool lower, unit;
  ir::Graph g;
  Program cpu, ref;

  Solve(CsrMatrix a, Tensor rhs, bool lo, bool un) : A(std::move(a)), b(std::move(rhs)), lower(lo), unit(un) {
    CsrVars V = A.ir_inputs(g, "A");
    Var bv = rlx::input(g, "b", A.value_type(), {A.rows()});
    rlx::output(g, {sptrsv(V, bv, lower, unit)});
    cpu = compile(g, DeviceRegistry::get().at("cpu"));
    ref = compile(g, DeviceRegistry::get().at("reference"));
  }
  std::vector<Tensor> inputs() const {
    std::vector<Tensor> in = A.arrays();
    in.push_back(b);
    return in;
  }
  Tensor on_cpu() { return run(cpu, DeviceRegistry::get().at("cpu"), inputs()).at(0); }
  Tensor on_reference() { return run(ref, DeviceRegistry::get().at("reference"), inputs()).at(0); }
};

// Runs s sequentially, threaded (forced: blocks from the bandwidth, and pipe:7 / pipe:1,
// blocks far below it, so that rows wait on older blocks) and automatically (4 runs:
// the two that measure the matrix, then the chosen path); every result must match the
// sequential one bit for bit, which must match the reference device. Returns how many
// of the automatic runs went threaded.
int64_t check_all_paths(Solve& s, double tol) {
  Tensor seq;
  {
    Mode m("seq");
    const int64_t before = threaded_runs();
    seq = s.on_cpu();
    BOOST_TEST(threaded_runs() == before);
  }
  BOOST_TEST(rel_diff(seq, s.on_reference()) <= tol);
  for (const char* forced : {"pipe", "pipe:7", "pipe:1"}) {
    BOOST_TEST_CONTEXT("RLX_CPU_SPTRSV=" << forced) {
      Mode m(forced);
      const int64_t before = threaded_runs();
      Tensor x = s.on_cpu();
      BOOST_TEST(same_bits(x, seq));
      BOOST_TEST(threaded_runs() == before + (have_threads() ? 1 : 0));
    }
  }
  Mode m(nullptr);
  const int64_t before = threaded_runs();
  for (int i = 0; i < 4; ++i) BOOST_TEST(same_bits(s.on_cpu(), seq));
  return threaded_runs() - before;
}

const DType kValues[] = {DType::F32, DType::F64, DType::C64};
const DType kIndices[] = {DType::I32, DType::I64};

double tol_for(DType t) { return t == DType::F64 ? 1e-13 : 1e-5; }

}  // namespace

BOOST_AUTO_TEST_CASE(poisson_factors_go_threaded_and_match) {
  if (!have_threads()) BOOST_TEST_MESSAGE("one pool thread: the threaded path cannot run; checking results only");
  std::mt19937_64 rng(seed() ^ 0x5eed);
  // Every matrix stays alive, so that none reuses another's buffers: the kernel's plan
  // cache (keyed by the arrays' addresses and a sample of their contents) then starts
  // fresh for each, and its runs 3 and 4 go threaded whatever the machine's load.
  std::vector<std::unique_ptr<Solve>> keep;
  for (DType t : kValues)
    for (DType it : kIndices)
      // IC(0)-like lower factor, its upper counterpart, and the two ILU(0) solves on a
      // combined factor (unit lower, upper with diagonal).
      for (int kind = 0; kind < 4; ++kind) {
        const int part = kind == 0 ? -1 : kind == 1 ? 1 : 0;
        const bool lower = kind == 0 || kind == 2, unit = kind == 2;
        BOOST_TEST_CONTEXT(dtype_name(t) << " " << dtype_name(it) << (lower ? " lower" : " upper")
                                         << (unit ? " unit" : "") << (part == 0 ? " (combined factor)" : "")) {
          // 40^3: 64,000 rows, blocks of one grid plane (1,600 rows).
          keep.push_back(std::make_unique<Solve>(stencil(rng, 40, part, t, it), random_vector(rng, t, 64000), lower, unit));
          const int64_t auto_threaded = check_all_paths(*keep.back(), tol_for(t));
          // Runs 3 and 4 go threaded (the contention guard needs two slow ones in a row
          // before it steps back).
          if (have_threads()) BOOST_TEST(auto_threaded >= 2);
        }
      }
}

BOOST_AUTO_TEST_CASE(random_structure_and_chains) {
  std::mt19937_64 rng(seed() ^ 0xc0ffee);
  for (DType t : kValues)
    for (DType it : kIndices)
      for (bool lower : {true, false})
        for (bool unit : {false, true}) {
          BOOST_TEST_CONTEXT(dtype_name(t) << " " << dtype_name(it) << (lower ? " lower" : " upper")
                                           << (unit ? " unit" : "")) {
            {  // bandwidth about n: the automatic choice stays sequential
              Solve s(random_structure(rng, 9000, 6, t, it), random_vector(rng, t, 9000), lower, unit);
              BOOST_TEST(check_all_paths(s, tol_for(t)) == 0);
            }
            {  // bandwidth 1, but every block's first row needs the previous block's last
              Solve s(tridiagonal(rng, 40000, t, it), random_vector(rng, t, 40000), lower, unit);
              BOOST_TEST(check_all_paths(s, tol_for(t)) == 0);
            }
          }
        }
}

// A zero diagonal gives IEEE infinities and NaNs, the same ones on every path.
BOOST_AUTO_TEST_CASE(zero_diagonal_same_bits) {
  std::mt19937_64 rng(seed() ^ 0xd1a6);
  for (DType t : kValues) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      Solve s(stencil(rng, 24, -1, t, DType::I32, 4001), random_vector(rng, t, 24 * 24 * 24), true, false);
      Tensor seq;
      {
        Mode m("seq");
        seq = s.on_cpu();
      }
      bool nonfinite = false;
      for (int64_t k = 0; k < seq.numel(); ++k) nonfinite |= !std::isfinite(std::abs(at(seq, k)));
      BOOST_TEST(nonfinite);
      for (const char* forced : {"pipe", "pipe:5"}) {
        Mode m(forced);
        BOOST_TEST(same_bits(s.on_cpu(), seq));
      }
    }
  }
}

// Called from inside a pool task the kernel must not wait for threads that are busy
// running the task: it runs the sequential sweep.
BOOST_AUTO_TEST_CASE(nested_call_runs_sequentially) {
  std::mt19937_64 rng(seed() ^ 0x7a5c);
  Solve s(stencil(rng, 40, -1, DType::F64, DType::I32), random_vector(rng, DType::F64, 64000), true, false);
  Tensor seq;
  {
    Mode m("seq");
    seq = s.on_cpu();
  }
  Mode m("pipe");
  const int64_t before = threaded_runs();
  Tensor inner;
  rlx::cpu::ThreadPool::instance().run(2, [&](int t, int) {
    if (t == 0) inner = s.on_cpu();
  });
  BOOST_TEST(threaded_runs() == before);
  BOOST_TEST(same_bits(inner, seq));
}
