// Layers: functions that add IR to a model's graph and declare their parameters under
// `name/` (weights as PyTorch lays them out and initialises them by default), so a model
// is ordinary code and its parameters a flat, named list.
#pragma once
#include <array>
#include <functional>
#include <optional>
#include <string>

#include "nn/model.hpp"

namespace rlx::nn {

// y = x W^T + b, W [out, in] and b [out] drawn from U(-1/sqrt(in), 1/sqrt(in)) as PyTorch's
// nn.Linear (Kaiming uniform with a = sqrt(5)).
Var linear(Model& m, const std::string& name, const Var& x, int64_t out, bool bias = true,
           SrcLoc loc = SrcLoc::current());
// Rows of a table [vocab, dim] drawn from N(0, 1), picked by integer indices.
Var embedding(Model& m, const std::string& name, const Var& indices, int64_t vocab, int64_t dim,
              SrcLoc loc = SrcLoc::current());
// Normalisation over the last axis with a learned scale (ones) and, for layer_norm, shift (zeros).
Var layer_norm(Model& m, const std::string& name, const Var& x, double eps = 1e-5, SrcLoc loc = SrcLoc::current());
Var rms_norm(Model& m, const std::string& name, const Var& x, double eps = 1e-6, SrcLoc loc = SrcLoc::current());

// A stack of linear layers with ReLU between them: sizes {in, h1, ..., out}, named
// name/0, name/1, ...
Var mlp(Model& m, const std::string& name, const Var& x, const std::vector<int64_t>& sizes,
        SrcLoc loc = SrcLoc::current());

// 2-D convolution of x [N, C, H, W] into `out` channels (rlx::conv2d, lowered through
// im2col): weight [out, C/groups, kh, kw] and bias [out] drawn from U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)), fan_in = C/groups * kh * kw, as PyTorch's nn.Conv2d.
Var conv2d(Model& m, const std::string& name, const Var& x, int64_t out, std::array<int64_t, 2> kernel,
           const Conv2dOptions& o = {}, bool bias = true, SrcLoc loc = SrcLoc::current());
// Square-window pooling (nn.MaxPool2d(k), nn.AvgPool2d(k)): stride 0 means the kernel.
// rlx::max_pool2d and rlx::avg_pool2d take a window per axis.
Var max_pool2d(const Var& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0, SrcLoc loc = SrcLoc::current());
Var avg_pool2d(const Var& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0, SrcLoc loc = SrcLoc::current());
// Batch normalisation of x [N, C, ...] per channel (nn.BatchNorm1d/2d): weight (ones) and bias
// (zeros) are parameters; running_mean (zeros) and running_var (ones) are buffers. training:
// normalises by the batch's statistics and records the buffers' next values (Model::
// update_buffer, PyTorch's rule with `momentum`); otherwise normalises by the buffers.
Var batch_norm(Model& m, const std::string& name, const Var& x, bool training, double momentum = 0.1,
               double eps = 1e-5, SrcLoc loc = SrcLoc::current());
// Multi-head attention (nn.MultiheadAttention with batch_first): queries x [N, Lq, E] attend to
// kv [N, Lk, E] (self-attention: kv = x) in `heads` heads of E / heads features. The q, k, v and
// out projections are linear layers name/q, name/k, name/v, name/out ([E, E] weights and [E]
// biases, nn.Linear's initialisation). causal: query i sees keys j <= i + Lk - Lq.
// key_padding_mask: bool [N, Lk], true where a key is padding (PyTorch's convention); a query
// row whose keys are all masked has no weights to normalise and gives NaN, as in PyTorch.
// `names` renames the projections where a checkpoint names them otherwise (BERT:
// self/query, self/key, self/value, output/dense).
// `project`, when set, makes each of the four projections in place of nn::linear with a bias
// (a model holding its weights packed, as a GGUF file stores them, passes its own).
using Projection = std::function<Var(Model& m, const std::string& name, const Var& x, int64_t out, SrcLoc loc)>;
struct AttentionNames {
  std::string q = "q", k = "k", v = "v", out = "out";
  Projection project;
};
Var multi_head_attention(Model& m, const std::string& name, const Var& x, const Var& kv, int64_t heads,
                         bool causal = false, std::optional<Var> key_padding_mask = std::nullopt,
                         const AttentionNames& names = {}, SrcLoc loc = SrcLoc::current());
// Rotary position embedding in the rotate-half form (GPT-NeoX, Llama/Qwen in Hugging Face):
// x [..., T, heads, D] (D even) at positions [T] (i64), each feature pair (i, i + D/2) turned
// by the angle position * theta^(-2i/D): x cos + rotate_half(x) sin, rotate_half(x) =
// (-x[D/2:], x[:D/2]). The angles are computed in f32 from positions as f32, as transformers
// computes them, so positions are exact up to 2^24.
Var rotary_embedding(const Var& x, const Var& positions, double theta, SrcLoc loc = SrcLoc::current());
// Grouped-query attention: q [B, H, T, D] attends to k [B, KV, S, D] and v [B, KV, S, Dv]
// with H a multiple of KV; query head h uses key/value head h / (H / KV) (transformers'
// repeat_kv), without copying k and v per query head. causal: query i sees keys
// j <= i + S - T; bias (additive, broadcast to [B, KV, H / KV, T, S]) masks otherwise.
// Returns [B, H, T, Dv].
Var grouped_query_attention(const Var& q, const Var& k, const Var& v, bool causal, std::optional<Var> bias = std::nullopt,
                            SrcLoc loc = SrcLoc::current());
// Inverted dropout (nn.Dropout(p)) in training, the identity otherwise. Its draw is keyed by
// the model's step key (Model::step_key) and seeded by the layer's scoped name, so two dropout
// layers drop independently, each step draws anew, and every device drops the same elements.
Var dropout(Model& m, const std::string& name, const Var& x, double p, bool training, SrcLoc loc = SrcLoc::current());
// x [N, d1, d2, ...] -> [N, d1 * d2 * ...].
Var flatten(const Var& x, SrcLoc loc = SrcLoc::current());

// A LeNet-5-like network for x [N, 1, 28, 28] -> logits [N, 10]: conv 6@5x5 (padding 2), relu,
// max pool 2, conv 16@5x5, relu, max pool 2, flatten, linear 120, relu, linear 84, relu,
// linear 10; layers name/conv1, conv2, fc1, fc2, fc3 (61,706 parameters).
Var lenet(Model& m, const std::string& name, const Var& x, SrcLoc loc = SrcLoc::current());

}  // namespace rlx::nn
