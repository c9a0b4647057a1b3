// One compiled training step: forward, backward (passes/autodiff.hpp) and the optimizer's
// update in one program for one device. Parameters and optimizer state live on the device
// between steps — two sets of buffers, each step reading one and writing the other — and
// only the loss comes back, when asked for. On a device that records (cuda), each step
// replays a captured graph.
//
//   nn::Trainer t(model, loss, nn::Sgd{.lr = 0.1, .momentum = 0.9}, device);
//   t.step({images, labels});            // the model's data inputs, in declaration order
//   double l = t.loss();
//
// Shapes are fixed per program. A model written as a function of the batch size takes
// batches of any size: the trainer traces it again for a size it has not seen (an epoch's
// last, partial batch) and compiles a second step program that shares the parameters,
// optimizer state and buffers with the first.
//
//   nn::Trainer t([](nn::Model& m, int64_t b) { ... return loss; }, 128, nn::Adam{}, device);
//   t.step({images_96, labels_96});      // traced and compiled for 96 on first use
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/model.hpp"
#include "nn/optim.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

namespace rlx::nn {

struct TrainerOptions {
  uint64_t seed = 0;       // the parameters' initial values (Model::initial_values)
  double clip_norm = 0;    // > 0: global-norm gradient clipping
  LrSchedule schedule{};   // the learning rate per step
  bool capture = true;     // replay the step as a recorded graph where the device can
  CompileOptions compile{};
};

// A model as a function of the batch size: it declares the model's inputs and parameters on
// m (the same parameters, buffers and data inputs, in the same order, for every size) and
// returns the loss.
using ModelFn = std::function<Var(Model& m, int64_t batch)>;

class Trainer {
 public:
  Trainer(Model& model, const Var& loss, Optimizer optimizer, Device& device, TrainerOptions options = {});
  // The model traced for `batch` (model parameters of `dtype`); other batch sizes on demand.
  Trainer(ModelFn build, int64_t batch, Optimizer optimizer, Device& device, TrainerOptions options = {},
          DType dtype = DType::F32);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One step on a batch: the model's data inputs in declaration order, host or device
  // tensors of their declared types. Returns without waiting for the device. A trainer made
  // from a ModelFn also takes inputs of another batch size (the first per-step input's first
  // dimension), tracing and compiling the model for it once.
  void step(const std::vector<Tensor>& data);
  // Data input k keeps `value` on the device for every later step (a whole data set, gathered
  // inside the step by an index input); step() then takes the other data inputs only.
  void hold(size_t k, const Tensor& value);
  double loss();  // the last step's loss (waits for the step)
  int64_t steps_done() const { return steps_; }
  double learning_rate() const;  // the rate the next step uses
  const Program& program() const;  // the step program of the first batch size
  const Model& model() const { return *model_; }
  size_t programs() const;  // step programs compiled so far (one per batch size)
  bool replays() const;  // whether steps replay a recorded graph

  // Host copies of the parameters (and of each one's optimizer state), in declaration order.
  std::vector<Tensor> parameters() const;
  std::vector<Tensor> state() const;
  std::vector<Tensor> buffers() const;  // the model's buffers (Model::buffer), in declaration order
  // Replaces the parameters (e.g. a trained model's), keeping the optimizer state.
  void set_parameters(const std::vector<Tensor>& values);
  // Replaces the optimizer state (state()'s order) and the count of steps done (Adam's bias
  // correction), e.g. a model's state carried over to a new trainer for a resized model
  // (rlx splat fit's densification). Call it before set_parameters: the step count chooses
  // which of the two buffer sets the next step reads.
  void set_state(const std::vector<Tensor>& values, int64_t steps_done);

  // Checkpoints: parameters ("param/<name>"), optimizer state ("state/<name>/<slot>"), buffers
  // ("buffer/<name>") and the
  // step count and optimizer (metadata) in one safetensors file, written atomically. load()
  // checks that the file matches this trainer's model and optimizer; a run resumed from a
  // checkpoint continues exactly as the uninterrupted run would.
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  struct Impl;
  struct Variant;
  void init(const Var& loss);
  Variant build_variant(Model& model, const Var& loss);
  Variant& variant_for(const std::vector<Tensor>& data);
  std::unique_ptr<ir::Graph> own_graph_;  // the traced model's graph (ModelFn constructor)
  std::unique_ptr<Model> own_model_;
  Model* model_;
  ModelFn build_;
  Optimizer optimizer_;
  Device& device_;
  TrainerOptions options_;
  std::unique_ptr<Impl> impl_;
  int64_t steps_ = 0;
};

}  // namespace rlx::nn
