// nn::Model, the layers' parameters, optimizers, schedules and the Trainer: one step
// against the update written out by hand, a resumed run bit for bit equal to an
// uninterrupted one, and every refusal's message.
#define BOOST_TEST_MODULE nn_trainer
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.hpp"
#include "tests/support/errors.hpp"
#include "nn/layers.hpp"
#include "nn/trainer.hpp"

namespace rlx::nn {
namespace {

using test::expect_error;

namespace fs = std::filesystem;

fs::path scratch() {
  fs::path p = fs::temp_directory_path() / ("rlx-nn-trainer-" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

Tensor random(Shape s, uint64_t seed, DType t = DType::F32) {
  Tensor r = Tensor::empty(t, std::move(s));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (t == DType::F32) r.data<float>()[i] = float(u(g));
    else r.data<double>()[i] = u(g);
  }
  return r;
}

// Labels 0, 1, ..., classes - 1, 0, 1, ... (i64 [n]).
Tensor cyclic_labels(int64_t n, int64_t classes) {
  Tensor r = Tensor::empty(DType::I64, {n});
  for (int64_t i = 0; i < n; ++i) r.data<int64_t>()[i] = i % classes;
  return r;
}


// y = x W^T, loss = mse(y, t): one SGD step (no momentum) is W - lr * 2/(N O) (xW^T - t)^T x.
BOOST_AUTO_TEST_CASE(one_sgd_step_matches_the_update_by_hand) {
  for (const char* device : {"reference", "cpu"}) {
    BOOST_TEST_CONTEXT(device) {
      ir::Graph g;
      Model m(g, DType::F64);
      const int64_t n = 5, in = 3, out = 2;
      Var x = m.input("x", DType::F64, {n, in});
      Var t = m.input("t", DType::F64, {n, out});
      Var y = linear(m, "fc", x, out, false);
      Trainer tr(m, mse(y, t), Sgd{.lr = 0.3}, DeviceRegistry::get().at(device), {.seed = 4});
      Tensor w = tr.parameters()[0];
      Tensor xv = random({n, in}, 1, DType::F64), tv = random({n, out}, 2, DType::F64);
      tr.step({xv, tv});
      Tensor w1 = tr.parameters()[0];
      const double* W = w.data<double>();
      const double* X = xv.data<double>();
      const double* T = tv.data<double>();
      double loss = 0;
      std::vector<double> r(size_t(n * out));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double s = 0;
          for (int64_t k = 0; k < in; ++k) s += X[i * in + k] * W[o * in + k];
          r[size_t(i * out + o)] = s - T[i * out + o];
          loss += r[size_t(i * out + o)] * r[size_t(i * out + o)] / double(n * out);
        }
      for (int64_t o = 0; o < out; ++o)
        for (int64_t k = 0; k < in; ++k) {
          double gr = 0;
          for (int64_t i = 0; i < n; ++i) gr += 2.0 / double(n * out) * r[size_t(i * out + o)] * X[i * in + k];
          BOOST_TEST(w1.data<double>()[o * in + k] == W[o * in + k] - 0.3 * gr, boost::test_tools::tolerance(1e-12));
        }
      BOOST_TEST(tr.loss() == loss, boost::test_tools::tolerance(1e-12));
    }
  }
}

// A small classifier on fixed data: the loss falls; a run saved after 3 steps and resumed
// in a new trainer ends with the same bits as 6 steps in one go.
BOOST_AUTO_TEST_CASE(training_reduces_the_loss_and_resumes_bit_for_bit) {
  auto make = [](ir::Graph& g, Model& m) {
    Var x = m.input("x", DType::F32, {16, 8});
    Var labels = m.input("labels", DType::I64, {16});
    return cross_entropy(mlp(m, "mlp", x, {8, 12, 4}), labels);
  };
  Tensor xv = random({16, 8}, 3);
  Tensor lv = Tensor::empty(DType::I64, {16});
  for (int64_t i = 0; i < 16; ++i) lv.data<int64_t>()[i] = (xv.data<float>()[i * 8] > 0) + 2 * (xv.data<float>()[i * 8 + 1] > 0);
  // On every device here (cuda replays a captured graph per step).
  for (Device* dev : DeviceRegistry::get().runnable())
  for (const char* opt : {"sgd", "adamw"}) {
    BOOST_TEST_CONTEXT(opt << " on " << dev->name()) {
      auto optimizer = [&]() -> Optimizer {
        if (std::string(opt) == "sgd") return Sgd{.lr = 0.2, .momentum = 0.9, .nesterov = true};
        return Optimizer::adamw({.lr = 0.01, .weight_decay = 0.01});
      };
      Device& d = *dev;
      const TrainerOptions o{.seed = 9, .clip_norm = 5, .schedule = {.kind = LrSchedule::Kind::Cosine, .warmup = 2, .total = 10}};
      ir::Graph g1;
      Model m1(g1);
      Trainer a(m1, make(g1, m1), optimizer(), d, o);
      a.step({xv, lv});
      if (d.name() == "cuda") BOOST_TEST(a.replays());
      const double first = a.loss();
      for (int i = 1; i < 6; ++i) a.step({xv, lv});
      BOOST_TEST(a.loss() < first);

      ir::Graph g2;
      Model m2(g2);
      Trainer b(m2, make(g2, m2), optimizer(), d, o);
      for (int i = 0; i < 3; ++i) b.step({xv, lv});
      const std::string path = (scratch() / (std::string(opt) + "-" + d.name() + ".safetensors")).string();
      b.save(path);
      ir::Graph g3;
      Model m3(g3);
      Trainer c(m3, make(g3, m3), optimizer(), d, o);
      c.load(path);
      BOOST_TEST(c.steps_done() == 3);
      for (int i = 0; i < 3; ++i) c.step({xv, lv});
      auto pa = a.parameters(), pc = c.parameters();
      auto sa = a.state(), sc = c.state();
      BOOST_REQUIRE_EQUAL(pa.size(), pc.size());
      for (size_t k = 0; k < pa.size(); ++k)
        BOOST_TEST(std::memcmp(pa[k].raw(), pc[k].raw(), pa[k].nbytes()) == 0, m1.parameters()[k].name);
      for (size_t k = 0; k < sa.size(); ++k) BOOST_TEST(std::memcmp(sa[k].raw(), sc[k].raw(), sa[k].nbytes()) == 0);

      // The same through set_state and set_parameters (what a resized model's new trainer
      // takes over from the old one): the step count continues the schedule and Adam's bias
      // correction.
      ir::Graph g4;
      Model m4(g4);
      Trainer e(m4, make(g4, m4), optimizer(), d, o);
      e.set_state(b.state(), b.steps_done());
      e.set_parameters(b.parameters());
      BOOST_TEST(e.steps_done() == 3);
      for (int i = 0; i < 3; ++i) e.step({xv, lv});
      auto pe = e.parameters(), se = e.state();
      for (size_t k = 0; k < pa.size(); ++k)
        BOOST_TEST(std::memcmp(pa[k].raw(), pe[k].raw(), pa[k].nbytes()) == 0, m1.parameters()[k].name);
      for (size_t k = 0; k < sa.size(); ++k) BOOST_TEST(std::memcmp(sa[k].raw(), se[k].raw(), sa[k].nbytes()) == 0);
      BOOST_CHECK_THROW(e.set_state({}, 0), InputError);
    }
  }
}

// A model with buffers (batch norm's running statistics): the step writes their next values
// back, and checkpoints carry them.
BOOST_AUTO_TEST_CASE(buffers_follow_the_steps_and_the_checkpoints) {
  auto make = [](Model& m) {
    Var x = m.input("x", DType::F32, {16, 8});
    Var labels = m.input("labels", DType::I64, {16});
    Var h = relu(batch_norm(m, "bn", linear(m, "fc1", x, 12), true));
    return cross_entropy(linear(m, "fc2", h, 4), labels);
  };
  Tensor xv = random({16, 8}, 5);
  Tensor lv = cyclic_labels(16, 4);
  Device& d = DeviceRegistry::get().at("cpu");
  ir::Graph g;
  Model m(g);
  Trainer t(m, make(m), Sgd{.lr = 0.1}, d);
  BOOST_REQUIRE_EQUAL(t.buffers().size(), 2u);
  t.step({xv, lv});
  t.step({xv, lv});
  Tensor mean = t.buffers()[0];
  double moved = 0;
  for (int64_t i = 0; i < mean.numel(); ++i) moved += std::abs(mean.data<float>()[i]);
  BOOST_TEST(moved > 0);  // started at zeros
  const std::string path = (scratch() / "bn.safetensors").string();
  t.save(path);
  ir::Graph g2;
  Model m2(g2);
  Trainer u(m2, make(m2), Sgd{.lr = 0.1}, d);
  u.load(path);
  BOOST_TEST(std::memcmp(u.buffers()[0].raw(), mean.raw(), mean.nbytes()) == 0);
  t.step({xv, lv});
  u.step({xv, lv});
  BOOST_TEST(std::memcmp(u.buffers()[1].raw(), t.buffers()[1].raw(), mean.nbytes()) == 0);
}

// Dropout draws from the step key (Model::step_key), a buffer the step advances: each step drops
// other elements, every device drops the same ones, and a resumed run repeats the draws.
BOOST_AUTO_TEST_CASE(dropout_is_keyed_by_the_step) {
  auto make = [](Model& m) {
    Var x = m.input("x", DType::F32, {16, 8});
    Var labels = m.input("labels", DType::I64, {16});
    Var h = dropout(m, "drop", relu(linear(m, "fc1", x, 32)), 0.5, true);
    return cross_entropy(linear(m, "fc2", h, 4), labels);
  };
  Tensor xv = random({16, 8}, 21);
  Tensor lv = cyclic_labels(16, 4);
  std::vector<Tensor> at_reference;
  for (Device* dev : DeviceRegistry::get().runnable()) {
    BOOST_TEST_CONTEXT(dev->name()) {
      ir::Graph g;
      Model m(g);
      Trainer t(m, make(m), Sgd{.lr = 0.1, .momentum = 0.9}, *dev, {.seed = 2});
      BOOST_REQUIRE_EQUAL(m.buffers().size(), 1u);
      BOOST_TEST(m.buffers()[0].name == "rng/step");
      for (int i = 0; i < 4; ++i) t.step({xv, lv});
      // Each step advanced the key, so each drew its own masks (the key's effect on a draw is
      // checked at the end).
      BOOST_TEST(t.buffers()[0].data<int64_t>()[0] == 4);
      auto params = t.parameters();
      if (dev->name() == "reference") {
        at_reference = params;
      } else {
        BOOST_REQUIRE(!at_reference.empty());
        for (size_t k = 0; k < params.size(); ++k)
          for (int64_t i = 0; i < params[k].numel(); ++i)
            BOOST_TEST(params[k].data<float>()[i] == at_reference[k].data<float>()[i], boost::test_tools::tolerance(1e-4f));
      }
      // Saved after 2 steps and resumed: the same bits as 4 steps in one go.
      ir::Graph g2;
      Model m2(g2);
      Trainer u(m2, make(m2), Sgd{.lr = 0.1, .momentum = 0.9}, *dev, {.seed = 2});
      u.step({xv, lv});
      u.step({xv, lv});
      const std::string path = (scratch() / ("dropout-" + dev->name() + ".safetensors")).string();
      u.save(path);
      ir::Graph g3;
      Model m3(g3);
      Trainer v(m3, make(m3), Sgd{.lr = 0.1, .momentum = 0.9}, *dev, {.seed = 2});
      v.load(path);
      v.step({xv, lv});
      v.step({xv, lv});
      auto pv = v.parameters();
      for (size_t k = 0; k < pv.size(); ++k)
        BOOST_TEST(std::memcmp(pv[k].raw(), params[k].raw(), pv[k].nbytes()) == 0, m.parameters()[k].name);
    }
  }
  // Two keys, two masks: about half the positions differ at p = 0.5 (a 4096-element draw).
  ir::Graph g;
  Var x = input(g, "x", DType::F32, {4096});
  Var k = input(g, "k", DType::I64, {});
  Var a = dropout(x, k, 0.5, 3), b = dropout(x, k + scalar_like(k, 1.0), 0.5, 3);
  output(g, {a, b});
  Tensor ones = Tensor::empty(DType::F32, {4096}), key = Tensor::empty(DType::I64, {});
  for (int64_t i = 0; i < 4096; ++i) ones.data<float>()[i] = 1;
  key.data<int64_t>()[0] = 0;
  Device& ref = DeviceRegistry::get().at("reference");
  auto r = run(compile(g, ref), ref, {ones, key});
  int differ = 0, kept = 0;
  for (int64_t i = 0; i < 4096; ++i) {
    differ += r[0].data<float>()[i] != r[1].data<float>()[i];
    kept += r[0].data<float>()[i] != 0;
    BOOST_TEST((r[0].data<float>()[i] == 0 || r[0].data<float>()[i] == 2));
  }
  // (binomial: mean 2048, standard deviation 32; 6 standard deviations)
  BOOST_TEST(std::abs(kept - 2048) < 192);
  BOOST_TEST(std::abs(differ - 2048) < 192);
}

// A data set held on the device (Trainer::hold) and gathered by per-step indices trains
// exactly as the same batches passed in whole.
BOOST_AUTO_TEST_CASE(held_data_sets_train_like_passed_batches) {
  Tensor all_x = random({40, 8}, 11);
  Tensor all_y = cyclic_labels(40, 3);
  Device& d = DeviceRegistry::get().at("cpu");
  ir::Graph g1;
  Model m1(g1);
  Var x = m1.input("x", DType::F32, {10, 8});
  Var y = m1.input("y", DType::I64, {10});
  Trainer whole(m1, cross_entropy(mlp(m1, "mlp", x, {8, 6, 3}), y), Sgd{.lr = 0.1, .momentum = 0.9}, d);
  ir::Graph g2;
  Model m2(g2);
  Var ax = m2.input("all_x", DType::F32, {40, 8});
  Var ay = m2.input("all_y", DType::I64, {40});
  Var rows = m2.input("rows", DType::I64, {10});
  Trainer held(m2, cross_entropy(mlp(m2, "mlp", gather(ax, rows, 0), {8, 6, 3}), gather(ay, rows, 0)),
               Sgd{.lr = 0.1, .momentum = 0.9}, d);
  held.hold(0, all_x);
  held.hold(1, all_y);
  expect_error([&] { held.step({all_x, all_y}); }, {"step takes 1 data inputs, got 2"});
  for (int s = 0; s < 4; ++s) {
    Tensor idx = Tensor::empty(DType::I64, {10}), bx = Tensor::empty(DType::F32, {10, 8}), by = Tensor::empty(DType::I64, {10});
    for (int64_t i = 0; i < 10; ++i) {
      const int64_t r = (7 * (s * 10 + i) + 3) % 40;
      idx.data<int64_t>()[i] = r;
      std::memcpy(bx.data<float>() + i * 8, all_x.data<float>() + r * 8, 8 * sizeof(float));
      by.data<int64_t>()[i] = all_y.data<int64_t>()[r];
    }
    whole.step({bx, by});
    held.step({idx});
  }
  BOOST_TEST(whole.loss() == held.loss());
  auto pw = whole.parameters(), ph = held.parameters();
  for (size_t k = 0; k < pw.size(); ++k) BOOST_TEST(std::memcmp(pw[k].raw(), ph[k].raw(), pw[k].nbytes()) == 0);
  expect_error([&] { held.hold(5, all_x); }, {"no input 5"});
}

// A trainer made from a model function takes an epoch's last, partial batch: steps of 10, 7
// and 10 rows give, bit for bit, what fixed-size trainers give when each continues from the
// previous one's checkpoint (parameters, momentum and step count carried over).
BOOST_AUTO_TEST_CASE(partial_batches_run_a_second_program_sharing_the_parameters) {
  for (Device* dev : DeviceRegistry::get().runnable()) {  // (cuda: each size replays its own graphs)
    const std::string device = dev->name();
    BOOST_TEST_CONTEXT(device) {
      Device& d = *dev;
      Tensor all_x = random({40, 8}, 21);
      Tensor all_y = cyclic_labels(40, 3);
      auto model = [](Model& m, int64_t batch) {
        Var ax = m.input("all_x", DType::F32, {40, 8});
        Var ay = m.input("all_y", DType::I64, {40});
        Var rows = m.input("rows", DType::I64, {batch});
        return cross_entropy(mlp(m, "mlp", gather(ax, rows, 0), {8, 6, 3}), gather(ay, rows, 0));
      };
      const Optimizer opt = Sgd{.lr = 0.1, .momentum = 0.9};
      auto rows = [](int64_t first, int64_t n) {
        Tensor idx = Tensor::empty(DType::I64, {n});
        for (int64_t i = 0; i < n; ++i) idx.data<int64_t>()[i] = (first + 3 * i) % 40;
        return idx;
      };
      const std::vector<Tensor> batches = {rows(0, 10), rows(5, 7), rows(11, 10)};
      Trainer any(model, 10, opt, d, {.seed = 3});
      any.hold(0, all_x);
      any.hold(1, all_y);
      for (const Tensor& b : batches) any.step({b});
      BOOST_TEST(any.programs() == 2u);
      // The same steps by trainers of one batch size each, handing over through checkpoints.
      Tensor last_params;
      std::string ckpt;
      double last_loss = 0;
      for (size_t s = 0; s < batches.size(); ++s) {
        ir::Graph g;
        Model m(g);
        Var loss = model(m, batches[s].shape()[0]);
        Trainer one(m, loss, opt, d, {.seed = 3});
        one.hold(0, all_x);
        one.hold(1, all_y);
        if (!ckpt.empty()) one.load(ckpt);
        one.step({batches[s]});
        ckpt = (scratch() / ("partial-" + device + "-" + std::to_string(s) + ".safetensors")).string();
        one.save(ckpt);
        last_loss = one.loss();
        if (s + 1 == batches.size()) {
          auto pa = any.parameters(), po = one.parameters();
          auto sa = any.state(), so = one.state();
          for (size_t k = 0; k < pa.size(); ++k) BOOST_TEST(std::memcmp(pa[k].raw(), po[k].raw(), pa[k].nbytes()) == 0);
          for (size_t k = 0; k < sa.size(); ++k) BOOST_TEST(std::memcmp(sa[k].raw(), so[k].raw(), sa[k].nbytes()) == 0);
        }
      }
      BOOST_TEST(any.loss() == last_loss);
      BOOST_TEST(any.steps_done() == 3);
      any.step({rows(2, 7)});  // the 7-row program again: nothing new is traced
      BOOST_TEST(any.programs() == 2u);
    }
  }
  // Refusals: a fixed-size trainer names the shape; a model function that declares other
  // parameters for another size is named too.
  Device& d = DeviceRegistry::get().at("cpu");
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {10, 8});
  Var y = m.input("y", DType::I64, {10});
  Trainer fixed(m, cross_entropy(mlp(m, "mlp", x, {8, 6, 3}), y), Sgd{.lr = 0.1}, d);
  expect_error([&] { fixed.step({random({7, 8}, 1), cyclic_labels(7, 3)}); },
               {"data input 0 ('x') is f32[7,8], the model declares f32[10,8]"});
  Trainer odd([](Model& mm, int64_t batch) {
    Var xx = mm.input("x", DType::F32, {batch, 8});
    Var yy = mm.input("y", DType::I64, {batch});
    return cross_entropy(mlp(mm, "mlp", xx, {8, batch == 10 ? 6 : 5, 3}), yy);
  }, 10, Sgd{.lr = 0.1}, d);
  expect_error([&] { odd.step({random({7, 8}, 1), cyclic_labels(7, 3)}); },
               {"the model traced for batch 7 declares other parameters", "mlp/0/weight f32[5,8]"});
  expect_error([&] { Trainer none(ModelFn{}, 10, Sgd{}, d); }, {"no model function"});
}

BOOST_AUTO_TEST_CASE(parameters_are_named_and_initialised_like_pytorch) {
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {2, 300});
  mlp(m, "net", x, {300, 50, 10});
  std::vector<std::string> names;
  for (const Parameter& p : m.parameters()) names.push_back(p.name);
  BOOST_TEST(names == (std::vector<std::string>{"net/0/weight", "net/0/bias", "net/1/weight", "net/1/bias"}),
             boost::test_tools::per_element());
  BOOST_TEST(m.parameter_count() == 300 * 50 + 50 + 50 * 10 + 10);
  auto v = m.initial_values(1), again = m.initial_values(1), other = m.initial_values(2);
  const double bound = 1 / std::sqrt(300.0);
  double sum2 = 0, top = 0;
  for (int64_t i = 0; i < v[0].numel(); ++i) {
    const double w = v[0].data<float>()[i];
    top = std::max(top, std::abs(w));
    sum2 += w * w;
  }
  BOOST_TEST(top <= bound);
  BOOST_TEST(top > 0.99 * bound);
  // U(-b, b) has variance b^2 / 3.
  BOOST_TEST(sum2 / double(v[0].numel()) == bound * bound / 3, boost::test_tools::tolerance(0.03));
  BOOST_TEST(std::memcmp(v[0].raw(), again[0].raw(), v[0].nbytes()) == 0);
  BOOST_TEST(std::memcmp(v[0].raw(), other[0].raw(), v[0].nbytes()) != 0);
  expect_error([&] { m.param("net/0/weight", {2}, Init::zeros()); }, {"declared twice"});
}

