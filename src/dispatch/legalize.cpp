#include "dispatch/legalize.hpp"

#include <algorithm>

#include "dispatch/rewrites.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"

namespace rlx {

namespace {

// Ops the runtime itself runs on any device: values it only names or views.
bool runtime_op(const ir::Node& n) {
  const std::string& o = n.op->name;
  return o == "param" || o == "constant" || o == "reshape";
}

int64_t value_bytes(const TensorType& t) { return int64_t(dtype_storage_bytes(t.dtype, numel(t.shape))); }

struct Outcome {
  bool ok = false;
  Route route = Route::Unsupported;
  std::string rule;
  std::string why;
  int64_t staged = 0;
  std::vector<ir::Value> vals;
};

class Emitter {
 public:
  Emitter(const Target& d, const Target* host, Policy p, const std::vector<std::string>& deny)
      : dev_(d), host_(host), policy_(p), deny_(deny) {}

  // Legalizes the whole graph `src` into `out` (whose params are created here).
  // Returns per-node outcomes for the top-level report.
  std::vector<std::pair<const ir::Node*, Outcome>> graph(const ir::Graph& src, ir::Graph& out) {
    std::vector<std::vector<ir::Value>> map(src.nodes.size());
    std::vector<std::pair<const ir::Node*, Outcome>> rep;
    out.name = src.name;
    for (auto& n : src.nodes) {
      if (n.op->name == "param") {
        map[size_t(n.id)] = {out.add_param(n.attrs.get_string("name"), n.out(), n.loc)};
        continue;
      }
      std::vector<ir::Value> in;
      for (auto v : n.inputs) in.push_back(map[size_t(v.node)][size_t(v.index)]);
      Outcome o = emit(n, src, in, out, 0);
      if (o.ok) {
        map[size_t(n.id)] = o.vals;
      } else {
        // Keep going so the report names every offending node: stand in placeholders
        // of the right type so later nodes can still be checked.
        std::vector<ir::Value> ph;
        for (auto& t : n.outputs) ph.push_back(placeholder(out, t));
        map[size_t(n.id)] = ph;
      }
      rep.push_back({&n, std::move(o)});
    }
    for (auto v : src.results) out.results.push_back(map[size_t(v.node)][size_t(v.index)]);
    return rep;
  }

 private:
  ir::Value placeholder(ir::Graph& out, const TensorType& t) {
    // A stand-in of the right type; it exists only in a graph that is never compiled.
    auto& reg = ir::OpRegistry::get();
    if (t.shape.empty() || t.dtype == DType::I4)
      return out.add(&reg.at("constant"), {}, ir::Attrs{{"value", Tensor::zeros(t.dtype, t.dtype == DType::I4 ? t.shape : Shape{})}});
    ir::Value z = out.add(&reg.at("constant"), {}, ir::Attrs{{"value", Tensor::zeros(t.dtype, {})}});
    return out.add(&reg.at("broadcast_to"), {z}, ir::Attrs{{"shape", t.shape}});
  }

  std::vector<ir::Value> copy_node(const ir::Node& n, const std::vector<ir::Value>& in, ir::Graph& out,
                                   std::vector<std::shared_ptr<ir::Graph>> regions, bool host) {
    auto vals = out.add_multi(n.op, in, n.attrs, n.loc, std::move(regions));
    out.nodes.back().host = host;
    return vals;
  }

  // Emits a scratch graph (params = the node's inputs) node by node into `out`.
  Outcome inline_scratch(const ir::Graph& scratch, const std::vector<ir::Value>& in, ir::Graph& out, int depth,
                         std::vector<std::string>& inner_rules) {
    Outcome o;
    std::vector<std::vector<ir::Value>> map(scratch.nodes.size());
    for (size_t i = 0; i < scratch.params.size(); ++i) map[size_t(scratch.params[i].node)] = {in[i]};
    for (auto& sn : scratch.nodes) {
      if (sn.op->name == "param") continue;
      std::vector<ir::Value> sin;
      for (auto v : sn.inputs) sin.push_back(map[size_t(v.node)][size_t(v.index)]);
      Outcome c = emit(sn, scratch, sin, out, depth + 1);
      if (!c.ok) {
        o.why = sn.op->name + ": " + c.why;
        return o;
      }
      if (c.route == Route::Rewritten) inner_rules.push_back(c.rule);
      if (c.route == Route::HostStaged) o.staged += c.staged;
      map[size_t(sn.id)] = c.vals;
    }
    for (auto v : scratch.results) o.vals.push_back(map[size_t(v.node)][size_t(v.index)]);
    o.ok = true;
    return o;
  }

