// The rotary embedding's inverse frequencies, shared by the `rotary_embedding` op's lowering
// (src/ir/ops/nn.cpp) and the devices' native kernels, so that every route turns feature
// pair i by the same f32 angle.
#pragma once
#include <cmath>
#include <cstdint>

namespace rlx {

// theta^(-2i/D) for pair i of a head of D features, rounded as transformers rounds it: the
// exponent 2i/D in f32, the power in f64, its reciprocal in f32.
inline float rotary_inverse_frequency(double theta, int64_t d, int64_t i) {
  return 1.0f / float(std::pow(theta, double(float(2 * i) / float(d))));
}

}  // namespace rlx
