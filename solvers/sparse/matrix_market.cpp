#include "solvers/sparse/matrix_market.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "solvers/sparse/host_memory.hpp"

namespace rlx::sparse {

const char* mm_name(MmFormat f) { return f == MmFormat::Coordinate ? "coordinate" : "array"; }
const char* mm_name(MmField f) {
  switch (f) {
    case MmField::Real: return "real";
    case MmField::Complex: return "complex";
    case MmField::Integer: return "integer";
    case MmField::Pattern: return "pattern";
  }
  return "?";
}
const char* mm_name(MmSymmetry s) {
  switch (s) {
    case MmSymmetry::General: return "general";
    case MmSymmetry::Symmetric: return "symmetric";
    case MmSymmetry::SkewSymmetric: return "skew-symmetric";
    case MmSymmetry::Hermitian: return "hermitian";
  }
  return "?";
}

namespace {

using cd = std::complex<double>;
constexpr double kMaxExactInt = 9007199254740992.0;  // 2^53

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> w;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t b = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t') ++i;
    if (i > b) w.push_back(s.substr(b, i - b));
  }
  return w;
}

// Walks the text line by line (1-based numbers), refusing control bytes.
class Lines {
 public:
  // first_number: the line number before the text's first line (a slice of a file starts
  // past line 0).
  Lines(std::string_view text, const std::string& name, int first_number = 0)
      : text_(text), name_(name), number_(first_number) {}
  // The next line without its terminator; false at the end of the text.
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    size_t e = text_.find('\n', pos_);
    if (e == std::string_view::npos) e = text_.size();
    line = text_.substr(pos_, e - pos_);
    pos_ = e + 1;
    ++number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    for (size_t i = 0; i < line.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(line[i]);
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", c);
        fail("binary data (byte " + std::string(hex) + " at column " + std::to_string(i + 1) +
             "): not a Matrix Market text file");
      }
    }
    return true;
  }
  // The next line that is neither blank nor a % comment.
  bool next_data(std::string_view& line) {
    while (next(line)) {
      size_t i = line.find_first_not_of(" \t");
      if (i == std::string_view::npos || line[i] == '%') continue;
      return true;
    }
    return false;
  }
  int number() const { return number_; }
  // Bytes of the text not yet read.
  size_t remaining() const { return pos_ < text_.size() ? text_.size() - pos_ : 0; }
  [[noreturn]] void fail(const std::string& msg) const { throw ParseError(name_, number_, msg); }
  [[noreturn]] void fail_at(int line, const std::string& msg) const { throw ParseError(name_, line, msg); }
  const std::string& name() const { return name_; }

 private:
  std::string_view text_;
  const std::string& name_;
  size_t pos_ = 0;
  int number_ = 0;
};

// Reads whitespace-separated tokens of one line.
class Tokens {
 public:
  Tokens(std::string_view line, const Lines& lines) : s_(line), lines_(lines) {}
  bool at_end() {
    skip();
    return i_ >= s_.size();
  }
  std::string_view word(const char* what) {
    skip();
    if (i_ >= s_.size()) lines_.fail("expected " + std::string(what) + ", found the end of the line");
    size_t b = i_;
    while (i_ < s_.size() && s_[i_] != ' ' && s_[i_] != '\t') ++i_;
    return s_.substr(b, i_ - b);
  }
  int64_t integer(const char* what) {
    std::string_view w = word(what);
    std::string_view d = w.size() > 1 && w[0] == '+' ? w.substr(1) : w;
    int64_t v = 0;
    auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (ec == std::errc::result_out_of_range) lines_.fail(std::string(what) + " '" + std::string(w) + "' is out of range");
    if (ec != std::errc() || p != d.data() + d.size())
      lines_.fail(std::string(what) + " '" + std::string(w) + "' is not an integer");
    return v;
  }
  // A finite floating-point number, parsed straight into T (float or double) so that a
  // value written with the shortest round-trip digits reads back to the same bits.
  template <class T>
  T real(const char* what) {
    std::string_view w = word(what);
    std::string_view d = w.size() > 1 && w[0] == '+' && w[1] != '-' ? w.substr(1) : w;
    T v = 0;
    auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (ec == std::errc::result_out_of_range) {
      // from_chars also reports underflow as out of range: tell the two apart.
      double probe = std::strtod(std::string(d).c_str(), nullptr);
      if (std::fabs(probe) < 1.0) return T(probe);
      lines_.fail(std::string(what) + " '" + std::string(w) + "' overflows " + (sizeof(T) == 4 ? "f32" : "f64"));
    }
    if (ec != std::errc() || p != d.data() + d.size())
      lines_.fail(std::string(what) + " '" + std::string(w) + "' is not a number");
    if (!std::isfinite(v)) lines_.fail(std::string(what) + " '" + std::string(w) + "' is not finite (NaN and Inf are refused)");
    return v;
  }
  void end() {
    skip();
    if (i_ < s_.size()) lines_.fail("unexpected text '" + std::string(s_.substr(i_)) + "' at the end of the line");
  }