  std::shared_ptr<ir::Graph> scratch_for(const ir::Node& n, const ir::Graph& src, std::vector<Var>& args) {
    auto g = std::make_shared<ir::Graph>();
    for (size_t i = 0; i < n.inputs.size(); ++i)
      args.emplace_back(g.get(), g->add_param("in" + std::to_string(i), src.type(n.inputs[i])));
    return g;
  }

  Outcome emit(const ir::Node& n, const ir::Graph& src, const std::vector<ir::Value>& in, ir::Graph& out, int depth) {
    Outcome o;
    size_t mark = out.nodes.size();
    auto rollback = [&] { out.nodes.resize(mark); };
    if (depth > 16) {
      o.why = "rewrites nest deeper than 16 levels";
      return o;
    }
    if (runtime_op(n)) {
      o.ok = true;
      o.route = Route::Native;
      o.why = n.op->name == "reshape" ? "a view: no data moves" : "held by the runtime";
      o.vals = copy_node(n, in, out, {}, false);
      return o;
    }
    if (n.op->cls == ir::OpClass::Control) return control(n, in, out);

    std::string why_native, why_lower, why_rewrite, why_host;
    bool l1 = n.op->level == ir::Level::L1;
    if (l1 && policy_ == Policy::ForceCommonIR) {
      why_native = "skipped (policy force-common-ir)";
    } else if (std::find(deny_.begin(), deny_.end(), n.op->name) != deny_.end()) {
      why_native = "denied by the caller (deny_native)";
    } else {
      Capability c = dev_.supports(n, src);
      if (c.ok) {
        o.ok = true;
        o.route = Route::Native;
        o.why = "device kernel";
        o.vals = copy_node(n, in, out, {}, false);
        return o;
      }
      why_native = c.why.empty() ? "no kernel" : c.why;
    }

    // The named rewrites of one kind (tried before the lowering, or after it); the first
    // whose result is legal wins. Failures are kept for the report.
    std::vector<std::string> tried;
    auto rewrite = [&](bool early) -> bool {
      for (auto& rule : rewrite_rules()) {
        if (rule.before_lowering != early || !rule.applies(n, src)) continue;
        if (policy_ == Policy::Strict && !rule.lossless) {
          tried.push_back(rule.name + " is lossy (policy strict)");
          continue;
        }
        std::vector<Var> args;
        auto scratch = scratch_for(n, src, args);
        std::vector<std::string> inner;
        try {
          output(*scratch, rule.build(n, args));
          Outcome c = inline_scratch(*scratch, in, out, depth, inner);
          if (c.ok) {
            c.route = Route::Rewritten;
            c.rule = rule.name;
            c.why = rule.summary;
            o = std::move(c);
            return true;
          }
          tried.push_back(rule.name + " -> " + c.why);
        } catch (const Error& e) {
          tried.push_back(rule.name + " -> " + e.what());
        }
        rollback();
      }
      return false;
    };
    if (policy_ != Policy::ForceCommonIR && rewrite(true)) return o;

    if (n.op->lower) {
      std::vector<Var> args;
      auto scratch = scratch_for(n, src, args);
      std::vector<std::string> inner;
      try {
        LocationScope scope(n.loc);
        output(*scratch, n.op->lower(args, n.attrs));
        Outcome c = inline_scratch(*scratch, in, out, depth, inner);
        if (c.ok) {
          c.route = Route::CommonIR;
          c.why = "lowered to " + std::to_string(out.nodes.size() - mark) + " L2 ops";
          if (!inner.empty()) {
            c.why += "; inner rewrites:";
            for (auto& r : inner) c.why += " " + r;
          }
          return c;
        }
        why_lower = c.why;
      } catch (const Error& e) {
        why_lower = e.what();
      }
      rollback();
    } else {
      why_lower = "no lowering body";
    }

    if (rewrite(false)) return o;
    if (tried.empty()) {
      why_rewrite = "no rule applies";
    } else {
      for (auto& t : tried) why_rewrite += (why_rewrite.empty() ? "" : "; ") + t;
    }

    if (policy_ != Policy::AllowHost) {
      why_host = "not allowed (policy " + std::string(policy_name(policy_)) + "; use allow-host)";
    } else if (!host_) {
      why_host = "no host device to stage on";
    } else if (n.op->level == ir::Level::L1) {
      why_host = "the host has no kernel";
    } else {
      Capability c = host_->supports(n, src);
      if (c.ok) {
        o.ok = true;
        o.route = Route::HostStaged;
        o.vals = copy_node(n, in, out, {}, true);
        for (size_t i = 0; i < n.inputs.size(); ++i)
          if (std::find(n.op->order_only_inputs.begin(), n.op->order_only_inputs.end(), int(i)) == n.op->order_only_inputs.end())
            o.staged += value_bytes(src.type(n.inputs[i]));
        for (auto& t : n.outputs) o.staged += value_bytes(t);
        o.why = "runs on the host with explicit copies";
        return o;
      }
      why_host = c.why;
    }
    o.why = "native: " + why_native + " | common-ir: " + why_lower + " | rewrite: " + why_rewrite +
            " | host-staged: " + why_host;
    return o;
  }

