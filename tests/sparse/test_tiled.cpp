// The tiled SpMV layout (src/ir/ops/tiled_layout.hpp; its solver side
// solvers/sparse/tiled.hpp): its invariants against CSR, its threaded build, tile_csr and
// spmv_tiled on every device, the choice between it and CSR, and broken layouts named by
// the reference device. (Cases of the front_end suite.)
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/sparse/test_sparse.hpp"
#include "tests/support/tiled.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/csr.hpp"
#include "solvers/sparse/ops.hpp"
#include "solvers/sparse/tiled.hpp"

using test::tiled_case;
using test::tiled_error;
using test::TiledCase;

BOOST_AUTO_TEST_SUITE(front_end)

// Checks a layout of c: counts, shares ascending and never inside a row, rows in order
// within each tile, and its host product against a long-double CSR product.
void check_layout(const TiledCase& c, const sparse::TiledCsr& t, const std::string& what) {
  BOOST_TEST(t.nnz == int64_t(c.val.size()), what);
  BOOST_TEST(t.share.size() == size_t(t.row_blocks * t.panels * t.warps + 1), what);
  BOOST_TEST(t.share.front() == 0, what);
  BOOST_TEST(t.share.back() == t.nnz, what);
  int64_t bad = 0;
  const size_t w = size_t(t.warps);
  for (size_t i = 0; i + 1 < t.share.size(); ++i) {
    if (t.share[i + 1] < t.share[i]) ++bad;
    const int64_t k = t.share[i], tile_start = t.share[i / w * w], tile_end = t.share[(i / w + 1) * w];
    if (k > tile_start && k < tile_end && (t.rc[size_t(k)] >> 16) == (t.rc[size_t(k) - 1] >> 16)) ++bad;
    if (i % w == 0)
      for (int64_t q = tile_start + 1; q < tile_end; ++q)
        if ((t.rc[size_t(q)] >> 16) < (t.rc[size_t(q) - 1] >> 16)) ++bad;
  }
  BOOST_TEST(bad == 0, what << ": shares out of order or inside a row, or rows out of order");
  std::vector<double> y(size_t(c.rows));
  sparse::tiled_product_host(t, c.x.data(), y.data());
  const double err = tiled_error(c, y);
  BOOST_TEST(err <= 1e-14, what << " worst relative error " << err);
}

