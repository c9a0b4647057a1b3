// The cuda device beyond the op suite: generated fused kernels (with fused sums) against
// the reference device on fresh random data, the kernel cache on disk, device errors that
// name the node and leave the process usable, and a PCG solve on the GPU against the cpu.
// Every GPU case is skipped, with the reason, where this process has no usable GPU.
#define BOOST_TEST_MODULE cuda
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "tests/support/nn_cases.hpp"
#include "tests/support/preconditions.hpp"
#include "tests/support/seed.hpp"
#include "tests/support/tensors.hpp"
#include "tests/support/tiled.hpp"
#include "core/error.hpp"
#include "devices/cuda/codegen.hpp"
#include "devices/cuda/library.hpp"
#include "devices/cuda/spmv.hpp"
#include "devices/cuda/spmv_tiled.hpp"
#include "ir/op_registry.hpp"
#include "ir/frontend.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"
#include "solvers/sparse/krylov.hpp"
#include "solvers/sparse/poisson.hpp"
#include "solvers/sparse/tiled.hpp"

using namespace rlx;
namespace utf = boost::unit_test;

namespace {

Device& cuda_dev() { return DeviceRegistry::get().at("cuda"); }

using test::GpuPresent;
using test::host_tensor;
using test::tiled_case;
using test::tiled_error;
using test::TiledCase;

uint64_t seed() { return test::run_seed("test_cuda"); }

// An f64 host tensor in dtype t, rounded through the reference device's cast, so that
// every device sees the same values.
Tensor as_dtype(const Tensor& h, DType t) {
  if (t == DType::F64) return h;
  ir::Graph c;
  output(c, {cast(input(c, "x", DType::F64, h.shape()), t)});
  Device& ref = DeviceRegistry::get().at("reference");
  return run(compile(c, ref), ref, {h})[0];
}

Tensor random(DType t, Shape s, std::mt19937_64& g, double lo = -2, double hi = 2) {
  Tensor h = Tensor::empty(DType::F64, s);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<double>()[i] = u(g);
  return as_dtype(h, t);
}

double value(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F64: return t.data<double>()[i];
    case DType::F32: return t.data<float>()[i];
    case DType::F16: return double(float(t.data<f16>()[i]));
    case DType::BF16: return double(float(t.data<bf16>()[i]));
    default: throw std::runtime_error("test: unexpected dtype");
  }
}

// max |got - want| / max |want|
double rel_error(const Tensor& got, const Tensor& want) {
  BOOST_REQUIRE_EQUAL(got.numel(), want.numel());
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = value(got, i), w = value(want, i);
    if (std::isnan(g) != std::isnan(w)) return INFINITY;
    num = std::max(num, std::fabs(g - w));
    den = std::max(den, std::fabs(w));
  }
  return den > 0 ? num / den : num;
}

std::vector<Tensor> on(const std::string& dev, const ir::Graph& g, const std::vector<Tensor>& in) {
  Device& d = DeviceRegistry::get().at(dev);
  return run(compile(g, d), d, in);
}

}  // namespace

BOOST_AUTO_TEST_CASE(unavailable_device_compiles_but_refuses_to_run) {
  Device& d = cuda_dev();
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {4});
  output(g, {exp(x) + 1.0});
  Program p = compile(g, d);  // capability tables answer without a GPU
  BOOST_TEST(p.device == "cuda");
  if (d.unavailable().empty()) return;  // covered by the GPU cases
  try {
    run(p, d, {Tensor::zeros(DType::F32, {4})});
    BOOST_ERROR("running on an unavailable cuda device did not throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("cannot run programs here") != std::string::npos, e.what());
  }
}

// Runs without a GPU too (NVRTC compiles for sm_90 anywhere): the generator's source for
// every elementwise op x declared dtype, contiguous and strided, compiles. Casts go to
// every dtype but i4.
BOOST_AUTO_TEST_CASE(every_generated_elementwise_kernel_compiles) {
  // Sources are compiled in batches (each in a namespace of its own, kernel renamed): one
  // NVRTC call per source would take half a minute.
  int compiled = 0, batched = 0;
  std::string batch, labels;
  auto flush = [&] {
    if (batch.empty()) return;
    std::string log;
    bool ok = !cuda::nvrtc_compile(batch, 90, &log).empty();
    BOOST_TEST(ok, "a batch of generated kernels does not compile (" << labels << "):\n" << log);
    compiled += ok ? batched : 0;
    batch.clear();
    labels.clear();
    batched = 0;
  };
  for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
    if (!cuda::is_elementwise_op(def->name)) continue;
    for (DType t : def->dtypes) {
      if (t == DType::I4) continue;
      std::vector<DType> targets = {t};
      if (def->name == "cast") targets = {DType::Bool, DType::I8, DType::U8, DType::I32, DType::I64,
                                          DType::F16, DType::BF16, DType::F32, DType::F64, DType::C64};
      for (DType to : targets) {
        ir::Graph g;
        std::vector<Var> in;
        const int arity = def->name == "where" ? 3 : def->min_inputs;
        for (int k = 0; k < arity; ++k)
          in.push_back(input(g, "x" + std::to_string(k), def->name == "where" && k == 0 ? DType::Bool : t, {8, 4}));
        ir::Attrs a;
        if (def->name == "cast") a.set("dtype", to);
        Var y = op(def->name, in, a);
        output(g, {y});
        const ir::Node& n = g.nodes.at(size_t(y.value().node));
        if (!cuda::elementwise_unsupported(n, g).empty()) continue;  // the capability table refuses it
        std::vector<ir::Value> ins;
        std::vector<DType> dts;
        for (const Var& v : in) {
          ins.push_back(v.value());
          dts.push_back(v.dtype());
        }
        for (int kind : {0, 2, 3}) {  // contiguous (grid-stride and vector layouts), strided
          std::vector<int> kinds(ins.size(), kind == 3 ? 0 : kind);
          std::string src = cuda::elementwise_source({&n}, ins, dts, {y.value()}, kinds, 2, false, {}, {}, kind == 3);
          const std::string id = std::to_string(batched);
          for (size_t at = src.find("rlx_ew"); at != std::string::npos; at = src.find("rlx_ew", at + 1))
            src.insert(at + 6, "_" + id);
          batch += "namespace k" + id + " {\n" + src + "}\n";
          labels += def->name + ":" + dtype_name(t) + "->" + dtype_name(to) + " ";
          if (++batched == 64) flush();
        }
      }
    }
  }
  flush();
  // The tuning knobs (unroll, FMA contraction) give compiling sources too.
  const cuda::CodegenOptions saved = cuda::codegen_options();
  for (cuda::CodegenOptions o : {cuda::CodegenOptions{1, false, false}, cuda::CodegenOptions{8, true, true},
                                 cuda::CodegenOptions{16, false, true}}) {
    cuda::set_codegen_options(o);
    ir::Graph g;
    Var a = input(g, "a", DType::F32, {64}), b = input(g, "b", DType::F32, {64});
    Var y = exp(a * b + a);
    output(g, {y});
    std::vector<const ir::Node*> nodes;
    for (const ir::Node& n : g.nodes)
      if (cuda::is_elementwise_op(n.op->name)) nodes.push_back(&n);
    std::string src = cuda::elementwise_source(nodes, {a.value(), b.value()}, {DType::F32, DType::F32}, {y.value()},
                                               {0, 0}, 1, false, {y.value()}, {DType::F32}, o.vector);
    BOOST_TEST((src.find("pk<float, ") != std::string::npos) == o.vector);
    BOOST_TEST((src.rfind("// fmad", 0) == 0) == o.fmad);
    std::string log;
    BOOST_TEST(!cuda::nvrtc_compile(src, 90, &log).empty(), "unroll " << o.unroll << ":\n" << log);
  }
  cuda::set_codegen_options(saved);
  std::string log;  // and a broken source is reported, not passed
  BOOST_TEST(cuda::nvrtc_compile("this is not CUDA", 90, &log).empty());
  BOOST_TEST(!log.empty());
  BOOST_TEST(compiled > 300);
  BOOST_TEST_MESSAGE(compiled << " generated kernels compiled for sm_90");
}