 private:
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  std::string_view s_;
  const Lines& lines_;
  size_t i_ = 0;
};

MmHeader parse_header(Lines& lines) {
  MmHeader h;
  std::string_view line;
  if (!lines.next(line)) lines.fail_at(1, "empty file: expected the banner '%%MatrixMarket matrix <format> <field> <symmetry>'");
  auto w = words(line);
  if (w.empty() || lower(w[0]) != "%%matrixmarket")
    lines.fail("expected the banner '%%MatrixMarket matrix <format> <field> <symmetry>', found '" +
               std::string(line.substr(0, 60)) + "'");
  if (w.size() < 5)
    lines.fail("the banner has " + std::to_string(w.size()) +
               " words; expected 5: %%MatrixMarket matrix <format> <field> <symmetry>");
  if (w.size() > 5) lines.fail("unexpected word '" + std::string(w[5]) + "' after the banner's symmetry");
  std::string object = lower(w[1]), format = lower(w[2]), field = lower(w[3]), sym = lower(w[4]);
  if (object != "matrix") lines.fail("unknown object '" + std::string(w[1]) + "' (only 'matrix' is supported)");
  if (format == "coordinate") h.format = MmFormat::Coordinate;
  else if (format == "array") h.format = MmFormat::Array;
  else lines.fail("unknown format '" + std::string(w[2]) + "' (expected coordinate or array)");
  if (field == "real" || field == "double") h.field = MmField::Real;
  else if (field == "complex") h.field = MmField::Complex;
  else if (field == "integer") h.field = MmField::Integer;
  else if (field == "pattern") h.field = MmField::Pattern;
  else lines.fail("unknown field '" + std::string(w[3]) + "' (expected real, complex, integer or pattern)");
  if (sym == "general") h.symmetry = MmSymmetry::General;
  else if (sym == "symmetric") h.symmetry = MmSymmetry::Symmetric;
  else if (sym == "skew-symmetric") h.symmetry = MmSymmetry::SkewSymmetric;
  else if (sym == "hermitian") h.symmetry = MmSymmetry::Hermitian;
  else lines.fail("unknown symmetry '" + std::string(w[4]) + "' (expected general, symmetric, skew-symmetric or hermitian)");
  if (h.format == MmFormat::Array && h.field == MmField::Pattern) lines.fail("'array pattern' is not a valid combination");
  if (h.symmetry == MmSymmetry::Hermitian && h.field != MmField::Complex)
    lines.fail(std::string("'") + mm_name(h.field) + " hermitian' is not a valid combination (hermitian needs complex)");
  if (h.symmetry == MmSymmetry::SkewSymmetric && h.field == MmField::Pattern)
    lines.fail("'pattern skew-symmetric' is not a valid combination");

  if (!lines.next_data(line)) lines.fail_at(lines.number() + 1, "truncated: the file ends before the size line");
  Tokens t(line, lines);
  h.rows = t.integer("the row count");
  h.cols = t.integer("the column count");
  if (h.format == MmFormat::Coordinate) h.entries = t.integer("the entry count");
  t.end();
  if (h.rows < 0 || h.cols < 0 || h.entries < 0) lines.fail("sizes must be >= 0");
  if (h.symmetry != MmSymmetry::General && h.rows != h.cols)
    lines.fail(std::string("the header says ") + mm_name(h.symmetry) + " but the matrix is " + std::to_string(h.rows) +
               " x " + std::to_string(h.cols) + " (not square)");
  // Every size computed from the size line is checked arithmetic (core/checked.hpp); a
  // SizeError becomes a ParseError at this line.
  try {
    checked_add(h.rows, 1, "the row count");
    checked_add(h.cols, 1, "the column count");
    const int64_t n = h.rows;
    if (h.format == MmFormat::Array) {
      switch (h.symmetry) {
        case MmSymmetry::General: h.entries = checked_mul(h.rows, h.cols, "the array's value count (rows * columns)"); break;
        case MmSymmetry::Symmetric:
        case MmSymmetry::Hermitian: h.entries = checked_mul(n, n + 1, "the array's value count (n * (n + 1) / 2)") / 2; break;
        case MmSymmetry::SkewSymmetric: h.entries = checked_mul(n, std::max<int64_t>(n - 1, 0), "the array's value count (n * (n - 1) / 2)") / 2; break;
      }
    } else {
      // The most entries the matrix has room for (clamped at 2^62: a large sparse matrix
      // is fine, it only needs few entries).
      int64_t most = saturating_mul(h.rows, h.cols);
      if (h.symmetry == MmSymmetry::Symmetric || h.symmetry == MmSymmetry::Hermitian) most = saturating_mul(n, n + 1) / 2;
      if (h.symmetry == MmSymmetry::SkewSymmetric) most = saturating_mul(n, std::max<int64_t>(n - 1, 0)) / 2;
      if (h.entries > most && h.field == MmField::Pattern)
        lines.fail("the size line declares " + std::to_string(h.entries) + " entries, more than a " +
                   std::to_string(h.rows) + " x " + std::to_string(h.cols) + " " + mm_name(h.symmetry) +
                   " pattern can hold");
      checked_mul(h.entries, 2, "the entry count after symmetric expansion");
    }
  } catch (const SizeError& e) {
    lines.fail(e.what());
  }
  return h;
}

