// Graph passes and the L3 schedule: verify, CSE, DCE, constant folding, fusion, memory
// planning (in-place reuse, views aliased, arena smaller than the sum of its values).
#define BOOST_TEST_MODULE passes
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/rng.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "passes/passes.hpp"
#include "passes/schedule.hpp"
#include "runtime/executor.hpp"
#include "runtime/program_text.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;

namespace {
int count_op(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (auto& x : g.nodes) n += x.op->name == op;
  return n;
}
Device& ref() { return DeviceRegistry::get().at("reference"); }
Tensor random_f32(Shape s, uint64_t seed) {
  Tensor t = Tensor::empty(DType::F32, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(rng_unit(seed, uint64_t(i)) * 2 - 1);
  return t;
}
}  // namespace

BOOST_AUTO_TEST_CASE(cse_merges_equal_nodes_and_literals) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {8});
  auto a = exp(x) * 2.0;
  auto b = exp(x) * 2.0;
  output(g, {a + b});
  ir::Graph c = passes::cse(g);
  BOOST_TEST(count_op(g, "exp") == 2);
  BOOST_TEST(count_op(c, "exp") == 1);
  BOOST_TEST(count_op(c, "constant") == 1);  // the two 2.0 literals are one
  BOOST_TEST(count_op(c, "mul") == 1);
  passes::verify(c);
}

// Constants made apart (folded ones, a mask each layer builds alike) merge when equal in
// content, however large; one differing in a middle element stays apart.
BOOST_AUTO_TEST_CASE(cse_merges_large_equal_constants_by_content) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {4096});
  Tensor a = random_f32({4096}, 11), b = a.clone(), c = a.clone();
  c.data<float>()[2048] += 1.0f;
  output(g, {x * constant(g, a) + x * constant(g, b) + x * constant(g, c)});
  ir::Graph m = passes::cse(g);
  BOOST_TEST(count_op(g, "constant") == 3);
  BOOST_TEST(count_op(m, "constant") == 2);
  BOOST_TEST(count_op(m, "mul") == 2);
  passes::verify(m);
}

BOOST_AUTO_TEST_CASE(cse_keeps_distinct_rng_draws) {
  ir::Graph g;
  auto r1 = rng_uniform(g, {4}, DType::F32, 7);
  auto r2 = rng_uniform(g, {4}, DType::F32, 7);
  output(g, {r1 + r2});
  BOOST_TEST(count_op(passes::cse(g), "rng_uniform") == 2);
}

BOOST_AUTO_TEST_CASE(dce_removes_unused_but_keeps_params) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {8});
  auto unused = input(g, "unused", DType::F32, {8});
  (void)sin(unused);
  output(g, {cos(x)});
  ir::Graph d = passes::dce(g);
  BOOST_TEST(count_op(d, "sin") == 0);
  BOOST_TEST(count_op(d, "cos") == 1);
  BOOST_TEST(d.params.size() == 2u);
}

BOOST_AUTO_TEST_CASE(constant_folding_evaluates_constant_subgraphs) {
  ir::Graph g;
  auto x = input(g, "x", DType::F64, {3});
  auto c = exp(scalar(g, 1.0, DType::F64)) + 1.0;  // all-constant: folds to e + 1
  output(g, {x * c});
  ir::Graph f = passes::dce(passes::fold_constants(g, evaluator_for(ref())));
  BOOST_TEST(count_op(f, "exp") == 0);
  BOOST_TEST(count_op(f, "mul") == 1);
  double folded = 0;
  for (auto& n : f.nodes)
    if (n.op->name == "constant") folded = *n.attrs.get_tensor("value").data<double>();
  BOOST_TEST(folded == std::exp(1.0) + 1.0, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(verify_rejects_a_tampered_type) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {8});
  output(g, {exp(x)});
  g.nodes.back().outputs[0].shape = {9};
  BOOST_CHECK_THROW(passes::verify(g), InputError);
}

