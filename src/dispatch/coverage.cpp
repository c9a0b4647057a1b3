#include "dispatch/coverage.hpp"

#include <nlohmann/json.hpp>
#include <sstream>

#include "dispatch/legalize.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"

namespace rlx {

namespace {

// The probe's inputs: plain graph inputs (routes depend on types, not on values).
class ProbeInputs final : public ir::ExampleInputs {
 public:
  ir::Graph& graph() override { return g; }
  Var in(DType t, Shape s, const ir::ValueRange&) override { return next(t, std::move(s)); }
  Var index(DType t, Shape s, int64_t) override { return next(t, std::move(s)); }
  Var fixed(const Tensor& v) override { return next(v.dtype(), v.shape()); }
  ir::Graph g;

 private:
  Var next(DType t, Shape s) { return input(g, "in" + std::to_string(g.params.size()), t, std::move(s)); }
};

}  // namespace

std::optional<ir::Graph> sample_graph(const std::string& name, DType t) {
  const ir::OpDef& def = ir::OpRegistry::get().at(name);
  if (name == "param" || def.cls == ir::OpClass::Control) return std::nullopt;
  ir::ExampleFn example = ir::example_of(def);
  if (!example) return std::nullopt;
  ProbeInputs in;
  output(in.g, example(in, t));
  return std::move(in.g);
}

std::vector<CoverageRow> coverage(const std::vector<const Target*>& devices) {
  std::vector<CoverageRow> rows;
  for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
    for (DType t : def->dtypes) {
      std::optional<ir::Graph> g;
      try {
        g = sample_graph(def->name, t);
      } catch (const Error&) {
        g.reset();
      }
      if (!g) continue;
      CoverageRow row{def->name, ir::level_name(def->level), t, {}};
      for (const Target* d : devices) {
        Legalized L = legalize(*g, *d, Policy::PreferNative);
        std::string route = "unsupported";
        for (auto& n : L.report.nodes)
          if (n.op == def->name) {
            route = n.route == Route::Rewritten ? "rewritten:" + n.rule : route_name(n.route);
          }
        row.routes.push_back(route);
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::string coverage_table(const std::vector<const Target*>& devices, const std::vector<CoverageRow>& rows) {
  std::ostringstream o;
  o << "| op | level | dtype |";
  for (auto* d : devices) o << " " << d->name() << " |";
  o << "\n|---|---|---|";
  for (size_t i = 0; i < devices.size(); ++i) o << "---|";
  o << "\n";
  for (auto& r : rows) {
    o << "| " << r.op << " | " << r.level << " | " << dtype_name(r.dtype) << " |";
    for (auto& x : r.routes) o << " " << x << " |";
    o << "\n";
  }
  return o.str();
}

std::string coverage_json(const std::vector<const Target*>& devices, const std::vector<CoverageRow>& rows) {
  nlohmann::ordered_json j;
  j["devices"] = nlohmann::ordered_json::array();
  for (auto* d : devices) j["devices"].push_back(d->name());
  j["ops"] = nlohmann::ordered_json::array();
  for (auto& r : rows) {
    nlohmann::ordered_json e;
    e["op"] = r.op;
    e["level"] = r.level;
    e["dtype"] = dtype_name(r.dtype);
    nlohmann::ordered_json routes;
    for (size_t i = 0; i < devices.size(); ++i) routes[devices[i]->name()] = r.routes[i];
    e["routes"] = routes;
    j["ops"].push_back(e);
  }
  return j.dump(2);
}

}  // namespace rlx
