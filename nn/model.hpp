// A model: the graph its layers add IR to, and its parameters — graph inputs with a name,
// a type and an initialiser, kept as a flat, ordered set (the order they were declared).
//
//   ir::Graph g;
//   nn::Model m(g);
//   Var x = m.input("x", DType::F32, {128, 784});
//   Var h = relu(nn::linear(m, "fc1", x, 128));
//   Var logits = nn::linear(m, "fc2", h, 10);
//
// Parameter values are drawn by initial_values(seed) on the host with the counter RNG
// (core/rng.hpp): the same numbers on every machine and device.
//
// Buffers are the state a layer carries from step to step without training it (batch norm's
// running statistics): graph inputs like parameters, named in the same namespace, but outside
// parameters() and never differentiated. The layer records each buffer's next value
// (update_buffer); buffer_updates() lists those pairs for a trainer to compute with the step and
// write back into the buffers afterwards.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "ir/frontend.hpp"

namespace rlx::nn {

struct Init {
  enum class Kind { Zeros, Ones, Constant, Uniform, Normal, KaimingUniform, KaimingNormal, XavierUniform, XavierNormal };
  Kind kind = Kind::Zeros;
  // Constant: a. Uniform: [a, b]. Normal: mean a, standard deviation b.
  // Kaiming: a is the negative slope of the leaky ReLU that follows (gain sqrt(2 / (1 + a^2)),
  // bound gain sqrt(3 / fan_in)); Xavier: a is the gain (0 means 1), bound gain sqrt(6 / (fan_in + fan_out)).
  double a = 0, b = 0;
  static Init zeros() { return {}; }
  static Init ones() { return {Kind::Ones}; }
  static Init constant(double v) { return {Kind::Constant, v}; }
  static Init uniform(double lo, double hi) { return {Kind::Uniform, lo, hi}; }
  static Init normal(double mean, double stddev) { return {Kind::Normal, mean, stddev}; }
  static Init kaiming_uniform(double slope = 0) { return {Kind::KaimingUniform, slope}; }
  static Init kaiming_normal(double slope = 0) { return {Kind::KaimingNormal, slope}; }
  static Init xavier_uniform(double gain = 1) { return {Kind::XavierUniform, gain}; }
  static Init xavier_normal(double gain = 1) { return {Kind::XavierNormal, gain}; }
};

struct Parameter {
  std::string name;
  TensorType type;
  Init init;
  // For Kaiming and Xavier: by default fan_in is the product of the extents after the first
  // (a weight [out, in, kh, kw] has in*kh*kw) and fan_out the first times the rest after two.
  int64_t fan_in = 1, fan_out = 1;
};

class Model {
 public:
  explicit Model(ir::Graph& g, DType dtype = DType::F32) : g_(g), dtype_(dtype) {}
  ir::Graph& graph() { return g_; }
  DType dtype() const { return dtype_; }
  // A parameter named scope + name (unique), of the model's dtype.
  Var param(const std::string& name, Shape shape, Init init, SrcLoc loc = SrcLoc::current());
  // A data input (images, labels, ...): a graph input that is not a parameter.
  Var input(const std::string& name, DType t, Shape shape, SrcLoc loc = SrcLoc::current());
  const std::vector<Parameter>& parameters() const { return params_; }
  const std::vector<Var>& parameter_vars() const { return vars_; }
  const std::vector<Var>& data_inputs() const { return inputs_; }
  int64_t parameter_count() const;  // elements over all parameters
  // Each parameter's initial value (host tensors, in order): element i of the parameter
  // named n draws from the counter RNG at (seed mixed with n, i).
  std::vector<Tensor> initial_values(uint64_t seed) const;

  // A buffer named scope + name (unique among parameters and buffers), of the model's dtype.
  Var buffer(const std::string& name, Shape shape, Init init, SrcLoc loc = SrcLoc::current());
  // The value `buffer` takes after a step (once per buffer; the same type).
  void update_buffer(const Var& buffer, const Var& value);
  const std::vector<Parameter>& buffers() const { return buffers_; }
  const std::vector<Var>& buffer_vars() const { return buffer_vars_; }
  // (buffer, its value after the step) for each updated buffer, in the order of the updates.
  // A buffer without one (an inference-mode layer's) keeps its value.
  const std::vector<std::pair<Var, Var>>& buffer_updates() const { return updates_; }
  // The step key: an i64[] buffer "rng/step" (declared on first use, outside any scope) that
  // starts at 0 and each training step advances by one, for layers that draw random numbers
  // per step (dropout): the draws are a function of (layer seed, step), so a run repeats
  // exactly, on every device, and resumes from a checkpoint mid-stream.
  Var step_key(SrcLoc loc = SrcLoc::current());
  std::string scoped(const std::string& name) const;  // name inside the current scopes
  // Each buffer's initial value, drawn as initial_values draws a parameter's.
  std::vector<Tensor> initial_buffer_values(uint64_t seed) const;

  // Names declared inside prefix "<name>/".
  class Scope {
   public:
    Scope(Model& m, const std::string& name) : m_(m), saved_(m.prefix_) { m.prefix_ += name + "/"; }
    ~Scope() { m_.prefix_ = saved_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Model& m_;
    std::string saved_;
  };

 private:
  ir::Graph& g_;
  DType dtype_;
  std::string prefix_;
  Var declare(std::vector<Parameter>& list, std::vector<Var>& vars, const std::string& name, Shape shape, Init init,
              SrcLoc loc, std::optional<DType> dtype = std::nullopt);
  std::vector<Parameter> params_, buffers_;
  std::vector<Var> vars_, inputs_, buffer_vars_;
  std::vector<std::pair<Var, Var>> updates_;
  Var step_key_;
};

// A 64-bit hash of a name, the same on every platform (the seeds derived from names).
uint64_t name_hash(const std::string& s);

// One parameter's initial value (what Model::initial_values draws for it).
Tensor initial_value(const Parameter& p, uint64_t seed);

}  // namespace rlx::nn