BOOST_AUTO_TEST_CASE(spmv_lane_rule) {
  auto is = [](cuda::SpmvTuning t, int lanes, int unroll, bool hint) {
    return t.kernel == 1 && t.lanes == lanes && t.unroll == unroll && t.stream_hint == hint;
  };
  BOOST_TEST(is(cuda::spmv_choice(4'096'000, 28'518'400), 2, 2, false));  // 3D Poisson: 7 per row
  BOOST_TEST(is(cuda::spmv_choice(4'000'000, 44'000'000), 2, 2, false));  // 11 per row
  BOOST_TEST(is(cuda::spmv_choice(4'000'000, 64'000'000), 8, 2, true));   // 16 per row
  BOOST_TEST(is(cuda::spmv_choice(4'000'000, 63'999'872), 8, 2, true));   // the benchmark's random:16
  BOOST_TEST(is(cuda::spmv_choice(4'000'000, 48'000'000), 4, 2, true));   // 12 per row
  BOOST_TEST(is(cuda::spmv_choice(100, 100), 1, 2, false));
  {  // long rows: the packed kernel, one row per warp, loads pipelined one trip deep, evict-first
    const cuda::SpmvTuning t = cuda::spmv_choice(100, 100 * 1000);
    BOOST_TEST(t.kernel == 3);
    BOOST_TEST(t.rows_per_warp == 1);
    BOOST_TEST(t.pipeline);
    BOOST_TEST(t.stream_hint);
    BOOST_TEST(!t.aligned);  // (the packed kernel's trips are aligned by construction)
    BOOST_TEST(cuda::spmv_choice(500'000, 72'264'152).kernel == 3);  // the benchmark's power-law rows
    BOOST_TEST(cuda::spmv_choice(1000, 63'999).kernel == 1);         // 63.999 per row: medium
  }
  BOOST_TEST(cuda::spmv_choice(4'000'000, 64'000'000).blocks_per_sm == 0);  // medium rows: no cap,
  BOOST_TEST(cuda::spmv_choice(4'000'000, 64'000'000).threads == 128);       // blocks of 128,
  BOOST_TEST(!cuda::spmv_choice(4'000'000, 64'000'000).aligned);             // trips not aligned
  BOOST_TEST(cuda::spmv_choice(4'096'000, 28'518'400).blocks_per_sm == 64);  // short rows: capped
  BOOST_TEST(cuda::spmv_choice(4'096'000, 28'518'400).threads == 256);
  BOOST_TEST(is(cuda::spmv_choice(0, 0), 1, 2, false));
}

// The SpMV kernels and knobs, forced, on structures that stress the split kernel's bookkeeping:
// empty rows first, in the middle and last; rows spanning many 256-nonzero chunks; rows
// ending exactly on a chunk boundary; short rows; i32 and i64 indices; f32 and f64; with
// and without beta * y0. Checked against a long-double host product.
BOOST_AUTO_TEST_CASE(spmv_kernels_match_host, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(seed() + 3);
  const int64_t cols = 3000;
  std::vector<int64_t> lens = {0, 0, 5, 256, 0, 251, 1, 2000, 0, 0, 700, 256, 256, 3, 0};
  std::uniform_int_distribution<int64_t> len(0, 400), col(0, cols - 1);
  for (int i = 0; i < 500; ++i) lens.push_back(i % 7 == 0 ? 0 : len(rng));
  for (int i = 0; i < 100; ++i) lens.push_back(i % 4);  // runs of short rows: many rows per 32 nonzeros
  lens.push_back(0);
  lens.push_back(0);
  const int64_t rows = int64_t(lens.size());
  std::vector<int64_t> rp(size_t(rows) + 1, 0), ci;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < lens[size_t(r)]; ++k) ci.push_back(col(rng));
    std::sort(ci.end() - lens[size_t(r)], ci.end());
    rp[size_t(r) + 1] = int64_t(ci.size());
  }
  const int64_t nnz = int64_t(ci.size());
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> val(static_cast<size_t>(nnz)), xv(static_cast<size_t>(cols)), y0v(static_cast<size_t>(rows));
  for (double& a : val) a = u(rng);
  for (double& a : xv) a = u(rng);
  for (double& a : y0v) a = u(rng);
  for (DType it : {DType::I32, DType::I64})
    for (DType t : {DType::F64, DType::F32}) {
      Tensor hv = host_tensor(t, val), hx = host_tensor(t, xv), hy0 = host_tensor(t, y0v);
      auto dev = [](const Tensor& h) { return h.to(cuda_dev().allocator()); };
      Tensor drp = dev(host_tensor(it, rp)), dci = dev(host_tensor(it, ci)), dv = dev(hv), dx = dev(hx), dy0 = dev(hy0);
      {  // knobs out of range are refused, not ignored
        Tensor y = Tensor::empty(t, {rows}, cuda_dev().allocator());
        auto refused = [&](auto&& change) {
          cuda::SpmvTuning bad;
          bad.kernel = 1;
          change(bad);
          BOOST_CHECK_THROW(cuda::spmv_csr_native(drp, dci, dv, dx, nullptr, 1.0, 0.0, y, bad), InputError);
        };
        refused([](cuda::SpmvTuning& b) { b.kernel = 4; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.rows_per_warp = 0; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.rows_per_warp = 32; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.aligned = true; });
        refused([](cuda::SpmvTuning& b) { b.pipeline = true; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.threads = 64; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.x_evict_last = true; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.unroll = 2; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.persist_x = true; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 2, b.pipeline = true; });
        refused([](cuda::SpmvTuning& b) { b.lanes = 3; });
        refused([](cuda::SpmvTuning& b) { b.unroll = 4; });
        refused([](cuda::SpmvTuning& b) { b.threads = 100; });
        refused([](cuda::SpmvTuning& b) { b.lanes = 64; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 2, b.aligned = true; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 2, b.persist_x = true; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 2, b.x_evict_last = true; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 2, b.carveout = 50; });
        refused([](cuda::SpmvTuning& b) { b.kernel = 3, b.carveout = 0; });
        refused([](cuda::SpmvTuning& b) { b.blocks_per_sm = -3; });
        refused([](cuda::SpmvTuning& b) { b.carveout = 101; });
      }
      for (bool with_y0 : {false, true})
        for (int variant = 0; variant < 16; ++variant) {
          // vector (the device's choice), split, then the vector kernel's experiment knobs:
          // x evict-last in L2 (f64 only; with plain and evict-first matrix loads, one and
          // two per lane), no grid cap with 64-thread blocks, one block per multiprocessor,
          // trips aligned to the lanes (one and two per lane), x in a persisting L2 window;
          // the packed kernel with 1, 5, 8, 31, 3 and 8 rows per warp (blocks of 256 and
          // 128, the last two with the load pipeline; the device's choice, variant 0, is one
          // row per warp with it).
          cuda::SpmvTuning tune;
          tune.kernel = variant == 0 ? 0 : variant == 1 ? 2 : 1;  // 0: all of spmv_choice()'s knobs
          if (variant == 2 || variant == 3 || variant == 8) {
            tune.x_evict_last = true;
            tune.lanes = variant == 2 ? 32 : variant == 3 ? 4 : 8;
            tune.unroll = variant == 2 ? 1 : 2;
            tune.stream_hint = variant != 3;
            if (t != DType::F64) {
              Tensor y = Tensor::empty(t, {rows}, cuda_dev().allocator());
              BOOST_CHECK_THROW(cuda::spmv_csr_native(drp, dci, dv, dx, nullptr, 1.0, 0.0, y, tune), InputError);
              continue;
            }
          }
          if (variant == 4) tune.blocks_per_sm = 0, tune.threads = 64, tune.lanes = 8;
          if (variant == 5) tune.blocks_per_sm = 1, tune.threads = 128, tune.lanes = 2, tune.stream_hint = true;
          if (variant == 6) tune.aligned = true, tune.lanes = 32;  // rows starting anywhere in a trip
          if (variant == 7) tune.aligned = true, tune.lanes = 4, tune.unroll = 2;
          if (variant == 9) tune.persist_x = true, tune.lanes = 8, tune.unroll = 2, tune.stream_hint = true;
          if (variant >= 10) {
            tune.kernel = 3;
            tune.rows_per_warp = variant == 10 ? 1 : variant == 11 ? 5 : variant == 12 || variant == 15 ? 8 : variant == 14 ? 3 : 31;
          }
          if (variant == 11 || variant == 13) tune.threads = 128;
          if (variant == 14) tune.threads = 128;
          if (variant == 12 || variant == 14) tune.stream_hint = true;
          if (variant >= 14) tune.pipeline = true;
          const std::string kernel = "variant " + std::to_string(variant);
          Tensor y = Tensor::empty(t, {rows}, cuda_dev().allocator());
          cuda::spmv_csr_native(drp, dci, dv, dx, with_y0 ? &dy0 : nullptr, 1.5, with_y0 ? -0.5 : 0.0, y, tune);
          if (tune.persist_x) cuda::reset_l2_persistence();
          Tensor got = y.to(host_allocator());
          double worst = 0;
          for (int64_t r = 0; r < rows; ++r) {
            long double acc = 0, mag = 0;
            for (int64_t k = rp[size_t(r)]; k < rp[size_t(r) + 1]; ++k) {
              const long double p = (long double)value(hv, k) * value(hx, ci[size_t(k)]);
              acc += p;
              mag += std::fabs(double(p));
            }
            long double want = 1.5L * acc;
            if (with_y0) want += -0.5L * value(hy0, r);
            const double scale = double(1.5L * mag) + (with_y0 ? 0.5 * std::fabs(value(hy0, r)) : 0.0) + 1e-300;
            worst = std::max(worst, std::fabs(value(got, r) - double(want)) / scale);
          }
          const double tol = t == DType::F64 ? 1e-14 : 1e-6;
          BOOST_TEST(worst <= tol, dtype_name(t) << "/" << dtype_name(it) << " kernel " << kernel << " y0 " << with_y0
                                                 << " worst relative error " << worst);
        }
    }
}

// spmv_tiled's kernel (spmv_tiled.hpp) on the layout of a random CSR matrix
// (tests/support/tiled.hpp) at every launch option — one or two nonzeros per lane, 2 or 4
// trips, 1 to 6 column groups (more than panels too), odd panels (8-byte copies), 1 to 32
// warps, rows not a multiple of rb, with and without y0 — against a long-double CSR
// product. Tensors that do not match the layout and shapes this GPU cannot run are refused.
BOOST_AUTO_TEST_CASE(tiled_spmv_matches_host, *utf::precondition(GpuPresent())) {
  const TiledCase c = tiled_case(seed() + 12, 3001, 70000);
  struct Shape {
    int rb, panel, warps, groups, unroll, per_lane;
    bool skip = false;  // skip_empty (rows of 0 and ~150 nonzeros over up to 8 panels: some tiles empty)
  };
  const Tensor x = host_tensor(DType::F64, c.x).to(cuda_dev().allocator());
  std::vector<double> y0v(size_t(c.rows));
  for (size_t i = 0; i < y0v.size(); ++i) y0v[i] = std::sin(double(i));
  const Tensor y0 = host_tensor(DType::F64, y0v).to(cuda_dev().allocator());
  for (Shape sh : {Shape{256, 12288, 32, 1, 4, 2}, Shape{1000, 8192, 8, 3, 2, 1}, Shape{3001, 10000, 32, 2, 4, 1},
                   Shape{7, 333, 4, 1, 2, 2}, Shape{64, 12000, 1, 6, 4, 2}, Shape{2048, 9999, 16, 1, 4, 2},
                   Shape{2048, 4096, 32, 2, 2, 2}, Shape{1, 9999, 2, 1, 2, 2}, Shape{1024, 6000, 32, 0, 2, 2},
                   Shape{1, 9999, 2, 1, 2, 2, true}, Shape{7, 333, 4, 2, 4, 1, true}, Shape{64, 12000, 32, 0, 2, 2, true}}) {
    const sparse::TiledCsr t = sparse::tile_csr(host_tensor(DType::I32, c.rp), host_tensor(DType::I32, c.ci),
                                                host_tensor(DType::F64, c.val), c.rows, c.cols, sh.rb, sh.panel,
                                                sh.warps);
    std::vector<Tensor> arrays = sparse::tiled_tensors(t);
    for (Tensor& a : arrays) a = a.to(cuda_dev().allocator());
    const cuda::TiledArgs args{c.rows, c.cols, t.rb, t.panel, t.warps};
    for (bool with_y0 : {false, true}) {
      // y starts as NaN: a row the kernels do not write fails the check.
      Tensor y = host_tensor(DType::F64, std::vector<double>(size_t(c.rows), NAN)).to(cuda_dev().allocator());
      cuda::spmv_tiled_native(arrays[0], arrays[1], arrays[2], x, with_y0 ? &y0 : nullptr, with_y0 ? 2.0 : 1.0,
                              -0.5, y, args, sh.groups, sh.unroll, sh.per_lane, sh.skip);
      const Tensor got = y.to(host_allocator());
      std::vector<double> g(got.data<double>(), got.data<double>() + c.rows);
      const double err = with_y0 ? tiled_error(c, g, 2.0, -0.5, y0v) : tiled_error(c, g);
      BOOST_TEST(err <= 1e-13, "rb " << sh.rb << " panel " << sh.panel << " warps " << sh.warps << " groups "
                                     << sh.groups << " unroll " << sh.unroll << " per lane " << sh.per_lane << " skip "
                                     << sh.skip << " y0 "
                                     << with_y0 << " worst relative error " << err);
    }
    Tensor wrong = Tensor::empty(DType::F64, {c.rows + 1}, cuda_dev().allocator());
    BOOST_CHECK_THROW(cuda::spmv_tiled_native(arrays[0], arrays[1], arrays[2], x, nullptr, 1, 0, wrong, args),
                      InputError);
  }
  // A banded matrix (7 diagonals), whose row blocks touch 1 or 2 of 20 panels: the same
  // result with empty panels skipped (skip_empty) and without, one and three column groups.
  TiledCase band{5000, 5000, {0}, {}, {}, {}};
  {
    std::mt19937_64 rng(seed() + 15);
    std::uniform_real_distribution<double> u(-1, 1);
    for (int64_t r = 0; r < band.rows; ++r) {
      for (int64_t j = std::max<int64_t>(0, r - 3); j <= std::min<int64_t>(band.cols - 1, r + 3); ++j)
        band.ci.push_back(j), band.val.push_back(u(rng));
      band.rp.push_back(int64_t(band.ci.size()));
    }
    for (int64_t j = 0; j < band.cols; ++j) band.x.push_back(u(rng));
  }
  const sparse::TiledCsr bt = sparse::tile_csr(host_tensor(DType::I32, band.rp), host_tensor(DType::I32, band.ci),
                                               host_tensor(DType::F64, band.val), band.rows, band.cols, 128, 256, 32);
  std::vector<Tensor> barr = sparse::tiled_tensors(bt);
  for (Tensor& a : barr) a = a.to(cuda_dev().allocator());
  const Tensor bx = host_tensor(DType::F64, band.x).to(cuda_dev().allocator());
  for (int groups : {1, 3})
    for (bool skip : {false, true}) {
      Tensor by = host_tensor(DType::F64, std::vector<double>(size_t(band.rows), NAN)).to(cuda_dev().allocator());
      cuda::spmv_tiled_native(barr[0], barr[1], barr[2], bx, nullptr, 1.0, 0.0, by, {band.rows, band.cols, 128, 256, 32},
                              groups, 2, 2, skip);
      const Tensor got = by.to(host_allocator());
      const double err = tiled_error(band, std::vector<double>(got.data<double>(), got.data<double>() + band.rows));
      BOOST_TEST(err <= 1e-14, "banded, groups " << groups << " skip " << skip << " worst relative error " << err);
    }
  // Shared memory beyond a block's limit, and bad launch options, are refused.
  Tensor y = Tensor::empty(DType::F64, {c.rows}, cuda_dev().allocator());
  const sparse::TiledCsr small = sparse::tile_csr(host_tensor(DType::I32, c.rp), host_tensor(DType::I32, c.ci),
                                                  host_tensor(DType::F64, c.val), c.rows, c.cols, 256, 8192);
  std::vector<Tensor> arrays = sparse::tiled_tensors(small);
  for (Tensor& a : arrays) a = a.to(cuda_dev().allocator());
  const cuda::TiledArgs args{c.rows, c.cols, 256, 8192, 32};
  BOOST_TEST(cuda::tiled_refusal(args).empty());
  const std::string big = cuda::tiled_refusal({c.rows, c.cols, 3001, 65536, 32});
  BOOST_TEST(big.find("bytes of shared memory") != std::string::npos, big);
  auto run = [&](int groups, int unroll, int per_lane) {
    cuda::spmv_tiled_native(arrays[0], arrays[1], arrays[2], x, nullptr, 1, 0, y, args, groups, unroll, per_lane);
  };
  BOOST_CHECK_THROW(run(1, 3, 2), InputError);
  BOOST_CHECK_THROW(run(-1, 2, 2), InputError);
  BOOST_CHECK_THROW(run(1, 2, 3), InputError);
}

BOOST_AUTO_TEST_CASE(fused_chain_matches_reference, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(seed());
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    // gelu(x * a + b) with a broadcast row, a scalar and a strided (transposed) input.
    const Shape s{301, 517};
    ir::Graph g;
    Var x = input(g, "x", t, s), a = input(g, "a", t, {517}), c = input(g, "c", t, {}), y = input(g, "y", t, {517, 301});
    Var z = gelu(x * a + c) - tanh(permute(y, {1, 0})) * 0.5;
    output(g, {z, sum(z * z)});
    std::vector<Tensor> in = {random(t, s, rng), random(t, {517}, rng), random(t, {}, rng), random(t, {517, 301}, rng)};
    auto want = on("reference", g, in);
    auto got = on("cuda", g, in);
    const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-5 : t == DType::F16 ? 4e-3 : 2e-2;
    BOOST_TEST(rel_error(got[0], want[0]) <= tol, dtype_name(t) << " elementwise error " << rel_error(got[0], want[0]));
    BOOST_TEST(rel_error(got[1], want[1]) <= tol, dtype_name(t) << " fused sum error " << rel_error(got[1], want[1]));
  }
}

// The vector layout (packs of neighbours) with a tail that is not a whole pack, and the
// grid-stride layout it falls back to for an operand at an odd address, under several
// pack sizes: both against the reference.
BOOST_AUTO_TEST_CASE(vector_layout_matches_reference, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(seed() + 2);
  const cuda::CodegenOptions saved = cuda::codegen_options();
  for (int unroll : {2, 4, 8, 16})
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      cuda::set_codegen_options({unroll, false, true});
      const int64_t n = 4099;  // 4099 % 16 = 3
      ir::Graph g;
      Var x = input(g, "x", t, {n}), y = input(g, "y", t, {n + 1}), c = input(g, "c", t, {});
      Var aligned = exp(x * 0.5) * c + x;
      Var odd = aligned * slice(y, {1}, {n + 1});  // y's view starts one element in
      output(g, {aligned, odd, sum(aligned)});
      std::vector<Tensor> in = {random(t, {n}, rng), random(t, {n + 1}, rng), random(t, {}, rng)};
      auto want = on("reference", g, in);
      auto got = on("cuda", g, in);
      const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-5 : t == DType::F16 ? 4e-3 : 2e-2;
      for (size_t k = 0; k < 3; ++k)
        BOOST_TEST(rel_error(got[k], want[k]) <= tol,
                   dtype_name(t) << " unroll " << unroll << " output " << k << " error " << rel_error(got[k], want[k]));
    }
  cuda::set_codegen_options(saved);
}

