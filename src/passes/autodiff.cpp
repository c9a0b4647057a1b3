#include "passes/autodiff.hpp"

#include <map>
#include <string>

#include "core/error.hpp"
#include "ir/op_registry.hpp"

namespace rlx {

namespace {

bool differentiable_dtype(DType t) { return is_float(t) || t == DType::C64; }

std::string where_is(const ir::Node& n) { return n.op->name + " at " + n.loc.str(); }

Var zeros_of(ir::Graph& g, const TensorType& t) {
  Var z = scalar(g, 0.0, t.dtype);
  return t.shape.empty() ? z : broadcast_to(z, t.shape);
}

using Key = std::pair<int32_t, int32_t>;
Key key(ir::Value v) { return {v.node, v.index}; }

// Reverse accumulation over the nodes [begin, end) of g, which may append to g. Values
// defined outside the range are constants unless they are in wrt.
class Backprop {
 public:
  Backprop(ir::Graph& g, int32_t begin, int32_t end) : g_(g), begin_(begin), end_(end) {}

  // The cotangents of wrt (undefined where none reaches a value) given the seeds'.
  std::vector<Var> run(const std::vector<std::pair<ir::Value, Var>>& seeds, const std::vector<ir::Value>& wrt) {
    std::map<Key, bool> is_wrt;
    for (ir::Value v : wrt) is_wrt[key(v)] = true;
    // Active: depends on a wrt value through inputs that carry gradients.
    std::vector<char> active(size_t(end_ - begin_), 0);
    auto value_active = [&](ir::Value v) {
      if (is_wrt.count(key(v))) return true;
      return v.node >= begin_ && v.node < end_ && active[size_t(v.node - begin_)];
    };
    for (int32_t id = begin_; id < end_; ++id) {
      const ir::Node& n = g_.nodes[size_t(id)];
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (carries_gradient(n, int(i)) && value_active(n.inputs[i])) active[size_t(id - begin_)] = 1;
    }
    // Needed: an active value some seed depends on through gradient-carrying inputs.
    std::map<Key, bool> needed;
    for (auto& [v, c] : seeds) needed[key(v)] = true;
    std::vector<char> useful(active.size(), 0);
    for (int32_t id = end_ - 1; id >= begin_; --id) {
      const ir::Node& n = g_.nodes[size_t(id)];
      if (!active[size_t(id - begin_)]) continue;
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        if (!needed.count({id, int32_t(k)})) continue;
        useful[size_t(id - begin_)] = 1;
        if (!differentiable_dtype(n.outputs[k].dtype))
          throw InputError("grad: " + where_is(n) + " lies between the differentiated values and the inputs, but its " +
                           (n.outputs.size() > 1 ? "result " + std::to_string(k) + " " : std::string("result ")) +
                           "is " + dtype_name(n.outputs[k].dtype) + ", which has no gradient");
      }
      if (!useful[size_t(id - begin_)]) continue;
      if (n.op->not_differentiable) throw InputError("grad: " + where_is(n) + " is not differentiable");
      if (!n.regions.empty())
        throw InputError("grad: " + where_is(n) +
                         " is control flow, which grad does not differentiate yet (docs/autodiff.md)");
      if (!n.op->vjp && !n.op->lower) throw InputError("grad: " + where_is(n) + " has no VJP rule");
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (carries_gradient(n, int(i)) && value_active(n.inputs[i])) needed[key(n.inputs[i])] = true;
    }

