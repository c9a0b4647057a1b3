// Named, device-aware rewrites: a node the device cannot run natively is re-expressed
// in other ops. The dispatcher applies one only if everything it produces is legal.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ir/frontend.hpp"
#include "ir/graph.hpp"

namespace rlx {

struct RewriteRule {
  std::string name;
  bool lossless = true;  // allowed under policy=strict
  // Tried before the op's common-IR lowering (not under policy=force-common-ir): for an
  // op whose lowering is a slow fallback and whose rewrite is the better route.
  bool before_lowering = false;
  std::string summary;
  std::function<bool(const ir::Node& n, const ir::Graph& g)> applies;
  // Builds the replacement from the node's inputs (Vars on a scratch graph).
  std::function<std::vector<Var>(const ir::Node& n, const std::vector<Var>& in)> build;
};

const std::vector<RewriteRule>& rewrite_rules();

}  // namespace rlx