struct Entry {
  double re = 0, im = 0;
};

// The value type a file's values read into.
DType target_type(const MmHeader& h, const ReadOptions& o, const Lines& lines) {
  DType t = o.value_type.value_or(h.field == MmField::Complex ? DType::C64 : DType::F64);
  if (t != DType::F32 && t != DType::F64 && t != DType::C64)
    throw InputError(lines.name() + ": value type must be f32, f64 or c64, got " + dtype_name(t));
  if (h.field == MmField::Complex && t != DType::C64)
    throw InputError(lines.name() + ": a complex file cannot be read into " + dtype_name(t));
  return t;
}

// One value (or a complex pair) from a line, checked against the field and target type.
Entry read_value(Tokens& t, const MmHeader& h, DType target, const Lines& lines) {
  Entry e;
  switch (h.field) {
    case MmField::Pattern:
      e.re = 1;
      break;
    case MmField::Integer: {
      int64_t v = t.integer("the integer value");
      if (v > (int64_t(1) << 53) || v < -(int64_t(1) << 53))
        lines.fail("integer value " + std::to_string(v) + " is beyond 2^53 (f64 cannot hold it exactly)");
      e.re = double(v);
      if (target != DType::F64 && std::fabs(e.re) > 3.4028234663852886e38) lines.fail("value overflows f32");
      break;
    }
    case MmField::Real:
      e.re = target == DType::F64 ? t.real<double>("the value") : double(t.real<float>("the value"));
      break;
    case MmField::Complex:
      e.re = double(t.real<float>("the real part"));
      e.im = double(t.real<float>("the imaginary part"));
      break;
  }
  t.end();
  return e;
}

// One coordinate entry line: 0-based (i, j) and its value, checked against the header
// (indices in range, the triangle a symmetric header allows, a real hermitian diagonal).
Entry read_coordinate_entry(std::string_view line, const MmHeader& h, DType target, const Lines& lines, int64_t& i0,
                            int64_t& j0) {
  Tokens t(line, lines);
  const int64_t i = t.integer("the row index"), j = t.integer("the column index");
  if (i < 1 || i > h.rows) lines.fail("row index " + std::to_string(i) + " out of range [1, " + std::to_string(h.rows) + "]");
  if (j < 1 || j > h.cols)
    lines.fail("column index " + std::to_string(j) + " out of range [1, " + std::to_string(h.cols) + "]");
  Entry e = read_value(t, h, target, lines);
  const char* sym = mm_name(h.symmetry);
  if ((h.symmetry == MmSymmetry::Symmetric || h.symmetry == MmSymmetry::Hermitian) && j > i)
    lines.fail("entry (" + std::to_string(i) + ", " + std::to_string(j) + ") lies above the diagonal, but the header says " +
               sym + " (only the lower triangle may be stored)");
  if (h.symmetry == MmSymmetry::SkewSymmetric && j >= i)
    lines.fail("entry (" + std::to_string(i) + ", " + std::to_string(j) + ") is " + (i == j ? "on" : "above") +
               " the diagonal, but the header says skew-symmetric (only the strict lower triangle may be stored)");
  if (h.symmetry == MmSymmetry::Hermitian && i == j && e.im != 0)
    lines.fail("diagonal entry (" + std::to_string(i) + ", " + std::to_string(i) +
               ") has a nonzero imaginary part, but the header says hermitian");
  i0 = i - 1;
  j0 = j - 1;
  return e;
}