// The three sort strategies (library.hpp) against the reference, bit for bit: one long row,
// many rows, both directions, 64-bit and narrow keys, a sort along axis 0, rows at and
// past each edge of the block sort (64, 512, 2048, 4096; 2048 for 64-bit keys); values drawn
// from a small set with NaN, +-0 and +-inf, so there are many ties.
BOOST_AUTO_TEST_CASE(sort_strategies_match_reference, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(seed() + 4);
  const double pool[] = {NAN, -0.0, 0.0, INFINITY, -INFINITY, 1.5, -2.0, 3.0, 7.0, -100.0};
  auto tricky = [&](DType t, Shape s) {
    Tensor h = Tensor::empty(DType::F64, s);
    std::uniform_int_distribution<int> pick(0, 9);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<double>()[i] = pool[pick(rng)] + (pick(rng) == 0 ? 0.25 * pick(rng) : 0.0);
    Tensor r = as_dtype(h, t);
    // NaNs of both signs with payloads (values are rebuilt from keys except NaNs and zeros,
    // which must still come back bit for bit).
    for (int64_t i = 0; i < r.numel(); i += 7) {
      if (t == DType::F32) r.data<uint32_t>()[i] = 0x7F800001u + uint32_t(i % 1000) + (i % 2 ? 0x80000000u : 0u);
      if (t == DType::F64) r.data<uint64_t>()[i] = 0x7FF0000000000001ull + uint64_t(i % 1000) + (i % 2 ? (1ull << 63) : 0);
    }
    return r;
  };
  struct Case {
    DType t;
    Shape s;
    int64_t axis;
    bool desc;
  };
  const Case cases[] = {{DType::F32, {100003}, -1, false}, {DType::F32, {37, 601}, -1, true},
                        {DType::F64, {5, 1000}, -1, false}, {DType::F64, {1, 4097}, -1, true},
                        {DType::BF16, {64, 33}, -1, false}, {DType::I8, {3, 7}, 0, false},
                        {DType::I64, {4, 257}, 1, true},    {DType::F16, {300, 2}, 0, true},
                        {DType::F32, {9, 4096}, -1, false}, {DType::F32, {2, 512}, -1, true},
                        {DType::F32, {4, 513}, -1, false},  {DType::I32, {3, 2048}, -1, false},
                        {DType::F64, {3, 2048}, -1, true},  {DType::F64, {2, 2049}, -1, false},
                        {DType::U8, {2, 3000}, -1, false},  {DType::F32, {4097, 3}, 0, false},
                        {DType::F32, {5, 64}, -1, false},   {DType::F32, {5, 65}, -1, true}};
  const cuda::SortStrategy saved = cuda::sort_strategy();
  for (cuda::SortStrategy st : {cuda::SortStrategy::Auto, cuda::SortStrategy::Segmented, cuda::SortStrategy::Radix}) {
    cuda::set_sort_strategy(st);
    for (const Case& c : cases) {
      ir::Graph g;
      Sorted r = sort(input(g, "x", c.t, c.s), c.axis, c.desc);
      output(g, {r.values, r.indices});
      Tensor x = tricky(c.t, c.s);
      auto want = on("reference", g, {x});
      auto got = on("cuda", g, {x});
      const std::string what = std::string(cuda::sort_strategy_name(st)) + " " +
                               dtype_name(c.t) + " axis " + std::to_string(c.axis) + (c.desc ? " desc" : "");
      BOOST_TEST(std::memcmp(got[0].raw(), want[0].raw(), want[0].nbytes()) == 0, what << ": values differ");
      BOOST_TEST(std::memcmp(got[1].raw(), want[1].raw(), want[1].nbytes()) == 0, what << ": indices differ");
    }
  }
  cuda::set_sort_strategy(saved);
}