BOOST_AUTO_TEST_CASE(tiled_layout_matches_csr) {
  const TiledCase c = tiled_case(seed() + 11, 1003, 5000);
  struct Shape {
    int rb, panel, warps;
  };
  for (DType it : {DType::I32, DType::I64})
    for (Shape sh : {Shape{64, 512, 32}, Shape{1, 5000, 1}, Shape{1003, 4999, 7}, Shape{100, 65536, 32},
                     Shape{7, 333, 4}, Shape{65536, 1024, 32}})
      check_layout(c,
                   sparse::tile_csr(host_tensor(it, c.rp), host_tensor(it, c.ci), host_tensor(DType::F64, c.val),
                                    c.rows, c.cols, sh.rb, sh.panel, sh.warps),
                   std::string(dtype_name(it)) + " rb " + std::to_string(sh.rb) + " panel " +
                       std::to_string(sh.panel) + " warps " + std::to_string(sh.warps));
  // Over 2^20 nonzeros the two passes run row blocks on several threads; the same checks,
  // and a bad input names its first offending row whichever thread meets it.
  const TiledCase big = tiled_case(seed() + 14, 12007, 40000);
  BOOST_REQUIRE(big.val.size() > (size_t(1) << 20));
  check_layout(big,
               sparse::tile_csr(host_tensor(DType::I64, big.rp), host_tensor(DType::I64, big.ci),
                                host_tensor(DType::F64, big.val), big.rows, big.cols, 256, 8192, 32),
               "threaded build");
  std::vector<int64_t> cols = big.ci;
  cols[size_t(big.rp[11016])] = -7;  // (rows 11016 and 3009 hold 2000 entries each: r % 17 == 0, r % 5 != 0)
  cols[size_t(big.rp[3009])] = 40000;
  try {
    sparse::tile_csr(host_tensor(DType::I64, big.rp), host_tensor(DType::I64, cols), host_tensor(DType::F64, big.val),
                     big.rows, big.cols, 256, 8192, 32);
    BOOST_ERROR("tile_csr accepted columns outside the matrix");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("column 40000 of row 3009") != std::string::npos, e.what());
  }
  // Refused, with the reason: bad tile shapes, dtypes, columns, row pointers, and layouts
  // whose shares would outweigh the matrix.
  const Tensor rp = host_tensor(DType::I32, c.rp), ci = host_tensor(DType::I32, c.ci);
  const Tensor v = host_tensor(DType::F64, c.val);
  auto refused = [&](const Tensor& r, const Tensor& cc, int64_t rows, int64_t cols, int rb, int panel, int warps,
                     const std::string& why) {
    try {
      sparse::tile_csr(r, cc, v, rows, cols, rb, panel, warps);
      BOOST_ERROR("tile_csr accepted a layout that should be refused for: " << why);
    } catch (const InputError& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what() << " (expected: " << why << ")");
    }
  };
  refused(rp, ci, c.rows, c.cols, 0, 512, 32, "must lie in [1, 65536], got 0 and 512");
  refused(rp, ci, c.rows, c.cols, 65537, 512, 32, "got 65537 and 512");
  refused(rp, ci, c.rows, c.cols, 64, 65537, 32, "got 64 and 65537");
  refused(rp, ci, c.rows, c.cols, 64, 512, 33, "warps must lie in [1, 32], got 33");
  refused(rp, ci, c.rows, c.cols, 1, 1, 32, "outnumber 4 per nonzero");  // 5000 panels x 1003 rows x 32
  refused(rp, host_tensor(DType::I64, c.ci), c.rows, c.cols, 64, 512, 32, "differs from row_ptr's i32");
  refused(rp, ci, c.rows, 100, 64, 512, 32, "outside [0, 100)");
  refused(rp, ci, c.rows + 1, c.cols, 64, 512, 32, "entries for 1004 rows");
  std::vector<int64_t> shifted = c.rp;
  for (int64_t& k : shifted) k += 1;
  refused(host_tensor(DType::I32, shifted), ci, c.rows, c.cols, 64, 512, 32, "row_ptr starts at 1");
}

