#include "nn/layers.hpp"

#include <cmath>

#include "core/error.hpp"

namespace rlx::nn {

Var linear(Model& m, const std::string& name, const Var& x, int64_t out, bool bias, SrcLoc loc) {
  if (x.rank() < 1) throw InputError("linear '" + name + "': the input is a scalar");
  const int64_t in = x.shape().back();
  const double bound = 1.0 / std::sqrt(double(std::max<int64_t>(in, 1)));
  Model::Scope scope(m, name);
  Var w = m.param("weight", {out, in}, Init::uniform(-bound, bound), loc);
  if (!bias) return rlx::linear(x, w, std::nullopt, loc);
  Var b = m.param("bias", {out}, Init::uniform(-bound, bound), loc);
  return rlx::linear(x, w, b, loc);
}

Var embedding(Model& m, const std::string& name, const Var& indices, int64_t vocab, int64_t dim, SrcLoc loc) {
  Model::Scope scope(m, name);
  Var table = m.param("weight", {vocab, dim}, Init::normal(0, 1), loc);
  return gather(table, indices, 0, loc);
}

Var layer_norm(Model& m, const std::string& name, const Var& x, double eps, SrcLoc loc) {
  const int64_t d = x.shape().back();
  Model::Scope scope(m, name);
  Var gamma = m.param("weight", {d}, Init::ones(), loc);
  Var beta = m.param("bias", {d}, Init::zeros(), loc);
  return rlx::layer_norm(x, gamma, beta, eps, loc);
}

Var rms_norm(Model& m, const std::string& name, const Var& x, double eps, SrcLoc loc) {
  const int64_t d = x.shape().back();
  Model::Scope scope(m, name);
  Var gamma = m.param("weight", {d}, Init::ones(), loc);
  return rlx::rms_norm(x, gamma, eps, loc);
}

Var mlp(Model& m, const std::string& name, const Var& x, const std::vector<int64_t>& sizes, SrcLoc loc) {
  if (sizes.size() < 2) throw InputError("mlp '" + name + "': needs at least the input and output sizes");
  if (x.shape().back() != sizes[0])
    throw InputError("mlp '" + name + "': the input has " + std::to_string(x.shape().back()) + " features, sizes say " +
                     std::to_string(sizes[0]));
  Model::Scope scope(m, name);
  Var h = x;
  for (size_t i = 1; i < sizes.size(); ++i) {
    h = linear(m, std::to_string(i - 1), h, sizes[i], true, loc);
    if (i + 1 < sizes.size()) h = relu(h, loc);
  }
  return h;
}

}  // namespace rlx::nn
