#include "runtime/executor.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/env.hpp"
#include "core/error.hpp"
#include "ir/op_registry.hpp"
#include "runtime/runtime.hpp"

namespace rlx {

Executor::~Executor() {
  if (!profile_ || runs_ == 0) return;
  // RLX_PROFILE=1: where the time went, per kernel, averaged over the runs after the first
  // (the first compiles generated kernels and meets libraries' first-call set-up, which can
  // outweigh a kernel's own time a thousandfold); the first run's time is the last column.
  const bool warm = runs_ > 1;
  std::fprintf(stderr, "rlx profile: %zu kernels, %lld runs (ms per run%s; then the first run's ms)\n", p_.kernels.size(),
               (long long)runs_, warm ? ", the first left out" : "");
  for (size_t ki = 0; ki < p_.kernels.size(); ++ki) {
    const Kernel& k = p_.kernels[ki];
    std::string ops;
    for (int32_t id : k.nodes) ops += (ops.empty() ? "" : ",") + p_.graph.nodes[size_t(id)].op->name;
    const char* kind[] = {"fused", "single", "control", "host", "mm+epi"};
    const double avg = warm ? kernel_seconds_[ki] / double(runs_ - 1) : first_seconds_[ki];
    std::fprintf(stderr, "  k%-3zu %-7s %9.3f  %s %s  %.3f\n", ki, kind[k.kind], 1e3 * avg, ops.c_str(),
                 p_.graph.nodes[size_t(k.nodes[0])].out().str().c_str(), 1e3 * first_seconds_[ki]);
  }
}

Executor::Executor(const Program& p, Device& d) : Executor(p, d, Tensor()) {}

Executor::Executor(const Program& p, Device& d, Tensor shared) : p_(p), d_(d) {
  profile_ = env_choice("RLX_PROFILE", {"0", "1"}) == 1;
  kernel_seconds_.assign(p.kernels.size(), 0.0);
  first_seconds_.assign(p.kernels.size(), 0.0);
  if (p.device != d.name())
    throw InputError("program was compiled for device '" + p.device + "', not '" + d.name() + "'");
  require_runnable(d);
  if (shared.defined()) {
    if (shared.allocator() != d.allocator() || shared.dtype() != DType::U8 || !shared.is_contiguous() ||
        shared.nbytes() < size_t(p.arena_bytes))
      throw InputError("a shared arena must be a u8 tensor on device '" + d.name() + "' of at least " +
                       std::to_string(p.arena_bytes) + " bytes, got " + shared.type().str() + " on '" +
                       shared.allocator()->name() + "'");
    arena_ = std::move(shared);
  } else if (p.arena_bytes > 0) {
    try {
      arena_ = Tensor::empty(DType::U8, {p.arena_bytes}, d.allocator());
    } catch (const std::exception& e) {
      if (!dynamic_cast<const DeviceError*>(&e) && !dynamic_cast<const std::bad_alloc*>(&e)) throw;
      throw DeviceError("device '" + d.name() + "': cannot allocate the program's " + std::to_string(p.arena_bytes) +
                        "-byte buffer arena: " + e.what());
    }
  }
  for (auto& k : p.kernels) {
    FusedRegion r = k.region;
    r.graph = &p.graph;
    regions_.push_back(std::move(r));
  }
  // Values whose tensors are the same on every run (constants, arena buffers, views of
  // them) are made once; a run fills in only its inputs and results. This keeps a small
  // program's launch (a Krylov iteration: ~15 kernels on a few thousand rows) from being
  // dominated by building tensor handles.
  const ir::Graph& g = p.graph;
  vals_.resize(g.nodes.size());
  fixed_.resize(g.nodes.size());
  char* arena = arena_.defined() ? static_cast<char*>(arena_.raw()) : nullptr;
  for (auto& n : g.nodes) {
    vals_[size_t(n.id)].resize(n.outputs.size());
    fixed_[size_t(n.id)].assign(n.outputs.size(), false);
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const BufferSlot& s = p.slots[size_t(n.id)][o];
      const TensorType& t = n.outputs[o];
      Tensor& v = vals_[size_t(n.id)][o];
      bool fixed = true;
      switch (s.kind) {
        case BufferSlot::Const: v = p.constants.at(size_t(s.index)); break;
        case BufferSlot::Arena: v = Tensor::view_of(arena + s.offset, d.allocator(), t.dtype, t.shape); break;
        case BufferSlot::View:
          fixed = fixed_[size_t(s.alias.node)][size_t(s.alias.index)];
          if (fixed) v = vals_[size_t(s.alias.node)][size_t(s.alias.index)].reshape(t.shape);
          break;
        default: fixed = false; break;
      }
      fixed_[size_t(n.id)][o] = fixed;
    }
  }
  kin_.resize(p.kernels.size());
  kout_.resize(p.kernels.size());
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const Kernel& k = p.kernels[ki];
    const bool listed = k.kind == Kernel::Fused || k.kind == Kernel::MatmulEpilogue;
    kin_[ki].resize((listed ? k.inputs : g.nodes[size_t(k.nodes[0])].inputs).size());
    kout_[ki].resize(k.outputs.size());
  }
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> results;
  execute(inputs, results, false);
  return results;
}

