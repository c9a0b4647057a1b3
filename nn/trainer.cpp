#include "nn/trainer.hpp"

#include <cstring>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "passes/autodiff.hpp"

namespace rlx::nn {

// What a step program reads, by input position: a parameter, a piece of optimizer state,
// a data input, the learning rate or the step count.
struct Slot {
  enum class Kind { Param, State, Buffer, Data, Lr, Step } kind;
  size_t index = 0;  // parameter, state or data index
};

// One step program: for the first batch size, or traced for another one.
struct Trainer::Variant {
  std::unique_ptr<ir::Graph> graph;  // a traced variant's graph and model
  std::unique_ptr<Model> model;
  std::unique_ptr<Program> program;
  std::vector<Slot> inputs;
  std::vector<Tensor> data;  // the data inputs, on the device (held ones shared by every variant)
  Tensor loss;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<Replay> replay[2];
  bool tried_capture = false;
};

struct Trainer::Impl {
  size_t n_params = 0, n_state = 0, n_buffers = 0;
  // sets[s][k]: parameters, optimizer state, then the model's buffers, on the device; step k reads sets[k % 2] and writes sets[1 - k % 2].
  std::vector<Tensor> sets[2];
  std::vector<bool> held;  // data inputs given once by hold(), not per step
  Tensor lr, step;         // scalars on the device
  std::vector<std::unique_ptr<Variant>> variants;  // [0]: the first batch size
  std::map<int64_t, size_t> by_batch;              // traced variants by batch size
  size_t last = 0;                                 // the variant the last step ran

  std::vector<Tensor> args(const Variant& v, int from) const {
    std::vector<Tensor> a;
    for (const Slot& s : v.inputs) switch (s.kind) {
        case Slot::Kind::Param: a.push_back(sets[from][s.index]); break;
        case Slot::Kind::State: a.push_back(sets[from][n_params + s.index]); break;
        case Slot::Kind::Buffer: a.push_back(sets[from][n_params + n_state + s.index]); break;
        case Slot::Kind::Data: a.push_back(v.data[s.index]); break;
        case Slot::Kind::Lr: a.push_back(lr); break;
        case Slot::Kind::Step: a.push_back(step); break;
      }
    return a;
  }
  std::vector<Tensor> results(const Variant& v, int to) const {
    std::vector<Tensor> r{v.loss};
    r.insert(r.end(), sets[to].begin(), sets[to].end());
    return r;
  }
};

namespace {

Tensor on_device(Device& d, const Tensor& host) { return host.to(d.allocator()); }

void write_scalar(Device& d, Tensor& t, double v) {
  Tensor h = Tensor::empty(t.dtype(), {});
  visit_dtype(t.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, double>) h.data<T>()[0] = v;
    else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>) h.data<T>()[0] = T(float(v));
  });
  t.allocator()->copy_from_host(t.raw(), h.raw(), h.nbytes());
}

}  // namespace

Trainer::Trainer(Model& model, const Var& loss, Optimizer optimizer, Device& device, TrainerOptions options)
    : model_(&model), optimizer_(std::move(optimizer)), device_(device), options_(std::move(options)),
      impl_(std::make_unique<Impl>()) {
  init(loss);
}

Trainer::Trainer(ModelFn build, int64_t batch, Optimizer optimizer, Device& device, TrainerOptions options, DType dtype)
    : own_graph_(std::make_unique<ir::Graph>()), own_model_(std::make_unique<Model>(*own_graph_, dtype)),
      model_(own_model_.get()), build_(std::move(build)), optimizer_(std::move(optimizer)), device_(device),
      options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  if (!build_) throw InputError("trainer: no model function");
  if (batch < 1) throw InputError("trainer: batch size " + std::to_string(batch) + " (at least 1)");
  init(build_(*model_, batch));
}

