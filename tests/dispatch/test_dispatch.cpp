// The dispatch contract itself: a test device with a deliberately small capability
// table must yield exactly the expected routes, and a graph with no route must fail
// naming every offending node.
#define BOOST_TEST_MODULE dispatch
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "core/rng.hpp"
#include "dispatch/coverage.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "runtime/host_function.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;

namespace {

// Runs its kernels on the reference device but claims only a few f32 ops.
class TinyDevice final : public Device {
 public:
  std::string name() const override { return "tiny"; }
  std::string description() const override { return "test device with a small capability table"; }
  Allocator* allocator() override { return host_allocator(); }
  Capability supports(const ir::Node& n, const ir::Graph& g) const override {
    static const std::set<std::string> ops = {"add", "sub", "mul", "div", "neg", "exp", "erf", "tanh", "recip",
                                              "maximum", "matmul", "cast", "real", "imag", "make_complex", "sum", "max"};
    if (!ops.count(n.op->name)) return Capability::no("tiny has no " + n.op->name + " kernel");
    for (auto v : n.inputs)
      if (g.type(v).dtype != DType::F32 && !(n.op->name == "cast" || n.op->name == "real" || n.op->name == "imag"))
        return Capability::no(std::string("tiny has no ") + dtype_name(g.type(v).dtype) + " " + n.op->name);
    return Capability::yes();
  }
  void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) override {
    ref().run_node(n, in, out);
  }
  static Device& ref() { return DeviceRegistry::get().at("reference"); }
};

Tensor random_f32(Shape s, uint64_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(rng_unit(seed, uint64_t(i)) * 2 - 1);
  return t;
}

const NodeReport& report_for(const DispatchReport& r, const std::string& op) {
  for (auto& n : r.nodes)
    if (n.op == op) return n;
  BOOST_FAIL("no report entry for " + op);
  return r.nodes.front();
}

}  // namespace

BOOST_AUTO_TEST_CASE(routes_native_common_ir_rewritten) {
  TinyDevice tiny;
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {4, 8});
  auto w = input(g, "w", DType::F32, {8, 8});
  auto z = input(g, "z", DType::C64, {3, 3});
  auto h = input(g, "h", DType::F16, {4, 8});
  output(g, {gelu(matmul(x, w)), matmul(z, z), add(h, h)});
  Program p = compile(g, tiny);
  const auto& r = p.report;
  BOOST_TEST(r.compile_ready);
  BOOST_TEST(route_name(report_for(r, "matmul").route) == "native");
  BOOST_TEST(route_name(report_for(r, "gelu").route) == "common-ir");
  int c64_matmuls = 0;
  for (auto& n : r.nodes)
    if (n.op == "matmul" && n.dtypes[0] == "c64") {
      ++c64_matmuls;
      BOOST_TEST(route_name(n.route) == "rewritten");
      BOOST_TEST(n.rule == "complex-as-real-pairs");
    }
  BOOST_TEST(c64_matmuls == 1);
  BOOST_TEST(report_for(r, "add").rule == "promote-f16-to-f32");
  // Every node of the executed graph is one the device claims (or the runtime holds).
  for (auto& n : p.graph.nodes) {
    if (n.op->name == "param" || n.op->name == "constant" || n.op->name == "reshape") continue;
    BOOST_TEST(tiny.supports(n, p.graph).ok, "illegal node left: " << n.op->name);
  }
}

