// Pieces of op semantics that every device's kernels share: how a reduction's `axes`
// attribute reads, and the wording of the dense solvers' input errors (so every device
// reports a singular matrix the same way).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/shape.hpp"
#include "ir/graph.hpp"

namespace rlx::ir {

// The reduced axes of sum/prod/max/min: normalized, sorted, unique; all axes when empty.
inline std::vector<int> reduce_axes(const Node& n, int rank) {
  std::vector<int> axes;
  for (int64_t a : n.attrs.get_ints("axes")) axes.push_back(normalize_axis(a, rank));
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

// "<op>: U(k,k) is exactly zero: the matrix is singular" (k zero-based here, printed 1-based).
[[noreturn]] inline void throw_singular(const std::string& op, const char* factor, int64_t k) {
  const std::string i = std::to_string(k + 1);
  throw InputError(op + ": " + factor + "(" + i + "," + i + ") is exactly zero: the matrix is singular");
}

// lstsq on a rank-deficient A (i one-based).
[[noreturn]] inline void throw_rank_deficient(int64_t i) {
  throw InputError("lstsq: R(" + std::to_string(i) + "," + std::to_string(i) +
                   ") of A's QR factorization is exactly zero: A does not have full column rank");
}

}  // namespace rlx::ir