struct CooBuild {
  std::vector<int64_t> i, j;
  std::vector<Entry> v;
  std::vector<int> line;  // per stored entry, for duplicate reports
};

Tensor values_tensor(const std::vector<Entry>& v, DType t) {
  Tensor r = Tensor::empty(t, {int64_t(v.size())});
  for (size_t k = 0; k < v.size(); ++k) {
    if (t == DType::F64) r.data<double>()[k] = v[k].re;
    else if (t == DType::F32) r.data<float>()[k] = float(v[k].re);
    else r.data<c64>()[k] = c64(float(v[k].re), float(v[k].im));
  }
  return r;
}

// Adds the mirror image of every off-diagonal stored entry.
void expand(CooBuild& c, MmSymmetry s) {
  if (s == MmSymmetry::General) return;
  const size_t n = c.i.size();
  for (size_t k = 0; k < n; ++k) {
    if (c.i[k] == c.j[k]) continue;
    Entry e = c.v[k];
    if (s == MmSymmetry::SkewSymmetric) e = {-e.re, -e.im};
    if (s == MmSymmetry::Hermitian) e.im = -e.im;
    c.i.push_back(c.j[k]);
    c.j.push_back(c.i[k]);
    c.v.push_back(e);
  }
}

void check_duplicates(const CooBuild& c, const Lines& lines) {
  std::vector<size_t> order(c.line.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return c.i[a] != c.i[b] ? c.i[a] < c.i[b] : c.j[a] != c.j[b] ? c.j[a] < c.j[b] : c.line[a] < c.line[b];
  });
  for (size_t k = 1; k < order.size(); ++k) {
    size_t a = order[k - 1], b = order[k];
    if (c.i[a] == c.i[b] && c.j[a] == c.j[b])
      lines.fail_at(c.line[b], "duplicate entry (" + std::to_string(c.i[b] + 1) + ", " + std::to_string(c.j[b] + 1) +
                                   "), first stored on line " + std::to_string(c.line[a]));
  }
}

MatrixMarketFile parse_entries(Lines& lines, MatrixMarketFile& out, DType target, const ReadOptions& o,
                               int64_t most_in_file);

// The fewest bytes one entry takes in the file: its tokens of one character each, one
// space between them and a line break ("1 1\n" for pattern, "1 1 1\n" for real or integer,
// "1 1 1 1\n" for complex; "1\n" or "1 1\n" in an array). k entries need at least
// k * fewest - 1 bytes (the last line may lack its break), so a file with B bytes after
// its size line holds at most (B + 1) / fewest entries.
int64_t fewest_bytes_per_entry(const MmHeader& h) {
  const int64_t values = h.field == MmField::Pattern ? 0 : h.field == MmField::Complex ? 2 : 1;
  const int64_t tokens = (h.format == MmFormat::Coordinate ? 2 : 0) + values;
  return 2 * tokens;  // each token, plus a space or the line break after it
}

MatrixMarketFile parse(std::string_view text, const std::string& name, const ReadOptions& o) {
  Lines lines(text, name);
  MatrixMarketFile out;
  MmHeader& h = out.header;
  h = parse_header(lines);
  const int size_line = lines.number();
  const DType target = target_type(h, o, lines);
  // Nothing is allocated by the size line's word alone. Entries are stored as they are
  // read, with room reserved for at most what the rest of the file can hold: a 100-byte
  // file claiming 10^12 entries reserves for 16 and ends in "truncated" at its last line.
  const int64_t most_in_file = (int64_t(lines.remaining()) + 1) / fewest_bytes_per_entry(h);
  // Assembling CSR keeps four arrays of rows + 1 64-bit integers (counts, fill positions,
  // row starts, row_ptr), whatever the entry count.
  try {
    const int64_t row_bytes = checked_mul(checked_add(h.rows, 1, "the row count"), 32, "the row pointers' bytes");
    if (std::string why = exceeds_host_memory(row_bytes); !why.empty())
      lines.fail_at(size_line, "the " + std::to_string(h.rows) + " rows the size line declares do not fit in memory: their row pointers alone need " + why);
    if (o.max_bytes > 0 && row_bytes > o.max_bytes)
      lines.fail_at(size_line, "the " + std::to_string(h.rows) + " rows the size line declares need " +
                                   std::to_string(row_bytes) + " bytes of row pointers, more than the " +
                                   std::to_string(o.max_bytes) + " this read allows (ReadOptions::max_bytes)");
  } catch (const SizeError& e) {
    lines.fail_at(size_line, e.what());
  }
  try {
    return parse_entries(lines, out, target, o, most_in_file);
  } catch (const std::bad_alloc&) {
    lines.fail_at(size_line, "the matrix the size line declares does not fit in memory");
  } catch (const std::length_error&) {
    lines.fail_at(size_line, "the matrix the size line declares does not fit in memory");
  }
}