BOOST_AUTO_TEST_CASE(fused_sums_are_deterministic, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(seed() + 1);
  const int64_t n = 3'000'001;  // not a multiple of any block size
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {n}), y = input(g, "y", DType::F64, {n});
  output(g, {sum(x * y), sum(x * x)});
  std::vector<Tensor> in = {random(DType::F64, {n}, rng), random(DType::F64, {n}, rng)};
  Device& d = cuda_dev();
  Program p = compile(g, d);
  auto a = run(p, d, in), b = run(p, d, in);
  BOOST_TEST(a[0].data<double>()[0] == b[0].data<double>()[0]);
  BOOST_TEST(a[1].data<double>()[0] == b[1].data<double>()[0]);
  long double dot = 0, nn = 0;
  for (int64_t i = 0; i < n; ++i) {
    dot += (long double)in[0].data<double>()[i] * in[1].data<double>()[i];
    nn += (long double)in[0].data<double>()[i] * in[0].data<double>()[i];
  }
  BOOST_TEST(std::fabs(a[0].data<double>()[0] - double(dot)) <= 1e-12 * double(nn));
  BOOST_TEST(std::fabs(a[1].data<double>()[0] - double(nn)) <= 1e-13 * double(nn));
}

BOOST_AUTO_TEST_CASE(kernel_cache_on_disk, *utf::precondition(GpuPresent())) {
  // The cache directory is read when a kernel is first compiled in this process: use a
  // source no other case generates (an unusual chain), then look for its files.
  const char* dir = std::getenv("RLX_CACHE_DIR");
  std::filesystem::path root = dir ? std::filesystem::path(dir) / "cuda" : std::filesystem::path();
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {1000});
  output(g, {floor(sin(x) * 7.25) + ceil(cos(x) / 3.5)});
  Tensor in = Tensor::zeros(DType::F32, {1000});
  auto r = on("cuda", g, {in});
  BOOST_TEST(r[0].data<float>()[0] == 0.0f + 1.0f);  // floor(0) + ceil(1/3.5)
  if (!dir) return;  // the run script sets RLX_CACHE_DIR to a fresh folder
  size_t cubins = 0;
  for (auto& e : std::filesystem::directory_iterator(root)) cubins += e.path().extension() == ".cubin";
  BOOST_TEST(cubins > 0);
}