    for (auto& [v, c] : seeds) accumulate(v, c, "the seed");
    for (int32_t id = end_ - 1; id >= begin_; --id) {
      if (!useful[size_t(id - begin_)]) continue;
      // Copies: the rules append to g_.nodes, which may move.
      const ir::Node n = g_.nodes[size_t(id)];
      std::vector<Var> outs, gouts;
      bool any = false;
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        outs.emplace_back(&g_, ir::Value{id, int32_t(k)});
        auto it = ct_.find({id, int32_t(k)});
        gouts.push_back(it == ct_.end() ? Var() : it->second);
        any |= it != ct_.end();
      }
      if (!any) continue;
      LocationScope scope(n.loc);
      for (size_t k = 0; k < n.outputs.size(); ++k)
        if (!gouts[k].defined() && differentiable_dtype(n.outputs[k].dtype)) gouts[k] = zeros_of(g_, n.outputs[k]);
      std::vector<Var> ins;
      for (ir::Value v : n.inputs) ins.emplace_back(&g_, v);
      std::vector<Var> gins = n.op->vjp ? n.op->vjp(ins, outs, gouts, n.attrs) : through_lowering(n, ins, gouts);
      if (gins.size() > n.inputs.size())
        throw InternalError("the VJP of " + n.op->name + " returned " + std::to_string(gins.size()) +
                            " cotangents for " + std::to_string(n.inputs.size()) + " inputs");
      for (size_t i = 0; i < gins.size(); ++i)
        if (gins[i].defined() && carries_gradient(n, int(i)) && value_active(n.inputs[i]))
          accumulate(n.inputs[i], gins[i], "the VJP of " + where_is(n) + " for input " + std::to_string(i));
    }
    std::vector<Var> r;
    for (ir::Value v : wrt) {
      auto it = ct_.find(key(v));
      r.push_back(it == ct_.end() ? Var() : it->second);
    }
    return r;
  }

 private:
  static bool carries_gradient(const ir::Node& n, int i) {
    for (int k : n.op->nondiff_inputs)
      if (k == i) return false;
    return true;
  }

  void accumulate(ir::Value v, const Var& c, const std::string& from) {
    const TensorType& want = g_.type(v);
    if (c.type() != want)
      throw InternalError(from + " has type " + c.type().str() + ", expected " + want.str());
    auto it = ct_.find(key(v));
    if (it == ct_.end())
      ct_.emplace(key(v), c);
    else
      it->second = it->second + c;
  }

  // An L1 op without a VJP of its own: its lowering body, appended here, differentiated.
  std::vector<Var> through_lowering(const ir::Node& n, const std::vector<Var>& ins, const std::vector<Var>& gouts) {
    const auto b = int32_t(g_.nodes.size());
    std::vector<Var> outs = n.op->lower(ins, n.attrs);
    const auto e = int32_t(g_.nodes.size());
    std::vector<std::pair<ir::Value, Var>> seeds;
    for (size_t k = 0; k < outs.size(); ++k)
      if (gouts[k].defined()) seeds.emplace_back(outs[k].value(), gouts[k]);
    // Distinct inputs only: a value used twice gets its summed cotangent once.
    std::vector<ir::Value> wrt;
    std::vector<int> first(ins.size(), -1);
    for (size_t i = 0; i < ins.size(); ++i) {
      for (size_t j = 0; j < i && first[i] < 0; ++j)
        if (ins[j].value() == ins[i].value()) first[i] = int(j);
      if (first[i] < 0) wrt.push_back(ins[i].value());
    }
    std::vector<Var> inner = Backprop(g_, b, e).run(seeds, wrt);
    std::vector<Var> r(ins.size());
    for (size_t i = 0, w = 0; i < ins.size(); ++i)
      if (first[i] < 0) r[i] = inner[w++];
    return r;
  }

  ir::Graph& g_;
  int32_t begin_, end_;
  std::map<Key, Var> ct_;
};

ir::Graph* common_graph(const std::vector<Var>& vs, const char* what) {
  ir::Graph* g = nullptr;
  for (const Var& v : vs) {
    if (!v.defined()) throw InputError(std::string(what) + ": an undefined Var");
    if (g && v.graph() != g) throw InputError(std::string(what) + ": values belong to different graphs");
    g = v.graph();
  }
  return g;
}

}  // namespace

std::vector<Var> vjp(const std::vector<Var>& outputs, const std::vector<Var>& cotangents, const std::vector<Var>& wrt,
                     SrcLoc loc) {
  if (outputs.size() != cotangents.size())
    throw InputError("vjp: " + std::to_string(outputs.size()) + " outputs but " + std::to_string(cotangents.size()) +
                     " cotangents");
  std::vector<Var> all = outputs;
  all.insert(all.end(), cotangents.begin(), cotangents.end());
  all.insert(all.end(), wrt.begin(), wrt.end());
  ir::Graph* g = common_graph(all, "vjp");
  if (!g) return {};
  std::vector<std::pair<ir::Value, Var>> seeds;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!differentiable_dtype(outputs[k].dtype()))
      throw InputError(std::string("vjp: output ") + std::to_string(k) + " is " + dtype_name(outputs[k].dtype()) +
                       ", which has no gradient");
    if (cotangents[k].type() != outputs[k].type())
      throw InputError("vjp: cotangent " + std::to_string(k) + " is " + cotangents[k].type().str() + ", its output " +
                       outputs[k].type().str());
    seeds.emplace_back(outputs[k].value(), cotangents[k]);
  }
  std::vector<ir::Value> w;
  for (size_t j = 0; j < wrt.size(); ++j) {
    if (!differentiable_dtype(wrt[j].dtype()))
      throw InputError(std::string("vjp: cannot differentiate with respect to a ") + dtype_name(wrt[j].dtype()) +
                       " value (wrt " + std::to_string(j) + ")");
    w.push_back(wrt[j].value());
  }
  std::vector<Var> r = Backprop(*g, 0, int32_t(g->nodes.size())).run(seeds, w);
  for (size_t j = 0; j < r.size(); ++j)
    if (!r[j].defined()) {
      LocationScope scope(to_location(loc));
      r[j] = zeros_of(*g, wrt[j].type());
    }
  return r;
}

