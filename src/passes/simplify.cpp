// verify, dce, cse, constant folding and order-keeping permutes as views.
#include <unordered_map>

#include "core/error.hpp"
#include "ir/op_registry.hpp"
#include "passes/passes.hpp"

namespace rlx::passes {

namespace {

using ValueMap = std::vector<std::vector<ir::Value>>;

std::vector<ir::Value> mapped(const ValueMap& m, const std::vector<ir::Value>& in) {
  std::vector<ir::Value> r;
  for (auto v : in) r.push_back(m[size_t(v.node)][size_t(v.index)]);
  return r;
}

std::vector<ir::Value> copy_into(ir::Graph& out, const ir::Node& n, std::vector<ir::Value> in) {
  if (n.op->name == "param") return {out.add_param(n.attrs.get_string("name"), n.out(), n.loc)};
  auto v = out.add_multi(n.op, std::move(in), n.attrs, n.loc, n.regions);
  out.nodes.back().host = n.host;
  return v;
}

void finish(const ir::Graph& g, ir::Graph& out, const ValueMap& m) {
  out.name = g.name;
  out.results = mapped(m, g.results);
}

}  // namespace

void verify(const ir::Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    auto fail = [&](const std::string& m) {
      throw InputError("verify: node %" + std::to_string(i) + (n.op ? " " + n.op->name : std::string()) + " at " +
                       n.loc.str() + ": " + m);
    };
    if (!n.op) fail("has no op");
    if (n.id != int32_t(i)) fail("id is out of order");
    std::vector<TensorType> in;
    for (auto v : n.inputs) {
      if (v.node < 0 || size_t(v.node) >= i) fail("uses a value defined later or not at all (SSA order)");
      if (size_t(v.index) >= g.nodes[size_t(v.node)].outputs.size()) fail("uses a missing result index");
      in.push_back(g.type(v));
    }
    for (auto& r : n.regions) verify(*r);
    ir::Attrs attrs = n.attrs;
    std::vector<TensorType> want;
    try {
      want = ir::check_and_infer(*n.op, in, attrs, n.regions, n.loc);
    } catch (const InputError& e) {
      fail(e.what());
    }
    if (want != n.outputs) {
      std::string got, exp;
      for (auto& t : n.outputs) got += t.str() + " ";
      for (auto& t : want) exp += t.str() + " ";
      fail("declared type " + got + "differs from the inferred " + exp);
    }
  }
  for (auto v : g.results)
    if (v.node < 0 || size_t(v.node) >= g.nodes.size()) throw InputError("verify: a result refers to no node");
}

ir::Graph dce(const ir::Graph& g) {
  std::vector<char> live(g.nodes.size(), 0);
  for (auto v : g.results) live[size_t(v.node)] = 1;
  for (auto v : g.params) live[size_t(v.node)] = 1;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (live[i])
      for (auto v : g.nodes[i].inputs) live[size_t(v.node)] = 1;
  ir::Graph out;
  ValueMap m(g.nodes.size());
  for (auto& n : g.nodes)
    if (live[size_t(n.id)]) m[size_t(n.id)] = copy_into(out, n, mapped(m, n.inputs));
  finish(g, out, m);
  return out;
}

ir::Graph cse(const ir::Graph& g) {
  ir::Graph out;
  ValueMap m(g.nodes.size());
  std::unordered_multimap<size_t, int32_t> seen;  // hash -> node id in out
  for (auto& n : g.nodes) {
    auto in = mapped(m, n.inputs);
    bool eligible = !n.op->stateful && n.regions.empty() && n.op->name != "param";
    size_t h = 0;
    if (eligible) {
      h = std::hash<std::string>{}(n.op->name) ^ (n.attrs.hash() * 31) ^ (size_t(n.host) << 7);
      for (auto v : in) h = h * 1000003u ^ (size_t(v.node) * 131u + size_t(v.index));
      auto [lo, hi] = seen.equal_range(h);
      bool hit = false;
      for (auto it = lo; it != hi; ++it) {
        const ir::Node& c = out.nodes[size_t(it->second)];
        if (c.op == n.op && c.inputs == in && c.host == n.host && c.attrs == n.attrs) {
          std::vector<ir::Value> vs;
          for (size_t k = 0; k < c.outputs.size(); ++k) vs.push_back({c.id, int32_t(k)});
          m[size_t(n.id)] = vs;
          hit = true;
          break;
        }
      }
      if (hit) continue;
    }
    m[size_t(n.id)] = copy_into(out, n, in);
    if (eligible) seen.emplace(h, m[size_t(n.id)][0].node);
  }
  finish(g, out, m);
  return out;
}

ir::Graph fold_constants(const ir::Graph& g, const Evaluator& evaluate, int64_t max_elems) {
  ir::Graph out;
  ValueMap m(g.nodes.size());
  const ir::OpDef* constant = &ir::OpRegistry::get().at("constant");
  for (auto& n : g.nodes) {
    auto in = mapped(m, n.inputs);
    bool foldable = !n.op->stateful && n.regions.empty() && n.op->cls != ir::OpClass::Source &&
                    n.op->level != ir::Level::L1 && n.op->name != "reshape";
    for (auto v : in) foldable = foldable && out.node(v).op == constant;
    for (auto& t : n.outputs) foldable = foldable && numel(t.shape) <= max_elems && t.dtype != DType::I4;
    if (foldable && !n.inputs.empty()) {
      std::vector<Tensor> args;
      for (auto v : in) args.push_back(out.node(v).attrs.get_tensor("value"));
      std::optional<std::vector<Tensor>> res;
      try {
        res = evaluate(n, g, args);
      } catch (const Error&) {
        // Leave the node to fail (or not) at run time, where the error names it.
      }
      if (res && res->size() == n.outputs.size()) {
        std::vector<ir::Value> vs;
        for (auto& r : *res) vs.push_back(out.add(constant, {}, ir::Attrs{{"value", r}}, n.loc));
        m[size_t(n.id)] = vs;
        continue;
      }
    }
    m[size_t(n.id)] = copy_into(out, n, in);
  }
  finish(g, out, m);
  return out;
}

ir::Graph permutes_as_reshapes(const ir::Graph& g) {
  ir::Graph out;
  ValueMap m(g.nodes.size());
  const ir::OpDef* reshape = &ir::OpRegistry::get().at("reshape");
  for (auto& n : g.nodes) {
    auto in = mapped(m, n.inputs);
    if (n.op->name == "permute" && n.regions.empty()) {
      // Row-major order is unchanged when the axes longer than 1 keep their relative order:
      // the permuted tensor is its input's bytes, so a view (reshape) replaces the copy.
      const Shape& from = g.type(n.inputs[0]).shape;
      int64_t last = -1;
      bool keeps = true;
      for (int64_t axis : n.attrs.get_ints("perm")) {
        if (from[size_t(axis)] == 1) continue;
        keeps = keeps && axis > last;
        last = axis;
      }
      if (keeps) {
        auto v = out.add_multi(reshape, in, ir::Attrs{{"shape", n.out().shape}}, n.loc, {});
        out.nodes.back().host = n.host;
        m[size_t(n.id)] = v;
        continue;
      }
    }
    m[size_t(n.id)] = copy_into(out, n, in);
  }
  finish(g, out, m);
  return out;
}

}  // namespace rlx::passes
