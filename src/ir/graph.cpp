#include "ir/graph.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/error.hpp"
#include "ir/op_registry.hpp"

namespace rlx::ir {

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::Bool: return "bool";
    case AttrKind::String: return "string";
    case AttrKind::Ints: return "int list";
    case AttrKind::Floats: return "float list";
    case AttrKind::DType: return "dtype";
    case AttrKind::Tensor: return "tensor";
  }
  return "?";
}

AttrKind attr_kind_of(const AttrValue& v) { return AttrKind(v.index()); }

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> init) {
  for (auto& [k, v] : init) set(k, v);
}

const AttrValue* Attrs::find(const std::string& name) const {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& p, const std::string& n) { return p.first < n; });
  return it != items_.end() && it->first == name ? &it->second : nullptr;
}

void Attrs::set(const std::string& name, AttrValue v) {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& p, const std::string& n) { return p.first < n; });
  if (it != items_.end() && it->first == name)
    it->second = std::move(v);
  else
    items_.insert(it, {name, std::move(v)});
}

template <class T>
static const T& get_as(const Attrs& a, const std::string& name, AttrKind k) {
  const AttrValue* v = a.find(name);
  if (!v) throw InputError("missing attribute '" + name + "'");
  if (auto* p = std::get_if<T>(v)) return *p;
  throw InputError("attribute '" + name + "' expects " + attr_kind_name(k) + ", got " +
                   attr_kind_name(attr_kind_of(*v)));
}

int64_t Attrs::get_int(const std::string& n) const { return get_as<int64_t>(*this, n, AttrKind::Int); }
double Attrs::get_float(const std::string& n) const {
  const AttrValue* v = find(n);
  if (v)
    if (auto* p = std::get_if<int64_t>(v)) return double(*p);
  return get_as<double>(*this, n, AttrKind::Float);
}
bool Attrs::get_bool(const std::string& n) const { return get_as<bool>(*this, n, AttrKind::Bool); }
const std::string& Attrs::get_string(const std::string& n) const {
  return get_as<std::string>(*this, n, AttrKind::String);
}
const std::vector<int64_t>& Attrs::get_ints(const std::string& n) const {
  return get_as<std::vector<int64_t>>(*this, n, AttrKind::Ints);
}
const std::vector<double>& Attrs::get_floats(const std::string& n) const {
  return get_as<std::vector<double>>(*this, n, AttrKind::Floats);
}
DType Attrs::get_dtype(const std::string& n) const { return get_as<DType>(*this, n, AttrKind::DType); }
const Tensor& Attrs::get_tensor(const std::string& n) const { return get_as<Tensor>(*this, n, AttrKind::Tensor); }

static bool tensor_equal(const Tensor& a, const Tensor& b) {
  if (a.raw() == b.raw() && a.type() == b.type()) return true;
  if (a.type() != b.type() || !a.is_host() || !b.is_host()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw(), cb.raw(), ca.nbytes()) == 0;
}

bool Attrs::operator==(const Attrs& o) const {
  if (items_.size() != o.items_.size()) return false;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].first != o.items_[i].first) return false;
    const auto &a = items_[i].second, &b = o.items_[i].second;
    if (a.index() != b.index()) return false;
    bool same = std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, Tensor>)
            return tensor_equal(x, std::get<Tensor>(b));
          else
            return x == std::get<T>(b);
        },
        a);
    if (!same) return false;
  }
  return true;
}

size_t Attrs::hash() const {
  size_t h = 0x12345;
  auto mix = [&](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (auto& [k, v] : items_) {
    mix(std::hash<std::string>{}(k));
    mix(v.index());
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            for (auto e : x) mix(std::hash<int64_t>{}(e));
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            for (auto e : x) mix(std::hash<double>{}(e));
          } else if constexpr (std::is_same_v<T, Tensor>) {
            // Host constants hash by content so CSE merges equal literals — folded ones too
            // (a mask broadcast to [N, 1, 1, L] that every layer builds alike). Past 512
            // bytes the first and last 256 stand for the rest: equal tensors still hash
            // alike, and operator== compares them whole.
            if (x.is_host() && x.is_contiguous()) {
              const char* b = static_cast<const char*>(x.raw());
              const size_t nb = size_t(x.nbytes());
              if (nb <= 512) {
                mix(std::hash<std::string_view>{}(std::string_view(b, nb)));
              } else {
                mix(std::hash<std::string_view>{}(std::string_view(b, 256)));
                mix(std::hash<std::string_view>{}(std::string_view(b + nb - 256, 256)));
              }
              mix(size_t(x.dtype()));
              for (int64_t e : x.shape()) mix(std::hash<int64_t>{}(e));
            } else {
              mix(std::hash<const void*>{}(x.raw()));
            }
          } else if constexpr (std::is_same_v<T, DType>) {
            mix(size_t(x));
          } else {
            mix(std::hash<T>{}(x));
          }
        },
        v);
  }
  return h;
}