BOOST_AUTO_TEST_CASE(memory_plan_reuses_in_place_and_aliases_views) {
  // A chain of matmuls (not fusable): each intermediate dies at the next kernel, so the
  // arena needs two live buffers at a time, not one per value.
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {64, 64});
  Var h = x;
  for (int i = 0; i < 6; ++i) h = exp(matmul(h, x) * 0.01);
  auto r = reshape(h, {4096});
  output(g, {r});
  Program p = compile(g, ref());
  int64_t value_bytes = 0;
  for (auto& slots : p.slots)
    for (auto& s : slots)
      if (s.kind == BufferSlot::Arena) value_bytes += s.bytes;
  BOOST_TEST(p.arena_bytes > 0);
  BOOST_TEST(p.arena_bytes <= 3 * 64 * 64 * 4);
  BOOST_TEST(p.arena_bytes < value_bytes);
  // The reshape of the result is a view of the last exp's buffer.
  const BufferSlot& rs = p.slot(p.graph.results[0]);
  BOOST_TEST(int(rs.kind) == int(BufferSlot::View));
  // Elementwise ops write in place over a dying input: some exp output shares its mul's offset.
  bool inplace = false;
  for (auto& n : p.graph.nodes)
    if (n.op->name == "exp" && p.slot(n.inputs[0]).kind == BufferSlot::Arena &&
        p.slot({n.id, 0}).kind == BufferSlot::Arena && p.slot(n.inputs[0]).offset == p.slot({n.id, 0}).offset)
      inplace = true;
  BOOST_TEST(inplace);
  // And the answer is still right (checked against an unplanned evaluation, op by op).
  Tensor xin = random_f32({64, 64}, 3);
  auto got = run(p, ref(), {xin});
  std::vector<double> hv(4096), xv(4096);
  for (int i = 0; i < 4096; ++i) hv[size_t(i)] = xv[size_t(i)] = xin.data<float>()[i];
  for (int it = 0; it < 6; ++it) {
    std::vector<double> nv(4096, 0.0);
    for (int a = 0; a < 64; ++a)
      for (int b = 0; b < 64; ++b) {
        double acc = 0;
        for (int k = 0; k < 64; ++k) acc += hv[size_t(a * 64 + k)] * xv[size_t(k * 64 + b)];
        nv[size_t(a * 64 + b)] = std::exp(double(float(acc)) * 0.01);
      }
    for (auto& v : nv) v = double(float(v));
    hv = nv;
  }
  for (int i = 0; i < 4096; ++i) BOOST_TEST(got[0].data<float>()[i] == hv[size_t(i)], boost::test_tools::tolerance(1e-4));
}

// A permute that moves only axes of extent 1 (a decode step's [B, 1, heads, d] -> [B, heads,
// 1, d]) is the same bytes: the compiled program holds a view there and copies nothing, while a
// permute that reorders longer axes stays a copy; both give the reference's values on every
// device, and the dispatch report still names the permutes.
BOOST_AUTO_TEST_CASE(order_keeping_permutes_become_views) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {2, 1, 3, 4});
  auto moved = permute(x, {0, 2, 1, 3});      // [2, 3, 1, 4]: same order of 2, 3, 4
  auto swapped = permute(x, {0, 1, 3, 2});    // [2, 1, 4, 3]: a real transpose
  output(g, {moved * 2.0, swapped});
  ir::Graph v = passes::permutes_as_reshapes(g);
  passes::verify(v);
  BOOST_TEST(count_op(v, "permute") == 1);
  BOOST_TEST(count_op(v, "reshape") == 1);
  const Tensor xin = random_f32({2, 1, 3, 4}, 11);
  const std::vector<Tensor> want = run(compile(g, ref()), ref(), {xin});
  for (Device* d : DeviceRegistry::get().runnable()) {
    const Program p = compile(g, *d);
    BOOST_TEST(count_op(p.graph, "permute") == 1, d->name());
    int permutes_reported = 0;
    for (const auto& r : p.report.nodes) permutes_reported += r.op == "permute";
    BOOST_TEST(permutes_reported == 2, d->name());
    std::vector<Tensor> got = run(p, *d, {xin});
    for (size_t i = 0; i < got.size(); ++i) {
      const Tensor h = got[i].is_host() ? got[i] : got[i].to(host_allocator());
      BOOST_TEST_REQUIRE(h.shape() == want[i].shape());
      for (int64_t e = 0; e < h.numel(); ++e)
        BOOST_TEST(h.data<float>()[e] == want[i].data<float>()[e], d->name() << " result " << i << " element " << e);
    }
  }
}

