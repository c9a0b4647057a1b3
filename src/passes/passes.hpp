// Graph passes. Each takes a graph and returns a new one; none changes what the graph
// computes. Node::host marks survive every pass.
#pragma once
#include <cstdint>

#include "ir/graph.hpp"

namespace rlx {
class Device;
}

namespace rlx::passes {

// Re-checks SSA order, arity, attributes and every node's type against its op's rule,
// recursively through regions. Throws InputError naming the node and its location.
void verify(const ir::Graph& g);
// Removes nodes no result depends on (parameters stay).
ir::Graph dce(const ir::Graph& g);
// Merges nodes with the same op, inputs and attributes (not rng, not control flow).
ir::Graph cse(const ir::Graph& g);
// Evaluates nodes whose inputs are all constants (results up to max_elems elements) on
// `evaluator` and replaces them by constants.
ir::Graph fold_constants(const ir::Graph& g, Device& evaluator, int64_t max_elems = 1 << 16);

}  // namespace rlx::passes