BOOST_AUTO_TEST_CASE(schedules_and_clipping) {
  LrSchedule cosine{.kind = LrSchedule::Kind::Cosine, .warmup = 4, .total = 10, .min_lr = 0.01};
  BOOST_TEST(cosine.at(1.0, 0) == 0.25);
  BOOST_TEST(cosine.at(1.0, 3) == 1.0);
  BOOST_TEST(cosine.at(1.0, 4) == 1.0);
  BOOST_TEST(cosine.at(1.0, 9) == 0.01 + 0.99 * 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(cosine.at(1.0, 100) == 0.01, boost::test_tools::tolerance(1e-12));
  LrSchedule step{.kind = LrSchedule::Kind::Step, .step_size = 3, .gamma = 0.5};
  BOOST_TEST(step.at(1.0, 2) == 1.0);
  BOOST_TEST(step.at(1.0, 3) == 0.5);
  BOOST_TEST(step.at(1.0, 7) == 0.25);
  ir::Graph g;
  Var a = input(g, "a", DType::F64, {3});
  Var b = input(g, "b", DType::F64, {2});
  auto c = clip_by_global_norm({a, b}, 1.0);
  output(g, c);
  Tensor av = Tensor::empty(DType::F64, {3}), bv = Tensor::empty(DType::F64, {2});
  const double A[] = {3, 0, 0}, B[] = {0, 4};  // norm 5
  std::memcpy(av.raw(), A, sizeof A);
  std::memcpy(bv.raw(), B, sizeof B);
  Device& d = DeviceRegistry::get().at("reference");
  auto r = run(compile(g, d), d, {av, bv});
  BOOST_TEST(r[0].data<double>()[0] == 3 / (5 + 1e-6), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(r[1].data<double>()[1] == 4 / (5 + 1e-6), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(refusals_name_what_is_wrong) {
  Device& d = DeviceRegistry::get().at("cpu");
  ir::Graph g;
  Model m(g);
  Var x = m.input("x", DType::F32, {4, 3});
  Var t = m.input("t", DType::F32, {4, 2});
  Var y = linear(m, "fc", x, 2);
  Trainer tr(m, mse(y, t), Sgd{.lr = 0.1, .momentum = 0.9}, d);
  expect_error([&] { tr.loss(); }, {"no step has run yet"});
  expect_error([&] { tr.step({random({4, 3}, 1)}); }, {"takes 2 data inputs, got 1"});
  expect_error([&] { tr.step({random({4, 4}, 1), random({4, 2}, 2)}); }, {"data input 0 ('x') is f32[4,4], the model declares f32[4,3]"});
  expect_error([&] { Trainer bad(m, y, Sgd{}, d); }, {"not one element"});
  tr.step({random({4, 3}, 1), random({4, 2}, 2)});
  const std::string path = (scratch() / "sgd.safetensors").string();
  tr.save(path);
  ir::Graph g2;
  Model m2(g2);
  Var x2 = m2.input("x", DType::F32, {4, 3});
  Var t2 = m2.input("t", DType::F32, {4, 2});
  Trainer other(m2, mse(linear(m2, "fc", x2, 2), t2), Adam{}, d);
  expect_error([&] { other.load(path); }, {"optimizer is sgd, this run's adam"});
  ir::Graph g3;
  Model m3(g3);
  Var x3 = m3.input("x", DType::F32, {4, 3});
  Var t3 = m3.input("t", DType::F32, {4, 2});
  Trainer wider(m3, mse(linear(m3, "fc", x3, 2, false), t3), Sgd{.lr = 0.1, .momentum = 0.9}, d);
  expect_error([&] { wider.load(path); }, {"holds 4 tensors, this model and optimizer 2"});
  expect_error([&] { tr.load((scratch() / "missing.safetensors").string()); }, {"missing.safetensors"});
}

}  // namespace
}  // namespace rlx::nn