MatrixMarketFile parse_entries(Lines& lines, MatrixMarketFile& out, DType target, const ReadOptions& o,
                               int64_t most_in_file) {
  MmHeader& h = out.header;
  CooBuild c;
  const bool want_lines = o.duplicates == Duplicates::Error && h.format == MmFormat::Coordinate;
  // A lying entry count must not allocate: reserve no more than the file can hold.
  const size_t guess = size_t(std::min(h.entries, most_in_file));
  c.i.reserve(guess);
  c.j.reserve(guess);
  c.v.reserve(guess);
  std::string_view line;
  const char* sym = mm_name(h.symmetry);
  if (h.format == MmFormat::Coordinate) {
    for (int64_t k = 0; k < h.entries; ++k) {
      if (!lines.next_data(line))
        lines.fail_at(lines.number() + 1, "truncated: the file ends after " + std::to_string(k) + " of the " +
                                              std::to_string(h.entries) + " entries the size line declares");
      int64_t i = 0, j = 0;
      Entry e = read_coordinate_entry(line, h, target, lines, i, j);
      c.i.push_back(i);
      c.j.push_back(j);
      c.v.push_back(e);
      if (want_lines) c.line.push_back(lines.number());
    }
  } else {
    const int64_t n = h.rows;
    int64_t k = 0;
    // Bounded by the values the array holds, not by its column count alone: a 0 x 10^16
    // array holds nothing and must not spin through its empty columns.
    for (int64_t j = 0; j < h.cols && k < h.entries; ++j) {
      int64_t first = 0;
      if (h.symmetry == MmSymmetry::Symmetric || h.symmetry == MmSymmetry::Hermitian) first = j;
      if (h.symmetry == MmSymmetry::SkewSymmetric) first = j + 1;
      for (int64_t i = first; i < n; ++i, ++k) {
        if (!lines.next_data(line))
          lines.fail_at(lines.number() + 1, "truncated: the file ends after " + std::to_string(k) + " of the " +
                                                std::to_string(h.entries) + " values a " + std::to_string(h.rows) +
                                                " x " + std::to_string(h.cols) + " " + sym + " array holds");
        Tokens t(line, lines);
        Entry e = read_value(t, h, target, lines);
        if (h.symmetry == MmSymmetry::Hermitian && i == j && e.im != 0)
          lines.fail("diagonal entry (" + std::to_string(i + 1) + ", " + std::to_string(i + 1) +
                     ") has a nonzero imaginary part, but the header says hermitian");
        if (e.re == 0 && e.im == 0) continue;
        c.i.push_back(i);
        c.j.push_back(j);
        c.v.push_back(e);
      }
    }
  }
  if (lines.next_data(line))
    lines.fail(std::string("unexpected data after the ") + std::to_string(h.entries) + " entries the " +
               (h.format == MmFormat::Coordinate ? "size line declares" : "array holds"));
  if (want_lines) check_duplicates(c, lines);
  expand(c, h.symmetry);
  Tensor v = values_tensor(c.v, target);
  c.v = {};
  out.matrix = CsrMatrix::from_coo(h.rows, h.cols, std::move(c.i), std::move(c.j), v, o.index_type);
  if (h.field == MmField::Pattern) {  // a repeated pattern entry is still just "present"
    const Tensor& vals = out.matrix.values();
    for (int64_t k = 0; k < vals.numel(); ++k) {
      if (target == DType::F64) vals.data<double>()[k] = 1;
      else if (target == DType::F32) vals.data<float>()[k] = 1;
      else vals.data<c64>()[k] = 1;
    }
  }
  return std::move(out);
}