BOOST_AUTO_TEST_CASE(out_of_memory_is_an_error_and_the_process_goes_on, *utf::precondition(GpuPresent())) {
  Device& d = cuda_dev();
  try {
    Tensor big = Tensor::empty(DType::F64, {int64_t(1) << 40}, d.allocator());
    BOOST_ERROR("an 8 TiB allocation succeeded");
  } catch (const DeviceError& e) {
    BOOST_TEST(std::string(e.what()).find("allocating") != std::string::npos, e.what());
  }
  // The device still works.
  ir::Graph h;
  Var y = input(h, "y", DType::F32, {3});
  output(h, {y + 1.0});
  Tensor in = Tensor::zeros(DType::F32, {3});
  auto r = on("cuda", h, {in});
  BOOST_TEST(r[0].data<float>()[2] == 1.0f);
}

BOOST_AUTO_TEST_CASE(pcg_on_the_gpu_matches_the_cpu, *utf::precondition(GpuPresent())) {
  sparse::CsrMatrix A = sparse::poisson3d(40);
  const int64_t n = A.rows();
  Tensor b = Tensor::empty(DType::F64, {n});
  std::mt19937_64 rng(seed() + 2);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < n; ++i) b.data<double>()[i] = u(rng);
  sparse::CsrOperator op(A);
  for (const char* pc : {"jacobi", "none"}) {
    sparse::KrylovOptions o;
    o.method = "cg";
    o.rtol = 1e-10;
    auto M = sparse::make_preconditioner(pc, op);
    o.device = "cpu";
    auto cpu = sparse::krylov_solve(op, b, *M, o);
    o.device = "cuda";
    auto gpu = sparse::krylov_solve(op, b, *M, o);
    BOOST_TEST(sparse::converged(gpu.reason), pc << ": " << sparse::stop_reason_name(gpu.reason));
    BOOST_TEST(std::abs(gpu.iterations - cpu.iterations) <= 2, pc << ": gpu " << gpu.iterations << " cpu " << cpu.iterations);
    BOOST_TEST(rel_error(gpu.x, cpu.x) <= 1e-7, pc << ": solution difference " << rel_error(gpu.x, cpu.x));
  }
}

