// dequantize and matmul_packed (src/ir/ops/quant.cpp) for every format of
// core/ggml_blocks.hpp: each block decoded element by element (decode_element, the
// obviously-correct path), and matmul_packed's sums accumulated in f64 over the decoded
// f32 weights, rounded to f32 once.
#include <vector>

#include "core/error.hpp"
#include "core/ggml_blocks.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

// Row n of the packed weight decoded into w[0 .. k).
void decode_row(const ggml::BlockFormat& f, const unsigned char* row, int64_t k, float* w) {
  for (int64_t e = 0; e < k; ++e) w[e] = ggml::decode_element(f.type, row + (e / f.block) * f.bytes, int(e % f.block));
}

void dequantize_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ggml::BlockFormat& f = ggml::format_named(n.attrs.get_string("type"));
  const Tensor w = in[0].contiguous();
  const int64_t rows = w.shape()[0], k = n.attrs.get_int("k"), row_bytes = w.shape()[1];
  const auto* p = w.data<unsigned char>();
  float* y = out[0].data<float>();
  for (int64_t r = 0; r < rows; ++r) decode_row(f, p + r * row_bytes, k, y + r * k);
}

void matmul_packed_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const ggml::BlockFormat& f = ggml::format_named(n.attrs.get_string("type"));
  const Tensor x = in[0].contiguous(), w = in[1].contiguous();
  const int64_t k = n.attrs.get_int("k"), rows = w.shape()[0], row_bytes = w.shape()[1];
  const int64_t m = k == 0 ? 0 : x.numel() / k;
  const float* xs = x.data<float>();
  const auto* p = w.data<unsigned char>();
  float* y = out[0].data<float>();
  std::vector<float> wr(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    decode_row(f, p + r * row_bytes, k, wr.data());
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += double(xs[i * k + e]) * double(wr[size_t(e)]);
      y[i * rows + r] = float(s);
    }
  }
}

}  // namespace

void add_quant_kernels(KernelTable& t) {
  t.add({"dequantize", bit(DType::U8), 0, dequantize_kernel, {}});
  t.add({"matmul_packed", bit(DType::F32), 0, matmul_packed_kernel, {}});
}

}  // namespace rlx::reference