std::string slurp(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ParseError(path, 0, "is a directory, not a Matrix Market file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ParseError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw ParseError(path, 0, "read failed");
  return std::move(s).str();
}

// ---- writing

// Buffered text output into a callback.
class Out {
 public:
  explicit Out(std::function<void(std::string_view)> sink) : sink_(std::move(sink)) { buf_.reserve(1 << 20); }
  ~Out() = default;
  Out& operator<<(std::string_view s) {
    buf_ += s;
    if (buf_.size() >= (1 << 20)) flush();
    return *this;
  }
  Out& operator<<(char c) {
    buf_ += c;
    return *this;
  }
  Out& integer(int64_t v) {
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, v);
    return *this << std::string_view(b, size_t(r.ptr - b));
  }
  template <class T>
  Out& real(T v) {  // shortest digits that read back to the same T
    char b[40];
    auto r = std::to_chars(b, b + sizeof b, v);
    return *this << std::string_view(b, size_t(r.ptr - b));
  }
  void flush() {
    if (!buf_.empty()) sink_(buf_);
    buf_.clear();
  }

 private:
  std::function<void(std::string_view)> sink_;
  std::string buf_;
};

int64_t idx(const Tensor& t, int64_t k) {
  return t.dtype() == DType::I32 ? int64_t(t.data<int32_t>()[k]) : t.data<int64_t>()[k];
}

// A host copy with sorted, duplicate-free rows.
CsrMatrix canonical(const CsrMatrix& A0) {
  CsrMatrix A = A0.is_host() ? A0 : A0.to(host_allocator());
  if (A.sorted_unique()) return A;
  Coo c = A.to_coo();
  return CsrMatrix::from_coo(c.rows, c.cols, c.row, c.col, c.values, A.index_type());
}

cd value_of(const CsrMatrix& A, int64_t k) {
  switch (A.value_type()) {
    case DType::F32: return double(A.values().data<float>()[k]);
    case DType::F64: return A.values().data<double>()[k];
    default: {
      c64 v = A.values().data<c64>()[k];
      return {double(v.real()), double(v.imag())};
    }
  }
}

// A(r, c) of a canonical matrix (0 when not stored).
cd lookup(const CsrMatrix& A, int64_t r, int64_t c) {
  int64_t b = idx(A.row_ptr(), r), e = idx(A.row_ptr(), r + 1);
  while (b < e) {
    int64_t m = (b + e) / 2, cm = idx(A.col_idx(), m);
    if (cm == c) return value_of(A, m);
    if (cm < c) b = m + 1;
    else e = m;
  }
  return 0;
}

std::string show(cd v) {
  std::ostringstream o;
  o.precision(17);
  if (v.imag() == 0) o << v.real();
  else o << "(" << v.real() << ", " << v.imag() << ")";
  return o.str();
}

void check_symmetry(const CsrMatrix& A, MmSymmetry s, MmField field) {
  if (s == MmSymmetry::General) return;
  if (A.rows() != A.cols())
    throw InputError(std::string("cannot write a ") + std::to_string(A.rows()) + " x " + std::to_string(A.cols()) +
                     " matrix as " + mm_name(s) + " (not square)");
  auto where = [](int64_t r, int64_t c) { return "(" + std::to_string(r + 1) + ", " + std::to_string(c + 1) + ")"; };
  for (int64_t r = 0; r < A.rows(); ++r)
    for (int64_t k = idx(A.row_ptr(), r); k < idx(A.row_ptr(), r + 1); ++k) {
      const int64_t c = idx(A.col_idx(), k);
      const cd a = value_of(A, k), b = lookup(A, c, r);
      bool ok;
      if (field == MmField::Pattern) {
        ok = false;  // the structure must be symmetric
        for (int64_t q = idx(A.row_ptr(), c); q < idx(A.row_ptr(), c + 1) && !ok; ++q) ok = idx(A.col_idx(), q) == r;
      } else if (s == MmSymmetry::Symmetric) {
        ok = a == b;
      } else if (s == MmSymmetry::SkewSymmetric) {
        ok = r == c ? a == 0.0 : a == -b;
      } else {
        ok = r == c ? a.imag() == 0 : a == std::conj(b);
      }
      if (!ok)
        throw InputError(std::string("the matrix is not ") + mm_name(s) + ": A" + where(r, c) + " = " + show(a) +
                         (r == c ? std::string(" on the diagonal") : ", A" + where(c, r) + " = " + show(b)));
    }
}

