#include "devices/cpu/library.hpp"

namespace rlx::cpu {

namespace {
const std::vector<LibraryKernel>& table() {
  static const std::vector<LibraryKernel> t = [] {
    std::vector<LibraryKernel> v;
    add_sparse_kernels(v);
    add_lapack_kernels(v);
    add_sort_kernels(v);
    return v;
  }();
  return t;
}
}  // namespace

const LibraryKernel* find_library_kernel(const std::string& op) {
  for (auto& k : table())
    if (k.op == op) return &k;
  return nullptr;
}

}  // namespace rlx::cpu
