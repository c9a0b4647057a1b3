// rlx-bench grad: the cost of a gradient. For each model, the median time of its forward
// program and of its forward+backward program (passes/autodiff.hpp: grad of the loss with
// respect to every parameter, one compiled program), and their ratio. PyTorch's figures for
// the same models come from apps/bench/peers_grad.py, run beside it.
//   mlp          784-128-10 ReLU MLP, cross-entropy, batch 128
//   mlp-step     the MLP's whole training step through nn::Trainer on a fixed batch
//   transformer  4 pre-norm blocks (layer_norm, attention with 6 heads, a 4x GELU MLP),
//                sequence 128, width 384, batch 1, mean of the output as the loss
#include <cmath>
#include <cstdio>
#include <random>

#include "apps/bench/common.hpp"
#include "nn/layers.hpp"
#include "nn/trainer.hpp"
#include "passes/autodiff.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;
using namespace rlx::bench;

namespace {

struct Options {
  std::vector<std::string> models = {"mlp", "transformer"};
  int reps = 30;
  std::string device = "cpu";
};

Tensor random_input(const TensorType& t, uint64_t seed) {
  Tensor r = Tensor::empty(t.dtype, t.shape);
  std::mt19937_64 g(seed);
  if (t.dtype == DType::I64) {
    for (int64_t i = 0; i < r.numel(); ++i) r.data<int64_t>()[i] = int64_t(g() % 10);
  } else {
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = u(g);
  }
  return r;
}

// One pre-norm transformer block on x [L, D].
Var block(nn::Model& m, const std::string& name, const Var& x, int64_t heads) {
  const int64_t L = x.shape()[0], D = x.shape()[1], dh = D / heads;
  nn::Model::Scope scope(m, name);
  Var h = nn::layer_norm(m, "ln1", x);
  auto split = [&](const Var& v) { return permute(reshape(v, {L, heads, dh}), {1, 0, 2}); };  // [H, L, dh]
  Var q = split(nn::linear(m, "q", h, D)), k = split(nn::linear(m, "k", h, D)), v = split(nn::linear(m, "v", h, D));
  Var a = reshape(permute(attention(q, k, v, "causal"), {1, 0, 2}), {L, D});
  Var x1 = x + nn::linear(m, "proj", a, D);
  Var f = nn::linear(m, "fc2", gelu(nn::linear(m, "fc1", nn::layer_norm(m, "ln2", x1), 4 * D)), D);
  return x1 + f;
}

void bench_model(Device& dev, const std::string& name, const Options& o) {
  ir::Graph g;
  nn::Model m(g);
  Var loss;
  if (name == "mlp") {
    Var x = m.input("x", DType::F32, {128, 784});
    Var y = m.input("y", DType::I64, {128});
    loss = cross_entropy(nn::mlp(m, "mlp", x, {784, 128, 10}), y);
  } else {
    Var x = m.input("x", DType::F32, {128, 384});
    Var h = x;
    for (int i = 0; i < 4; ++i) h = block(m, "block" + std::to_string(i), h, 6);
    loss = sum(h) * (1.0 / double(numel(h.shape())));
  }
  ir::Graph fwd = g;
  output(fwd, {Var(&fwd, loss.value())});
  std::vector<Var> grads = grad(loss, m.parameter_vars());
  std::vector<Var> outs{loss};
  outs.insert(outs.end(), grads.begin(), grads.end());
  output(g, outs);
  std::vector<Tensor> in;
  uint64_t seed = 1;
  for (ir::Value v : g.params) in.push_back(random_input(g.type(v), seed++));
  Program pf = compile(fwd, dev), pb = compile(g, dev);
  Executor ef(pf, dev), eb(pb, dev);
  std::vector<Tensor> dev_in;
  for (const Tensor& t : in) dev_in.push_back(t.to(dev.allocator()));
  auto rf = ef.run(dev_in), rb = eb.run(dev_in);
  const double tf = median_seconds(o.reps, [&] {
    ef.run_into(dev_in, rf);
    dev.synchronize();
  });
  const double tb = median_seconds(o.reps, [&] {
    eb.run_into(dev_in, rb);
    dev.synchronize();
  });
  std::printf("%-12s forward %8.3f ms   forward+backward %8.3f ms   ratio %.2f   (%lld parameters, %zu kernels fwd, %zu fwd+bwd)\n",
              name.c_str(), tf * 1e3, tb * 1e3, tb / tf, (long long)m.parameter_count(), pf.kernels.size(), pb.kernels.size());
  Result("grad")
      .add("model", name)
      .add("device", dev.name())
      .add("forward_ms", tf * 1e3, "%.4f")
      .add("forward_backward_ms", tb * 1e3, "%.4f")
      .add("ratio", tb / tf, "%.3f")
      .add("reps", int64_t(o.reps))
      .print();
}

// A whole training step of the MLP (forward, backward, SGD with momentum) through nn::Trainer
// on one fixed batch: what `rlx train mnist` pays per step without the loader.
void bench_step(Device& dev, const Options& o) {
  ir::Graph g;
  nn::Model m(g);
  Var x = m.input("x", DType::F32, {128, 784});
  Var y = m.input("y", DType::I64, {128});
  nn::Trainer t(m, cross_entropy(nn::mlp(m, "mlp", x, {784, 128, 10}), y), nn::Sgd{.lr = 0.05, .momentum = 0.9}, dev);
  std::vector<Tensor> batch{random_input({DType::F32, {128, 784}}, 1), random_input({DType::I64, {128}}, 2)};
  const double ts = median_seconds(o.reps, [&] {
    for (int i = 0; i < 10; ++i) t.step(batch);
    t.loss();
  }) / 10;
  std::printf("%-12s training step %8.3f ms   %.0f img/s\n", "mlp-step", ts * 1e3, 128 / ts);
  Result("grad").add("model", std::string("mlp-step")).add("device", dev.name()).add("step_ms", ts * 1e3, "%.4f")
      .add("img_per_s", 128 / ts, "%.0f").add("reps", int64_t(o.reps)).print();
}

}  // namespace

int bench_grad(int argc, char** argv) {
  Options o;
  Args args("rlx-bench grad",
            "Forward vs forward+backward time of the 784-128-10 MLP (batch 128) and of 4 transformer\n"
            "blocks (sequence 128, width 384, 6 heads), f32; medians of --reps runs.\n");
  args.option("--models", "mlp,transformer,mlp-step", o.models, {"mlp", "transformer", "mlp-step"})
      .option("--reps", "N", o.reps, 1)
      .option("--device", "cpu", o.device);
  args.parse(argc, argv);
  return run_bench("rlx-bench grad", [&] {
    Device& dev = DeviceRegistry::get().at(o.device);
    print_device(dev);
    for (const std::string& name : o.models) name == "mlp-step" ? bench_step(dev, o) : bench_model(dev, name, o);
    return 0;
  });
}