Trainer::Variant Trainer::build_variant(Model& model, const Var& loss) {
  if (loss.graph() != &model.graph()) throw InputError("trainer: the loss is not in the model's graph");
  if (numel(loss.shape()) != 1) throw InputError("trainer: the loss has shape " + shape_str(loss.shape()) + ", not one element");
  if (model.parameters().empty()) throw InputError("trainer: the model has no parameters");
  Variant v;
  // The step graph: the model's graph, then its gradients, the clipping and the updates.
  ir::Graph g = model.graph();
  g.results.clear();
  const DType dt = model.dtype();
  std::vector<Var> params, state;
  for (const Var& p : model.parameter_vars()) params.emplace_back(&g, p.value());
  const auto names = optimizer_.state_names();
  for (const Parameter& p : model.parameters())
    for (const std::string& s : names) state.push_back(input(g, "state/" + p.name + "/" + s, dt, p.type.shape));
  Var lr = input(g, "lr", dt, {}), step = input(g, "step", dt, {});
  Var l(&g, loss.value());
  std::vector<Var> grads = grad(l, params);
  if (options_.clip_norm > 0) grads = clip_by_global_norm(grads, options_.clip_norm);
  std::vector<Var> new_params, new_state;
  for (size_t k = 0; k < params.size(); ++k) {
    std::vector<Var> st(state.begin() + int64_t(k * names.size()), state.begin() + int64_t((k + 1) * names.size()));
    std::vector<Var> u = optimizer_.update(params[k], grads[k], st, lr, step);
    new_params.push_back(u[0]);
    new_state.insert(new_state.end(), u.begin() + 1, u.end());
  }
  std::vector<Var> outs{l};
  outs.insert(outs.end(), new_params.begin(), new_params.end());
  outs.insert(outs.end(), new_state.begin(), new_state.end());
  // Buffers (batch norm's running statistics): the value the model gives each after the
  // step, or the buffer itself when it has none.
  std::vector<Var> buffers;
  for (const Var& b : model.buffer_vars()) {
    buffers.emplace_back(&g, b.value());
    Var next(&g, b.value());
    for (const auto& [buf, value] : model.buffer_updates())
      if (buf.value() == b.value()) next = Var(&g, value.value());
    outs.push_back(next);
  }
  output(g, outs);

  // Which input is which.
  std::map<int32_t, Slot> slot_of;
  for (size_t k = 0; k < params.size(); ++k) slot_of[params[k].value().node] = {Slot::Kind::Param, k};
  for (size_t k = 0; k < state.size(); ++k) slot_of[state[k].value().node] = {Slot::Kind::State, k};
  for (size_t k = 0; k < buffers.size(); ++k) slot_of[buffers[k].value().node] = {Slot::Kind::Buffer, k};
  for (size_t k = 0; k < model.data_inputs().size(); ++k)
    slot_of[model.data_inputs()[k].value().node] = {Slot::Kind::Data, k};
  slot_of[lr.value().node] = {Slot::Kind::Lr, 0};
  slot_of[step.value().node] = {Slot::Kind::Step, 0};
  for (ir::Value val : g.params) {
    auto it = slot_of.find(val.node);
    if (it == slot_of.end())
      throw InputError("trainer: the graph input '" + g.node(val).attrs.get_string("name") +
                       "' is neither a parameter, a buffer nor a data input declared through the model");
    v.inputs.push_back(it->second);
  }
  v.program = std::make_unique<Program>(compile(g, device_, options_.compile));
  for (const Var& d : model.data_inputs()) v.data.push_back(Tensor::empty(d.dtype(), d.shape(), device_.allocator()));
  v.loss = Tensor::empty(loss.dtype(), loss.shape(), device_.allocator());
  v.exec = std::make_unique<Executor>(*v.program, device_);
  return v;
}

void Trainer::init(const Var& loss) {
  Impl& m = *impl_;
  Model& model = *model_;
  m.variants.push_back(std::make_unique<Variant>(build_variant(model, loss)));
  const DType dt = model.dtype();
  m.n_params = model.parameters().size();
  m.n_state = m.n_params * optimizer_.state_names().size();
  m.n_buffers = model.buffers().size();
  std::vector<Tensor> init = model.initial_values(options_.seed), init_buffers = model.initial_buffer_values(options_.seed);
  for (int s = 0; s < 2; ++s) {
    for (const Tensor& t : init) m.sets[s].push_back(on_device(device_, t));
    for (const Parameter& p : model.parameters())
      for (size_t k = 0; k < optimizer_.state_names().size(); ++k)
        m.sets[s].push_back(on_device(device_, Tensor::zeros(dt, p.type.shape)));
    for (const Tensor& t : init_buffers) m.sets[s].push_back(on_device(device_, t));
  }
  m.held.assign(model.data_inputs().size(), false);
  m.lr = Tensor::empty(dt, {}, device_.allocator());
  m.step = Tensor::empty(dt, {}, device_.allocator());
}

Trainer::~Trainer() = default;

