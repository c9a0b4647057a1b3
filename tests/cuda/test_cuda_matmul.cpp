// matmul on the cuda device through cuBLASLt, and matmul + bias (+ relu) as one kernel
// with a cuBLASLt epilogue: the schedule forms the kernel (checked by compiling, also
// without a GPU), the L3 text and the dispatch report show it, and on a GPU the results
// match the reference device on fresh random data (f32, bf16, f16; batched; transposed
// operands; broadcast bias; recorded and replayed). Every GPU case is skipped, with the
// reason, where this process has no usable GPU.
#define BOOST_TEST_MODULE cuda_matmul
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/half.hpp"
#include "devices/cuda/library.hpp"
#include "tests/support/nn_cases.hpp"
#include "tests/support/preconditions.hpp"
#include "tests/support/seed.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "runtime/executor.hpp"
#include "runtime/program_text.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;
namespace utf = boost::unit_test;

namespace {

Device& device(const char* name) { return DeviceRegistry::get().at(name); }

using test::GpuPresent;

// For the TF32 and 16-bit cases: RLX_CUDA_TF32 and RLX_CUDA_BF16 are read once per process,
// so those cases run only in the process started with the variable set (ctest's
// test_cuda_matmul_tf32 and test_cuda_matmul_bf16).
struct EnvSet {
  const char* name;
  const char* value;
  const char* ctest_name;
  boost::test_tools::assertion_result operator()(utf::test_unit_id) const {
    const char* e = std::getenv(name);
    const std::string why = device("cuda").unavailable();
    boost::test_tools::assertion_result r(why.empty() && e && std::strcmp(e, value) == 0);
    r.message() << (why.empty() ? std::string(name) + "=" + value + " is not set (ctest runs this case as " + ctest_name + ")"
                                : "no usable GPU here: " + why);
    return r;
  }
};
const EnvSet kTf32Enabled{"RLX_CUDA_TF32", "1", "test_cuda_matmul_tf32"};
const EnvSet kHalfProductsEnabled{"RLX_CUDA_BF16", "all", "test_cuda_matmul_bf16"};

// x cast to t by the reference device (the one rounding every device agrees on).
Tensor cast_on_reference(const Tensor& x, DType t) {
  ir::Graph c;
  output(c, {cast(input(c, "x", x.dtype(), x.shape()), t)});
  return run(compile(c, device("reference")), device("reference"), {x})[0];
}

Tensor random_tensor(DType t, const Shape& s, std::mt19937_64& rng) {
  Tensor h = Tensor::empty(DType::F64, s);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < h.numel(); ++i) h.data<double>()[i] = u(rng);
  return t == DType::F64 ? h : cast_on_reference(h, t);
}