void Executor::run_into(const std::vector<Tensor>& inputs, std::vector<Tensor>& results) {
  execute(inputs, results, true);
}

void Executor::enqueue(const std::vector<Tensor>& inputs, std::vector<Tensor>& results) {
  execute(inputs, results, true, false);
}

std::unique_ptr<Replay> Executor::capture(const std::vector<Tensor>& inputs, std::vector<Tensor>& results) {
  // (A collective's messages are host calls made once while recording: a replay would not
  // send them again.)
  for (const Kernel& k : p_.kernels)
    if (k.kind == Kernel::Control || k.kind == Kernel::HostStaged ||
        (k.kind == Kernel::Single && p_.graph.nodes[size_t(k.nodes[0])].op->comm_bytes))
      throw InputError("cannot record a program with control flow, host-staged nodes or collectives for replay (node %" +
                       std::to_string(k.nodes[0]) + " " + p_.graph.nodes[size_t(k.nodes[0])].op->name + ")");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].allocator() != d_.allocator())
      throw InputError("recording for replay needs every input on device '" + d_.name() + "' (input " +
                       std::to_string(i) + " is not)");
  run_into(inputs, results);
  d_.synchronize();
  std::unique_ptr<Replay> r = d_.capture([&] { run_into(inputs, results); });
  if (!r) throw InputError("device '" + d_.name() + "' cannot record programs for replay");
  // The recording reads and writes the arena and reads the constants on every launch: the
  // replay keeps them alive, whatever happens to this executor or its program.
  struct Holding final : Replay {
    std::unique_ptr<Replay> inner;
    Tensor arena;
    std::vector<Tensor> constants;
    void launch() override { inner->launch(); }
  };
  auto h = std::make_unique<Holding>();
  h->inner = std::move(r);
  h->arena = arena_;
  h->constants = p_.constants;
  return h;
}

