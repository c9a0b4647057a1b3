// compile(): verify -> legalize (dispatch contract) -> fold/CSE/DCE -> schedule -> plan.
#include "dispatch/legalize.hpp"
#include "ir/op_registry.hpp"
#include "passes/passes.hpp"
#include "passes/schedule.hpp"
#include "runtime/runtime.hpp"

namespace rlx {

namespace {

void finish_program(Program& p, Device& d, const CompileOptions& opts) {
  if (Device* ref = DeviceRegistry::get().find("reference"); ref && opts.fold_constants)
    p.graph = passes::fold_constants(p.graph, *ref);
  if (opts.cse) p.graph = passes::cse(p.graph);
  p.graph = passes::dce(p.graph);
  passes::schedule_kernels(p, opts.fuse && d.fuses_elementwise(), d.fuses_reductions());
  passes::plan_memory(p);
  for (auto& n : p.graph.nodes)
    // Constants go to the device; where the device cannot run here (no GPU), the program
    // is still compiled (for reports) and keeps them on the host.
    if (n.op->name == "constant")
      p.constants.push_back(n.attrs.get_tensor("value").to(d.unavailable().empty() ? d.allocator() : host_allocator()));
  for (auto& k : p.kernels) {
    if (k.kind != Kernel::Control) continue;
    for (auto& r : p.graph.nodes[size_t(k.nodes[0])].regions) {
      auto sub = std::make_shared<Program>();
      sub->device = d.name();
      sub->graph = *r;
      finish_program(*sub, d, opts);
      k.sub.push_back(sub);
    }
  }
}

}  // namespace

Program compile(const ir::Graph& g, Device& d, const CompileOptions& opts) {
  passes::verify(g);
  Legalized L = legalize(g, d, opts.policy, opts.deny_native);
  if (!L.report.compile_ready) throw LegalizeError(std::move(L.report));
  Program p;
  p.device = d.name();
  p.graph = std::move(L.graph);
  p.report = std::move(L.report);
  finish_program(p, d, opts);
  return p;
}

}  // namespace rlx