// A result may be written over a parameter's buffer (Program::donations) where the kernel
// making it reads the parameter last and element for element: x (read once, by y's kernel)
// gives y its buffer; w, still read by the matmul after y's kernel, does not. A caller passing
// the same tensor for both gets the values of a run with separate buffers, on every device;
// an alias the program does not allow is refused naming the pair; the L3 text carries the
// donor and a text claiming one the kernels do not allow is refused.
BOOST_AUTO_TEST_CASE(results_written_over_donated_parameters) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {16, 16});
  auto w = input(g, "w", DType::F32, {16, 16});
  auto a = input(g, "a", DType::F32, {});
  auto y = x * a + w;
  auto m = matmul(w, w);
  output(g, {y, m});
  const Tensor xin = random_f32({16, 16}, 21), win = random_f32({16, 16}, 22), ain = random_f32({}, 23);
  const std::vector<Tensor> want = run(compile(g, ref()), ref(), {xin, win, ain});
  for (Device* d : DeviceRegistry::get().runnable()) {
    const Program p = compile(g, *d);
    // (where x * a and + w are one fused kernel; the reference runs them as two, and x's
    // last reader then makes x * a, not y)
    BOOST_TEST(p.donates(0, 0) == d->fuses_elementwise(), d->name());
    BOOST_TEST(!p.donates(1, 0), d->name());
    BOOST_TEST(!p.donates(1, 1), d->name());
    Executor ex(p, *d);
    std::vector<Tensor> in = {xin.to(d->allocator()), win.to(d->allocator()), ain.to(d->allocator())};
    std::vector<Tensor> out = {in[0], Tensor::empty(DType::F32, {16, 16}, d->allocator())};
    if (!p.donates(0, 0)) {
      BOOST_CHECK_THROW(ex.run_into(in, out), InputError);
      continue;
    }
    ex.run_into(in, out);
    BOOST_TEST(out[0].raw() == in[0].raw());
    // (1e-5 of each value's size or of the operands': an entry of w·w near 0 is a sum of 16
    // products that cancel, whose last bits depend on the device's order of summation)
    for (size_t r = 0; r < 2; ++r) {
      const Tensor h = out[r].is_host() ? out[r] : out[r].to(host_allocator());
      for (int64_t e = 0; e < h.numel(); ++e) {
        const float got = h.data<float>()[e], exp = want[r].data<float>()[e];
        BOOST_TEST(std::abs(got - exp) <= 1e-5f * (1 + std::abs(exp)), d->name() << " result " << r << " element " << e << ": "
                                                                             << got << " against " << exp);
      }
    }
    std::vector<Tensor> bad = {Tensor::empty(DType::F32, {16, 16}, d->allocator()), in[1]};
    BOOST_CHECK_EXCEPTION(ex.run_into(in, bad), InputError, [](const InputError& e) {
      return std::string(e.what()).find("result tensor 1 is also input 1") != std::string::npos;
    });
  }
  const std::string text = print_program(compile(g, DeviceRegistry::get().at("cpu")));
  BOOST_TEST(text.find("result 0 donor=0") != std::string::npos, text);
  BOOST_TEST(parse_program(text).donates(0, 0));
  std::string forged = text;
  const size_t at = forged.find("result 1");
  BOOST_TEST_REQUIRE(at != std::string::npos);
  forged.insert(at + 8, " donor=1");
  BOOST_CHECK_EXCEPTION(parse_program(forged), ParseError, [](const ParseError& e) {
    return std::string(e.what()).find("cannot take parameter 1") != std::string::npos;
  });
}

