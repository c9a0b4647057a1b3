// A user's own model trained with rlx in a few lines: a two-layer MLP on MNIST, one
// compiled program per step (forward, backward, SGD with momentum), the test accuracy after.
//   example_train_mlp [mnist-dir] [device]
#include <cstdio>
#include <cstring>
#include <string>

#include "nn/data/loader.hpp"
#include "nn/data/mnist.hpp"
#include "nn/layers.hpp"
#include "nn/trainer.hpp"

using namespace rlx;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : RLX_EXAMPLE_DATA "/mnist";
  Device& device = DeviceRegistry::get().at(argc > 2 ? argv[2] : "cpu");
  nn::Mnist data = nn::load_mnist(dir);
  const int64_t batch = 100;  // 60000 and 10000 are multiples: no partial batch

  ir::Graph g;
  nn::Model model(g);
  Var images = model.input("images", DType::F32, {batch, 784});
  Var labels = model.input("labels", DType::I64, {batch});
  Var h = relu(nn::linear(model, "fc1", images, 256));
  Var logits = nn::linear(model, "fc2", h, 10);
  nn::Trainer trainer(model, cross_entropy(logits, labels), nn::Sgd{.lr = 0.05, .momentum = 0.9}, device);

  nn::Loader loader(data.train.images, data.train.labels, {.batch_size = batch, .seed = 1});
  while (auto b = loader.next()) trainer.step({b->images, b->labels});
  std::printf("loss after one epoch: %.4f\n", trainer.loss());

  // Accuracy: the same layers in a forward-only graph, fed the trained parameters.
  ir::Graph eg;
  nn::Model eval(eg);
  Var x = eval.input("images", DType::F32, {10000, 784});
  Var out = nn::linear(eval, "fc2", relu(nn::linear(eval, "fc1", x, 256)), 10);
  output(eg, {argmax(out, 1)});
  std::vector<Tensor> in{data.test.images};
  for (const Tensor& p : trainer.parameters()) in.push_back(p);
  Tensor pred = run(compile(eg, device), device, in)[0];
  int64_t hits = 0;
  for (int64_t i = 0; i < 10000; ++i) hits += pred.data<int64_t>()[i] == data.test.labels.data<int64_t>()[i];
  std::printf("test accuracy: %.2f %%\n", hits / 100.0);
  return hits >= 9000 ? 0 : 1;  // (a broken step lands near 10 %)
}
