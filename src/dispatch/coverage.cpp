#include "dispatch/coverage.hpp"

#include <nlohmann/json.hpp>
#include <sstream>

#include "dispatch/legalize.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "runtime/device.hpp"

namespace rlx {

std::optional<ir::Graph> sample_graph(const std::string& name, DType t) {
  const ir::OpDef& def = ir::OpRegistry::get().at(name);
  if (name == "param" || def.cls == ir::OpClass::Control) return std::nullopt;
  ir::Graph g;
  auto in = [&](const char* n, DType d, Shape s) { return input(g, n, d, std::move(s)); };
  DType idx = DType::I64;
  std::vector<Var> outs;
  Shape s{4, 8};
  if (name == "constant") {
    outs = {constant(g, Tensor::zeros(t, s))};
  } else if (name == "iota") {
    outs = {iota(g, s, 1, t)};
  } else if (name == "rng_uniform") {
    outs = {rng_uniform(g, s, t, 1)};
  } else if (name == "rng_normal") {
    outs = {rng_normal(g, s, t, 1)};
  } else if (def.cls == ir::OpClass::Elementwise) {
    if (name == "where")
      outs = {where(in("c", DType::Bool, s), in("a", t, s), in("b", t, s))};
    else if (name == "cast")
      outs = {cast(in("x", t, s), t == DType::F32 ? DType::F64 : DType::F32)};
    else if (def.max_inputs == 2)
      outs = {op(name, {in("a", t, s), in("b", t, s)})};
    else
      outs = {op(name, {in("x", t, s)})};
  } else if (def.cls == ir::OpClass::Reduction) {
    outs = {name == "argmax" ? argmax(in("x", t, s), 1) : op(name, {in("x", t, s)}, {{"axes", std::vector<int64_t>{1}}})};
  } else if (name == "cumsum") {
    outs = {cumsum(in("x", t, s), 1)};
  } else if (name == "matmul") {
    outs = {matmul(in("a", t, {2, 4, 8}), in("b", t, {2, 8, 4}))};
  } else if (name == "reshape") {
    outs = {reshape(in("x", t, s), {32})};
  } else if (name == "permute") {
    outs = {permute(in("x", t, s), {1, 0})};
  } else if (name == "broadcast_to") {
    outs = {broadcast_to(in("x", t, {1, 8}), s)};
  } else if (name == "slice") {
    outs = {slice(in("x", t, s), {1, 0}, {3, 8}, {1, 2})};
  } else if (name == "concat") {
    outs = {concat({in("a", t, s), in("b", t, s)}, 0)};
  } else if (name == "pad") {
    outs = {pad(in("x", t, s), {1, 0}, {0, 2})};
  } else if (name == "gather") {
    outs = {gather(in("x", t, s), in("i", idx, {3}), 0)};
  } else if (name == "scatter_add") {
    outs = {scatter_add(in("x", t, s), in("i", idx, {3}), in("u", t, {3, 8}), 0)};
  } else if (name == "linear") {
    outs = {linear(in("x", t, s), in("w", t, {16, 8}), in("b", t, {16}))};
  } else if (name == "layer_norm") {
    outs = {layer_norm(in("x", t, s), in("g", t, {8}), in("b", t, {8}))};
  } else if (name == "rms_norm") {
    outs = {rms_norm(in("x", t, s), in("g", t, {8}))};
  } else if (name == "mse") {
    outs = {mse(in("p", t, s), in("q", t, s))};
  } else if (name == "cross_entropy") {
    outs = {cross_entropy(in("x", t, s), in("y", idx, {4}))};
  } else if (name == "attention") {
    outs = {attention(in("q", t, {2, 4, 8}), in("k", t, {2, 6, 8}), in("v", t, {2, 6, 8}))};
  } else if (name == "spmv_csr" || name == "spmm_csr" || name == "sptrsv_csr") {
    std::vector<Var> csr = {in("row_ptr", DType::I32, {5}), in("col_idx", DType::I32, {8}), in("values", t, {8})};
    csr.push_back(name == "spmm_csr" ? in("B", t, {4, 3}) : in("x", t, {4}));
    outs = {op(name, csr, {{"cols", int64_t(4)}})};
  } else if (name == "spmv_tiled") {  // 4 x 4 in tiles of 2 x 2, one warp
    outs = {op(name, {in("share", DType::I64, {5}), in("rc", DType::I32, {8}), in("values", t, {8}), in("x", t, {4})},
               {{"rows", int64_t(4)}, {"cols", int64_t(4)}, {"rb", int64_t(2)}, {"panel", int64_t(2)},
                {"warps", int64_t(1)}})};
  } else if (name == "tile_csr") {  // 4 x 4 in tiles of 2 x 2, one warp
    outs = op_multi(name, {in("row_ptr", DType::I32, {5}), in("col_idx", DType::I32, {8}), in("values", t, {8})},
                    {{"cols", int64_t(4)}, {"rb", int64_t(2)}, {"panel", int64_t(2)}, {"warps", int64_t(1)}});
  } else if (def.cls == ir::OpClass::Library && def.max_inputs == 1) {
    outs = op_multi(name, {in("A", t, {4, 4})});
  } else if (name == "lu_solve") {
    outs = {op(name, {in("lu", t, {4, 4}), in("piv", DType::I32, {4}), in("B", t, {4, 2})})};
  } else if (def.cls == ir::OpClass::Library && def.max_inputs == 2) {
    outs = {op(name, {in("A", t, {4, 4}), in("B", t, {4, 2})})};
  } else if (def.level == ir::Level::L1 && def.min_inputs == 1) {
    outs = {op(name, {in("x", t, s)})};
  } else {
    return std::nullopt;
  }
  output(g, outs);
  return g;
}

std::vector<CoverageRow> coverage(const std::vector<Device*>& devices) {
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
      for (Device* d : devices) {
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

std::string coverage_table(const std::vector<Device*>& devices, const std::vector<CoverageRow>& rows) {
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

std::string coverage_json(const std::vector<Device*>& devices, const std::vector<CoverageRow>& rows) {
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
