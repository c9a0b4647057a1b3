#include "devices/cuda/library.hpp"

namespace rlx::cuda {

const LibraryKernel* find_library_kernel(const std::string& op) {
  static const std::vector<LibraryKernel> table = [] {
    std::vector<LibraryKernel> t;
    add_blas_kernels(t);
    add_sparse_kernels(t);
    add_solver_kernels(t);
    add_sort_kernels(t);
    return t;
  }();
  for (const LibraryKernel& k : table)
    if (k.op == op) return &k;
  return nullptr;
}

}  // namespace rlx::cuda
