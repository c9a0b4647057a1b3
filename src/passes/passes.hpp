// Graph passes. Each takes a graph and returns a new one; none changes what the graph
// computes. Node::host marks survive every pass.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"

namespace rlx::passes {

// Runs node n of g on its operands' values (host tensors) and returns its results as host
// tensors, or nullopt when it has no way to run n; an rlx::Error when running it fails.
// compile() passes the reference device's (runtime/device.hpp: evaluator_for).
using Evaluator =
    std::function<std::optional<std::vector<Tensor>>(const ir::Node& n, const ir::Graph& g, const std::vector<Tensor>& args)>;

// Re-checks SSA order, arity, attributes and every node's type against its op's rule,
// recursively through regions. Throws InputError naming the node and its location.
void verify(const ir::Graph& g);
// Removes nodes no result depends on (parameters stay).
ir::Graph dce(const ir::Graph& g);
// Merges nodes with the same op, inputs and attributes (not rng, not control flow).
ir::Graph cse(const ir::Graph& g);
// Evaluates nodes whose inputs are all constants (results up to max_elems elements) with
// `evaluate` and replaces them by constants; a node it cannot run, or whose run fails, stays.
ir::Graph fold_constants(const ir::Graph& g, const Evaluator& evaluate, int64_t max_elems = 1 << 16);
// Replaces each permute that moves only axes of extent 1 (the others keep their order) by a
// reshape: the same bytes in the same order, a view instead of a copy. Runs after legalize
// (reshape is a runtime view on every device), so the dispatch report still shows the permute
// and its route.
ir::Graph permutes_as_reshapes(const ir::Graph& g);

}  // namespace rlx::passes
