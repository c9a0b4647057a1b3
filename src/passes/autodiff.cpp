#include "passes/autodiff.hpp"

#include <functional>
#include <map>
#include <memory>
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

// Re-emits region r's nodes into g with its parameters bound to args (values of g) and
// returns its results. Each node keeps its own location (the user's line inside the
// region function); nested regions are shared, not copied (regions are never mutated).
std::vector<Var> inline_region(ir::Graph& g, const ir::Graph& r, const std::vector<Var>& args) {
  std::vector<std::vector<ir::Value>> at(r.nodes.size());
  for (size_t i = 0; i < r.params.size(); ++i) at[size_t(r.params[i].node)] = {args.at(i).value()};
  for (size_t id = 0; id < r.nodes.size(); ++id) {
    const ir::Node& n = r.nodes[id];
    if (!at[id].empty()) continue;
    if (n.op->name == "param") throw InternalError("region " + r.name + " has a parameter outside its parameter list");
    std::vector<ir::Value> in;
    for (ir::Value v : n.inputs) in.push_back(at[size_t(v.node)].at(size_t(v.index)));
    at[id] = g.add_multi(n.op, std::move(in), n.attrs, n.loc, n.regions);
  }
  std::vector<Var> out;
  for (ir::Value v : r.results) out.emplace_back(&g, at[size_t(v.node)].at(size_t(v.index)));
  return out;
}

// The integer a one-element constant holds, looked through the casts, reshapes and
// broadcasts that keep it one; nullopt for anything else.
std::optional<int64_t> integer_constant(const ir::Graph& g, ir::Value v) {
  for (;;) {
    const ir::Node& n = g.node(v);
    if (!is_byte_integer(n.outputs[size_t(v.index)].dtype) || numel(n.outputs[size_t(v.index)].shape) != 1)
      return std::nullopt;
    if (n.op->name == "constant") {
      const Tensor& t = n.attrs.get_tensor("value");
      switch (t.dtype()) {
        case DType::I8: return *t.data<int8_t>();
        case DType::U8: return *t.data<uint8_t>();
        case DType::I32: return *t.data<int32_t>();
        case DType::I64: return *t.data<int64_t>();
        default: return std::nullopt;
      }
    }
    if (n.op->name != "cast" && n.op->name != "reshape" && n.op->name != "broadcast_to") return std::nullopt;
    v = n.inputs[0];
  }
}

// A while's trip count as grad sees it: fixed when one carried integer counter starts at a
// constant, the body steps it by a constant and the condition is nothing but that counter
// compared (lt, le, gt, ge, ne) with a constant. Otherwise `why` says what is not fixed.
struct TripCount {
  std::optional<int64_t> trips;
  std::string why;
};