double Trainer::learning_rate() const { return options_.schedule.at(optimizer_.lr(), steps_); }

bool Trainer::replays() const { return impl_->variants[0]->replay[0] != nullptr; }

const Program& Trainer::program() const { return *impl_->variants[0]->program; }

size_t Trainer::programs() const { return impl_->variants.size(); }

namespace {
std::string data_name(Model& model, size_t k) {
  return "data input " + std::to_string(k) + " ('" +
         model.graph().node(model.data_inputs()[k].value()).attrs.get_string("name") + "')";
}

void put_data(Model& model, Tensor& dst, const Tensor& value, size_t k) {
  if (value.type() != dst.type())
    throw InputError("trainer: " + data_name(model, k) + " is " + value.type().str() + ", the model declares " + dst.type().str());
  Tensor src = value.is_host() ? value.contiguous() : value.to(host_allocator());
  dst.allocator()->copy_from_host(dst.raw(), src.raw(), src.nbytes());
}

// Whether a traced model declares what the first one declares (names and types).
void check_same(const std::vector<Parameter>& want, const std::vector<Parameter>& got, const char* what, int64_t batch) {
  auto desc = [](const std::vector<Parameter>& v) {
    std::string r;
    for (const Parameter& p : v) r += (r.empty() ? "" : ", ") + p.name + " " + p.type.str();
    return r.empty() ? std::string("none") : r;
  };
  bool same = want.size() == got.size();
  for (size_t k = 0; same && k < want.size(); ++k) same = want[k].name == got[k].name && want[k].type == got[k].type;
  if (!same)
    throw InputError(std::string("trainer: the model traced for batch ") + std::to_string(batch) + " declares other " + what +
                     " (" + desc(got) + ") than the first (" + desc(want) + ")");
}
}  // namespace

Trainer::Variant& Trainer::variant_for(const std::vector<Tensor>& data) {
  Impl& m = *impl_;
  Variant& first = *m.variants[0];
  bool fits = true;
  for (size_t k = 0, i = 0; k < first.data.size(); ++k)
    if (!m.held[k]) fits &= data[i++].type() == first.data[k].type();
  if (fits || !build_) return first;  // (put_data names a mismatch)
  // Another batch size: the first per-step input's first dimension.
  size_t k0 = 0;
  while (m.held[k0]) ++k0;
  if (data[0].rank() < 1)
    throw InputError("trainer: " + data_name(*model_, k0) + " is " + data[0].type().str() + ", the model declares " +
                     first.data[k0].type().str());
  const int64_t batch = data[0].shape()[0];
  if (batch < 1) throw InputError("trainer: a batch of " + std::to_string(batch) + " samples");
  if (auto it = m.by_batch.find(batch); it != m.by_batch.end()) return *m.variants[it->second];
  auto v = std::make_unique<Variant>();
  auto graph = std::make_unique<ir::Graph>();
  auto model = std::make_unique<Model>(*graph, model_->dtype());
  Var loss = build_(*model, batch);
  check_same(model_->parameters(), model->parameters(), "parameters", batch);
  check_same(model_->buffers(), model->buffers(), "buffers", batch);
  if (model->data_inputs().size() != first.data.size())
    throw InputError("trainer: the model traced for batch " + std::to_string(batch) + " declares " +
                     std::to_string(model->data_inputs().size()) + " data inputs, the first " + std::to_string(first.data.size()));
  *v = build_variant(*model, loss);
  for (size_t k = 0; k < first.data.size(); ++k) {
    if (!m.held[k]) continue;
    if (v->data[k].type() != first.data[k].type())
      throw InputError("trainer: " + data_name(*model, k) + " is held as " + first.data[k].type().str() +
                       ", the model traced for batch " + std::to_string(batch) + " declares " + v->data[k].type().str());
    v->data[k] = first.data[k];
  }
  v->graph = std::move(graph);
  v->model = std::move(model);
  m.variants.push_back(std::move(v));
  m.by_batch[batch] = m.variants.size() - 1;
  return *m.variants.back();
}

void Trainer::hold(size_t k, const Tensor& value) {
  Impl& m = *impl_;
  if (k >= m.held.size())
    throw InputError("trainer: the model has " + std::to_string(m.held.size()) + " data inputs, no input " + std::to_string(k));
  device_.synchronize();
  for (auto& v : m.variants) put_data(*model_, v->data[k], value, k);  // (traced variants share the tensor)
  m.held[k] = true;
}