// max |got - want| / max |want|, both read as f64.
double normalized_error(const Tensor& got, const Tensor& want) {
  const Tensor g = cast_on_reference(got, DType::F64), w = cast_on_reference(want, DType::F64);
  BOOST_REQUIRE_EQUAL(g.numel(), w.numel());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    worst = std::max(worst, std::fabs(g.data<double>()[i] - w.data<double>()[i]));
    scale = std::max(scale, std::fabs(w.data<double>()[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

double tolerance(DType t) { return t == DType::F32 ? 1e-5 : t == DType::F16 ? 2e-3 : 1e-2; }

const Kernel* epilogue_kernel(const Program& p) {
  for (const Kernel& k : p.kernels)
    if (k.kind == Kernel::MatmulEpilogue) return &k;
  return nullptr;
}

// One shape of the problem: y = [relu](op(a) op(b) + bias).
struct Case {
  const char* name;
  Shape a, b, bias;
  bool ta = false, tb = false, relu = true;
};

const Case kCases[] = {
    {"2d", {37, 64}, {64, 29}, {29}},
    {"2d, no relu", {37, 64}, {64, 29}, {29}, false, false, false},
    {"transposed a", {64, 37}, {64, 29}, {29}, true, false},
    {"transposed b (linear)", {37, 64}, {29, 64}, {29}, false, true},
    {"both transposed", {64, 37}, {29, 64}, {1, 29}, true, true},
    {"batched", {3, 37, 64}, {3, 64, 29}, {29}},
    {"batched, broadcast b", {2, 3, 37, 64}, {64, 29}, {1, 1, 29}},
    {"batched, broadcast a, transposed b", {37, 64}, {4, 29, 64}, {29}, false, true},
    {"uneven batches", {2, 1, 37, 64}, {3, 64, 29}, {29}, false, false, false},
};

ir::Graph build(const Case& c, DType t) {
  ir::Graph g;
  Var a = input(g, "a", t, c.a), b = input(g, "b", t, c.b), bias = input(g, "bias", t, c.bias);
  Var y = matmul(a, b, c.ta, c.tb) + bias;
  output(g, {c.relu ? relu(y) : y});
  return g;
}

}  // namespace

// Compile only: no GPU needed.
BOOST_AUTO_TEST_CASE(schedule_forms_the_epilogue_kernel_for_cuda) {
  for (const Case& c : kCases)
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      const std::string what = std::string(c.name) + " " + dtype_name(t);
      Program p = compile(build(c, t), device("cuda"));
      const Kernel* k = epilogue_kernel(p);
      BOOST_REQUIRE_MESSAGE(k, what << ": no matmul_epilogue kernel in\n" << print_program(p));
      // Bias only: the cuda device refuses to fuse the relu (NaN), which then runs on its own.
      BOOST_TEST(k->nodes.size() == 2u, what);
      BOOST_TEST(k->inputs.size() == 3u, what);
      BOOST_TEST(k->epilogue.activation == MatmulEpilogue::None, what);
      BOOST_TEST(p.graph.nodes[size_t(k->epilogue.matmul)].op->name == "matmul", what);
      BOOST_TEST(p.kernels.size() == (c.relu ? 2u : 1u), what << "\n" << print_program(p));
      // The L3 text shows it and parses back to the same kernel.
      const std::string text = print_program(p);
      BOOST_TEST(text.find("matmul_epilogue") != std::string::npos, text);
      Program q = parse_program(text, "l3");
      const Kernel* kq = epilogue_kernel(q);
      BOOST_REQUIRE(kq);
      BOOST_TEST(kq->nodes == k->nodes);
      BOOST_TEST(kq->inputs == k->inputs);
      BOOST_TEST(kq->epilogue.relu == k->epilogue.relu);
      BOOST_TEST(print_program(q) == text);
      // So does the dispatch report, as a table and as JSON.
      const std::string table = p.report.table(), json = p.report.json();
      BOOST_TEST(table.find("matmul_epilogue (bias)") != std::string::npos, table);
      BOOST_TEST(json.find("\"kind\": \"matmul_epilogue\"") != std::string::npos, json);
    }
}

BOOST_AUTO_TEST_CASE(no_epilogue_kernel_where_the_graph_or_device_does_not_allow_it) {
  auto has_epilogue = [](const ir::Graph& g, const char* dev, CompileOptions o = {}) {
    return epilogue_kernel(compile(g, device(dev), o)) != nullptr;
  };
  const Case& c = kCases[0];
  BOOST_TEST(has_epilogue(build(c, DType::F32), "cpu"));  // the cpu device takes the bias (tests/cpu runs it)
  BOOST_TEST(!has_epilogue(build(c, DType::F32), "reference"));
  CompileOptions unfused;
  unfused.fuse = false;
  BOOST_TEST(!has_epilogue(build(c, DType::F32), "cuda", unfused));
  BOOST_TEST(!has_epilogue(build(c, DType::F64), "cuda"));  // f64 stays on cuBLAS
  {  // the product is also a result
    ir::Graph g;
    Var a = input(g, "a", DType::F32, {8, 4}), b = input(g, "b", DType::F32, {4, 5}), bias = input(g, "bias", DType::F32, {5});
    Var y = matmul(a, b);
    output(g, {relu(y + bias), y});
    BOOST_TEST(!has_epilogue(g, "cuda"));
  }
  {  // a bias along the rows, and a full-size addend
    ir::Graph g;
    Var a = input(g, "a", DType::F32, {8, 4}), b = input(g, "b", DType::F32, {4, 5});
    Var rows = input(g, "rows", DType::F32, {8, 1}), full = input(g, "full", DType::F32, {5, 8});
    output(g, {matmul(a, b) + rows, matmul(b, a, true, true) + full});
    BOOST_TEST(!has_epilogue(g, "cuda"));
  }
  {  // a bias computed after the matmul stays a separate kernel, as does a relu whose input is also a result
    ir::Graph g;
    Var a = input(g, "a", DType::F32, {8, 4}), b = input(g, "b", DType::F32, {4, 5}), s = input(g, "s", DType::F32, {5});
    Var y = matmul(a, b);
    Var z = y + exp(s);
    output(g, {z});
    Program p = compile(g, device("cuda"));
    BOOST_TEST(!epilogue_kernel(p), print_program(p));
    ir::Graph h;
    Var a2 = input(h, "a", DType::F32, {8, 4}), b2 = input(h, "b", DType::F32, {4, 5}), c2 = input(h, "c", DType::F32, {5});
    Var sum = matmul(a2, b2) + c2;
    output(h, {relu(sum), sum});
    Program q = compile(h, device("cuda"));
    const Kernel* kq = epilogue_kernel(q);
    BOOST_REQUIRE(kq);
    BOOST_TEST(kq->epilogue.relu == -1, print_program(q));  // bias only; the relu runs on its own
  }
}

// The default Device::run_matmul_epilogue (node by node) through a program text that
// names the kernel for a device that does not form it: the reference device runs it and
// agrees with itself running the nodes as compiled.
BOOST_AUTO_TEST_CASE(default_run_path_runs_the_nodes_one_by_one) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul"));
  const Case& c = kCases[3];
  ir::Graph g = build(c, DType::F32);
  std::string text = print_program(compile(g, device("cuda")));
  const std::string from = "device \"cuda\"";
  text.replace(text.find(from), from.size(), "device \"reference\"");
  Program p = parse_program(text, "l3");
  BOOST_REQUIRE(epilogue_kernel(p));
  for (int round = 0; round < 2; ++round) {
    std::vector<Tensor> in = {random_tensor(DType::F32, c.a, rng), random_tensor(DType::F32, c.b, rng),
                              random_tensor(DType::F32, c.bias, rng)};
    auto got = run(p, device("reference"), in);
    auto want = run(compile(g, device("reference")), device("reference"), in);
    BOOST_TEST(normalized_error(got[0], want[0]) <= 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(epilogue_kernel_matches_reference, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul") + 1);
  for (const Case& c : kCases)
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      ir::Graph g = build(c, t);
      std::vector<Tensor> in = {random_tensor(t, c.a, rng), random_tensor(t, c.b, rng), random_tensor(t, c.bias, rng)};
      auto want = run(compile(g, device("reference")), device("reference"), in);
      Program p = compile(g, device("cuda"));
      BOOST_REQUIRE(epilogue_kernel(p));
      auto got = run(p, device("cuda"), in);
      const double err = normalized_error(got[0], want[0]);
      BOOST_TEST(err <= tolerance(t), c.name << " " << dtype_name(t) << ": normalized error " << err);
    }
}

// relu(x w + b[1:]) with a NaN in x: the bias is a view one element in (not 16-byte
// aligned: the epilogue takes an aligned copy), and the NaN reaches the output as the
// reference says (maximum(NaN, 0) = NaN: the relu is not fused, see blas.cpp).
ir::Graph nan_and_odd_bias(DType t) {
  ir::Graph g;
  Var x = input(g, "x", t, {37, 64}), w = input(g, "w", t, {64, 29}), b = input(g, "b", t, {30});
  Var bias = slice(b, {1}, {30});
  output(g, {relu(matmul(x, w) + bias)});
  return g;
}

BOOST_AUTO_TEST_CASE(bias_view_at_an_odd_offset_is_fused) {
  Program p = compile(nan_and_odd_bias(DType::F32), device("cuda"));
  BOOST_TEST(epilogue_kernel(p) != nullptr, print_program(p));
}

BOOST_AUTO_TEST_CASE(nan_and_odd_bias_match_reference, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul") + 3);
  ir::Graph g = nan_and_odd_bias(DType::F32);
  std::vector<Tensor> in = {random_tensor(DType::F32, {37, 64}, rng), random_tensor(DType::F32, {64, 29}, rng),
                            random_tensor(DType::F32, {30}, rng)};
  in[0].data<float>()[5 * 64 + 3] = std::nanf("");
  auto want = run(compile(g, device("reference")), device("reference"), in);
  auto got = run(compile(g, device("cuda")), device("cuda"), in);
  int nan_rows = 0;
  double worst = 0;
  for (int64_t i = 0; i < 37 * 29; ++i) {
    const float a = got[0].data<float>()[i], b = want[0].data<float>()[i];
    if (std::isnan(b)) {
      BOOST_TEST(std::isnan(a), "element " << i << ": reference NaN, cuda " << a);
      nan_rows += i / 29 == 5;
    } else {
      worst = std::max(worst, double(std::fabs(a - b)));
    }
  }
  BOOST_TEST(nan_rows == 29);  // the whole row of the NaN
  BOOST_TEST(worst <= 1e-4, "largest difference " << worst);
}

// An L3 text may name a matmul_epilogue kernel with the relu inside (the schedule never
// forms one for cuda). It must still give maximum(NaN, 0) = NaN: the cuda device runs such a
// kernel node by node instead of through cuBLASLt's RELU_BIAS (see blas.cpp).
std::string relu_epilogue_text(const char* dev) {
  return std::string("program @main device \"") + dev + R"(" arena 512 {
  param %x: f32[37,64] -> param 0
  param %w: f32[64,29] -> param 1
  param %b: f32[29] -> param 2
  %5 = constant() {value=dense<[0.0]>} : f32[] -> const 0
  kernel 0 matmul_epilogue(%x, %w, %b, %5) -> (%6) {
    %3 = matmul(%x, %w) : f32[37,29] -> internal
    %4 = add(%3, %b) : f32[37,29] -> internal
    %6 = maximum(%4, %5) : f32[37,29] -> result 0
  }
  return %6
}
)";
}

void check_relu_epilogue_text(const char* dev) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul") + 4);
  Program p = parse_program(relu_epilogue_text(dev), "l3");
  const Kernel* k = epilogue_kernel(p);
  BOOST_REQUIRE(k);
  BOOST_REQUIRE(k->epilogue.activation == MatmulEpilogue::Relu);
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {37, 64}), w = input(g, "w", DType::F32, {64, 29}), b = input(g, "b", DType::F32, {29});
  output(g, {relu(matmul(x, w) + b)});
  std::vector<Tensor> in = {random_tensor(DType::F32, {37, 64}, rng), random_tensor(DType::F32, {64, 29}, rng),
                            random_tensor(DType::F32, {29}, rng)};
  in[0].data<float>()[7 * 64 + 1] = std::nanf("");
  auto want = run(compile(g, device("reference")), device("reference"), in);
  auto got = run(p, device(dev), in);
  const Tensor h = got[0].to(host_allocator());
  int nans = 0;
  double worst = 0;
  for (int64_t i = 0; i < 37 * 29; ++i) {
    const float a = h.data<float>()[i], e = want[0].data<float>()[i];
    if (std::isnan(e)) {
      BOOST_TEST(std::isnan(a), dev << " element " << i << ": reference NaN, got " << a);
      ++nans;
    } else {
      worst = std::max(worst, double(std::fabs(a - e)));
    }
  }
  BOOST_TEST(nans == 29);  // the row of the NaN
  BOOST_TEST(worst <= 1e-4, dev << ": largest difference " << worst);
}