// A KV cache's decode write: update_slice's result takes the cache's buffer (its
// inplace_input), so a step writes one row instead of copying the cache. On every device the
// in-place run equals the reference's out-of-place one, step after step; where the device
// records programs, the replay takes each step's position from the device tensor, and a
// position past the cache fails where the results are read.
BOOST_AUTO_TEST_CASE(a_cache_row_is_written_in_place) {
  ir::Graph g;
  auto cache = input(g, "cache", DType::F32, {2, 3, 10, 4});
  auto row = input(g, "row", DType::F32, {2, 3, 1, 4});
  auto pos = input(g, "pos", DType::I64, {});
  auto kc = update_slice(cache, row, pos, 2);
  output(g, {kc, sum(kc * kc, {2})});
  Tensor want_cache = random_f32({2, 3, 10, 4}, 31);
  for (Device* d : DeviceRegistry::get().runnable()) {
    const Program p = compile(g, *d);
    BOOST_TEST_REQUIRE(p.donates(0, 0), d->name());
    Executor ex(p, *d);
    const Program oracle = compile(g, ref());
    Executor oracle_ex(oracle, ref());
    Tensor c = want_cache.to(d->allocator()), host_want = want_cache.contiguous();
    Tensor r = random_f32({2, 3, 1, 4}, 32).to(d->allocator());
    Tensor at = Tensor::zeros(DType::I64, {}).to(d->allocator());
    std::vector<Tensor> in = {c, r, at};
    std::vector<Tensor> out = {c, Tensor::empty(DType::F32, {2, 3, 4}, d->allocator())};
    std::unique_ptr<Replay> replay;
    try {
      replay = ex.capture(in, out);  // (runs the step at position 0 twice: the same row)
    } catch (const InputError&) {
    }
    for (int64_t step : {0, 7, 9, 3}) {
      const Tensor rh = random_f32({2, 3, 1, 4}, uint64_t(40 + step));
      d->allocator()->copy_from_host(r.raw(), rh.raw(), size_t(rh.nbytes()));
      d->allocator()->copy_from_host(at.raw(), &step, sizeof(step));
      const Tensor ph = Tensor::zeros(DType::I64, {});
      std::memcpy(ph.raw(), &step, sizeof(step));
      const std::vector<Tensor> want = oracle_ex.run({host_want, rh, ph});
      host_want = want[0];
      if (replay) {
        replay->launch();
        d->synchronize();
      } else {
        ex.run_into(in, out);
      }
      BOOST_TEST(out[0].raw() == c.raw());
      for (size_t k = 0; k < 2; ++k) {
        const Tensor h = out[k].is_host() ? out[k] : out[k].to(host_allocator());
        for (int64_t e = 0; e < h.numel(); ++e)
          BOOST_TEST(h.data<float>()[e] == want[k].data<float>()[e], boost::test_tools::tolerance(1e-6f));
      }
    }
    const int64_t past = 10;
    d->allocator()->copy_from_host(at.raw(), &past, sizeof(past));
    auto names_it = [](const InputError& e) { return std::string(e.what()).find("start 10 is outside [0, 9]") != std::string::npos; };
    if (replay) {
      replay->launch();
      BOOST_CHECK_EXCEPTION(d->synchronize(), InputError, names_it);
    } else {
      BOOST_CHECK_EXCEPTION(ex.run_into(in, out), InputError, names_it);
    }
  }
}

BOOST_AUTO_TEST_CASE(fusion_groups_elementwise_chains) {
  Device* cpu = DeviceRegistry::get().find("cpu");
  if (!cpu || !cpu->fuses_elementwise()) {
    BOOST_TEST_MESSAGE("skipped: no fusing device registered");
    return;
  }
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {1000});
  auto a = input(g, "a", DType::F32, {});
  output(g, {gelu(x * a + 1.0)});
  Program p = compile(g, *cpu);
  BOOST_TEST(p.kernels.size() == 1u);
  BOOST_TEST(int(p.kernels[0].kind) == int(Kernel::Fused));
  BOOST_TEST(p.kernels[0].outputs.size() == 1u);
  BOOST_TEST(p.arena_bytes == 0);  // nothing but the result touches memory
}