void Trainer::step(const std::vector<Tensor>& data) {
  Impl& m = *impl_;
  size_t per_step = 0;
  for (bool h : m.held) per_step += !h;
  if (data.size() != per_step)
    throw InputError("trainer: step takes " + std::to_string(per_step) + " data inputs, got " + std::to_string(data.size()));
  Variant& v = variant_for(data);
  for (size_t k = 0, i = 0; k < v.data.size(); ++k)
    if (!m.held[k]) put_data(*model_, v.data[k], data[i++], k);
  write_scalar(device_, m.lr, learning_rate());
  write_scalar(device_, m.step, double(steps_ + 1));
  const int from = int(steps_ % 2), to = 1 - from;
  if (options_.capture && !v.tried_capture) {
    v.tried_capture = true;
    // capture() runs the program once per direction before recording it: keep the two
    // sets as they are and put them back afterwards.
    std::vector<Tensor> saved[2];
    for (int s = 0; s < 2; ++s)
      for (const Tensor& t : m.sets[s]) saved[s].push_back(t.clone());
    try {
      for (int s = 0; s < 2; ++s) {
        std::vector<Tensor> in = m.args(v, s), out = m.results(v, 1 - s);
        v.replay[s] = v.exec->capture(in, out);
      }
    } catch (const InputError&) {
      v.replay[0].reset();
      v.replay[1].reset();
    }
    device_.synchronize();
    for (int s = 0; s < 2; ++s)
      for (size_t k = 0; k < saved[s].size(); ++k)
        m.sets[s][k].allocator()->copy_within(m.sets[s][k].raw(), saved[s][k].raw(), saved[s][k].nbytes());
  }
  if (v.replay[from]) {
    v.replay[from]->launch();
  } else {
    std::vector<Tensor> out = m.results(v, to);
    v.exec->enqueue(m.args(v, from), out);
  }
  for (size_t k = 0; k < m.variants.size(); ++k)
    if (m.variants[k].get() == &v) m.last = k;
  ++steps_;
}

double Trainer::loss() {
  if (steps_ == 0) throw InputError("trainer: no step has run yet");
  device_.synchronize();
  Tensor h = impl_->variants[impl_->last]->loss.to(host_allocator());
  return visit_dtype(h.dtype(), [&](auto z) -> double {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) return double(h.data<T>()[0]);
    else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return double(float(h.data<T>()[0]));
    else throw InternalError("trainer: the loss is not a float");
  });
}

std::vector<Tensor> Trainer::parameters() const {
  device_.synchronize();
  const auto& set = impl_->sets[steps_ % 2];
  std::vector<Tensor> r;
  for (size_t k = 0; k < impl_->n_params; ++k) r.push_back(set[k].to(host_allocator()));
  return r;
}

std::vector<Tensor> Trainer::state() const {
  device_.synchronize();
  const auto& set = impl_->sets[steps_ % 2];
  std::vector<Tensor> r;
  for (size_t k = impl_->n_params; k < impl_->n_params + impl_->n_state; ++k) r.push_back(set[k].to(host_allocator()));
  return r;
}

std::vector<Tensor> Trainer::buffers() const {
  device_.synchronize();
  const auto& set = impl_->sets[steps_ % 2];
  std::vector<Tensor> r;
  for (size_t k = impl_->n_params + impl_->n_state; k < set.size(); ++k) r.push_back(set[k].to(host_allocator()));
  return r;
}

void Trainer::set_parameters(const std::vector<Tensor>& values) {
  Impl& m = *impl_;
  if (values.size() != m.n_params)
    throw InputError("trainer: " + std::to_string(values.size()) + " values for " + std::to_string(m.n_params) + " parameters");
  device_.synchronize();
  auto& set = m.sets[steps_ % 2];
  for (size_t k = 0; k < values.size(); ++k) {
    if (values[k].type() != set[k].type())
      throw InputError("trainer: a value for '" + model_->parameters()[k].name + "' is " + values[k].type().str() +
                       ", the parameter " + set[k].type().str());
    Tensor src = values[k].is_host() ? values[k].contiguous() : values[k].to(host_allocator());
    set[k].allocator()->copy_from_host(set[k].raw(), src.raw(), src.nbytes());
  }
}