TripCount trip_count(const ir::Graph& g, const ir::Node& w) {
  const ir::Graph &cond = *w.regions[0], &body = *w.regions[1];
  const ir::Node& c = cond.node(cond.results[0]);
  static const std::map<std::string, std::string> mirrored = {{"lt", "gt"}, {"le", "ge"}, {"gt", "lt"}, {"ge", "le"}, {"ne", "ne"}};
  if (!mirrored.count(c.op->name))
    return {std::nullopt, "its condition is " + c.op->name + ", not a counter compared with a constant"};
  // i: the counter's position among the carried values; the comparison read as `counter op bound`.
  auto param_index = [&](ir::Value v) {
    for (size_t i = 0; i < cond.params.size(); ++i)
      if (cond.params[i] == v) return int(i);
    return -1;
  };
  std::string cmp = c.op->name;
  int i = param_index(c.inputs[0]);
  std::optional<int64_t> bound = integer_constant(cond, c.inputs[1]);
  if (i < 0) {
    i = param_index(c.inputs[1]);
    bound = integer_constant(cond, c.inputs[0]);
    cmp = mirrored.at(cmp);
  }
  if (i < 0 || !bound || !is_byte_integer(cond.type(cond.params[size_t(i)]).dtype))
    return {std::nullopt, "its condition " + c.op->name + " does not compare a carried integer with a constant"};
  std::optional<int64_t> start = integer_constant(g, w.inputs[size_t(i)]);
  if (!start) return {std::nullopt, "its counter (carried value " + std::to_string(i) + ") does not start at a constant"};
  const ir::Node& u = body.node(body.results[size_t(i)]);
  const ir::Value counter = body.params[size_t(i)];
  std::optional<int64_t> step;
  if ((u.op->name == "add" || u.op->name == "sub") && u.inputs[0] == counter) step = integer_constant(body, u.inputs[1]);
  else if (u.op->name == "add" && u.inputs[1] == counter) step = integer_constant(body, u.inputs[0]);
  if (!step)
    return {std::nullopt, "the body does not step its counter (carried value " + std::to_string(i) + ") by a constant"};
  // In 128 bits: the distance between two int64 values does not fit in 64.
  const __int128 d = (u.op->name == "sub" ? -__int128(*step) : __int128(*step)), c0 = *start, n = *bound;
  const __int128 dist = (cmp == "lt" || cmp == "le") ? n - c0 : c0 - n;  // what the trips must cover
  __int128 trips = -1;                                                    // -1: never ends
  if (cmp == "ne") {
    if (c0 == n) trips = 0;
    else if (d != 0 && (n - c0) % d == 0 && (n - c0) / d > 0) trips = (n - c0) / d;
  } else {
    const bool strict = cmp == "lt" || cmp == "gt";
    const __int128 towards = (cmp == "lt" || cmp == "le") ? d : -d;  // the step toward the bound
    if (dist < 0 || (strict && dist == 0)) trips = 0;
    else if (towards > 0) trips = strict ? (dist + towards - 1) / towards : dist / towards + 1;
  }
  if (trips < 0)
    return {std::nullopt, "its counter, from " + std::to_string(*start) + " in steps of " + std::to_string(int64_t(d)) +
                              ", never ends the loop (" + cmp + " " + std::to_string(*bound) + ")"};
  return {int64_t(std::min<__int128>(trips, INT64_MAX)), ""};
}

// The longest loop grad unrolls, in nodes re-emitted (trips times the body's nodes). The
// recomputation keeps every trip's intermediates alive until the backward reads them, and
// it and its backward (about as many nodes again) are one graph that every later pass
// walks (verification, CSE, fusion, memory planning, dispatch). At this limit that graph
// has about 240,000 nodes and compiles for cpu in about 8 s on a 2-core machine; ten times
// more would make every compile of the program a minute-scale wait. A longer loop wants
// checkpointing or an adjoint rule, which grad does not derive.
constexpr int64_t kMaxUnrolledNodes = 100000;

int64_t body_nodes(const ir::Graph& body) { return int64_t(body.nodes.size() - body.params.size()); }

// Reverse accumulation over the nodes [begin, end) of g, which may append to g. Values
// defined outside the range are constants unless they are in wrt.
class Backprop {
 public:
  Backprop(ir::Graph& g, int32_t begin, int32_t end) : g_(g), begin_(begin), end_(end) {}

