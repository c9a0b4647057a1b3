// compile() and run(): the public entry points.
#pragma once
#include <string>
#include <vector>

#include "dispatch/report.hpp"
#include "runtime/device.hpp"
#include "runtime/program.hpp"

namespace rlx {

// Lowers, legalizes, fuses and plans g for device d. Throws LegalizeError (with the
// full report) when some node has no route under the policy.
Program compile(const ir::Graph& g, Device& d, const CompileOptions& opts = {});
// Runs a compiled program. Inputs may live anywhere (they are copied to the device
// when needed); results come back on the host, in the graph's result order.
std::vector<Tensor> run(const Program& p, Device& d, const std::vector<Tensor>& inputs);

}  // namespace rlx