void Trainer::set_state(const std::vector<Tensor>& values, int64_t steps_done) {
  Impl& m = *impl_;
  if (values.size() != m.n_state)
    throw InputError("trainer: " + std::to_string(values.size()) + " values for " + std::to_string(m.n_state) +
                     " pieces of optimizer state");
  if (steps_done < 0) throw InputError("trainer: a step count of " + std::to_string(steps_done));
  device_.synchronize();
  // Parameters and buffers move to the set the new count reads.
  auto& from = m.sets[steps_ % 2];
  auto& to = m.sets[steps_done % 2];
  if (&from != &to)
    for (size_t k = 0; k < from.size(); ++k)
      if (k < m.n_params || k >= m.n_params + m.n_state)
        to[k].allocator()->copy_within(to[k].raw(), from[k].raw(), from[k].nbytes());
  steps_ = steps_done;
  for (size_t k = 0; k < values.size(); ++k) {
    Tensor& dst = to[m.n_params + k];
    if (values[k].type() != dst.type())
      throw InputError("trainer: a state value is " + values[k].type().str() + ", the state " + dst.type().str());
    Tensor src = values[k].is_host() ? values[k].contiguous() : values[k].to(host_allocator());
    dst.allocator()->copy_from_host(dst.raw(), src.raw(), src.nbytes());
  }
}

void Trainer::save(const std::string& path) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<Tensor> p = parameters(), s = state();
  const auto names = optimizer_.state_names();
  for (size_t k = 0; k < p.size(); ++k) tensors.emplace_back("param/" + model_->parameters()[k].name, p[k]);
  for (size_t k = 0; k < s.size(); ++k)
    tensors.emplace_back("state/" + model_->parameters()[k / names.size()].name + "/" + names[k % names.size()], s[k]);
  std::vector<Tensor> b = buffers();
  for (size_t k = 0; k < b.size(); ++k) tensors.emplace_back("buffer/" + model_->buffers()[k].name, b[k]);
  io::write_safetensors(path, tensors,
                        {{"format", "rlx-checkpoint-1"}, {"step", std::to_string(steps_)}, {"optimizer", optimizer_.name()}});
}

void Trainer::load(const std::string& path) {
  io::SafetensorsFile f(path);
  auto meta = [&](const std::string& key) {
    auto it = f.metadata().find(key);
    if (it == f.metadata().end()) throw InputError(path + ": not an rlx checkpoint (no '" + key + "' in its metadata)");
    return it->second;
  };
  if (meta("format") != "rlx-checkpoint-1") throw InputError(path + ": unknown checkpoint format '" + meta("format") + "'");
  if (meta("optimizer") != optimizer_.name())
    throw InputError(path + ": the checkpoint's optimizer is " + meta("optimizer") + ", this run's " + optimizer_.name());
  int64_t step = 0;
  try {
    size_t used = 0;
    step = std::stoll(meta("step"), &used);
    if (used != meta("step").size() || step < 0) throw std::invalid_argument("step");
  } catch (const std::logic_error&) {
    throw InputError(path + ": the checkpoint's step '" + meta("step") + "' is not a count");
  }
  const auto names = optimizer_.state_names();
  std::vector<std::pair<std::string, TensorType>> want;
  for (const Parameter& p : model_->parameters()) want.emplace_back("param/" + p.name, p.type);
  for (const Parameter& p : model_->parameters())
    for (const std::string& s : names) want.emplace_back("state/" + p.name + "/" + s, p.type);
  for (const Parameter& b : model_->buffers()) want.emplace_back("buffer/" + b.name, b.type);
  if (f.tensors().size() != want.size())
    throw InputError(path + ": the checkpoint holds " + std::to_string(f.tensors().size()) + " tensors, this model and optimizer " +
                     std::to_string(want.size()));
  std::vector<Tensor> values;
  for (const auto& [name, type] : want) {
    if (!f.contains(name)) throw InputError(path + ": the checkpoint lacks '" + name + "'");
    Tensor t = f.tensor(name);
    if (t.type() != type) throw InputError(path + ": '" + name + "' is " + t.type().str() + ", the model's " + type.str());
    values.push_back(std::move(t));
  }
  device_.synchronize();
  steps_ = step;
  auto& set = impl_->sets[steps_ % 2];
  for (size_t k = 0; k < values.size(); ++k)
    set[k].allocator()->copy_from_host(set[k].raw(), values[k].raw(), values[k].nbytes());
}

}  // namespace rlx::nn