  Outcome control(const ir::Node& n, const std::vector<ir::Value>& in, ir::Graph& out) {
    Outcome o;
    std::vector<std::shared_ptr<ir::Graph>> regions;
    std::string fails;
    for (auto& r : n.regions) {
      auto lg = std::make_shared<ir::Graph>();
      for (auto& [node, oc] : graph(*r, *lg))
        if (!oc.ok) fails += (fails.empty() ? "" : "; ") + r->name + " %" + std::to_string(node->id) + " " + node->op->name + ": " + oc.why;
        else o.staged += oc.staged;
      regions.push_back(lg);
    }
    if (!fails.empty()) {
      o.why = "region ops have no route: " + fails;
      return o;
    }
    o.ok = true;
    o.route = Route::Native;
    o.why = "structured control flow on the executor; regions compiled for the device";
    o.vals = copy_node(n, in, out, std::move(regions), false);
    return o;
  }

  const Target& dev_;
  const Target* host_;
  Policy policy_;
  const std::vector<std::string>& deny_;
};

}  // namespace

Legalized legalize(const ir::Graph& g, const Target& d, Policy p, const std::vector<std::string>& deny,
                   const Target* host) {
  Legalized L;
  Emitter em(d, host, p, deny);
  auto rep = em.graph(g, L.graph);
  L.report.device = d.name();
  L.report.policy = policy_name(p);
  for (auto& [n, o] : rep) {
    NodeReport r;
    r.id = n->id;
    r.op = n->op->name;
    r.level = ir::level_name(n->op->level);
    for (auto v : n->inputs) r.dtypes.push_back(dtype_name(g.type(v).dtype));
    if (n->inputs.empty() && !n->outputs.empty()) r.dtypes.push_back(dtype_name(n->out().dtype));
    r.shape = n->outputs.empty() ? Shape{} : n->out().shape;
    r.location = n->loc.str();
    r.route = o.ok ? o.route : Route::Unsupported;
    r.rule = o.rule;
    r.bytes_staged = o.staged;
    if (n->op->comm_bytes) {
      std::vector<TensorType> in;
      for (auto v : n->inputs) in.push_back(g.type(v));
      r.bytes_comm = n->op->comm_bytes(in, n->attrs);
    }
    r.why = o.why;
    L.report.nodes.push_back(std::move(r));
  }
  L.report.compile_ready = L.report.count(Route::Unsupported) == 0;
  return L;
}

}  // namespace rlx