BOOST_AUTO_TEST_CASE(rewritten_and_lowered_results_match_reference) {
  TinyDevice tiny;
  Device& ref = TinyDevice::ref();
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {5, 7});
  auto w = input(g, "w", DType::F32, {7, 6});
  auto zr = input(g, "zr", DType::F32, {4, 4});
  auto zi = input(g, "zi", DType::F32, {4, 4});
  auto z = make_complex(zr, zi);
  output(g, {gelu(matmul(x, w)), real(matmul(z, z)), imag(matmul(z, z))});
  std::vector<Tensor> in = {random_f32({5, 7}, 11), random_f32({7, 6}, 12), random_f32({4, 4}, 13), random_f32({4, 4}, 14)};
  auto got = run(compile(g, tiny), tiny, in);
  auto want = run(compile(g, ref), ref, in);
  for (size_t k = 0; k < got.size(); ++k)
    for (int64_t i = 0; i < got[k].numel(); ++i)
      BOOST_TEST(got[k].data<float>()[i] == want[k].data<float>()[i], boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(unsupported_fails_naming_every_node) {
  TinyDevice tiny;
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {4, 8});
  int line_a = __LINE__ + 1;
  auto a = cumsum(x, 1);
  int line_b = __LINE__ + 1;
  auto b = argmax(x, 1);
  output(g, {a, b});
  try {
    compile(g, tiny);
    BOOST_FAIL("compile should have failed");
  } catch (const LegalizeError& e) {
    const auto& r = e.report();
    BOOST_TEST(!r.compile_ready);
    BOOST_TEST(r.count(Route::Unsupported) == 2);
    std::string msg = e.what();
    BOOST_TEST(msg.find("cumsum") != std::string::npos);
    BOOST_TEST(msg.find("argmax") != std::string::npos);
    BOOST_TEST(msg.find("test_dispatch.cpp:" + std::to_string(line_a)) != std::string::npos);
    BOOST_TEST(msg.find("test_dispatch.cpp:" + std::to_string(line_b)) != std::string::npos);
    BOOST_TEST(report_for(r, "cumsum").why.find("host-staged: not allowed") != std::string::npos);
    auto j = nlohmann::json::parse(r.json());
    BOOST_TEST(j["compile_ready"] == false);
    BOOST_TEST(j["summary"]["unsupported"] == 2);
    for (const char* k : {"id", "op", "level", "dtypes", "shape", "location", "route", "rule", "bytes_staged", "why"})
      BOOST_TEST(j["nodes"][0].contains(k), "missing json field " << k);
  }
}

BOOST_AUTO_TEST_CASE(allow_host_stages_with_byte_count_and_right_answer) {
  TinyDevice tiny;
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {4, 8});
  output(g, {cumsum(x * 2.0, 1)});
  CompileOptions o;
  o.policy = Policy::AllowHost;
  Program p = compile(g, tiny, o);
  const auto& n = report_for(p.report, "cumsum");
  BOOST_TEST(route_name(n.route) == "host-staged");
  BOOST_TEST(n.bytes_staged == 2 * 4 * 8 * 4);
  Tensor xin = random_f32({4, 8}, 21);
  auto got = run(p, tiny, {xin});
  for (int r = 0; r < 4; ++r) {
    double acc = 0;
    for (int c = 0; c < 8; ++c) {
      acc += 2.0 * xin.data<float>()[r * 8 + c];
      BOOST_TEST(got[0].data<float>()[r * 8 + c] == acc, boost::test_tools::tolerance(1e-5));
    }
  }
}

// host_call runs the registered function on the node's inputs, once per run of the node and
// once per node (two equal calls are not merged: the function may have effects), natively on
// a device with host memory (cpu, reference) and host-staged -- only where allowed, its bytes
// counted -- elsewhere. A strided input arrives contiguous, with its values.
BOOST_AUTO_TEST_CASE(host_call_runs_the_registered_function_on_every_route) {
  int calls = 0;
  HostFunction f("axpy3", [&](std::span<const Tensor> in, Tensor& out) {
    ++calls;
    BOOST_TEST_REQUIRE(in.size() == 2u);
    BOOST_TEST((in[0].is_contiguous() && in[1].is_contiguous()));
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = 3 * in[0].data<float>()[i] + in[1].data<float>()[i];
  });
  BOOST_TEST(f.id() > 0);
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {8, 4});
  auto z = input(g, "z", DType::F32, {4, 8});
  auto xt = permute(x * 2.0, {1, 0});  // a view where the device makes views
  auto y1 = host_call(f.id(), {xt, z}, DType::F32, {4, 8});
  auto y2 = host_call(f.id(), {xt, z}, DType::F32, {4, 8});
  output(g, {y1 + 1.0, y2});
  Tensor xin = random_f32({8, 4}, 31), zin = random_f32({4, 8}, 32);
  auto check = [&](const std::vector<Tensor>& got) {
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 8; ++c) {
        const float want = 3 * (2 * xin.data<float>()[c * 4 + r]) + zin.data<float>()[r * 8 + c];
        BOOST_TEST(got[1].data<float>()[r * 8 + c] == want);
        BOOST_TEST(got[0].data<float>()[r * 8 + c] == want + 1.0f);
      }
  };
  for (const char* dev : {"reference", "cpu"}) {
    Device& d = DeviceRegistry::get().at(dev);
    Program p = compile(g, d);
    BOOST_TEST(route_name(report_for(p.report, "host_call").route) == "native", dev);
    calls = 0;
    check(run(p, d, {xin, zin}));
    BOOST_TEST(calls == 2, dev);
    check(run(p, d, {xin, zin}));
    BOOST_TEST(calls == 4, dev);
  }
  TinyDevice tiny;
  BOOST_CHECK_THROW(compile(g, tiny), LegalizeError);
  CompileOptions o;
  o.policy = Policy::AllowHost;
  Program p = compile(g, tiny, o);
  const NodeReport& n = report_for(p.report, "host_call");
  BOOST_TEST(route_name(n.route) == "host-staged");
  BOOST_TEST(n.bytes_staged == 3 * 4 * 8 * 4);  // two inputs and the result, f32 [4, 8] each
  calls = 0;
  check(run(p, tiny, {xin, zin}));
  BOOST_TEST(calls == 2);
}

