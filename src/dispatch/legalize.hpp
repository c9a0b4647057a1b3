// Legalization: resolve every node of a graph to one route on a device (the dispatch
// contract, docs/dispatch.md) and produce the L2 graph that will run there.
#pragma once
#include <string>
#include <vector>

#include "dispatch/report.hpp"
#include "dispatch/target.hpp"
#include "ir/graph.hpp"

namespace rlx {

struct Legalized {
  ir::Graph graph;  // L2 + library primitives only; host-staged nodes have Node::host set
  DispatchReport report;
};

// Never throws LegalizeError itself: the report says whether it is compile-ready.
// Ops in `deny_native` are treated as having no kernel on d. `host` is where host-staged
// nodes would run (policy allow-host; compile() passes the reference device): without one,
// nothing is host-staged.
Legalized legalize(const ir::Graph& g, const Target& d, Policy p, const std::vector<std::string>& deny_native = {},
                   const Target* host = nullptr);

}  // namespace rlx
