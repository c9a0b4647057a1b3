// IDX files, the format MNIST ships in: two zero bytes, an element-type byte, a dimension
// count, then that many big-endian uint32 extents and the row-major big-endian data. Plain
// or gzip-compressed (recognised by the gzip magic 1f 8b, whatever the file's name).
//
// Element types and the dtype each becomes:
//   0x08 unsigned byte -> u8     0x0C int32   -> i32
//   0x09 signed byte   -> i8     0x0D float32 -> f32
//   0x0B int16         -> i32    0x0E float64 -> f64
// rlx has no 16-bit integer, so int16 widens to i32, which holds every value exactly.
//
// The file is untrusted: every failure is an InputError (SizeError for sizes past 2^62)
// naming the file and what is wrong, and nothing is allocated for data the file does not
// hold — the header's size is compared with the data's length first, and a gzip stream is
// never inflated past the header's size plus one byte.
#pragma once
#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace rlx::io {

// At most this many dimensions (MNIST has 1 or 3; the format allows 255).
inline constexpr int kMaxIdxRank = 8;

// Reads the IDX file at `path` into a host tensor.
Tensor read_idx(const std::string& path);

// The same for a file's bytes already in memory; `name` stands for the file in errors.
Tensor read_idx_bytes(std::string_view data, const std::string& name);

}  // namespace rlx::io
