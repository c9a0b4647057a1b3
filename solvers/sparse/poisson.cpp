#include "solvers/sparse/poisson.hpp"

#include "core/checked.hpp"
#include "core/error.hpp"
#include "solvers/sparse/host_memory.hpp"

namespace rlx::sparse {

namespace {

// The (2*dim+1)-point Laplacian on an n^dim grid, columns in increasing order.
template <class I, class T>
CsrMatrix stencil(int64_t n, int dim, DType index) {
  int64_t rows = 1, faces = 1;
  for (int d = 0; d < dim; ++d) rows *= n;
  for (int d = 0; d + 1 < dim; ++d) faces *= n;
  // Each axis has n-1 neighbour pairs per line, n^(dim-1) lines, two entries per pair.
  const int64_t nnz = rows + 2 * dim * (n - 1) * faces;
  Tensor rp = Tensor::empty(index, {rows + 1}), ci = Tensor::empty(index, {nnz});
  Tensor va = Tensor::empty(dtype_of<T>::value, {nnz});
  I* p = rp.data<I>();
  I* c = ci.data<I>();
  T* v = va.data<T>();
  const T diag = T(float(2 * dim)), off = T(-1.f);
  const int64_t nn = n * n;
  int64_t k = 0;
  for (int64_t r = 0; r < rows; ++r) {
    p[r] = I(k);
    const int64_t x = r % n, y = (r / n) % n, z = dim == 3 ? r / nn : 0;
    auto put = [&](int64_t col, T val) {
      c[k] = I(col);
      v[k] = val;
      ++k;
    };
    if (dim == 3 && z > 0) put(r - nn, off);
    if (y > 0) put(r - n, off);
    if (x > 0) put(r - 1, off);
    put(r, diag);
    if (x + 1 < n) put(r + 1, off);
    if (y + 1 < n) put(r + n, off);
    if (dim == 3 && z + 1 < n) put(r + nn, off);
  }
  p[rows] = I(k);
  if (k != nnz) throw InternalError("poisson: wrote " + std::to_string(k) + " entries, expected " + std::to_string(nnz));
  return CsrMatrix(rows, rows, rp, ci, va);
}

CsrMatrix make(int64_t n, int dim, DType value, std::optional<DType> index) {
  const std::string name = "poisson" + std::to_string(dim) + "d";
  if (n < 1) throw InputError(name + ": n must be >= 1, got " + std::to_string(n));
  if (value != DType::F32 && value != DType::F64 && value != DType::C64)
    throw InputError(std::string("sparse values must be f32, f64 or c64, got ") + dtype_name(value));
  // Every size is checked arithmetic (core/checked.hpp), and the arrays' total is checked
  // against the host's memory, before anything is allocated: n = 3000 in 3D is 2.7e10 rows,
  // a size error here, not an allocation failure.
  const std::string what = name + ": n = " + std::to_string(n);
  int64_t rows = 1, faces = 1;
  for (int d = 0; d < dim; ++d) rows = checked_mul(rows, n, what + " (rows)");
  for (int d = 0; d + 1 < dim; ++d) faces = checked_mul(faces, n, what + " (rows)");
  // Each axis has n-1 neighbour pairs per line, n^(dim-1) lines, two entries per pair.
  const int64_t nnz = checked_add(rows, checked_mul(2 * dim, checked_mul(n - 1, faces, what + " (nonzeros)"), what + " (nonzeros)"),
                                  what + " (nonzeros)");
  DType it = index.value_or(index_type_for(rows, rows, nnz));
  if (it != DType::I32 && it != DType::I64)
    throw InputError(std::string("index dtype must be i32 or i64, got ") + dtype_name(it));
  if (it == DType::I32 && index_type_for(rows, rows, nnz) == DType::I64)
    throw InputError(what + " needs i64 indices (" + std::to_string(rows) + " rows, " + std::to_string(nnz) + " nonzeros)");
  const int64_t isz = int64_t(dtype_size(it)), vsz = int64_t(dtype_size(value));
  const int64_t bytes = checked_add(checked_mul(checked_add(rows, 1, what), isz, what + " (bytes)"),
                                    checked_mul(nnz, isz + vsz, what + " (bytes)"), what + " (bytes)");
  if (std::string why = exceeds_host_memory(bytes); !why.empty())
    throw SizeError(what + " is too large: " + std::to_string(rows) + " rows and " + std::to_string(nnz) + " nonzeros (" +
                    dtype_name(it) + " indices, " + dtype_name(value) + " values) need " + why);
  auto with_value = [&](auto idx) -> CsrMatrix {
    using I = decltype(idx);
    switch (value) {
      case DType::F32: return stencil<I, float>(n, dim, it);
      case DType::F64: return stencil<I, double>(n, dim, it);
      case DType::C64: return stencil<I, c64>(n, dim, it);
      default: break;
    }
    throw InputError(std::string("sparse values must be f32, f64 or c64, got ") + dtype_name(value));
  };
  return it == DType::I32 ? with_value(int32_t{}) : with_value(int64_t{});
}

}  // namespace

CsrMatrix poisson2d(int64_t n, DType value, std::optional<DType> index) { return make(n, 2, value, index); }
CsrMatrix poisson3d(int64_t n, DType value, std::optional<DType> index) { return make(n, 3, value, index); }

}  // namespace rlx::sparse
