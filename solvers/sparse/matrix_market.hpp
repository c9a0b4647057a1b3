// Matrix Market (https://math.nist.gov/MatrixMarket/formats.html) read and write.
//
// Banner: `%%MatrixMarket matrix <format> <field> <symmetry>` (words case-insensitive)
//   format   coordinate | array
//   field    real | complex | integer | pattern      (pattern: coordinate only)
//   symmetry general | symmetric | skew-symmetric | hermitian
//            (hermitian: complex only; skew-symmetric: not pattern; all but general: square)
//
// Reading:
// - Symmetric files are expanded into the full matrix: a stored (i, j), i > j, also gives
//   (j, i) = a (symmetric), -a (skew-symmetric) or conj(a) (hermitian); the diagonal is
//   stored once and kept once. A coordinate file that says symmetric/hermitian must store
//   only the lower triangle with the diagonal, skew-symmetric only the strict lower
//   triangle; an entry elsewhere is an error (the header lies about the symmetry). A
//   hermitian diagonal must be real.
// - Duplicates (the same (i, j) stored twice in a coordinate file) are summed, as COO
//   assembly does (a pattern entry stays 1), unless ReadOptions::duplicates is Error,
//   which names both lines. In a symmetric file an entry and its mirror never collide:
//   only one triangle may be stored.
// - Values: real and integer files read into f64 (integers beyond 2^53 are refused: f64
//   cannot hold them exactly), complex into c64 (each part rounded to f32), pattern into
//   1.0; ReadOptions::value_type overrides (f32, f64, c64; a complex file cannot become
//   real). NaN and infinite values are refused, as are values that overflow the value type.
// - Array files become CSR with their zero entries dropped.
// - Blank lines and `%` comment lines may appear anywhere after the banner.
// - Every error is an rlx::ParseError "file:line: message" (line 0: the file as a whole,
//   e.g. it cannot be opened): a missing or unknown banner word, a bad size line, a
//   truncated file (fewer entries than the size line says), extra entries, an index out
//   of range, a malformed or non-finite number, control bytes (binary data), trailing text.
//
// Writing is atomic: the file is written to a temporary name beside the target and renamed
// over it, so a reader never sees half a file and a failed write leaves the old one.
// Values are written with enough digits to read back exactly (17 for f64, 9 for f32 parts).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "solvers/sparse/csr.hpp"

namespace rlx::sparse {

enum class MmFormat { Coordinate, Array };
enum class MmField { Real, Complex, Integer, Pattern };
enum class MmSymmetry { General, Symmetric, SkewSymmetric, Hermitian };
const char* mm_name(MmFormat f);
const char* mm_name(MmField f);
const char* mm_name(MmSymmetry s);

struct MmHeader {
  MmFormat format = MmFormat::Coordinate;
  MmField field = MmField::Real;
  MmSymmetry symmetry = MmSymmetry::General;
  int64_t rows = 0, cols = 0;
  int64_t entries = 0;  // as stored in the file (coordinate: the size line's count)
};

enum class Duplicates { Sum, Error };

struct ReadOptions {
  std::optional<DType> value_type;  // default: f64, or c64 for complex files
  std::optional<DType> index_type;  // default: i32 when it fits
  Duplicates duplicates = Duplicates::Sum;
  // A cap on the bytes the size line may make the reader allocate for row pointers (rows + 1
  // of them, 32 bytes each while assembling), for callers reading files they do not trust
  // with all of the machine's memory; 0: the host's physical memory is the limit.
  int64_t max_bytes = 0;
};

struct MatrixMarketFile {
  MmHeader header;
  CsrMatrix matrix;  // the full (expanded) matrix
};

MatrixMarketFile read_matrix_market(const std::string& path, const ReadOptions& opts = {});
// Parses text held in memory; `name` stands for the file in error messages.
MatrixMarketFile parse_matrix_market(std::string_view text, const std::string& name, const ReadOptions& opts = {});
// Where a file's entries begin: the byte just past the size line, the size line's number,
// and the file's size.
struct MmDataStart {
  int64_t offset = 0;
  int line = 0;
  int64_t file_bytes = 0;
};
// Only the banner and size line (and, when asked, where the entries begin).
MmHeader read_matrix_market_header(const std::string& path, MmDataStart* start = nullptr);
MmHeader parse_matrix_market_header(std::string_view text, const std::string& name, MmDataStart* start = nullptr);

// For readers that split a file among processes (dist_matrix_market.hpp): the coordinate
// entries in `slice`, whole lines of the file past its size line whose first is line
// `first_line`, each checked as read_matrix_market checks it (indices in range, the triangle
// a symmetric header allows, the field's values as f64; blank and % lines skipped). Appends
// 0-based (i, j) and values, without mirroring, and returns how many. Coordinate files of
// real, integer or pattern values only (an InputError otherwise); ParseError "file:line".
struct MmEntries {
  std::vector<int64_t> i, j;
  std::vector<double> v;
};
int64_t parse_matrix_market_entries(std::string_view slice, const MmHeader& h, const std::string& name, int first_line,
                                    MmEntries& out);

struct WriteOptions {
  MmFormat format = MmFormat::Coordinate;
  // Default: real for f32/f64 values, complex for c64. Integer requires integral values;
  // pattern writes the structure only (coordinate only).
  std::optional<MmField> field;
  // Anything but general writes one triangle, after checking that the matrix has the
  // symmetry (an InputError naming an offending entry otherwise).
  MmSymmetry symmetry = MmSymmetry::General;
  std::string comment;  // written as `%` lines after the banner (may hold newlines)
};

// Duplicate entries of A are summed before writing.
void write_matrix_market(const std::string& path, const CsrMatrix& A, const WriteOptions& opts = {});
std::string format_matrix_market(const CsrMatrix& A, const WriteOptions& opts = {});

}  // namespace rlx::sparse