BOOST_AUTO_TEST_CASE(recorded_program_replays_on_new_input_values, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(seed() + 3);
  const int64_t n = 100'003;
  ir::Graph g;
  Var x = input(g, "x", DType::F64, {n}), w = input(g, "w", DType::F64, {n});
  Var y = exp(x * w) - 1.0;
  Var z = y * y + cumsum(x, 0);  // a second kernel besides the fused one
  output(g, {z, sum(z * x)});
  Device& d = cuda_dev();
  Program p = compile(g, d);
  Executor ex(p, d);
  std::vector<Tensor> in = {random(DType::F64, {n}, rng).to(d.allocator()), random(DType::F64, {n}, rng).to(d.allocator())};
  std::vector<Tensor> out = {Tensor::empty(DType::F64, {n}, d.allocator()), Tensor::empty(DType::F64, {}, d.allocator())};
  // Queued runs (no wait per call) give what waiting runs give once the device is synchronized.
  {
    std::vector<Tensor> a = {Tensor::empty(DType::F64, {n}, d.allocator()), Tensor::empty(DType::F64, {}, d.allocator())};
    std::vector<Tensor> b = {Tensor::empty(DType::F64, {n}, d.allocator()), Tensor::empty(DType::F64, {}, d.allocator())};
    ex.run_into(in, a);
    for (int i = 0; i < 3; ++i) ex.enqueue(in, b);
    d.synchronize();
    for (size_t k = 0; k < 2; ++k) BOOST_TEST(rel_error(b[k].to(host_allocator()), a[k].to(host_allocator())) == 0.0);
  }
  std::unique_ptr<Replay> r = ex.capture(in, out);
  for (int round = 0; round < 2; ++round) {
    // New values in the same device buffers, then one replay.
    Tensor hx = random(DType::F64, {n}, rng), hw = random(DType::F64, {n}, rng);
    d.allocator()->copy_from_host(in[0].raw(), hx.raw(), hx.nbytes());
    d.allocator()->copy_from_host(in[1].raw(), hw.raw(), hw.nbytes());
    r->launch();
    d.synchronize();
    auto want = on("reference", g, {hx, hw});
    BOOST_TEST(rel_error(out[0].to(host_allocator()), want[0]) <= 1e-12);
    BOOST_TEST(rel_error(out[1].to(host_allocator()), want[1]) <= 1e-12);
  }
  // Programs that wait on the host (control flow) are refused with a clear error.
  ir::Graph c;
  Var a = input(c, "a", DType::F32, {4});
  output(c, {if_then_else(
                 gt(sum(a), scalar_like(a, 0.0)), {a},
                 [](const std::vector<Var>& v) { return std::vector<Var>{v[0] + 1.0}; },
                 [](const std::vector<Var>& v) { return std::vector<Var>{v[0] - 1.0}; })[0]});
  Program pc = compile(c, d);
  Executor ec(pc, d);
  std::vector<Tensor> ci = {Tensor::zeros(DType::F32, {4}).to(d.allocator())};
  std::vector<Tensor> co = {Tensor::empty(DType::F32, {4}, d.allocator())};
  BOOST_CHECK_THROW(ec.capture(ci, co), InputError);
}