BOOST_AUTO_TEST_CASE(relu_epilogue_from_text_keeps_nan_on_cpu) { check_relu_epilogue_text("cpu"); }

BOOST_AUTO_TEST_CASE(relu_epilogue_from_text_keeps_nan_on_cuda, *utf::precondition(GpuPresent())) {
  check_relu_epilogue_text("cuda");
}

// The plain matmul path (cuBLASLt without an epilogue) on the same shapes.
BOOST_AUTO_TEST_CASE(plain_matmul_matches_reference, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul") + 2);
  for (const Case& c : kCases)
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      ir::Graph g;
      Var a = input(g, "a", t, c.a), b = input(g, "b", t, c.b);
      output(g, {matmul(a, b, c.ta, c.tb)});
      std::vector<Tensor> in = {random_tensor(t, c.a, rng), random_tensor(t, c.b, rng)};
      auto want = run(compile(g, device("reference")), device("reference"), in);
      auto got = run(compile(g, device("cuda")), device("cuda"), in);
      const double err = normalized_error(got[0], want[0]);
      BOOST_TEST(err <= tolerance(t), c.name << " " << dtype_name(t) << ": normalized error " << err);
    }
}

BOOST_AUTO_TEST_CASE(recorded_epilogue_kernel_replays, *utf::precondition(GpuPresent())) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul") + 3);
  const Case& c = kCases[6];
  ir::Graph g = build(c, DType::F32);
  Device& d = device("cuda");
  Program p = compile(g, d);
  Executor ex(p, d);
  std::vector<Tensor> in = {random_tensor(DType::F32, c.a, rng).to(d.allocator()),
                            random_tensor(DType::F32, c.b, rng).to(d.allocator()),
                            random_tensor(DType::F32, c.bias, rng).to(d.allocator())};
  const Shape ys = g.type(g.results[0]).shape;
  std::vector<Tensor> out = {Tensor::empty(DType::F32, ys, d.allocator())};
  std::unique_ptr<Replay> r = ex.capture(in, out);
  for (int round = 0; round < 2; ++round) {
    std::vector<Tensor> host = {random_tensor(DType::F32, c.a, rng), random_tensor(DType::F32, c.b, rng),
                                random_tensor(DType::F32, c.bias, rng)};
    for (size_t i = 0; i < in.size(); ++i) in[i].allocator()->copy_from_host(in[i].raw(), host[i].raw(), host[i].nbytes());
    r->launch();
    d.synchronize();
    auto want = run(compile(g, device("reference")), device("reference"), host);
    BOOST_TEST(normalized_error(out[0].to(host_allocator()), want[0]) <= 1e-5, "round " << round);
  }
}

