#include "solvers/sparse/hdf5_matrix.hpp"

#include <algorithm>
#include <climits>

#include "core/error.hpp"
#include "io/hdf5.hpp"
#include "solvers/sparse/host_memory.hpp"

namespace rlx::sparse {

namespace {

// What the group says, checked against its datasets' headers before any data are read.
struct Header {
  std::string where;  // "file:group"
  std::string prefix;  // "group/" (or "" for the root): the datasets' names start with it
  int64_t rows = 0, cols = 0, nnz = 0;
  DType value = DType::F64;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Header read_header(const io::H5Reader& r, const std::string& path, const std::string& group) {
  Header h;
  const std::string obj = group.empty() ? "/" : group;
  h.where = path + ":" + obj;
  h.prefix = obj == "/" ? "" : (obj.back() == '/' ? obj : obj + "/");
  io::H5Attr format;
  try {
    format = r.attr(obj, "format");
  } catch (const InputError&) {
    throw InputError(h.where + ": not a CSR matrix (no attribute format = \"csr\"; docs/io.md gives the layout)");
  }
  if (!std::holds_alternative<std::string>(format) || std::get<std::string>(format) != "csr")
    throw InputError(h.where + ": not a CSR matrix (its attribute format is not \"csr\")");
  auto size_attr = [&](const char* name) {
    const io::H5Attr v = r.attr(obj, name);
    if (!std::holds_alternative<int64_t>(v)) throw InputError(h.where + "@" + name + ": not an integer");
    const int64_t k = std::get<int64_t>(v);
    if (k < 0 || k > (int64_t(1) << 62)) throw InputError(h.where + "@" + name + ": " + std::to_string(k) + " is out of range");
    return k;
  };
  h.rows = size_attr("rows");
  h.cols = size_attr("cols");
  auto vector_info = [&](const char* name) {
    const io::H5DatasetInfo d = r.info(h.prefix + name);
    if (d.shape.size() != 1)
      throw InputError(path + ":" + h.prefix + name + ": must be one-dimensional, got shape " + shape_str(d.shape));
    return d;
  };
  const io::H5DatasetInfo rp = vector_info("row_ptr"), ci = vector_info("col_idx"), v = vector_info("values");
  for (auto [d, name] : {std::pair{rp, "row_ptr"}, std::pair{ci, "col_idx"}})
    if (d.dtype != DType::I32 && d.dtype != DType::I64)
      throw InputError(path + ":" + h.prefix + name + ": elements must be 32- or 64-bit integers, got " + dtype_name(d.dtype));
  if (v.dtype != DType::F32 && v.dtype != DType::F64 && v.dtype != DType::C64)
    throw InputError(path + ":" + h.prefix + "values: elements must be f32, f64 or complex64, got " + dtype_name(v.dtype));
  if (rp.shape[0] != h.rows + 1)
    throw InputError(path + ":" + h.prefix + "row_ptr: " + std::to_string(rp.shape[0]) + " entries for the " +
                     std::to_string(h.rows) + " rows the attribute rows declares (expected rows + 1)");
  if (v.shape[0] != ci.shape[0])
    throw InputError(h.where + ": col_idx has " + std::to_string(ci.shape[0]) + " entries, values " +
                     std::to_string(v.shape[0]) + " (both must hold nnz)");
  h.nnz = ci.shape[0];
  h.value = v.dtype;
  return h;
}

// n items of `per` bytes, saturated (n is at most 2^62: checked by the reader).
int64_t bytes_for(int64_t n, int64_t per) { return n > INT64_MAX / per ? INT64_MAX : n * per; }

// A 1-D integer tensor (i32 or i64) as int64 values.
std::vector<int64_t> as_i64(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) v[size_t(k)] = index_at(t, k);
  return v;
}

Tensor i64_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DType::I64, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// Rows [first, first + count) with global column numbers: a count x cols matrix. Reads
// row_ptr[first .. first + count], checks it, then reads the entries it spans.
CsrMatrix read_rows(const io::H5Reader& r, const std::string& path, const Header& h, int64_t first, int64_t count,
                    int64_t* entries) {
  const std::string rp_name = path + ":" + h.prefix + "row_ptr";
  if (std::string over = exceeds_host_memory(bytes_for(count + 1, 16)); !over.empty())
    throw InputError(rp_name + ": " + std::to_string(count) + " rows need " + over);
  std::vector<int64_t> rp = as_i64(r.read_rows(h.prefix + "row_ptr", first, count + 1));
  for (int64_t k = 0; k <= count; ++k) {
    const int64_t at = rp[size_t(k)], row = first + k;
    if (at < 0 || at > h.nnz)
      throw InputError(rp_name + ": row_ptr[" + std::to_string(row) + "] = " + std::to_string(at) + " lies outside [0, " +
                       std::to_string(h.nnz) + "] (nnz, the length of col_idx and values)");
    if (k > 0 && at < rp[size_t(k) - 1])
      throw InputError(rp_name + ": row " + std::to_string(row - 1) + ": row_ptr decreases from " +
                       std::to_string(rp[size_t(k) - 1]) + " to " + std::to_string(at));
  }
  if (first == 0 && rp[0] != 0) throw InputError(rp_name + ": row_ptr[0] = " + std::to_string(rp[0]) + ", must be 0");
  if (first + count == h.rows && rp[size_t(count)] != h.nnz)
    throw InputError(rp_name + ": row_ptr[" + std::to_string(h.rows) + "] = " + std::to_string(rp[size_t(count)]) +
                     ", must be nnz = " + std::to_string(h.nnz) + " (the length of col_idx and values)");
  const int64_t lo = rp[0], hi = rp[size_t(count)], m = hi - lo;
  if (std::string over = exceeds_host_memory(bytes_for(m, 16 + int64_t(dtype_size(h.value)))); !over.empty())
    throw InputError(h.where + ": the " + std::to_string(m) + " entries of rows " + std::to_string(first) + ".." +
                     std::to_string(first + count - 1) + " need " + over);
  std::vector<int64_t> ci = as_i64(r.read_rows(h.prefix + "col_idx", lo, m));
  Tensor values = r.read_rows(h.prefix + "values", lo, m);
  for (int64_t k = 0; k < count; ++k)
    for (int64_t e = rp[size_t(k)]; e < rp[size_t(k) + 1]; ++e) {
      const int64_t c = ci[size_t(e - lo)];
      if (c < 0 || c >= h.cols)
        throw InputError(path + ":" + h.prefix + "col_idx: row " + std::to_string(first + k) + ": column index " +
                         std::to_string(c) + " (entry " + std::to_string(e) + ") out of range [0, " + std::to_string(h.cols) +
                         ")");
    }
  for (int64_t& v : rp) v -= lo;
  if (entries) *entries = m;
  return CsrMatrix(count, h.cols, i64_tensor(rp), i64_tensor(ci), values);
}

}  // namespace

std::optional<Hdf5MatrixSpec> hdf5_matrix_spec(const std::string& spec) {
  for (const char* ext : {".h5", ".hdf5"}) {
    if (ends_with(spec, ext)) return Hdf5MatrixSpec{spec, "/"};
    const size_t at = spec.rfind(std::string(ext) + ":");
    if (at != std::string::npos && at + std::char_traits<char>::length(ext) + 1 < spec.size()) {
      const size_t colon = at + std::char_traits<char>::length(ext);
      return Hdf5MatrixSpec{spec.substr(0, colon), spec.substr(colon + 1)};
    }
  }
  return std::nullopt;
}

CsrMatrix read_hdf5_csr(const std::string& path, const std::string& group) {
  io::H5Reader r(path);
  const Header h = read_header(r, path, group);
  return read_rows(r, path, h, 0, h.rows, nullptr);
}

DistCsrMatrix read_hdf5_csr_distributed(const dist::Communicator& comm, const std::string& path, const std::string& group,
                                        Hdf5ReadInfo* info) {
  Hdf5ReadInfo local_info;
  Hdf5ReadInfo& inf = info ? *info : local_info;
  inf = {};
  // Every rank opens the file and reads the group's header itself (the same few bytes).
  std::optional<io::H5Reader> r;
  Header h;
  dist::raise_collectively(comm, dist::failure_of([&] {
                             r.emplace(path);
                             h = read_header(*r, path, group);
                           }, path));
  if (h.rows != h.cols)
    throw dist::CollectiveError(h.where + ": the matrix is " + std::to_string(h.rows) + " x " + std::to_string(h.cols) +
                                ", not square (a distributed matrix must be)");
  inf.rows = h.rows, inf.cols = h.cols, inf.nnz = h.nnz;
  const std::vector<int64_t> starts = even_row_starts(h.rows, comm.size());
  const int64_t first = starts[size_t(comm.rank())], count = starts[size_t(comm.rank()) + 1] - first;
  CsrMatrix mine;
  dist::raise_collectively(comm, dist::failure_of([&] { mine = read_rows(*r, path, h, first, count, &inf.entries_read); }, path));
  r.reset();
  return DistCsrMatrix::from_local_rows(comm, mine);
}

}  // namespace rlx::sparse
