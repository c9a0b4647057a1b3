#include "dispatch/report.hpp"

#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

namespace rlx {

const char* route_name(Route r) {
  switch (r) {
    case Route::Native: return "native";
    case Route::CommonIR: return "common-ir";
    case Route::Rewritten: return "rewritten";
    case Route::HostStaged: return "host-staged";
    case Route::Unsupported: return "unsupported";
  }
  return "?";
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::PreferNative: return "prefer-native";
    case Policy::ForceCommonIR: return "force-common-ir";
    case Policy::Strict: return "strict";
    case Policy::AllowHost: return "allow-host";
  }
  return "?";
}

Policy policy_from_name(const std::string& s) {
  for (Policy p : {Policy::PreferNative, Policy::ForceCommonIR, Policy::Strict, Policy::AllowHost})
    if (s == policy_name(p)) return p;
  throw InputError("unknown policy '" + s + "' (expected prefer-native, force-common-ir, strict or allow-host)");
}

int64_t DispatchReport::count(Route r) const {
  int64_t n = 0;
  for (auto& x : nodes) n += x.route == r;
  return n;
}

static std::string route_label(const NodeReport& n) {
  return n.route == Route::Rewritten ? std::string("rewritten:") + n.rule : route_name(n.route);
}

std::string DispatchReport::table() const {
  std::ostringstream o;
  o << "dispatch report: device=" << device << " policy=" << policy
    << " compile_ready=" << (compile_ready ? "true" : "false") << "\n";
  size_t wop = 2, wroute = 5, wtype = 4, wloc = 8;
  std::vector<std::string> types;
  for (auto& n : nodes) {
    std::string t;
    for (size_t i = 0; i < n.dtypes.size(); ++i) t += (i ? "," : "") + n.dtypes[i];
    t += shape_str(n.shape);
    types.push_back(t);
    wop = std::max(wop, n.op.size());
    wroute = std::max(wroute, route_label(n).size());
    wtype = std::max(wtype, t.size());
    wloc = std::max(wloc, n.location.size());
  }
  auto row = [&](const std::string& id, const std::string& op, const std::string& lvl, const std::string& ty,
                 const std::string& loc, const std::string& route, const std::string& why) {
    o << std::left << std::setw(6) << id << std::setw(int(wop) + 2) << op << std::setw(5) << lvl
      << std::setw(int(wtype) + 2) << ty << std::setw(int(wloc) + 2) << loc << std::setw(int(wroute) + 2) << route
      << why << "\n";
  };
  row("node", "op", "lvl", "type", "location", "route", "why");
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& n = nodes[i];
    std::string why = n.why;
    if (n.bytes_staged) why += " (" + std::to_string(n.bytes_staged) + " bytes staged)";
    if (n.bytes_comm) why += " (" + std::to_string(n.bytes_comm) + " bytes between processes per call)";
    row("%" + std::to_string(n.id), n.op, n.level, types[i], n.location, route_label(n), why);
  }
  for (auto& k : kernels) {
    o << "kernel " << k.kind << " (" << k.what << ") at " << k.location << ":";
    for (size_t i = 0; i < k.nodes.size(); ++i) o << (i ? ", " : " ") << "%" << k.nodes[i] << " " << k.ops[i];
    o << "\n";
  }
  o << "summary: native=" << count(Route::Native) << " common-ir=" << count(Route::CommonIR)
    << " rewritten=" << count(Route::Rewritten) << " host-staged=" << count(Route::HostStaged)
    << " unsupported=" << count(Route::Unsupported) << "\n";
  return o.str();
}

std::string DispatchReport::json() const {
  nlohmann::ordered_json j;
  j["device"] = device;
  j["policy"] = policy;
  j["compile_ready"] = compile_ready;
  j["summary"] = {{"native", count(Route::Native)},         {"common-ir", count(Route::CommonIR)},
                  {"rewritten", count(Route::Rewritten)},   {"host-staged", count(Route::HostStaged)},
                  {"unsupported", count(Route::Unsupported)}};
  j["nodes"] = nlohmann::ordered_json::array();
  for (auto& n : nodes) {
    nlohmann::ordered_json e;
    e["id"] = n.id;
    e["op"] = n.op;
    e["level"] = n.level;
    e["dtypes"] = n.dtypes;
    e["shape"] = n.shape;
    e["location"] = n.location;
    e["route"] = route_name(n.route);
    e["rule"] = n.rule.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(n.rule);
    e["bytes_staged"] = n.bytes_staged;
    e["bytes_comm"] = n.bytes_comm;
    e["why"] = n.why;
    j["nodes"].push_back(e);
  }
  j["kernels"] = nlohmann::ordered_json::array();
  for (auto& k : kernels)
    j["kernels"].push_back(nlohmann::ordered_json{
        {"kind", k.kind}, {"what", k.what}, {"nodes", k.nodes}, {"ops", k.ops}, {"location", k.location}});
  return j.dump(2);
}

static std::string legalize_message(const DispatchReport& r) {
  std::string m = "cannot compile for device '" + r.device + "' (policy " + r.policy + "): " +
                  std::to_string(r.count(Route::Unsupported)) + " node(s) have no route";
  for (auto& n : r.nodes)
    if (n.route == Route::Unsupported) m += "\n  %" + std::to_string(n.id) + " " + n.op + " at " + n.location + ": " + n.why;
  return m;
}

LegalizeError::LegalizeError(DispatchReport r) : Error(legalize_message(r)), report_(std::move(r)) {}

}  // namespace rlx