// Does entry (r, c) belong in the file for this symmetry?
bool stored(MmSymmetry s, int64_t r, int64_t c) {
  if (s == MmSymmetry::General) return true;
  if (s == MmSymmetry::SkewSymmetric) return r > c;
  return r >= c;
}

void write_value(Out& o, const CsrMatrix& A, int64_t k, MmField field) {
  switch (field) {
    case MmField::Pattern: return;
    case MmField::Integer: o << ' '; o.integer(int64_t(value_of(A, k).real())); return;
    case MmField::Real:
      o << ' ';
      if (A.value_type() == DType::F32) o.real(A.values().data<float>()[k]);
      else if (A.value_type() == DType::F64) o.real(A.values().data<double>()[k]);
      else o.real(A.values().data<c64>()[k].real());
      return;
    case MmField::Complex:
      o << ' ';
      if (A.value_type() == DType::C64) {
        c64 v = A.values().data<c64>()[k];
        o.real(v.real()) << ' ';
        o.real(v.imag());
      } else if (A.value_type() == DType::F32) {
        o.real(A.values().data<float>()[k]) << " 0";
      } else {
        o.real(A.values().data<double>()[k]) << " 0";
      }
      return;
  }
}

void write_dense_value(Out& o, cd v, DType t, MmField field) {
  if (field == MmField::Integer) {
    o.integer(int64_t(v.real()));
  } else if (t == DType::F64) {
    o.real(v.real());
    if (field == MmField::Complex) o << " 0";
  } else {
    o.real(float(v.real()));
    if (field == MmField::Complex) o << ' ', o.real(float(v.imag()));
  }
}

void format(const CsrMatrix& A0, const WriteOptions& w, Out& o) {
  const CsrMatrix A = canonical(A0);
  const MmField field = w.field.value_or(A.value_type() == DType::C64 ? MmField::Complex : MmField::Real);
  if (w.format == MmFormat::Array && field == MmField::Pattern)
    throw InputError("cannot write an array Matrix Market file with the pattern field");
  if (w.symmetry == MmSymmetry::Hermitian && field != MmField::Complex)
    throw InputError("cannot write a hermitian Matrix Market file without the complex field");
  if (w.symmetry == MmSymmetry::SkewSymmetric && field == MmField::Pattern)
    throw InputError("cannot write a skew-symmetric Matrix Market file with the pattern field");
  for (int64_t k = 0; k < A.nnz(); ++k) {
    cd v = value_of(A, k);
    if ((field == MmField::Real || field == MmField::Integer) && v.imag() != 0)
      throw InputError(std::string("cannot write complex values with the ") + mm_name(field) + " field (entry " +
                       std::to_string(k) + " is " + show(v) + ")");
    if (field == MmField::Integer && (v.real() != std::floor(v.real()) || std::fabs(v.real()) > kMaxExactInt))
      throw InputError("cannot write " + show(v) + " (entry " + std::to_string(k) + ") with the integer field");
    if (field != MmField::Pattern && (!std::isfinite(v.real()) || !std::isfinite(v.imag())))
      throw InputError("cannot write the non-finite value " + show(v) + " (entry " + std::to_string(k) +
                       "): Matrix Market readers refuse NaN and Inf");
  }
  check_symmetry(A, w.symmetry, field);
  o << "%%MatrixMarket matrix " << mm_name(w.format) << ' ' << mm_name(field) << ' ' << mm_name(w.symmetry) << '\n';
  if (!w.comment.empty()) {
    std::string_view c = w.comment;
    while (true) {
      size_t e = c.find('\n');
      o << '%' << c.substr(0, e) << '\n';
      if (e == std::string_view::npos) break;
      c = c.substr(e + 1);
    }
  }
  if (w.format == MmFormat::Coordinate) {
    int64_t count = 0;
    for (int64_t r = 0; r < A.rows(); ++r)
      for (int64_t k = idx(A.row_ptr(), r); k < idx(A.row_ptr(), r + 1); ++k) count += stored(w.symmetry, r, idx(A.col_idx(), k));
    o.integer(A.rows()) << ' ';
    o.integer(A.cols()) << ' ';
    o.integer(count) << '\n';
    for (int64_t r = 0; r < A.rows(); ++r)
      for (int64_t k = idx(A.row_ptr(), r); k < idx(A.row_ptr(), r + 1); ++k) {
        const int64_t c = idx(A.col_idx(), k);
        if (!stored(w.symmetry, r, c)) continue;
        o.integer(r + 1) << ' ';
        o.integer(c + 1);
        write_value(o, A, k, field);
        o << '\n';
      }
  } else {
    o.integer(A.rows()) << ' ';
    o.integer(A.cols()) << '\n';
    // Column-major: walk the transpose's rows.
    Coo t = A.to_coo();
    CsrMatrix At = CsrMatrix::from_coo(A.cols(), A.rows(), t.col, t.row, t.values, DType::I64);
    for (int64_t c = 0; c < A.cols(); ++c) {
      int64_t k = idx(At.row_ptr(), c);
      const int64_t e = idx(At.row_ptr(), c + 1);
      for (int64_t r = 0; r < A.rows(); ++r) {
        cd v = 0;
        if (k < e && idx(At.col_idx(), k) == r) v = value_of(At, k++);
        if (!stored(w.symmetry, r, c)) continue;
        write_dense_value(o, v, A.value_type(), field);
        o << '\n';
      }
    }
  }
  o.flush();
}

}  // namespace