void Executor::execute(const std::vector<Tensor>& inputs, std::vector<Tensor>& results, bool have_results,
                       bool wait) {
  const ir::Graph& g = p_.graph;
  if (inputs.size() != g.params.size())
    throw InputError("program takes " + std::to_string(g.params.size()) + " inputs, got " + std::to_string(inputs.size()));
  if (have_results && results.size() != g.results.size())
    throw InputError("program has " + std::to_string(g.results.size()) + " results, got " +
                     std::to_string(results.size()) + " result tensors");
  if (have_results) {
    // Result buffers are written while inputs are still being read: they must not overlap
    // each other or any input, except where the program takes a parameter's buffer for a
    // result (Program::donations) and the caller passes that very tensor for both.
    for (size_t i = 0; i < results.size(); ++i) {
      for (size_t j = 0; j < i; ++j)
        if (results[i].defined() && results[i].raw() == results[j].raw())
          throw InputError("result tensors " + std::to_string(j) + " and " + std::to_string(i) + " share a buffer");
      for (size_t j = 0; j < inputs.size(); ++j)
        if (results[i].defined() && results[i].raw() == inputs[j].raw() &&
            !(p_.donates(j, i) && results[i].nbytes() == inputs[j].nbytes() && inputs[j].is_contiguous() &&
              inputs[j].allocator() == d_.allocator()))
          throw InputError("result tensor " + std::to_string(i) + " is also input " + std::to_string(j) +
                           (p_.donates(j, i) ? " but not the same whole device tensor"
                                             : " (the program cannot write that result over that input)"));
    }
  }
  Allocator* dev_alloc = d_.allocator();
  std::vector<std::vector<Tensor>>& vals = vals_;
  if (!have_results) results.assign(g.results.size(), Tensor{});

  for (auto& n : g.nodes) {
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (fixed_[size_t(n.id)][o]) continue;
      const BufferSlot& s = p_.slots[size_t(n.id)][o];
      const TensorType& t = n.outputs[o];
      Tensor& v = vals[size_t(n.id)][o];
      switch (s.kind) {
        case BufferSlot::Param: {
          const Tensor& x = inputs.at(size_t(s.index));
          if (x.dtype() != t.dtype || x.shape() != t.shape)
            throw InputError("input '" + g.param_name(size_t(s.index)) + "' must be " + t.str() + ", got " +
                             x.type().str());
          if (x.allocator() == dev_alloc) v = x;
          else v = x.to(dev_alloc);
          break;
        }
        case BufferSlot::Result: {
          Tensor& r = results[size_t(s.index)];
          if (have_results) {
            if (r.dtype() != t.dtype || r.shape() != t.shape || r.allocator() != dev_alloc || !r.is_contiguous())
              throw InputError("result " + std::to_string(s.index) + " must be a contiguous " + t.str() + " on " +
                               d_.name());
          } else {
            try {
              r = Tensor::empty(t.dtype, t.shape, dev_alloc);
            } catch (const std::exception& e) {
              if (!dynamic_cast<const DeviceError*>(&e) && !dynamic_cast<const std::bad_alloc*>(&e)) throw;
              throw DeviceError("node %" + std::to_string(n.id) + " " + n.op->name + " at " + n.loc.str() +
                                ": cannot allocate its result " + t.str() + ": " + e.what());
            }
          }
          v = r;
          break;
        }
        case BufferSlot::View: v = vals[size_t(s.alias.node)][size_t(s.alias.index)].reshape(t.shape); break;
        default: break;  // Const, Arena: fixed; Internal: no tensor
      }
    }
  }
  // The run's tensors are let go when it ends (the caller's inputs and results are not kept
  // alive by the executor); the handles keep their storage for the next run.
  struct Release {
    Executor& e;
    ~Release() { e.release_run_tensors(); }
  } release{*this};

  for (size_t ki = 0; ki < p_.kernels.size(); ++ki) {
    const Kernel& k = p_.kernels[ki];
    const ir::Node& first = g.nodes[size_t(k.nodes[0])];
    auto t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    // A fused region names each outside value once; a single node takes its operands
    // positionally (matmul(z, z) reads z twice), and so does a matmul epilogue's kernel.
    std::vector<Tensor>& in = kin_[ki];
    std::vector<Tensor>& out = kout_[ki];
    const bool listed = k.kind == Kernel::Fused || k.kind == Kernel::MatmulEpilogue;
    const auto& operands = listed ? k.inputs : first.inputs;
    for (size_t i = 0; i < operands.size(); ++i) in[i] = vals[size_t(operands[i].node)][size_t(operands[i].index)];
    for (size_t i = 0; i < k.outputs.size(); ++i) out[i] = vals[size_t(k.outputs[i].node)][size_t(k.outputs[i].index)];
    try {
      switch (k.kind) {
        case Kernel::Fused: d_.run_fused(regions_[ki], in, out); break;
        case Kernel::Single: d_.run_node(first, in, out); break;
        case Kernel::MatmulEpilogue: d_.run_matmul_epilogue(k.epilogue, g, in, out); break;
        case Kernel::Control: run_control(k, vals); break;
        case Kernel::HostStaged: {
          Device* host = DeviceRegistry::get().find("reference");
          std::vector<Tensor> hin, hout;
          // (An input the op never reads is not copied: an empty host tensor of its type stands in.)
          const std::vector<int>& unread = first.op->order_only_inputs;
          for (size_t i = 0; i < in.size(); ++i) {
            const Tensor& t = in[i];
            if (t.is_host()) hin.push_back(t);
            else if (std::find(unread.begin(), unread.end(), int(i)) != unread.end())
              hin.push_back(Tensor::empty(t.dtype(), t.shape(), host_allocator()));
            else hin.push_back(t.to(host_allocator()));
          }
          for (auto& t : out) hout.push_back(Tensor::empty(t.dtype(), t.shape(), host->allocator()));
          host->run_node(first, hin, hout);
          for (size_t i = 0; i < out.size(); ++i) out[i].allocator()->copy_from_host(out[i].raw(), hout[i].raw(), hout[i].nbytes());
          break;
        }
      }
    } catch (const InputError& e) {
      throw InputError("node %" + std::to_string(first.id) + " " + first.op->name + " at " + first.loc.str() + ": " +
                       e.what());
    } catch (const std::bad_alloc&) {
      throw DeviceError("node %" + std::to_string(first.id) + " " + first.op->name + " at " + first.loc.str() +
                        ": out of memory on device '" + d_.name() + "'");
    }
    if (profile_) {
      d_.synchronize();
      (runs_ == 0 ? first_seconds_ : kernel_seconds_)[ki] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  if (wait) d_.synchronize();
  ++runs_;
  // Results that are not result buffers (parameters, constants, views of the arena)
  // are copied, so the caller never holds memory the next run overwrites.
  for (size_t r = 0; r < g.results.size(); ++r) {
    ir::Value v = g.results[r];
    // (A value returned twice has one result buffer; the second copy is made here.)
    if (p_.slot(v).kind == BufferSlot::Result && p_.slot(v).index == int32_t(r)) continue;
    const Tensor& src = vals[size_t(v.node)][size_t(v.index)];
    if (have_results) {
      if (src.is_contiguous() && src.allocator() == results[r].allocator()) {
        results[r].allocator()->copy_within(results[r].raw(), src.raw(), src.nbytes());
      } else {
        Tensor c = src.to(host_allocator());
        results[r].allocator()->copy_from_host(results[r].raw(), c.raw(), c.nbytes());
      }
    } else {
      results[r] = src.to(dev_alloc);
    }
  }
}

void Executor::release_run_tensors() {
  static const Tensor kNone;  // copy-assigned, so each handle keeps its shape storage
  for (size_t id = 0; id < vals_.size(); ++id)
    for (size_t o = 0; o < vals_[id].size(); ++o)
      if (!fixed_[id][o]) vals_[id][o] = kNone;
  for (auto& v : kin_)
    for (auto& t : v) t = kNone;
  for (auto& v : kout_)
    for (auto& t : v) t = kNone;
}

void Executor::run_control(const Kernel& k, std::vector<std::vector<Tensor>>& vals) {
  const ir::Node& n = p_.graph.nodes[size_t(k.nodes[0])];
  std::vector<Tensor> args;
  for (auto v : n.inputs) args.push_back(vals[size_t(v.node)][size_t(v.index)]);
  std::vector<Tensor> res;
  auto read_bool = [](const Tensor& t) {
    bool b = false;
    t.allocator()->copy_to_host(&b, t.raw(), 1);
    return b;
  };
  if (n.op->name == "while") {
    const auto& sub = p_.regions_of(k);
    Executor cond(*sub.at(0), d_), body(*sub.at(1), d_);
    // Two sets of carried values on the device, swapped each trip: the body reads one
    // set and writes the other, so a loop allocates nothing after its first iteration.
    // Only the condition's one bool crosses to the host per iteration.
    std::vector<Tensor> cur, next;
    for (auto& a : args) {
      cur.push_back(a.to(d_.allocator()));
      next.push_back(Tensor::empty(a.dtype(), a.shape(), d_.allocator()));
    }
    while (read_bool(cond.run(cur)[0])) {
      body.run_into(cur, next);
      std::swap(cur, next);
    }
    res = cur;
  } else {
    bool pred = read_bool(args[0]);
    Executor branch(*p_.regions_of(k).at(pred ? 0 : 1), d_);
    res = branch.run(std::vector<Tensor>(args.begin() + 1, args.end()));
  }
  for (size_t i = 0; i < res.size(); ++i) {
    Tensor& dst = vals[size_t(n.id)][i];
    if (!dst.defined()) continue;
    Tensor src = res[i].is_contiguous() ? res[i] : res[i].contiguous();
    if (dst.allocator()->host_accessible() && src.allocator()->host_accessible())
      std::memcpy(dst.raw(), src.raw(), src.nbytes());
    else if (dst.allocator() == src.allocator())
      dst.allocator()->copy_within(dst.raw(), src.raw(), src.nbytes());
    else
      dst.allocator()->copy_from_host(dst.raw(), src.to(host_allocator()).raw(), src.nbytes());
  }
}

std::vector<Tensor> run(const Program& p, Device& d, const std::vector<Tensor>& inputs) {
  Executor ex(p, d);
  std::vector<Tensor> r = ex.run(inputs);
  for (auto& t : r)
    if (!t.is_host()) t = t.to(host_allocator());
  return r;
}

}  // namespace rlx
