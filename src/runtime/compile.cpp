// compile(): verify -> legalize (dispatch contract) -> fold/views/CSE/DCE -> schedule -> plan.
#include <unistd.h>

#include "core/checked.hpp"
#include "dispatch/legalize.hpp"
#include "ir/op_registry.hpp"
#include "passes/passes.hpp"
#include "passes/schedule.hpp"
#include "runtime/runtime.hpp"

namespace rlx {

namespace {

int64_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

// A program whose buffers cannot fit in the device's memory is refused here, naming its
// largest buffer's node, rather than failing (or being killed) when it runs.
void check_memory_fits(const Program& p, const Device& d) {
  int64_t cap = d.geometry().memory_bytes;
  if (cap == 0 && d.unavailable().empty() && const_cast<Device&>(d).allocator()->host_accessible())
    cap = host_memory_bytes();
  if (cap <= 0) return;
  int64_t need = p.arena_bytes, largest = -1;
  ir::Value big{};
  for (const auto& n : p.graph.nodes)
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const BufferSlot& s = p.slots[size_t(n.id)][o];
      if (s.kind == BufferSlot::Result || s.kind == BufferSlot::Const) need = checked_add(need, s.bytes, "program memory");
      if ((s.kind == BufferSlot::Result || s.kind == BufferSlot::Arena || s.kind == BufferSlot::Const) && s.bytes > largest) {
        largest = s.bytes;
        big = {n.id, int32_t(o)};
      }
    }
  if (need <= cap) return;
  const ir::Node& n = p.graph.nodes[size_t(big.node)];
  throw DeviceError("program needs " + std::to_string(need) + " bytes on device '" + d.name() + "', more than its " +
                    std::to_string(cap) + " bytes of memory; its largest buffer is %" + std::to_string(n.id) + " = " +
                    n.op->name + " " + n.outputs[size_t(big.index)].str() + (n.loc.known() ? " at " + n.loc.str() : "") +
                    " (" + std::to_string(largest) + " bytes)");
}

void finish_program(Program& p, Device& d, const CompileOptions& opts) {
  if (Device* ref = DeviceRegistry::get().find("reference"); ref && opts.fold_constants)
    p.graph = passes::fold_constants(p.graph, evaluator_for(*ref));
  p.graph = passes::permutes_as_reshapes(p.graph);
  if (opts.cse) p.graph = passes::cse(p.graph);
  p.graph = passes::dce(p.graph);
  passes::FusesEpilogue epilogues;
  if (opts.fuse) epilogues = [&d](const MatmulEpilogue& e, const ir::Graph& g) { return d.fuses_matmul_epilogue(e, g); };
  passes::schedule_kernels(p, opts.fuse && d.fuses_elementwise(), d.fuses_reductions(), epilogues);
  passes::plan_memory(p);
  check_memory_fits(p, d);
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
      p.regions[k.nodes[0]].push_back(sub);
      // The node's region becomes the graph its program runs (folded, deduplicated), so
      // the L3 text, which prints each region once as that program, reads back the same.
      r = std::make_shared<ir::Graph>(sub->graph);
    }
  }
}

// The kernels that merged nodes beyond elementwise fusion, into the report (those of
// control-flow regions too).
void report_kernels(const Program& p, DispatchReport& r) {
  for (const Kernel& k : p.kernels) {
    for (const auto& sub : p.regions_of(k)) report_kernels(*sub, r);
    if (k.kind != Kernel::MatmulEpilogue) continue;
    KernelReport kr;
    kr.kind = "matmul_epilogue";
    kr.what = k.epilogue.activation == MatmulEpilogue::Relu ? "bias+relu" : "bias";
    kr.nodes = k.nodes;
    for (int32_t id : k.nodes) kr.ops.push_back(p.graph.nodes[size_t(id)].op->name);
    kr.location = p.graph.nodes[size_t(k.nodes[0])].loc.str();
    r.kernels.push_back(std::move(kr));
  }
}

}  // namespace

Program compile(const ir::Graph& g, Device& d, const CompileOptions& opts) {
  passes::verify(g);
  Legalized L = legalize(g, d, opts.policy, opts.deny_native, DeviceRegistry::get().find("reference"));
  if (!L.report.compile_ready) throw LegalizeError(std::move(L.report));
  Program p;
  p.device = d.name();
  p.graph = std::move(L.graph);
  p.report = std::move(L.report);
  finish_program(p, d, opts);
  report_kernels(p, p.report);
  return p;
}

}  // namespace rlx