std::string Location::str() const {
  if (!file.empty()) return file + ":" + std::to_string(line);
  if (!name.empty()) return name;
  return "?";
}

static std::string where(const OpDef& op, const Location& loc) {
  return "op '" + op.name + "'" + (loc.known() ? " at " + loc.str() : std::string());
}

std::vector<TensorType> check_and_infer(const OpDef& op, const std::vector<TensorType>& in, Attrs& attrs,
                                        const std::vector<std::shared_ptr<Graph>>& regions, const Location& loc) {
  int n = int(in.size());
  if (n < op.min_inputs || (op.max_inputs >= 0 && n > op.max_inputs)) {
    std::string want = op.max_inputs < 0 ? "at least " + std::to_string(op.min_inputs)
                       : op.min_inputs == op.max_inputs
                           ? std::to_string(op.min_inputs)
                           : std::to_string(op.min_inputs) + " to " + std::to_string(op.max_inputs);
    throw InputError(where(op, loc) + " takes " + want + " inputs, got " + std::to_string(n));
  }
  for (auto& [k, v] : attrs.items()) {
    const AttrSpec* s = op.attr_spec(k);
    if (!s) throw InputError(where(op, loc) + " has no attribute '" + k + "'");
    AttrKind got = attr_kind_of(v);
    if (got == AttrKind::Int && s->kind == AttrKind::Float) {
      attrs.set(k, double(std::get<int64_t>(v)));
      continue;
    }
    if (got != s->kind)
      throw InputError("attribute '" + k + "' of " + where(op, loc) + " expects " + attr_kind_name(s->kind) +
                       ", got " + attr_kind_name(got));
  }
  for (auto& s : op.attrs) {
    if (attrs.has(s.name)) continue;
    if (s.required) throw InputError(where(op, loc) + " requires attribute '" + s.name + "'");
    attrs.set(s.name, s.fallback);
  }
  try {
    std::vector<TensorType> out = op.infer(in, attrs, regions);
    // One place checks every result type of every op: no shape rule can hand on an
    // extent product or byte count that wraps (SizeError names the shape).
    for (const TensorType& t : out) dtype_storage_bytes(t.dtype, numel(t.shape));
    return out;
  } catch (const InputError& e) {
    throw ShapeError(where(op, loc) + ": " + e.what());
  }
}

std::vector<Value> Graph::add_multi(const OpDef* op, std::vector<Value> inputs, Attrs attrs, Location loc,
                                    std::vector<std::shared_ptr<Graph>> regions) {
  std::vector<TensorType> in;
  in.reserve(inputs.size());
  for (Value v : inputs) {
    if (v.node < 0 || size_t(v.node) >= nodes.size() || size_t(v.index) >= nodes[size_t(v.node)].outputs.size())
      throw InputError("op '" + op->name + "'" + (loc.known() ? " at " + loc.str() : "") +
                       ": input refers to an undefined value");
    in.push_back(type(v));
  }
  Node n;
  n.outputs = check_and_infer(*op, in, attrs, regions, loc);
  n.id = int32_t(nodes.size());
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.loc = std::move(loc);
  n.regions = std::move(regions);
  nodes.push_back(std::move(n));
  std::vector<Value> r;
  for (size_t i = 0; i < nodes.back().outputs.size(); ++i) r.push_back({nodes.back().id, int32_t(i)});
  return r;
}

Value Graph::add(const OpDef* op, std::vector<Value> inputs, Attrs attrs, Location loc,
                 std::vector<std::shared_ptr<Graph>> regions) {
  auto r = add_multi(op, std::move(inputs), std::move(attrs), std::move(loc), std::move(regions));
  if (r.size() != 1) throw InternalError("op '" + op->name + "' has " + std::to_string(r.size()) + " results");
  return r[0];
}

Value Graph::add_param(const std::string& name, TensorType t, Location loc) {
  for (size_t i = 0; i < params.size(); ++i)
    if (param_name(i) == name) throw InputError("duplicate graph input '" + name + "'");
  Value v = add(&OpRegistry::get().at("param"), {}, Attrs{{"name", name}, {"dtype", t.dtype}, {"shape", t.shape}},
                std::move(loc));
  params.push_back(v);
  return v;
}

std::string Graph::param_name(size_t i) const { return node(params.at(i)).attrs.get_string("name"); }

}  // namespace rlx::ir
