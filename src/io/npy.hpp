// NumPy .npy files (format versions 1.0-3.0 read, 1.0 written): the interchange format
// scientists already have. Writes are atomic (temporary file + rename).
#pragma once
#include <string>

#include "core/tensor.hpp"

namespace rlx::io {

// Throws InputError naming the file and what is wrong (bad magic, unsupported dtype,
// Fortran order, truncated data, ...).
Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);

}  // namespace rlx::io