// The tile_csr op on every device (the cuda device's is its own sort-based build) gives
// the reference device's arrays bit for bit, and names bad structure as the cpu does.
BOOST_AUTO_TEST_CASE(tile_csr_on_every_device) {
  Device& ref = DeviceRegistry::get().at("reference");
  struct Case {
    TiledCase c;
    int rb, panel, warps;
    DType it;
  };
  std::vector<Case> cases = {{tiled_case(seed() + 21, 1003, 5000), 64, 512, 32, DType::I32},
                             {tiled_case(seed() + 22, 1003, 5000), 1003, 4999, 7, DType::I64},
                             {tiled_case(seed() + 23, 777, 3001), 7, 333, 4, DType::I32},
                             {tiled_case(seed() + 24, 4001, 20000), 256, 8192, 32, DType::I64},
                             // over 2^20 nonzeros: the cpu device's two passes run on several threads
                             {tiled_case(seed() + 25, 12007, 40000), 256, 8192, 32, DType::I64}};
  auto host = [](const Tensor& t) { return t.is_host() ? t : t.to(host_allocator()); };
  for (const Case& k : cases) {
    const Tensor rp = host_tensor(k.it, k.c.rp), ci = host_tensor(k.it, k.c.ci), v = host_tensor(DType::F64, k.c.val);
    const sparse::TiledCsr want = sparse::tile_csr(rp, ci, v, k.c.rows, k.c.cols, k.rb, k.panel, k.warps, &ref);
    check_layout(k.c, want, "reference");
    for (Device* d : DeviceRegistry::get().runnable()) {
      BOOST_TEST_CONTEXT(d->name() << " rb " << k.rb << " panel " << k.panel << " warps " << k.warps) {
        const sparse::TiledCsr got = sparse::tile_csr(rp, ci, v, k.c.rows, k.c.cols, k.rb, k.panel, k.warps, d);
        const std::vector<Tensor> a = sparse::tiled_tensors(want), b = sparse::tiled_tensors(got);
        for (size_t i = 0; i < 3; ++i) {
          const Tensor hb = host(b[i]);
          BOOST_REQUIRE(hb.numel() == a[i].numel());
          BOOST_TEST(std::memcmp(hb.raw(), a[i].raw(), size_t(a[i].numel()) * dtype_size(a[i].dtype())) == 0,
                     "array " << i << " differs from the reference device's");
        }
      }
    }
  }
  // Bad structure: the lowest offending row is named, on every device (on the cpu device by
  // whichever thread meets it).
  const TiledCase& c = cases[4].c;
  BOOST_REQUIRE(c.val.size() > (size_t(1) << 20));
  std::vector<int64_t> cols = c.ci, ptr = c.rp;
  cols[size_t(c.rp[3009])] = -7;  // (rows 2006 and 3009 hold 2000 entries each)
  cols[size_t(c.rp[2006] + 1)] = 40000;
  ptr[2500] = ptr[2501] + 1;  // row 2500 (empty) ends before it starts
  std::vector<int64_t> late = c.rp;
  late[3900] = late[3899] - 1;  // row 3899 goes backwards
  const Tensor v = host_tensor(DType::F64, c.val);
  struct Bad {
    std::vector<int64_t> rp, ci;
    std::string why;
  };
  const std::vector<Bad> bad = {{c.rp, cols, "column 40000 of row 2006 outside [0, 40000)"},
                                {ptr, cols, "column 40000 of row 2006"},
                                {ptr, c.ci, "not ascending (or past nnz) at row 2500"},
                                {late, c.ci, "not ascending (or past nnz) at row 3899"}};
  for (Device* d : DeviceRegistry::get().runnable())
    for (const Bad& b : bad) {
      try {
        sparse::tile_csr(host_tensor(DType::I64, b.rp), host_tensor(DType::I64, b.ci), v, c.rows, c.cols, 256, 8192,
                         32, d);
        BOOST_ERROR(d->name() << " built a layout of a matrix with bad structure (" << b.why << ")");
      } catch (const InputError& e) {
        BOOST_TEST(std::string(e.what()).find(b.why) != std::string::npos,
                   d->name() << ": " << e.what() << " (expected: " << b.why << ")");
      }
    }
}

// --spmv auto: tiled only for f64 values on a GPU with rows of kTiledRowLength or more.
BOOST_AUTO_TEST_CASE(choose_spmv_picks_tiled_for_long_rows_on_a_gpu) {
  const Device::Geometry gpu{132, 232448}, host{};
  auto rows_of = [](int64_t rows, int64_t per_row, DType t) {
    std::vector<int64_t> i, j;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < per_row; ++k) i.push_back(r), j.push_back((r + k * 7) % 1000);
    return sparse::CsrMatrix::from_coo(rows, 1000, i, j, std::vector<double>(i.size(), 1.0), t);
  };
  const int64_t at = int64_t(sparse::kTiledRowLength);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F64), gpu).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F64), gpu).why.find("tiled: 96.0 nonzeros per row") == 0);
  BOOST_TEST(!sparse::choose_spmv(rows_of(50, at - 1, DType::F64), gpu).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at - 1, DType::F64), gpu).why.find("csr: 95.0 nonzeros per row") == 0);
  BOOST_TEST(!sparse::choose_spmv(rows_of(50, at, DType::F64), host).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F64), host).why.find("not a GPU") != std::string::npos);
  BOOST_TEST(!sparse::choose_spmv(rows_of(50, at, DType::F32), gpu).tiled);
  BOOST_TEST(sparse::choose_spmv(rows_of(50, at, DType::F32), gpu).why.find("f32 values") != std::string::npos);
  BOOST_TEST(!sparse::choose_spmv(rows_of(0, at, DType::F64), gpu).tiled);
}

