#include "nn/model.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace rlx::nn {

// A parameter or buffer: a graph input named scope + name (unique over both: a checkpoint
// keys them by name) with its Kaiming/Xavier fans, appended to `list` and `vars`.
Var Model::declare(std::vector<Parameter>& list, std::vector<Var>& vars, const std::string& name, Shape shape,
                   Init init, SrcLoc loc, std::optional<DType> dtype) {
  const DType t = dtype.value_or(dtype_);
  Parameter p{.name = prefix_ + name, .type = {t, shape}, .init = init};
  for (const auto* declared : {&params_, &buffers_})
    for (const Parameter& q : *declared)
      if (q.name == p.name) throw InputError("model: the parameter or buffer '" + p.name + "' is declared twice");
  if (!shape.empty()) {
    int64_t rest = 1;
    for (size_t i = 1; i < shape.size(); ++i) rest *= shape[i];
    int64_t field = 1;
    for (size_t i = 2; i < shape.size(); ++i) field *= shape[i];
    p.fan_in = shape.size() == 1 ? shape[0] : rest;
    p.fan_out = shape[0] * field;
  }
  Var v = rlx::input(g_, p.name, t, std::move(shape), loc);
  list.push_back(std::move(p));
  vars.push_back(v);
  return v;
}

Var Model::param(const std::string& name, Shape shape, Init init, SrcLoc loc) {
  return declare(params_, vars_, name, std::move(shape), init, loc);
}

Var Model::buffer(const std::string& name, Shape shape, Init init, SrcLoc loc) {
  return declare(buffers_, buffer_vars_, name, std::move(shape), init, loc);
}

std::string Model::scoped(const std::string& name) const { return prefix_ + name; }

Var Model::step_key(SrcLoc loc) {
  if (!step_key_.defined()) {
    const std::string saved = prefix_;
    prefix_.clear();
    step_key_ = declare(buffers_, buffer_vars_, "rng/step", {}, Init::zeros(), loc, DType::I64);
    prefix_ = saved;
    update_buffer(step_key_, step_key_ + scalar_like(step_key_, 1.0));
  }
  return step_key_;
}

void Model::update_buffer(const Var& buffer, const Var& value) {
  size_t k = 0;
  while (k < buffer_vars_.size() && !(buffer.graph() == &g_ && buffer_vars_[k].value() == buffer.value())) ++k;
  if (k == buffer_vars_.size()) throw InputError("model: update_buffer: the value updated is not one of the model's buffers");
  const std::string& name = buffers_[k].name;
  if (value.graph() != &g_) throw InputError("model: the update of buffer '" + name + "' is not in the model's graph");
  if (value.type() != buffer.type())
    throw InputError("model: the update of buffer '" + name + "' is " + value.type().str() + ", the buffer " +
                     buffer.type().str());
  for (const auto& [b, v] : updates_)
    if (b.value() == buffer.value()) throw InputError("model: the buffer '" + name + "' is updated twice");
  updates_.emplace_back(buffer, value);
}

Var Model::input(const std::string& name, DType t, Shape shape, SrcLoc loc) {
  Var v = rlx::input(g_, prefix_ + name, t, std::move(shape), loc);
  inputs_.push_back(v);
  return v;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += numel(p.type.shape);
  return n;
}

uint64_t name_hash(const std::string& s) {  // FNV-1a: the same on every platform
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

Tensor initial_value(const Parameter& p, uint64_t seed) {
  const uint64_t s = rng_bits(seed, name_hash(p.name));
  const int64_t n = numel(p.type.shape);
  std::vector<double> v(static_cast<size_t>(n));
  const Init& in = p.init;
  using K = Init::Kind;
  const double fan_in = double(std::max<int64_t>(p.fan_in, 1)), fan_out = double(std::max<int64_t>(p.fan_out, 1));
  auto uniform = [&](double lo, double hi) {
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = lo + (hi - lo) * rng_unit(s, uint64_t(i));
  };
  auto normal = [&](double mean, double sd) {
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = mean + sd * rng_std_normal(s, uint64_t(i));
  };
  const double kaiming_gain = std::sqrt(2.0 / (1.0 + in.a * in.a));
  const double xavier_gain = in.a == 0 ? 1.0 : in.a;
  switch (in.kind) {
    case K::Zeros: break;
    case K::Ones: std::fill(v.begin(), v.end(), 1.0); break;
    case K::Constant: std::fill(v.begin(), v.end(), in.a); break;
    case K::Uniform: uniform(in.a, in.b); break;
    case K::Normal: normal(in.a, in.b); break;
    case K::KaimingUniform: {
      double bound = kaiming_gain * std::sqrt(3.0 / fan_in);
      uniform(-bound, bound);
      break;
    }
    case K::KaimingNormal: normal(0, kaiming_gain / std::sqrt(fan_in)); break;
    case K::XavierUniform: {
      double bound = xavier_gain * std::sqrt(6.0 / (fan_in + fan_out));
      uniform(-bound, bound);
      break;
    }
    case K::XavierNormal: normal(0, xavier_gain * std::sqrt(2.0 / (fan_in + fan_out))); break;
  }
  Tensor t = Tensor::empty(p.type.dtype, p.type.shape);
  visit_dtype(p.type.dtype, [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, double>)
      for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = v[size_t(i)];
    else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
      for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = T(float(v[size_t(i)]));
    else if constexpr (std::is_integral_v<T>) {
      // (integer buffers: counters; only the constant initialisers make sense for them)
      if (in.kind != K::Zeros && in.kind != K::Ones && in.kind != K::Constant)
        throw InputError("model: '" + p.name + "' is " + dtype_name(p.type.dtype) +
                         ", which only a constant initialiser fits");
      for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = T(v[size_t(i)]);
    } else {
      throw InputError(std::string("model: parameters must be float, '") + p.name + "' is " + dtype_name(p.type.dtype));
    }
  });
  return t;
}

std::vector<Tensor> Model::initial_values(uint64_t seed) const {
  std::vector<Tensor> r;
  for (const Parameter& p : params_) r.push_back(initial_value(p, seed));
  return r;
}

std::vector<Tensor> Model::initial_buffer_values(uint64_t seed) const {
  std::vector<Tensor> r;
  for (const Parameter& b : buffers_) r.push_back(initial_value(b, seed));
  return r;
}

}  // namespace rlx::nn