std::vector<Var> grad(const Var& y, const std::vector<Var>& wrt, std::optional<Var> cotangent, SrcLoc loc) {
  if (!y.defined()) throw InputError("grad: an undefined Var");
  Var seed;
  if (cotangent) {
    seed = *cotangent;
  } else {
    if (numel(y.shape()) != 1)
      throw InputError("grad: the value has shape " + shape_str(y.shape()) +
                       "; grad without a cotangent needs one element (a loss)");
    LocationScope scope(to_location(loc));
    seed = scalar_like(y, 1.0);
    if (!y.shape().empty()) seed = broadcast_to(seed, y.shape());
  }
  return vjp({y}, {seed}, wrt, loc);
}

std::vector<Var> jvp(const std::vector<Var>& outputs, const std::vector<Var>& wrt, const std::vector<Var>& tangents,
                     SrcLoc loc) {
  if (wrt.size() != tangents.size())
    throw InputError("jvp: " + std::to_string(wrt.size()) + " wrt values but " + std::to_string(tangents.size()) +
                     " tangents");
  for (size_t j = 0; j < wrt.size(); ++j)
    if (tangents[j].type() != wrt[j].type())
      throw InputError("jvp: tangent " + std::to_string(j) + " is " + tangents[j].type().str() + ", its value " +
                       wrt[j].type().str());
  if (outputs.empty()) return {};
  ir::Graph& g = *outputs[0].graph();
  // u: a stand-in cotangent per output. The VJP is linear in u, so its own VJP with
  // respect to u, seeded with the tangents, is the JVP and no longer reads u's value.
  std::vector<Var> us;
  {
    LocationScope scope(to_location(loc));
    for (const Var& y : outputs) us.push_back(zeros_of(g, y.type()));
  }
  std::vector<Var> back = vjp(outputs, us, wrt, loc);
  return vjp(back, tangents, us, loc);
}

std::vector<Var> hvp(const Var& y, const std::vector<Var>& wrt, const std::vector<Var>& vectors, SrcLoc loc) {
  return jvp(grad(y, wrt, std::nullopt, loc), wrt, vectors, loc);
}

}  // namespace rlx

namespace rlx::passes {

ir::Graph grad(const ir::Graph& g, int output, std::vector<int> wrt, bool with_cotangent) {
  if (output < 0 || size_t(output) >= g.results.size())
    throw InputError("grad: the graph has " + std::to_string(g.results.size()) + " results, no result " +
                     std::to_string(output));
  ir::Graph r = g;
  if (wrt.empty())
    for (size_t i = 0; i < r.params.size(); ++i)
      if (differentiable_dtype(r.type(r.params[i]).dtype)) wrt.push_back(int(i));
  std::vector<Var> w;
  for (int i : wrt) {
    if (i < 0 || size_t(i) >= r.params.size())
      throw InputError("grad: the graph has " + std::to_string(r.params.size()) + " inputs, no input " + std::to_string(i));
    w.emplace_back(&r, r.params[size_t(i)]);
  }
  Var y(&r, r.results[size_t(output)]);
  ir::Location here{.name = "grad"};
  std::optional<Var> seed;
  if (with_cotangent) seed = Var(&r, r.add_param("cotangent", y.type(), here));
  LocationScope scope(here);
  for (const Var& d : rlx::grad(y, w, seed)) r.results.push_back(d.value());
  return r;
}

}  // namespace rlx::passes