// The dispatch report for a mixed graph on cuda (any machine: compiling needs no GPU):
// L1 ops lowered, matmul and cumsum native, and an i4 cast — which the cuda device has no
// kernel for — refused under prefer-native (the error lists it) and host-staged under
// allow-host. On a GPU the host-staged program also runs and matches the reference.
BOOST_AUTO_TEST_CASE(dispatch_report_for_a_mixed_graph) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {16, 32}), w = input(g, "w", DType::F32, {8, 32}), z = input(g, "z", DType::C64, {4, 4});
  Var h = gelu(linear(x, w));                   // L1 -> common-ir
  Var c = cumsum(matmul(h, w), 1);              // native matmul, cumsum
  Var q = cast(cast(h, DType::I4), DType::F32);  // no i4 kernels on cuda
  output(g, {c, q, matmul(z, z)});
  Device& d = cuda_dev();
  try {
    compile(g, d);
    BOOST_ERROR("an i4 cast compiled for cuda under prefer-native");
  } catch (const LegalizeError& e) {
    int unsupported = 0;
    for (const NodeReport& n : e.report().nodes)
      if (n.route == Route::Unsupported) {
        ++unsupported;
        BOOST_TEST(n.op == "cast");
        BOOST_TEST(n.why.find("i4") != std::string::npos, n.why);
      }
    BOOST_TEST(unsupported == 2);
  }
  CompileOptions o;
  o.policy = Policy::AllowHost;
  Program p = compile(g, d, o);
  std::map<std::string, std::set<Route>> routes;
  for (const NodeReport& n : p.report.nodes) routes[n.op].insert(n.route);
  BOOST_TEST(routes["linear"].count(Route::CommonIR) == 1);
  BOOST_TEST(routes["gelu"].count(Route::CommonIR) == 1);
  BOOST_TEST(routes["matmul"].count(Route::Native) == 1);  // c64 too: cuBLAS
  BOOST_TEST(routes["cumsum"].count(Route::Native) == 1);
  BOOST_TEST(routes["cast"].count(Route::HostStaged) == 1);
  if (!d.unavailable().empty()) return;
  std::mt19937_64 rng(seed() + 4);
  std::vector<Tensor> in = {random(DType::F32, {16, 32}, rng), random(DType::F32, {8, 32}, rng), Tensor::zeros(DType::C64, {4, 4})};
  auto got = run(p, d, in);
  auto want = on("reference", g, in);
  for (size_t r = 0; r < 2; ++r) BOOST_TEST(rel_error(got[r], want[r]) <= 1e-5, "result " << r);
}

// Errors raised while a program runs on the GPU name the node (op and source line), and
// the device stays usable afterwards.
BOOST_AUTO_TEST_CASE(run_time_errors_name_the_node, *utf::precondition(GpuPresent())) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {8}), i = input(g, "i", DType::I32, {3});
  output(g, {gather(x, i, 0) * 2.0});
  Tensor idx = Tensor::empty(DType::I32, {3});
  idx.data<int32_t>()[0] = 0;
  idx.data<int32_t>()[1] = 9;  // out of range
  idx.data<int32_t>()[2] = 1;
  try {
    on("cuda", g, {Tensor::zeros(DType::F32, {8}), idx});
    BOOST_ERROR("an out-of-range gather index ran");
  } catch (const InputError& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("gather") != std::string::npos, m);
    BOOST_TEST(m.find("test_cuda.cpp") != std::string::npos, m);
  }
  idx.data<int32_t>()[1] = 7;
  auto r = on("cuda", g, {Tensor::zeros(DType::F32, {8}), idx});
  BOOST_TEST(r[0].data<float>()[1] == 0.0f);
}