BOOST_AUTO_TEST_CASE(while_loop_runs_on_the_executor) {
  ir::Graph g;
  auto x = input(g, "x", DType::F64, {3});
  auto n0 = scalar(g, 0.0, DType::I64);
  auto out = while_loop(
      {x, n0}, [](const std::vector<Var>& v) { return std::vector<Var>{lt(v[1], scalar_like(v[1], 5))}; },
      [](const std::vector<Var>& v) { return std::vector<Var>{v[0] * 2.0, v[1] + 1.0}; });
  output(g, {out[0], out[1]});
  for (Device* d : DeviceRegistry::get().runnable()) {
    Tensor xin = Tensor::empty(DType::F64, {3});
    for (int i = 0; i < 3; ++i) xin.data<double>()[i] = 1.5 + i;
    auto r = run(compile(g, *d), *d, {xin});
    for (int i = 0; i < 3; ++i) BOOST_TEST(r[0].data<double>()[i] == (1.5 + i) * 32.0);
    BOOST_TEST(*r[1].data<int64_t>() == 5);
  }
}

BOOST_AUTO_TEST_CASE(if_picks_the_branch) {
  ir::Graph g;
  auto p = input(g, "p", DType::Bool, {});
  auto x = input(g, "x", DType::F32, {2});
  auto out = if_then_else(
      p, {x}, [](const std::vector<Var>& v) { return std::vector<Var>{v[0] + 1.0}; },
      [](const std::vector<Var>& v) { return std::vector<Var>{v[0] - 1.0}; });
  output(g, out);
  Program prog = compile(g, ref());
  for (bool b : {true, false}) {
    Tensor pt = Tensor::empty(DType::Bool, {});
    *pt.data<bool>() = b;
    Tensor xt = random_f32({2}, 5);
    auto r = run(prog, ref(), {pt, xt});
    for (int i = 0; i < 2; ++i) BOOST_TEST(r[0].data<float>()[i] == xt.data<float>()[i] + (b ? 1.f : -1.f));
  }
}

// Executors that run one after another may share one arena (a solver's steps): each run's
// results stay as they were when another program reuses the arena, and match those of
// executors with arenas of their own bit for bit, on every device. An arena too small, of
// another dtype or on another device is refused.
BOOST_AUTO_TEST_CASE(executors_share_one_arena) {
  auto chain = [](int steps, double scale) {
    ir::Graph g;
    auto x = input(g, "x", DType::F32, {32, 32});
    Var h = x;
    for (int i = 0; i < steps; ++i) h = exp(matmul(h, x) * scale);
    output(g, {reshape(h, {1024}), h * 2.0});  // a view of an intermediate's buffer among the results
    return g;
  };
  const ir::Graph ga = chain(4, 0.01), gb = chain(3, -0.02);
  for (Device* d : DeviceRegistry::get().runnable()) {
    Program a = compile(ga, *d), b = compile(gb, *d);
    BOOST_REQUIRE(a.arena_bytes > 0 && b.arena_bytes > 0);
    Tensor arena = Tensor::empty(DType::U8, {std::max(a.arena_bytes, b.arena_bytes)}, d->allocator());
    // A sentinel in the shared arena: the runs must write their intermediates over it.
    std::vector<uint8_t> sentinel(size_t(arena.numel()), 0xab);
    d->allocator()->copy_from_host(arena.raw(), sentinel.data(), sentinel.size());
    Executor sa(a, *d, arena), sb(b, *d, arena), own_a(a, *d), own_b(b, *d);
    auto host = [](const Tensor& t) { return t.is_host() ? t.clone() : t.to(host_allocator()); };
    for (uint64_t round = 0; round < 3; ++round) {
      Tensor xa = random_f32({32, 32}, 40 + round), xb = random_f32({32, 32}, 50 + round);
      auto ra = sa.run({xa.to(d->allocator())});
      std::vector<Tensor> ra_then;
      for (auto& t : ra) ra_then.push_back(host(t));
      auto rb = sb.run({xb.to(d->allocator())});  // writes over the arena sa used
      auto wa = own_a.run({xa.to(d->allocator())}), wb = own_b.run({xb.to(d->allocator())});
      for (size_t r = 0; r < 2; ++r) {
        BOOST_TEST_CONTEXT(d->name() << " round " << round << " result " << r) {
          Tensor ga_now = host(ra[r]), want_a = host(wa[r]), gb_now = host(rb[r]), want_b = host(wb[r]);
          BOOST_TEST(std::memcmp(ga_now.raw(), ra_then[r].raw(), ga_now.nbytes()) == 0);  // untouched by b's run
          BOOST_TEST(std::memcmp(ga_now.raw(), want_a.raw(), ga_now.nbytes()) == 0);
          BOOST_TEST(std::memcmp(gb_now.raw(), want_b.raw(), gb_now.nbytes()) == 0);
        }
      }
    }
    std::vector<uint8_t> after(sentinel.size());
    d->allocator()->copy_to_host(after.data(), arena.raw(), after.size());
    BOOST_TEST(after != sentinel, d->name() << ": the shared arena was not used");
    BOOST_CHECK_THROW(Executor(a, *d, Tensor::empty(DType::U8, {a.arena_bytes - 1}, d->allocator())), InputError);
    BOOST_CHECK_THROW(Executor(a, *d, Tensor::empty(DType::F32, {a.arena_bytes}, d->allocator())), InputError);
    if (d->allocator() != host_allocator())
      BOOST_CHECK_THROW(Executor(a, *d, Tensor::empty(DType::U8, {a.arena_bytes})), InputError);
  }
}