// operator_for: the operator a solve multiplies by, on every runnable device. A matrix of
// 100 nonzeros per row: auto picks tiled exactly on the devices that report a GPU geometry
// (cuda), built there; csr never, tiled always; other modes refused.
BOOST_AUTO_TEST_CASE(operator_for_follows_the_mode_and_the_device) {
  const int64_t n = 2000;
  std::vector<int64_t> i, j;
  std::vector<double> v;
  std::mt19937_64 g(seed() + 31);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < 100; ++k) i.push_back(r), j.push_back((r * 37 + k * 19) % n), v.push_back(u(g));
  const sparse::CsrOperator A(sparse::CsrMatrix::from_coo(n, n, i, j, v));
  for (Device* d : DeviceRegistry::get().runnable()) {
    BOOST_TEST_CONTEXT(d->name()) {
      const bool gpu = d->geometry().multiprocessors > 0;
      const sparse::OperatorChoice a = sparse::operator_for(A, *d, "auto");
      BOOST_TEST(bool(a.op) == gpu, a.why);
      BOOST_TEST(a.why.find(gpu ? "tiled: 100.0 nonzeros per row" : "not a GPU") != std::string::npos, a.why);
      BOOST_TEST(!sparse::operator_for(A, *d, "csr").op);
      const sparse::OperatorChoice t = sparse::operator_for(A, *d, "tiled");
      BOOST_REQUIRE(t.op);
      BOOST_TEST(t.layout.find("laid out on " + d->name()) == 0, t.layout);
      BOOST_TEST(t.layout.find(gpu ? "this GPU's" : "an H200's") != std::string::npos, t.layout);
      BOOST_TEST(t.op->rows() == n);
      BOOST_CHECK_THROW(sparse::operator_for(A, *d, "coo"), InputError);
      // Long rows spread over 2^31 columns: more tiles than the layout allows. Forced, an
      // error; auto on a GPU falls back to CSR and says why.
      std::vector<int64_t> wi, wj;
      for (int64_t r = 0; r < 100; ++r)
        for (int64_t k = 0; k < 100; ++k) wi.push_back(r), wj.push_back(k * 21474836 + r);
      const sparse::CsrOperator wide(
          sparse::CsrMatrix::from_coo(100, int64_t(1) << 31, wi, wj, std::vector<double>(wi.size(), 1.0)));
      BOOST_CHECK_THROW(sparse::operator_for(wide, *d, "tiled"), InputError);
      const sparse::OperatorChoice w = sparse::operator_for(wide, *d, "auto");
      BOOST_TEST(!w.op);
      if (gpu)
        BOOST_TEST(w.why.find("csr: the tiled layout was chosen but cannot be built on " + d->name()) == 0, w.why);
    }
  }
}

