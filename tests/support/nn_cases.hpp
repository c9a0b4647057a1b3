// The shapes the native layer_norm / softmax / attention kernels of every device are checked
// with against the reference device (tests/cpu, tests/cuda): each suite builds the graphs
// here, feeds them its own random data and compares with its own tolerance.
#pragma once
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ir/frontend.hpp"

namespace rlx::test {

struct AttentionCase {
  DType t;
  Shape q, k, v;
  std::string mask;
  std::optional<Shape> bias;
  bool padding = false;  // a bias of 0 / -inf: the last quarter of each row's keys masked
  std::string layout = "hld";  // or "lhd": q, k, v [.., L, heads, D] (BERT's heads in place)
};

// BERT's shapes (a padding bias broadcast over heads and queries), causal masks with fewer
// and with more queries than keys (rows that see no key: NaN), head sizes that are not
// multiples of a vector or above 64, a full bias, more queries than one block, a causal
// mask and a bias over more keys than a kernel stages at once; with_f64 adds
// f64 cases for devices whose kernel takes f64.
inline std::vector<AttentionCase> attention_cases(bool with_f64) {
  std::vector<AttentionCase> c = {
      {DType::F32, {2, 12, 128, 32}, {2, 12, 128, 32}, {2, 12, 128, 32}, "none", Shape{2, 1, 1, 128}, true},
      {DType::F32, {1, 3, 5, 64}, {1, 3, 19, 64}, {1, 3, 19, 48}, "causal", std::nullopt},
      {DType::F32, {2, 2, 9, 100}, {2, 2, 9, 100}, {2, 2, 9, 128}, "causal", Shape{2, 2, 9, 9}},
      {DType::F32, {1, 2, 300, 16}, {1, 2, 70, 16}, {1, 2, 70, 24}, "none", Shape{300, 70}},
      {DType::F32, {17, 33}, {21, 33}, {21, 5}, "none", std::nullopt},
      {DType::F32, {2, 11, 7}, {2, 4, 7}, {2, 4, 3}, "causal", std::nullopt},
      {DType::F32, {1, 2, 40, 32}, {1, 2, 150, 32}, {1, 2, 150, 32}, "causal", Shape{1, 40, 150}},
      {DType::F32, {2, 128, 12, 32}, {2, 128, 12, 32}, {2, 128, 12, 32}, "none", Shape{2, 1, 1, 128}, true, "lhd"},
  };
  if (with_f64) {
    c.push_back({DType::F64, {2, 3, 37, 20}, {2, 3, 41, 20}, {2, 3, 41, 9}, "causal", Shape{3, 1, 41}});
    c.push_back({DType::F64, {3, 40, 8}, {3, 40, 8}, {3, 40, 8}, "none", Shape{3, 1, 40}, true});
  }
  return c;
}

// Grouped-query attention's shapes as `grouped_query_attention` lowers them: k and v of 1
// where q has the group's query heads ([B, KV, G, T, D] against [B, KV, 1, S, D]; causal with
// more keys than queries, a padding bias, f64 with k and v broadcasting over different axes),
// and last a decode step's single query row per head.
inline std::vector<AttentionCase> grouped_attention_cases() {
  return {
      {DType::F32, {2, 3, 4, 19, 16}, {2, 3, 1, 21, 16}, {2, 3, 1, 21, 8}, "causal", Shape{3, 1, 19, 21}},
      {DType::F32, {1, 8, 2, 16, 128}, {1, 8, 1, 40, 128}, {1, 8, 1, 40, 128}, "none", Shape{1, 1, 1, 1, 40}, true},
      {DType::F64, {2, 2, 3, 17, 8}, {1, 2, 1, 17, 8}, {2, 1, 1, 17, 5}, "causal", std::nullopt},
      {DType::F32, {1, 8, 2, 1, 128}, {1, 8, 1, 40, 128}, {1, 8, 1, 40, 128}, "none", Shape{1, 1, 1, 1, 40}, true},
  };
}

inline ir::Graph attention_graph(const AttentionCase& c) {
  ir::Graph g;
  Var q = input(g, "q", c.t, c.q), k = input(g, "k", c.t, c.k), v = input(g, "v", c.t, c.v);
  std::optional<Var> bias;
  if (c.bias) bias = input(g, "bias", c.t, *c.bias);
  output(g, {attention(q, k, v, c.mask, bias, SrcLoc::current(), c.layout)});
  return g;
}

// For a padding case: b's values become 0, and -inf for the last quarter of each row.
inline void make_padding(Tensor& b) {
  const int64_t n = b.shape().back();
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double v = (i % n) >= n * 3 / 4 ? -INFINITY : 0.0;
    if (b.dtype() == DType::F64) b.data<double>()[i] = v;
    else b.data<float>()[i] = float(v);
  }
}

// A case's inputs q, k, v (and its bias, a padding one where the case says so), each drawn
// by the suite's own random(dtype, shape).
template <class Random>
std::vector<Tensor> attention_inputs(const AttentionCase& c, Random&& random) {
  std::vector<Tensor> in = {random(c.t, c.q), random(c.t, c.k), random(c.t, c.v)};
  if (c.bias) {
    in.push_back(random(c.t, *c.bias));
    if (c.padding) make_padding(in.back());
  }
  return in;
}

// Shapes the kernels refuse, which still compile through the lowering: attention whose q
// broadcasts against k's leading dimensions, softmax over the first axis. Inputs: q, k, v, x.
inline const std::vector<Shape>& refused_nn_shapes() {
  static const std::vector<Shape> s = {{1, 4, 8}, {2, 6, 8}, {2, 6, 8}, {5, 6}};
  return s;
}
inline ir::Graph refused_nn_graph() {
  const auto& s = refused_nn_shapes();
  ir::Graph g;
  Var q = input(g, "q", DType::F32, s[0]), k = input(g, "k", DType::F32, s[1]), v = input(g, "v", DType::F32, s[2]);
  Var x = input(g, "x", DType::F32, s[3]);
  output(g, {attention(q, k, v), softmax(x, 0)});
  return g;
}

}  // namespace rlx::test