BOOST_AUTO_TEST_CASE(executor_rejects_wrong_inputs) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {4});
  output(g, {exp(x)});
  Program p = compile(g, ref());
  BOOST_CHECK_THROW(run(p, ref(), {}), InputError);
  BOOST_CHECK_THROW(run(p, ref(), {random_f32({5}, 1)}), InputError);
}

BOOST_AUTO_TEST_CASE(a_value_returned_twice_comes_back_twice) {
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {3});
  auto y = exp(x);
  output(g, {y, y, x});
  for (Device* d : DeviceRegistry::get().runnable()) {
    Tensor xin = random_f32({3}, 9);
    auto r = run(compile(g, *d), *d, {xin});
    BOOST_TEST_REQUIRE(r.size() == 3u);
    for (int i = 0; i < 3; ++i) {
      BOOST_TEST(r[0].data<float>()[i] == std::exp(xin.data<float>()[i]), boost::test_tools::tolerance(1e-6f));
      BOOST_TEST(r[1].data<float>()[i] == r[0].data<float>()[i]);
      BOOST_TEST(r[2].data<float>()[i] == xin.data<float>()[i]);
    }
    BOOST_TEST(r[0].raw() != r[1].raw());  // two results, two buffers
  }
}

namespace {
// The reference kernels behind a device that asks for elementwise and reduction fusion;
// its fused regions run node by node (Device::run_fused), so results must match exactly.
class FusingReference final : public Device {
 public:
  std::string name() const override { return "fusing-reference"; }
  std::string description() const override { return "reference kernels with fused scheduling"; }
  Allocator* allocator() override { return host_allocator(); }
  bool fuses_elementwise() const override { return true; }
  bool fuses_reductions() const override { return true; }
  Capability supports(const ir::Node& n, const ir::Graph& g) const override { return ref().supports(n, g); }
  void run_node(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) override { ref().run_node(n, in, out); }
};
}  // namespace