// A gather recorded into a CUDA graph still validates its indices on every replay: a replay
// with an index out of range fails where its results are read (synchronize, or a copy to the
// host), naming the node; a later replay with good indices runs and matches the reference.
BOOST_AUTO_TEST_CASE(replayed_gather_refuses_bad_indices, *utf::precondition(GpuPresent())) {
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {8}), i = input(g, "i", DType::I64, {3});
  output(g, {gather(x, i, 0) * 2.0});
  Device& d = cuda_dev();
  Program p = compile(g, d);
  Executor ex(p, d);
  Tensor hx = Tensor::empty(DType::F32, {8});
  for (int k = 0; k < 8; ++k) hx.data<float>()[k] = float(k + 1);
  Tensor hi = Tensor::empty(DType::I64, {3});
  auto set_indices = [&](int64_t a, int64_t b, int64_t c) {
    hi.data<int64_t>()[0] = a, hi.data<int64_t>()[1] = b, hi.data<int64_t>()[2] = c;
  };
  set_indices(0, 1, 2);
  std::vector<Tensor> in = {hx.to(d.allocator()), hi.to(d.allocator())};
  std::vector<Tensor> out = {Tensor::empty(DType::F32, {3}, d.allocator())};
  std::unique_ptr<Replay> r = ex.capture(in, out);
  auto replay_with = [&](int64_t a, int64_t b, int64_t c) {
    set_indices(a, b, c);
    d.allocator()->copy_from_host(in[1].raw(), hi.raw(), hi.nbytes());
    r->launch();
  };
  replay_with(3, 12, 1);  // 12 is out of range
  try {
    d.synchronize();
    BOOST_ERROR("a replay with an out-of-range index was not refused");
  } catch (const InputError& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("gather") != std::string::npos, m);
    BOOST_TEST(m.find("index 12") != std::string::npos, m);
    BOOST_TEST(m.find("replayed") != std::string::npos, m);
  }
  replay_with(0, -9, 0);  // -9 < -8
  try {
    out[0].to(host_allocator());
    BOOST_ERROR("reading a replay's result with index -9 was not refused");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("index -9") != std::string::npos, e.what());
  }
  replay_with(-1, 7, 2);
  d.synchronize();
  Tensor got = out[0].to(host_allocator());
  BOOST_TEST(got.data<float>()[0] == 16.0f);
  BOOST_TEST(got.data<float>()[1] == 16.0f);
  BOOST_TEST(got.data<float>()[2] == 6.0f);
}

// layer_norm, softmax and attention run as native kernels (one pass each instead of their
// lowerings' chains) and match the reference device: attention on the shapes every device's
// kernel is checked with (tests/support/nn_cases.hpp; f32, the dtype of this kernel); and
// cases the kernels refuse (softmax over another axis, q and k with other leading
// dimensions) still compile, through the lowering.
BOOST_AUTO_TEST_CASE(nn_kernels_match_the_reference, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(seed());
  auto route_of = [](const Program& p, const std::string& op) {
    for (const NodeReport& r : p.report.nodes)
      if (r.op == op) return std::string(route_name(r.route));
    return std::string("absent");
  };
  for (DType t : {DType::F32, DType::F64}) {
    ir::Graph g;
    Var x = input(g, "x", t, {3, 7, 45}), gm = input(g, "g", t, {45}), b = input(g, "b", t, {45});
    output(g, {layer_norm(x, gm, b, 1e-6), softmax(x * 3.0)});
    std::vector<Tensor> in = {random(t, {3, 7, 45}, rng), random(t, {45}, rng), random(t, {45}, rng)};
    Program p = compile(g, cuda_dev());
    BOOST_TEST(route_of(p, "layer_norm") == "native");
    BOOST_TEST(route_of(p, "softmax") == "native");
    auto want = on("reference", g, in), got = run(p, cuda_dev(), in);
    const double tol = t == DType::F64 ? 1e-12 : 2e-6;
    for (int k = 0; k < 2; ++k) BOOST_TEST(rel_error(got[size_t(k)], want[size_t(k)]) <= tol, dtype_name(t) << " output " << k);
  }
  // Every lane count the lane kernel has (auto picks by size; these shapes are small), then
  // the register-tiled kernel (lanes 0 stands for it here) where the shape allows it — at most
  // 128 keys: the BERT case, the causal ones with rows that see no key, the full bias over
  // 300 query rows, the grouped-query prefill; the others fall back to the lane kernel —
  // each against the reference.
  const int saved_lanes = cuda::attention_lanes_setting();
  const cuda::AttentionKernel saved_kernel = cuda::attention_kernel_setting();
  for (int lanes : {1, 2, 4, 8, 0}) {
    cuda::set_attention_lanes(lanes);
    cuda::set_attention_kernel(lanes == 0 ? cuda::AttentionKernel::Tile : cuda::AttentionKernel::Lanes);
    // The shared cases, then grouped-query attention's f32 shapes (k and v broadcasting over
    // the group's query heads, the decode step's single row included): native here too.
    std::vector<test::AttentionCase> cases = test::attention_cases(false);
    for (const test::AttentionCase& c : test::grouped_attention_cases())
      if (c.t == DType::F32) cases.push_back(c);
    for (const test::AttentionCase& c : cases) {
      ir::Graph g = test::attention_graph(c);
      std::vector<Tensor> in = test::attention_inputs(c, [&](DType t, const Shape& s) { return random(t, s, rng); });
      Program p = compile(g, cuda_dev());
      BOOST_TEST(route_of(p, "attention") == "native", "q " << c.q.size() << "-d: " << p.report.table());
      auto want = on("reference", g, in), got = run(p, cuda_dev(), in);
      BOOST_TEST(rel_error(got[0], want[0]) <= 2e-6, "attention q" << shape_str(c.q) << " " << c.mask << ", " << lanes
                                                                << " lanes (0: tiled): " << rel_error(got[0], want[0]));
    }
  }
  cuda::set_attention_lanes(saved_lanes);
  cuda::set_attention_kernel(saved_kernel);
  BOOST_CHECK_THROW(cuda::set_attention_lanes(3), InputError);
  {  // refused shapes run the lowering
    ir::Graph g = test::refused_nn_graph();
    Program p = compile(g, cuda_dev());
    BOOST_TEST(route_of(p, "attention") == "common-ir");
    BOOST_TEST(route_of(p, "softmax") == "common-ir");
    std::vector<Tensor> in;
    for (const Shape& s : test::refused_nn_shapes()) in.push_back(random(DType::F32, s, rng));
    auto want = on("reference", g, in), got = run(p, cuda_dev(), in);
    BOOST_TEST(rel_error(got[0], want[0]) <= 1e-5);
    BOOST_TEST(rel_error(got[1], want[1]) <= 1e-5);
  }
  if (!cuda::tf32_allowed()) {  // heads over 64 wide and 256 query rows or more: the lowering too
    const test::AttentionCase c{DType::F32, {1, 2, 256, 128}, {1, 2, 256, 128}, {1, 2, 256, 128}, "causal", std::nullopt};
    ir::Graph g = test::attention_graph(c);
    Program p = compile(g, cuda_dev());
    BOOST_TEST(route_of(p, "attention") == "common-ir", p.report.table());
    std::vector<Tensor> in = {random(c.t, c.q, rng), random(c.t, c.k, rng), random(c.t, c.v, rng)};
    auto want = on("reference", g, in), got = run(p, cuda_dev(), in);
    BOOST_TEST(rel_error(got[0], want[0]) <= 1e-5);
  }
}
