// Finite-difference Poisson matrices on the unit square/cube with Dirichlet boundaries,
// unscaled (no 1/h^2): n points per side, grid point (x, y[, z]) is row
// x + n*y (+ n*n*z).
//   2D 5-point: 4 on the diagonal, -1 for each of the (up to 4) grid neighbours.
//   3D 7-point: 6 on the diagonal, -1 for each of the (up to 6) grid neighbours.
// Symmetric positive definite; each row's columns come out sorted.
#pragma once
#include <optional>

#include "solvers/sparse/csr.hpp"

namespace rlx::sparse {

// value: f32, f64 or c64; index: i32 or i64 (default: i32 when it fits).
CsrMatrix poisson2d(int64_t n, DType value = DType::F64, std::optional<DType> index = std::nullopt);
CsrMatrix poisson3d(int64_t n, DType value = DType::F64, std::optional<DType> index = std::nullopt);

}  // namespace rlx::sparse
