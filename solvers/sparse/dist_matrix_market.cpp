#include "solvers/sparse/dist_matrix_market.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "solvers/sparse/host_memory.hpp"

namespace rlx::sparse {

namespace {

// Byte q of [from, to) of the file, read in pieces; `pos` is the file offset of buf[0].
class Reader {
 public:
  explicit Reader(const std::string& path) : f_(path, std::ios::binary), path_(path) {
    if (!f_) throw ParseError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  }
  // Appends the bytes [from, to) to out.
  void read(int64_t from, int64_t to, std::string& out) {
    if (to <= from) return;
    const size_t old = out.size();
    out.resize(old + size_t(to - from));
    f_.clear();
    f_.seekg(from);
    f_.read(out.data() + old, to - from);
    if (f_.gcount() != to - from) throw ParseError(path_, 0, "read failed (the file changed while it was read?)");
  }

 private:
  std::ifstream f_;
  std::string path_;
};

// The header fields every rank needs, as integers for one broadcast.
enum HeadField { kFormat, kField, kSymmetry, kRows, kCols, kEntries, kOffset, kLine, kBytes, kHeadSize };

}  // namespace

DistCsrMatrix read_matrix_market_distributed(const dist::Communicator& comm, const std::string& path, DistReadInfo* info) {
  const int p = comm.size(), me = comm.rank();
  DistReadInfo local_info;
  DistReadInfo& inf = info ? *info : local_info;
  inf = {};

  // 1. The header, read by rank 0.
  int64_t head[kHeadSize] = {};
  std::string why;
  if (me == 0) {
    why = dist::failure_of([&] {
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec)) throw ParseError(path, 0, "is a directory, not a Matrix Market file");
      MmDataStart start;
      const MmHeader h = read_matrix_market_header(path, &start);
      head[kFormat] = int64_t(h.format), head[kField] = int64_t(h.field), head[kSymmetry] = int64_t(h.symmetry);
      head[kRows] = h.rows, head[kCols] = h.cols, head[kEntries] = h.entries;
      head[kOffset] = start.offset, head[kLine] = start.line, head[kBytes] = start.file_bytes;
    }, path);
  }
  dist::raise_collectively(comm, why);
  comm.broadcast(head, kHeadSize, DType::I64, 0);
  MmHeader& h = inf.header;
  h.format = MmFormat(head[kFormat]), h.field = MmField(head[kField]), h.symmetry = MmSymmetry(head[kSymmetry]);
  h.rows = head[kRows], h.cols = head[kCols], h.entries = head[kEntries];
  if (h.rows != h.cols)
    throw dist::CollectiveError(path + ": the matrix is " + std::to_string(h.rows) + " x " + std::to_string(h.cols) +
                                ", not square (a distributed matrix must be)");

  // Array and complex files: rank 0 reads the whole file and scatters its rows.
  if (h.format != MmFormat::Coordinate || h.field == MmField::Complex || h.symmetry == MmSymmetry::Hermitian) {
    CsrMatrix whole;
    if (me == 0) why = dist::failure_of([&] { whole = read_matrix_market(path).matrix; }, path);
    dist::raise_collectively(comm, why);
    inf.parallel = false;
    return DistCsrMatrix::scatter(comm, whole);
  }
  inf.parallel = true;

  // Each rank's rows, checked against memory before anything is sized by them.
  const int64_t n = h.rows;
  const std::vector<int64_t> starts = even_row_starts(n, p);
  const int64_t first = starts[size_t(me)], mine = starts[size_t(me) + 1] - first;
  why.clear();
  if (std::string over = exceeds_host_memory(mine > (int64_t(1) << 58) ? INT64_MAX : (mine + 1) * 32); !over.empty())
    why = path + ":" + std::to_string(head[kLine]) + ": the " + std::to_string(n) + " rows the size line declares do not fit: " +
          std::to_string(mine) + " rows on this rank need " + over;
  dist::raise_collectively(comm, why);

  // 2. This rank's lines: those whose first byte lies in [a, b).
  const int64_t D = head[kOffset], S = head[kBytes], len = S - D;
  auto cut = [&](int r) { return D + int64_t((__int128)len * r / p); };
  const int64_t a = cut(me), b = cut(me + 1);
  std::string text;
  int64_t newlines = 0;
  why = dist::failure_of([&] {
    if (a >= b) return;
    Reader f(path);
    // A line starts at q when q == D or byte q - 1 is a line break: look at [a - 1, b - 1).
    std::string window;
    const int64_t w0 = me == 0 ? a : a - 1;
    f.read(w0, b, window);
    int64_t start = -1;
    if (me == 0) start = a;
    else {
      const size_t k = window.find('\n');
      if (k != std::string::npos && int64_t(k) + w0 < b - 1) start = w0 + int64_t(k) + 1;
    }
    if (start < 0) return;  // one line runs through this rank's whole range
    text.assign(window, size_t(start - w0), std::string::npos);
    // The last line starting before b ends at the first line break at or after b - 1.
    if (text.empty() || text.back() != '\n') {
      int64_t at = b;
      while (at < S) {
        const int64_t to = std::min(S, at + (int64_t(1) << 16));
        const size_t old = text.size();
        f.read(at, to, text);
        const size_t k = text.find('\n', old);
        at = to;
        if (k != std::string::npos) {
          text.resize(k + 1);
          break;
        }
      }
    }
    newlines = int64_t(std::count(text.begin(), text.end(), '\n'));
  }, path);
  dist::raise_collectively(comm, why);
  inf.bytes_read = int64_t(text.size());

  // Line numbers: the size line's, plus every earlier rank's lines.
  const std::vector<int64_t> line_counts = comm.all_gather_counts(newlines);
  int64_t first_line = head[kLine] + 1;
  for (int r = 0; r < me; ++r) first_line += line_counts[size_t(r)];
  MmEntries entries;
  why = dist::failure_of([&] {
    if (first_line > INT32_MAX) throw ParseError(path, 0, "more lines than the reader counts (2^31)");
    inf.entries_read = parse_matrix_market_entries(text, h, path, int(first_line), entries);
  }, path);
  text = {};
  dist::raise_collectively(comm, why);

  // 3. The count the size line declares, agreed on by all.
  const int64_t total = comm.all_reduce(inf.entries_read, ReduceOp::Sum);
  if (total != h.entries) {
    int64_t lines = head[kLine];
    for (int64_t c : line_counts) lines += c;
    throw dist::CollectiveError(
        total < h.entries
            ? ParseError(path, int(std::min<int64_t>(lines + 1, INT32_MAX)),
                         "truncated: the file ends after " + std::to_string(total) + " of the " + std::to_string(h.entries) +
                             " entries the size line declares")
                  .what()
            : ParseError(path, head[kLine], "the file holds " + std::to_string(total) + " entries, more than the " +
                                                std::to_string(h.entries) + " the size line declares")
                  .what());
  }

  // Mirror, then send each entry to its row's owner as (row, column, value bits).
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(p));
  auto owner = [&](int64_t row) { return size_t(std::upper_bound(starts.begin(), starts.end(), row) - starts.begin()) - 1; };
  auto send = [&](int64_t i, int64_t j, double v) {
    int64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    auto& o = out[owner(i)];
    o.push_back(i), o.push_back(j), o.push_back(bits);
  };
  why = dist::failure_of([&] {
    for (size_t k = 0; k < entries.i.size(); ++k) {
      const int64_t i = entries.i[k], j = entries.j[k];
      const double v = entries.v[k];
      send(i, j, v);
      if (i != j && h.symmetry != MmSymmetry::General) send(j, i, h.symmetry == MmSymmetry::SkewSymmetric ? -v : v);
    }
  }, path);
  entries = {};
  dist::raise_collectively(comm, why);
  std::vector<std::vector<int64_t>> in = comm.all_to_all(out);
  out = {};

  // 4. This rank's rows.
  std::vector<int64_t> I, J;
  std::vector<double> V;
  for (const auto& from : in)
    for (size_t k = 0; k + 2 < from.size(); k += 3) {
      I.push_back(from[k] - first);
      J.push_back(from[k + 1]);
      double v;
      std::memcpy(&v, &from[k + 2], sizeof v);
      V.push_back(v);
    }
  in = {};
  CsrMatrix rows = CsrMatrix::from_coo(mine, n, I, J, V, DType::F64);
  if (h.field == MmField::Pattern) {  // a repeated pattern entry is still just "present"
    const Tensor& vals = rows.values();
    for (int64_t k = 0; k < vals.numel(); ++k) vals.data<double>()[k] = 1;
  }
  return DistCsrMatrix::from_local_rows(comm, rows);
}

}  // namespace rlx::sparse