  // The cotangents of wrt (undefined where none reaches a value) given the seeds'.
  std::vector<Var> run(const std::vector<std::pair<ir::Value, Var>>& seeds, const std::vector<ir::Value>& wrt) {
    for (ir::Value v : wrt) is_wrt_[key(v)] = true;
    // Active: depends on a wrt value through inputs that carry gradients.
    active_.assign(size_t(end_ - begin_), 0);
    for (int32_t id = begin_; id < end_; ++id) {
      const ir::Node& n = g_.nodes[size_t(id)];
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (carries_gradient(n, int(i)) && value_active(n.inputs[i])) active_[size_t(id - begin_)] = 1;
    }
    // Needed: an active value some seed depends on through gradient-carrying inputs.
    std::map<Key, bool> needed;
    for (auto& [v, c] : seeds) needed[key(v)] = true;
    std::vector<char> useful(active_.size(), 0);
    for (int32_t id = end_ - 1; id >= begin_; --id) {
      const ir::Node& n = g_.nodes[size_t(id)];
      if (!active_[size_t(id - begin_)]) continue;
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
      if (n.op->name == "while")
        check_unrollable(id, n);
      else if (n.op->name != "if" && !n.op->vjp && !n.op->lower)
        throw InputError("grad: " + where_is(n) + " has no VJP rule");
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
      std::vector<Var> gins;
      if (n.op->name == "if")
        gins = if_vjp(n, ins, gouts);
      else if (n.op->name == "while")
        gins = through(ins, gouts, [&] { return unroll(n, ins, trips_.at(id)); });
      else if (n.op->vjp)
        gins = n.op->vjp(ins, outs, gouts, n.attrs);
      else
        gins = through(ins, gouts, [&] { return n.op->lower(ins, n.attrs); });
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
    // An if's predicate picks a branch; like a where's condition it has no gradient.
    if (i == 0 && n.op->name == "if") return false;
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

  bool value_active(ir::Value v) const {
    if (is_wrt_.count(key(v))) return true;
    return v.node >= begin_ && v.node < end_ && active_[size_t(v.node - begin_)];
  }

  // The VJP of ins -> outs through IR that emit appends here (an L1 op's lowering body, a
  // while unrolled), differentiated by ordinary reverse accumulation.
  std::vector<Var> through(const std::vector<Var>& ins, const std::vector<Var>& gouts,
                           const std::function<std::vector<Var>()>& emit) {
    const auto b = int32_t(g_.nodes.size());
    std::vector<Var> outs = emit();
    const auto e = int32_t(g_.nodes.size());
    std::vector<std::pair<ir::Value, Var>> seeds;
    for (size_t k = 0; k < outs.size(); ++k)
      if (gouts[k].defined()) seeds.emplace_back(outs[k].value(), gouts[k]);
    // Distinct inputs only (a value used twice gets its summed cotangent once), and only
    // those a gradient reaches: the others (a loop's counter, a constant operand) are
    // constants of the inner backward, which then emits nothing for them.
    std::vector<ir::Value> wrt;
    std::vector<int> slot(ins.size(), -1);
    for (size_t i = 0; i < ins.size(); ++i) {
      bool repeated = false;
      for (size_t j = 0; j < i && !repeated; ++j) repeated = ins[j].value() == ins[i].value();
      if (repeated || !value_active(ins[i].value()) || !differentiable_dtype(ins[i].dtype())) continue;
      slot[i] = int(wrt.size());
      wrt.push_back(ins[i].value());
    }
    std::vector<Var> inner = Backprop(g_, b, e).run(seeds, wrt);
    std::vector<Var> r(ins.size());
    for (size_t i = 0; i < ins.size(); ++i)
      if (slot[i] >= 0) r[i] = inner[size_t(slot[i])];
    return r;
  }

  // A while grad differentiates has a fixed trip count and unrolls to at most
  // kMaxUnrolledNodes; anything else is refused here, before any backward is emitted.
  void check_unrollable(int32_t id, const ir::Node& n) {
    TripCount t = trip_count(g_, n);
    if (!t.trips)
      throw InputError("grad: " + where_is(n) + " is control flow whose trip count depends on the data (" + t.why +
                       "), so grad cannot differentiate it by unrolling; a solver with an adjoint rule (an op with a "
                       "VJP) is differentiated through that rule instead (docs/autodiff.md)");
    const int64_t per_trip = body_nodes(*n.regions[1]);
    if (per_trip > 0 && *t.trips > kMaxUnrolledNodes / per_trip)
      throw InputError("grad: " + where_is(n) + " runs " + std::to_string(*t.trips) + " trips of a " +
                       std::to_string(per_trip) + "-node body; unrolling it for the backward would emit more than " +
                       std::to_string(kMaxUnrolledNodes) + " nodes, the limit (docs/autodiff.md)");
    trips_[id] = *t.trips;
  }

  // The forward recomputed for the backward: the body inlined `trips` times from the loop's
  // inputs, every trip's intermediates kept for the ordinary VJPs to read.
  std::vector<Var> unroll(const ir::Node& n, std::vector<Var> carried, int64_t trips) {
    for (int64_t t = 0; t < trips; ++t) carried = inline_region(g_, *n.regions[1], carried);
    return carried;
  }

  // The VJP of an if: an if on the same predicate whose regions differentiate the branches.
  // Region parameters: the arguments, then one cotangent per result of a differentiable
  // dtype; results: one cotangent per active differentiable argument. Being an if itself,
  // it differentiates by this rule again (jvp transposes it; hvp goes through it twice).
  std::vector<Var> if_vjp(const ir::Node& n, const std::vector<Var>& ins, const std::vector<Var>& gouts) {
    std::vector<TensorType> arg_types;
    std::vector<int> wanted, seeded;  // argument positions to differentiate, results with a cotangent
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      arg_types.push_back(g_.type(n.inputs[i]));
      if (value_active(n.inputs[i]) && differentiable_dtype(arg_types.back().dtype)) wanted.push_back(int(i) - 1);
    }
    std::vector<Var> in = ins;
    for (size_t k = 0; k < gouts.size(); ++k)
      if (gouts[k].defined()) {
        seeded.push_back(int(k));
        in.push_back(gouts[k]);
      }
    std::vector<Var> gins(n.inputs.size());
    if (wanted.empty() || seeded.empty()) return gins;
    std::vector<std::shared_ptr<ir::Graph>> regions;
    for (const auto& branch : n.regions) regions.push_back(branch_vjp(*branch, arg_types, seeded, wanted));
    std::vector<Var> r = op_multi("if", in, {}, regions);
    for (size_t j = 0; j < wanted.size(); ++j) gins[size_t(wanted[j]) + 1] = r[j];
    return gins;
  }

  // One branch's VJP as a region: the branch re-emitted on the region's parameters and
  // differentiated there, zeros for an argument the branch does not depend on.
  static std::shared_ptr<ir::Graph> branch_vjp(const ir::Graph& branch, const std::vector<TensorType>& arg_types,
                                               const std::vector<int>& seeded, const std::vector<int>& wanted) {
    auto r = std::make_shared<ir::Graph>();
    r->name = branch.name + "_vjp";
    std::vector<Var> args;
    for (size_t i = 0; i < arg_types.size(); ++i)
      args.emplace_back(r.get(), r->add_param(std::string("a") + std::to_string(i), arg_types[i]));
    std::vector<Var> cts;
    for (int k : seeded)
      cts.emplace_back(r.get(), r->add_param(std::string("g") + std::to_string(k), branch.type(branch.results[size_t(k)])));
    const auto b = int32_t(r->nodes.size());
    std::vector<Var> outs = inline_region(*r, branch, args);
    std::vector<std::pair<ir::Value, Var>> seeds;
    for (size_t j = 0; j < seeded.size(); ++j) seeds.emplace_back(outs[size_t(seeded[j])].value(), cts[j]);
    std::vector<ir::Value> wrt;
    for (int i : wanted) wrt.push_back(args[size_t(i)].value());
    std::vector<Var> d = Backprop(*r, b, int32_t(r->nodes.size())).run(seeds, wrt);
    for (size_t j = 0; j < d.size(); ++j)
      if (!d[j].defined()) d[j] = zeros_of(*r, arg_types[size_t(wanted[j])]);
    output(*r, d);
    return r;
  }

  ir::Graph& g_;
  int32_t begin_, end_;
  std::map<Key, bool> is_wrt_;
  std::vector<char> active_;
  std::map<int32_t, int64_t> trips_;  // of each while, by node
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