BOOST_AUTO_TEST_CASE(dot_products_fuse_into_the_region_that_makes_their_operands) {
  FusingReference dev;
  ir::Graph g;
  auto x = input(g, "x", DType::F64, {64});
  auto y = input(g, "y", DType::F64, {64});
  auto p = x * y + 1.0;
  auto d = sum(p * p);        // joins the region computing p
  auto e = sum(x);            // x is an input, not a region value: its own kernel
  auto z = p + d * y;         // reads d: must start a new region
  output(g, {z, d, e});
  Program prog = compile(g, dev);
  int fused_with_sum = 0;
  for (auto& k : prog.kernels) {
    bool has_sum = false, has_ew = false;
    for (int32_t id : k.nodes) {
      has_sum |= prog.graph.nodes[size_t(id)].op->name == "sum";
      has_ew |= prog.graph.nodes[size_t(id)].op->cls == ir::OpClass::Elementwise;
    }
    fused_with_sum += has_sum && has_ew && k.kind == Kernel::Fused;
  }
  BOOST_TEST(fused_with_sum == 1);
  Tensor xin = random_f32({64}, 31).to(host_allocator()), yin = random_f32({64}, 32);
  Tensor xd = Tensor::empty(DType::F64, {64}), yd = Tensor::empty(DType::F64, {64});
  for (int i = 0; i < 64; ++i) xd.data<double>()[i] = xin.data<float>()[i], yd.data<double>()[i] = yin.data<float>()[i];
  auto got = run(prog, dev, {xd, yd});
  auto want = run(compile(g, ref()), ref(), {xd, yd});
  for (size_t r = 0; r < got.size(); ++r)
    for (int64_t i = 0; i < got[r].numel(); ++i) BOOST_TEST(got[r].data<double>()[i] == want[r].data<double>()[i]);
}

BOOST_AUTO_TEST_CASE(cpu_fused_dot_products_match_the_reference) {
  Device* cpu = DeviceRegistry::get().find("cpu");
  if (!cpu || !cpu->fuses_reductions()) {
    BOOST_TEST_MESSAGE("skipped: the cpu device does not fuse reductions");
    return;
  }
  for (DType t : {DType::F32, DType::F64})
    for (int64_t n : {int64_t(1), int64_t(2047), int64_t(100003)}) {  // one chunk, a partial chunk, many threads' worth
      ir::Graph g;
      auto x = input(g, "x", t, {n});
      auto y = input(g, "y", t, {n});
      auto p = x * y + 0.5;
      auto z = (p - x) * 2.0;
      output(g, {z, sum(p * p), sum(z), sum(x * y)});
      Program prog = compile(g, *cpu);
      bool fused_sum = false;
      for (auto& k : prog.kernels)
        if (k.kind == Kernel::Fused)
          for (int32_t id : k.nodes) fused_sum |= prog.graph.nodes[size_t(id)].op->name == "sum";
      BOOST_TEST(fused_sum);
      Tensor xin = Tensor::empty(t, {n}), yin = Tensor::empty(t, {n});
      for (int64_t i = 0; i < n; ++i) {
        double a = rng_unit(77, uint64_t(i)) * 2 - 1, b = rng_unit(78, uint64_t(i)) * 2 - 1;
        if (t == DType::F32) xin.data<float>()[i] = float(a), yin.data<float>()[i] = float(b);
        else xin.data<double>()[i] = a, yin.data<double>()[i] = b;
      }
      auto got = run(prog, *cpu, {xin, yin});
      auto want = run(compile(g, ref()), ref(), {xin, yin});
      for (size_t r = 1; r < 4; ++r) {
        double gv = t == DType::F32 ? got[r].data<float>()[0] : got[r].data<double>()[0];
        double wv = t == DType::F32 ? want[r].data<float>()[0] : want[r].data<double>()[0];
        // The cpu sums f32 elements that were rounded to f32 (as the reference's are) in
        // double; only the summation order differs.
        BOOST_TEST(gv == wv, boost::test_tools::tolerance(t == DType::F32 ? 1e-5 : 1e-12));
      }
      for (int64_t i = 0; i < n; i += 997) {
        double gv = t == DType::F32 ? got[0].data<float>()[i] : got[0].data<double>()[i];
        double wv = t == DType::F32 ? want[0].data<float>()[i] : want[0].data<double>()[i];
        BOOST_TEST(gv == wv);
      }
    }
}
