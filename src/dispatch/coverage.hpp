// The op x dtype x device coverage matrix, computed by asking each device's own
// capability table (through the dispatcher) about a representative node.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "dispatch/report.hpp"
#include "dispatch/target.hpp"
#include "ir/graph.hpp"

namespace rlx {

// The op's example (ir::example_of: written beside its declaration, or its class's) with
// `dtype` as its key dtype, on plain graph inputs; nullopt for ops the runtime owns
// (param, while, if) and for an op without an example (tests/dispatch fails on those).
std::optional<ir::Graph> sample_graph(const std::string& op, DType dtype);

struct CoverageRow {
  std::string op;
  std::string level;
  DType dtype;
  std::vector<std::string> routes;  // per device, "native" / "common-ir" / "rewritten:<rule>" / "unsupported"
};
std::vector<CoverageRow> coverage(const std::vector<const Target*>& devices);
std::string coverage_table(const std::vector<const Target*>& devices, const std::vector<CoverageRow>& rows);
std::string coverage_json(const std::vector<const Target*>& devices, const std::vector<CoverageRow>& rows);

}  // namespace rlx
