// Build a small MLP block with the C++ front end, see how each op will run on the cpu
// device, run it, and check it against the reference device.
#include <cmath>
#include <iostream>

#include "ir/frontend.hpp"
#include "runtime/runtime.hpp"

int main() {
  using namespace rlx;
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {32, 64});
  auto w1 = input(g, "w1", DType::F32, {128, 64});
  auto w2 = input(g, "w2", DType::F32, {10, 128});
  auto logits = linear(gelu(linear(x, w1)), w2);
  output(g, {softmax(logits)});

  Device& cpu = DeviceRegistry::get().at("cpu");
  Program p = compile(g, cpu);  // throws LegalizeError (with the full report) if anything has no route
  std::cout << p.report.table();

  std::vector<Tensor> in;
  for (auto& shape : {Shape{32, 64}, Shape{128, 64}, Shape{10, 128}}) {
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(std::sin(double(i) * 0.37)) * 0.2f;
    in.push_back(t);
  }
  Tensor y = run(p, cpu, in)[0];
  Device& ref = DeviceRegistry::get().at("reference");
  Tensor want = run(compile(g, ref), ref, in)[0];
  double err = 0;
  for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, double(std::abs(y.data<float>()[i] - want.data<float>()[i])));
  std::cout << "max |cpu - reference| = " << err << "\n";
  return err < 1e-5 ? 0 : 1;
}
