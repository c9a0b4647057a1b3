// Layers: functions that add IR to a model's graph and declare their parameters under
// `name/` (weights as PyTorch lays them out and initialises them by default), so a model
// is ordinary code and its parameters a flat, named list.
#pragma once
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

}  // namespace rlx::nn