// The errors: a call whose function is gone names its id (and the node); the identity (id 0)
// refuses inputs that are not of its result's type; the function's own InputError carries its
// name; a negative id is refused when the graph is built.
BOOST_AUTO_TEST_CASE(host_call_errors_name_the_function) {
  Device& cpu = DeviceRegistry::get().at("cpu");
  Tensor xin = random_f32({4, 8}, 33);
  int64_t gone_id = 0;
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {4, 8});
  {
    HostFunction gone("gone", [](std::span<const Tensor>, Tensor&) {});
    gone_id = gone.id();
    output(g, {host_call(gone_id, {x}, DType::F32, {4, 8})});
  }
  Program p = compile(g, cpu);
  try {
    run(p, cpu, {xin});
    BOOST_FAIL("a call of an unregistered function ran");
  } catch (const InputError& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("host function " + std::to_string(gone_id) + " is not registered") != std::string::npos, m);
    BOOST_TEST(m.find("host_call") != std::string::npos, m);
  }
  ir::Graph h;
  auto hx = input(h, "x", DType::F32, {4, 8});
  output(h, {host_call(0, {hx}, DType::F32, {4, 8}), host_call(0, {hx}, DType::F64, {4, 8})});
  try {
    run(compile(h, cpu), cpu, {xin});
    BOOST_FAIL("the identity took an input of another type");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("identity) takes one input of the result's type (f64[4,8])") != std::string::npos,
               e.what());
  }
  HostFunction picky("picky", [](std::span<const Tensor>, Tensor&) { throw InputError("the mesh is not loaded"); });
  ir::Graph k;
  output(k, {host_call(picky.id(), {input(k, "x", DType::F32, {4, 8})}, DType::F32, {4, 8})});
  try {
    run(compile(k, cpu), cpu, {xin});
    BOOST_FAIL("the function's error was lost");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("'picky': the mesh is not loaded") != std::string::npos, e.what());
  }
  ir::Graph bad;
  BOOST_CHECK_THROW(host_call(-1, {input(bad, "x", DType::F32, {2})}, DType::F32, {2}), InputError);
  BOOST_CHECK_THROW(HostFunction("empty", HostFn{}), InputError);
}

BOOST_AUTO_TEST_CASE(force_common_ir_lowers_l1_even_when_native) {
  Device& ref = TinyDevice::ref();
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {4, 8});
  output(g, {softmax(x)});
  CompileOptions o;
  o.policy = Policy::ForceCommonIR;
  Program p = compile(g, ref, o);
  BOOST_TEST(route_name(report_for(p.report, "softmax").route) == "common-ir");
  for (auto& n : p.graph.nodes) BOOST_TEST((n.op->level != ir::Level::L1), "L1 node left: " << n.op->name);
}

BOOST_AUTO_TEST_CASE(policy_names_round_trip_and_unknown_fails) {
  for (Policy pol : {Policy::PreferNative, Policy::ForceCommonIR, Policy::Strict, Policy::AllowHost})
    BOOST_TEST(int(policy_from_name(policy_name(pol))) == int(pol));
  BOOST_CHECK_THROW(policy_from_name("fastest"), InputError);
}

// Every op but param has an example (its own, beside its declaration, or its class's), and
// it builds for every dtype the op declares: the op suite runs it on every device and
// `rlx ops` probes with it, so the coverage matrix (docs/ops.md) has a row for every op and
// declared dtype but the ones the runtime owns (param, control flow).
BOOST_AUTO_TEST_CASE(every_op_has_an_example_and_a_coverage_row) {
  for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
    if (def->name == "param") continue;
    BOOST_TEST_CONTEXT(def->name) {
      BOOST_TEST(bool(ir::example_of(*def)), "no example: write one beside the op's declaration");
      if (def->cls == ir::OpClass::Control) continue;
      for (DType t : def->dtypes) {
        try {
          BOOST_TEST(sample_graph(def->name, t).has_value(), dtype_name(t) << ": no probe graph");
        } catch (const std::exception& e) {
          BOOST_ERROR(dtype_name(t) << ": the example fails: " << e.what());
        }
      }
    }
  }
}
