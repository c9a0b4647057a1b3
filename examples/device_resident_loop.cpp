// A time-stepping loop that keeps its state on the device: s <- s + 0.1 * tanh(s W + b),
// 20 steps. It runs on the cuda device where this process can use one, else on the cpu.
//   1. Executor::enqueue queues each step without waiting (ping-pong buffers on the
//      device); Device::synchronize() waits once at the end.
//   2. Executor::capture records a step as a CUDA graph; Replay::launch() reruns it.
//      Devices that cannot record (the cpu) say so with an InputError.
// Both are checked against the reference device stepping on the host.
#include <cmath>
#include <iostream>
#include <memory>

#include "core/error.hpp"
#include "ir/frontend.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;

namespace {

Tensor filled(Shape s, double scale, double phase) {
  Tensor t = Tensor::empty(DType::F32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(scale * std::sin(0.37 * double(i) + phase));
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
  return d;
}

}  // namespace

int main() {
  const int64_t n = 256, steps = 20;
  ir::Graph g;
  Var s = input(g, "s", DType::F32, {n, n}), w = input(g, "w", DType::F32, {n, n}), b = input(g, "b", DType::F32, {n});
  output(g, {s + tanh(matmul(s, w) + b) * 0.1});

  Device* cuda = DeviceRegistry::get().find("cuda");
  Device& d = cuda && cuda->unavailable().empty() ? *cuda : DeviceRegistry::get().at("cpu");
  std::cout << "device: " << d.name() << " (" << d.description() << ")\n";
  Program p = compile(g, d);
  Executor ex(p, d);

  const Tensor s0 = filled({n, n}, 1.0, 0.0), w0 = filled({n, n}, 0.05, 1.0), b0 = filled({n}, 0.1, 2.0);
  // The state, the weights and the bias live on the device for the whole loop.
  Tensor wd = w0.to(d.allocator()), bd = b0.to(d.allocator());
  Tensor buf[2] = {s0.to(d.allocator()), Tensor::empty(DType::F32, {n, n}, d.allocator())};

  // The reference: the same steps, one synchronous run each, on the host.
  Device& ref = DeviceRegistry::get().at("reference");
  Program pr = compile(g, ref);
  Tensor want = s0;
  for (int64_t k = 0; k < steps; ++k) want = run(pr, ref, {want, w0, b0})[0];

  // 1. Queued steps.
  for (int64_t k = 0; k < steps; ++k) {
    std::vector<Tensor> out = {buf[(k + 1) % 2]};
    ex.enqueue({buf[k % 2], wd, bd}, out);
  }
  d.synchronize();
  const double err = max_diff(buf[steps % 2].to(host_allocator()), want);
  std::cout << "enqueued " << steps << " steps: max |" << d.name() << " - reference| = " << err << "\n";
  if (!(err < 1e-4)) return 1;

  // 2. Recorded steps: one recording per direction of the ping-pong.
  try {
    buf[0] = s0.to(d.allocator());
    std::vector<Tensor> to1 = {buf[1]}, to0 = {buf[0]};
    std::unique_ptr<Replay> forward = ex.capture({buf[0], wd, bd}, to1);  // (runs the step once, then records)
    std::unique_ptr<Replay> back = ex.capture({buf[1], wd, bd}, to0);     // (and this one: 2 steps so far)
    for (int64_t k = 2; k < steps; k += 2) {
      forward->launch();
      back->launch();
    }
    d.synchronize();
    const double rerr = max_diff(buf[0].to(host_allocator()), want);
    std::cout << "replayed: max |" << d.name() << " - reference| = " << rerr << "\n";
    if (!(rerr < 1e-4)) return 1;
  } catch (const InputError& e) {
    std::cout << "no replay here: " << e.what() << "\n";
  }
  return 0;
}
