// Host functions: code of the running program that a graph calls through the `host_call`
// op (src/ir/ops/host.cpp). A HostFunction registers a callable for as long as it lives and
// hands out the id that host_call's attribute `fn` names:
//
//   HostFunction f("my_operator", [&](std::span<const Tensor> in, Tensor& out) { ... });
//   Var y = host_call(f.id(), {x}, DType::F64, {n});
//
// The callable gets the node's inputs as contiguous host tensors and writes the whole of
// `out` (contiguous, host memory, of the declared type; its previous contents are
// undefined). It runs on the thread that runs the program, between the node's producers and
// its consumers, once per run of the node. Devices with host memory (reference, cpu) call it
// natively; on others the node is host-staged where the caller allows that, and compilation
// fails otherwise (docs/dispatch.md). Id 0 is the built-in identity (one input, the result
// of its type). An InputError thrown by the callable propagates out of the run with the
// function's id and name and then the node's prefixed; other exceptions propagate as thrown.
// An id that names no live function is an InputError when the node runs.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "core/tensor.hpp"

namespace rlx {

class KernelTable;

using HostFn = std::function<void(std::span<const Tensor> in, Tensor& out)>;

class HostFunction {
 public:
  HostFunction(std::string name, HostFn fn);
  ~HostFunction();  // unregisters: a program still naming the id then fails when it runs
  HostFunction(const HostFunction&) = delete;
  HostFunction& operator=(const HostFunction&) = delete;
  HostFunction(HostFunction&& o) noexcept;
  HostFunction& operator=(HostFunction&& o) noexcept;
  int64_t id() const { return id_; }
  const std::string& name() const { return name_; }

 private:
  int64_t id_ = -1;
  std::string name_;
};

// Runs function `id` (InputError when no live function has it).
void call_host_function(int64_t id, std::span<const Tensor> in, Tensor& out);

// host_call's kernel, for devices whose tensors are in host memory.
void add_host_call_kernel(KernelTable& t);

}  // namespace rlx