// spmv_tiled through a compiled graph on every device (the cuda device too where there is a
// GPU): y = alpha A x + beta y0 on the layout of a random matrix, against a long-double
// CSR product; then a layout with a share out of order, which the reference device names.
BOOST_AUTO_TEST_CASE(spmv_tiled_on_every_device) {
  const TiledCase c = tiled_case(seed() + 13, 2003, 9001);
  const sparse::TiledCsr t = sparse::tile_csr(host_tensor(DType::I64, c.rp), host_tensor(DType::I64, c.ci),
                                              host_tensor(DType::F64, c.val), c.rows, c.cols, 512, 2048, 32);
  const std::vector<Tensor> arrays = sparse::tiled_tensors(t);
  std::vector<double> y0v(size_t(c.rows));
  for (size_t i = 0; i < y0v.size(); ++i) y0v[i] = std::cos(double(i));
  ir::Graph g;
  std::vector<Var> a = {rlx::input(g, "share", DType::I64, arrays[0].shape()),
                        rlx::input(g, "rc", DType::I32, arrays[1].shape()),
                        rlx::input(g, "values", DType::F64, arrays[2].shape())};
  Var x = rlx::input(g, "x", DType::F64, {c.cols}), y0 = rlx::input(g, "y0", DType::F64, {c.rows});
  Var plain = sparse::spmv_tiled(a, t, x);
  Var axpy = rlx::op("spmv_tiled", {a[0], a[1], a[2], x, y0},
                     {{"rows", c.rows}, {"cols", c.cols}, {"rb", int64_t(512)}, {"panel", int64_t(2048)},
                      {"warps", int64_t(32)}, {"alpha", 2.0}, {"beta", -0.5}});
  rlx::output(g, {plain, axpy});
  const std::vector<Tensor> inputs = {arrays[0], arrays[1], arrays[2], host_tensor(DType::F64, c.x),
                                      host_tensor(DType::F64, y0v)};
  int ran = 0;
  for (Device* d : DeviceRegistry::get().runnable()) {
    BOOST_TEST_CONTEXT("on " << d->name()) {
      Program p = compile(g, *d);
      std::vector<Tensor> r = run(p, *d, inputs);
      const std::vector<double> y(r[0].data<double>(), r[0].data<double>() + c.rows),
          axpy_y(r[1].data<double>(), r[1].data<double>() + c.rows);
      BOOST_TEST(tiled_error(c, y) <= 1e-13);
      BOOST_TEST(tiled_error(c, axpy_y, 2.0, -0.5, y0v) <= 1e-13);
      ++ran;
    }
  }
  BOOST_TEST(ran >= 2);  // the reference and cpu devices at least
  // Broken layouts: the oracle refuses, naming what is wrong — a share out of order, a
  // share starting inside a row, rows out of order within a tile.
  Device& ref = DeviceRegistry::get().at("reference");
  Program p = compile(g, ref);
  auto copy = [](const Tensor& t) {
    Tensor c = Tensor::empty(t.dtype(), t.shape());
    std::memcpy(c.raw(), t.raw(), t.nbytes());
    return c;
  };
  auto refused = [&](const std::vector<Tensor>& bad, const std::string& why) {
    try {
      run(p, ref, bad);
      BOOST_ERROR("the reference device ran spmv_tiled with " << why);
    } catch (const InputError& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what() << " (expected: " << why << ")");
    }
  };
  std::vector<Tensor> bad = {copy(arrays[0]), arrays[1], arrays[2], inputs[3], inputs[4]};
  bad[0].data<int64_t>()[5] = bad[0].data<int64_t>()[7] + 1;
  refused(bad, "share 6 is");
  // The first tile's second share moved to a position inside a row (its shares hold
  // hundreds of entries, rows tens per panel).
  const int64_t* sh = arrays[0].data<int64_t>();
  const uint32_t* rcw = reinterpret_cast<const uint32_t*>(arrays[1].data<int32_t>());
  int64_t inside = -1;
  for (int64_t k = 1; k < sh[2] && inside < 0; ++k)  // (shares stay ascending)
    if ((rcw[k] >> 16) == (rcw[k - 1] >> 16)) inside = k;
  BOOST_REQUIRE(inside > 0);
  bad = {copy(arrays[0]), arrays[1], arrays[2], inputs[3], inputs[4]};
  bad[0].data<int64_t>()[1] = inside;
  refused(bad, "starts inside row");
  // Two entries of the first tile from different rows swapped.
  int64_t step = -1;
  for (int64_t k = 1; k < sh[32] && step < 0; ++k)
    if ((rcw[k] >> 16) > (rcw[k - 1] >> 16)) step = k;
  BOOST_REQUIRE(step > 0);
  bad = {arrays[0], copy(arrays[1]), arrays[2], inputs[3], inputs[4]};
  std::swap(bad[1].data<int32_t>()[step], bad[1].data<int32_t>()[step - 1]);
  refused(bad, "rows out of order");
}

BOOST_AUTO_TEST_SUITE_END()