// TF32 tensor cores (RLX_CUDA_TF32=1): 10-bit mantissas in the products, f32 sums.
BOOST_AUTO_TEST_CASE(tf32_matches_reference_within_tf32_tolerance, *utf::precondition(kTf32Enabled)) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul") + 4);
  for (const Case& c : kCases) {
    ir::Graph g = build(c, DType::F32);
    std::vector<Tensor> in = {random_tensor(DType::F32, c.a, rng), random_tensor(DType::F32, c.b, rng),
                              random_tensor(DType::F32, c.bias, rng)};
    auto want = run(compile(g, device("reference")), device("reference"), in);
    auto got = run(compile(g, device("cuda")), device("cuda"), in);
    const double err = normalized_error(got[0], want[0]);
    BOOST_TEST(err <= 5e-3, c.name << ": normalized error " << err);
  }
}

// Attention on the tensor cores (at least 16 query rows): every shape the kernels are checked
// with (tests/support/nn_cases.hpp), grouped-query attention's, a Qwen3-like prefill (128-wide
// heads, k and v broadcasting over the group, causal, more rows than a block) and a causal mask
// with fewer keys than queries (rows that see no key: NaN, as on the reference device); within
// `tol` of the reference (normalized by the output's largest entry), NaN where it is. With
// `rounds`, each case of 16 or more query rows must also be further from the reference than
// f32 rounding (1e-4): an f32 kernel run in place of the tensor-core one would not be.
void check_tensor_core_attention(uint64_t seed, double tol, bool rounds) {
  std::mt19937_64 rng(seed);
  std::vector<test::AttentionCase> cases = test::attention_cases(false);
  for (const test::AttentionCase& c : test::grouped_attention_cases())
    if (c.t == DType::F32) cases.push_back(c);
  cases.push_back({DType::F32, {2, 4, 2, 200, 128}, {2, 4, 1, 200, 128}, {2, 4, 1, 200, 128}, "causal", std::nullopt});
  cases.push_back({DType::F32, {1, 2, 40, 32}, {1, 2, 24, 32}, {1, 2, 24, 32}, "causal", Shape{2, 40, 24}});
  for (const test::AttentionCase& c : cases) {
    ir::Graph g = test::attention_graph(c);
    std::vector<Tensor> in = test::attention_inputs(c, [&](DType t, const Shape& s) { return random_tensor(t, s, rng); });
    Program p = compile(g, device("cuda"));
    for (const NodeReport& r : p.report.nodes)
      if (r.op == "attention") BOOST_TEST(std::string(route_name(r.route)) == "native", p.report.table());
    const Tensor got = cast_on_reference(run(p, device("cuda"), in)[0], DType::F64);
    const Tensor want = cast_on_reference(run(compile(g, device("reference")), device("reference"), in)[0], DType::F64);
    int64_t nan_mismatch = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      nan_mismatch += std::isnan(got.data<double>()[i]) != std::isnan(want.data<double>()[i]);
    BOOST_TEST(nan_mismatch == 0, "q" << shape_str(c.q) << ": " << nan_mismatch << " entries NaN on one device only");
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      if (!std::isnan(want.data<double>()[i])) {
        worst = std::max(worst, std::fabs(got.data<double>()[i] - want.data<double>()[i]));
        scale = std::max(scale, std::fabs(want.data<double>()[i]));
      }
    BOOST_TEST(worst <= tol * scale, "q" << shape_str(c.q) << " " << c.mask << ": normalized error " << worst / scale);
    const int64_t lq = c.q[c.q.size() - (c.layout == "lhd" ? 3 : 2)];
    if (rounds && lq >= 16 && scale > 0)
      BOOST_TEST(worst > 1e-4 * scale, "q" << shape_str(c.q) << ": error " << worst / scale << " is f32's");
  }
}