MatrixMarketFile parse_matrix_market(std::string_view text, const std::string& name, const ReadOptions& opts) {
  return parse(text, name, opts);
}

MatrixMarketFile read_matrix_market(const std::string& path, const ReadOptions& opts) {
  std::string text = slurp(path);
  return parse_matrix_market(text, path, opts);
}

MmHeader parse_matrix_market_header(std::string_view text, const std::string& name, MmDataStart* start) {
  Lines lines(text, name);
  MmHeader h = parse_header(lines);
  if (start) {
    start->offset = int64_t(text.size() - lines.remaining());
    start->line = lines.number();
    start->file_bytes = int64_t(text.size());
  }
  return h;
}

MmHeader read_matrix_market_header(const std::string& path, MmDataStart* start) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ParseError(path, 0, "is a directory, not a Matrix Market file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ParseError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  std::string text, line;
  int data_lines = 0;
  while (data_lines < 2 && std::getline(f, line)) {  // the banner, then the size line
    text += line;
    text += '\n';
    size_t i = line.find_first_not_of(" \t\r");
    if (text.size() == line.size() + 1 || (i != std::string::npos && line[i] != '%')) ++data_lines;
  }
  MmHeader h = parse_matrix_market_header(text, path, start);
  if (start) {
    f.clear();
    f.seekg(0, std::ios::end);
    const int64_t size = int64_t(f.tellg());
    // The text holds every line read so far with a '\n' each; the last may have had none.
    start->offset = std::min<int64_t>(start->offset, size);
    start->file_bytes = size;
  }
  return h;
}

int64_t parse_matrix_market_entries(std::string_view slice, const MmHeader& h, const std::string& name, int first_line,
                                    MmEntries& out) {
  if (h.format != MmFormat::Coordinate || h.field == MmField::Complex)
    throw InputError(name + ": parse_matrix_market_entries reads coordinate files of real, integer or pattern values, not " +
                     mm_name(h.format) + " " + mm_name(h.field));
  Lines lines(slice, name, first_line - 1);
  std::string_view line;
  int64_t count = 0;
  while (lines.next_data(line)) {
    int64_t i = 0, j = 0;
    const Entry e = read_coordinate_entry(line, h, DType::F64, lines, i, j);
    out.i.push_back(i);
    out.j.push_back(j);
    out.v.push_back(e.re);
    ++count;
  }
  return count;
}

std::string format_matrix_market(const CsrMatrix& A, const WriteOptions& opts) {
  std::string s;
  Out o([&](std::string_view v) { s += v; });
  format(A, opts, o);
  return s;
}

void write_matrix_market(const std::string& path, const CsrMatrix& A, const WriteOptions& opts) {
  io::AtomicFile out(path);
  {
    std::ofstream f(out.temp(), std::ios::binary | std::ios::trunc);
    if (!f) throw InputError(path + ": cannot open for writing (" + std::strerror(errno) + ")");
    Out o([&](std::string_view v) {
      f.write(v.data(), std::streamsize(v.size()));
      if (!f) throw InputError(path + ": write failed");
    });
    format(A, opts, o);
    f.close();
    if (!f) throw InputError(path + ": write failed");
  }
  out.commit();
}

}  // namespace rlx::sparse
