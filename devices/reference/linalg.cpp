// Matmul: a triple loop per batch entry, accumulating in double or complex<double>.
#include <type_traits>

#include "core/error.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

// Strides of t's batch axes (all but the last two) broadcast to `batch`.
std::vector<int64_t> batch_strides(const Tensor& t, const Shape& batch) {
  Shape s(t.shape().begin(), t.shape().end() - 2);
  std::vector<int64_t> st(t.strides().begin(), t.strides().end() - 2);
  std::vector<int64_t> r(batch.size(), 0);
  size_t lead = batch.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] != 1) r[lead + d] = st[d];
  return r;
}

void matmul_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor &a = in[0], &b = in[1], &y = out[0];
  const bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
  const size_t ra = size_t(a.rank()), rb = size_t(b.rank()), ry = size_t(y.rank());
  const int64_t m = y.shape()[ry - 2], nn = y.shape()[ry - 1];
  const int64_t k = a.shape()[ta ? ra - 2 : ra - 1];
  // Element (i, p) of op(a) and (p, j) of op(b), whatever the transposes and strides.
  const int64_t a_i = a.strides()[ta ? ra - 1 : ra - 2], a_p = a.strides()[ta ? ra - 2 : ra - 1];
  const int64_t b_p = b.strides()[tb ? rb - 1 : rb - 2], b_j = b.strides()[tb ? rb - 2 : rb - 1];
  const Shape batch(y.shape().begin(), y.shape().end() - 2);
  std::vector<int64_t> yb = contiguous_strides(batch);
  for (int64_t& s : yb) s *= m * nn;
  visit_domain(a.dtype(), [&](auto zero) {
    using C = decltype(zero);
    if constexpr (std::is_same_v<C, int64_t>) {
      throw InternalError("reference: integer matmul");
    } else {
      for_each_offset(batch, {batch_strides(a, batch), batch_strides(b, batch), yb}, [&](int64_t, const int64_t* o) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < nn; ++j) {
            C acc(0);
            for (int64_t p = 0; p < k; ++p)
              acc += load<C>(a, o[0] + i * a_i + p * a_p) * load<C>(b, o[1] + p * b_p + j * b_j);
            store(y, o[2] + i * nn + j, acc);
          }
      });
    }
  });
}

}  // namespace

void add_linalg_kernels(KernelTable& t) { t.add({"matmul", kInexact, 0, matmul_kernel, {}}); }

}  // namespace rlx::reference