// TF32 (RLX_CUDA_TF32=1): 10-bit mantissas in the products.
BOOST_AUTO_TEST_CASE(tf32_attention_matches_reference_within_tf32_tolerance, *utf::precondition(kTf32Enabled)) {
  check_tensor_core_attention(test::run_seed("test_cuda_matmul") + 6, 5e-3, false);
}

// bf16 (set_attention_kernel(Bf16), as RLX_CUDA_ATTENTION=bf16): 8-bit significands against
// TF32's 11, so 8 times the TF32 bound.
BOOST_AUTO_TEST_CASE(bf16_attention_matches_reference_within_bf16_tolerance, *utf::precondition(GpuPresent())) {
  const cuda::AttentionKernel saved = cuda::attention_kernel_setting();
  cuda::set_attention_kernel(cuda::AttentionKernel::Bf16);
  struct Restore {
    cuda::AttentionKernel k;
    ~Restore() { cuda::set_attention_kernel(k); }
  } restore{saved};
  check_tensor_core_attention(test::run_seed("test_cuda_matmul") + 7, 4e-2, true);
}

// matmul_packed over BF16 and F16 weights on the tensor cores (RLX_CUDA_BF16=all: every row
// count): each x rounded once to the weights' type (to nearest even), the products exact, f32
// sums — so the result is the f64 product of the rounded x and the weights within the f32
// sums' bound k 2^-24 sum|x w|. Odd shapes (k = 37: rows off cuBLAS's 16-byte alignment),
// and row counts from one to past the GEMV kernels' 64.
template <class H>
void check_half_products(DType t, const char* type) {
  std::mt19937_64 rng(test::run_seed("test_cuda_matmul") + 5);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t n = 37;
  // (k a multiple of 32 and at most 64 rows: the tensor-core GEMV, every count of its 16-row
  // tiles and partial ones, k of 8, 32 and 33 steps of 32 — the last a second pass of the
  // warps' loop with a partial unroll; otherwise cuBLAS. 37 weight rows: a partial tile of 16.)
  for (int64_t k : {37, 256, 1000, 1024, 1056}) {
    std::vector<H> w(size_t(n * k));
    for (H& v : w) v = H(u(rng));
    Tensor wt = Tensor::empty(DType::U8, {n, 2 * k});
    std::memcpy(wt.raw(), w.data(), size_t(n * k) * 2);
    for (int64_t m : {1, 5, 16, 24, 40, 64, 70, 300}) {
      Tensor x = Tensor::empty(DType::F32, {m, k});
      for (int64_t i = 0; i < m * k; ++i) x.data<float>()[i] = u(rng);
      ir::Graph g;
      Var xv = input(g, "x", DType::F32, {m, k});
      Var wv = input(g, "w", DType::U8, {n, 2 * k});
      output(g, {op("matmul_packed", {xv, wv}, {{"type", std::string(type)}, {"k", k}})});
      const Tensor y = run(compile(g, device("cuda")), device("cuda"), {x, wt})[0].to(host_allocator());
      double worst = 0, moved = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0, a = 0, exact = 0;
          for (int64_t e = 0; e < k; ++e) {
            const double wj = double(float(w[size_t(j * k + e)])), xi = double(x.data<float>()[i * k + e]);
            const double p = double(float(H(float(xi)))) * wj;
            s += p, a += std::fabs(p), exact += xi * wj;
          }
          worst = std::max(worst, std::fabs(y.data<float>()[i * n + j] - s) / (double(k) * std::ldexp(1.0, -24) * a));
          moved = std::max(moved, std::fabs(s - exact));
        }
      BOOST_TEST(worst <= 1.0, dtype_name(t) << " m=" << m << " k=" << k << ": error / bound " << worst);
      // (the rounding of x is visible: the exact-x product differs from the rounded one)
      BOOST_TEST(moved > 0.0, dtype_name(t) << " m=" << m << " k=" << k);
    }
  }
}

BOOST_AUTO_TEST_CASE(sixteen_bit_products_round_x_once_and_sum_in_f32, *utf::precondition(kHalfProductsEnabled)) {
  check_half_products<bf16>(DType::BF16, "BF16");
  check_half_products<f16>(DType::F16, "F16");
}
