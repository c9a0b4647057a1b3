// Library primitives on the cpu device (sparse kernels, LAPACK calls): each family adds
// entries here, and the device consults this table before its built-in op kinds.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/device.hpp"

namespace rlx::cpu {

struct LibraryKernel {
  std::string op;
  std::function<Capability(const ir::Node&, const ir::Graph&)> supports;
  std::function<void(const ir::Node&, std::span<const Tensor>, std::span<Tensor>)> run;
};

const LibraryKernel* find_library_kernel(const std::string& op);

// One function per family (devices/cpu/<family>.cpp).
void add_sparse_kernels(std::vector<LibraryKernel>& t);
void add_lapack_kernels(std::vector<LibraryKernel>& t);
void add_sort_kernels(std::vector<LibraryKernel>& t);

}  // namespace rlx::cpu
