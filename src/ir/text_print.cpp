// The graph printer: one line per node, regions nested, in the form docs/ir.md describes.
#include <charconv>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ir/op_registry.hpp"
#include "ir/text.hpp"

namespace rlx::ir {
namespace text {
namespace {

// An identifier as it is, anything else quoted.
std::string name_or_quoted(std::string_view s) { return is_identifier(s) ? std::string(s) : quote(s); }
std::string sigil_name(char sigil, std::string_view s) {
  std::string r(1, sigil);
  r += name_or_quoted(s);
  return r;
}

template <class F>
std::string shortest(F v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_float32(float v) { return shortest(v); }

// Tensor elements, flat and row-major: `[1.0, 2.0]`.
std::string print_elements(const Tensor& t) {
  Tensor h = t.is_host() ? t : t.to(host_allocator());
  if (t.dtype() != DType::I4) h = h.contiguous();
  int64_t n = h.numel();
  std::string out = "[";
  auto sep = [&](int64_t i) {
    if (i) out += ", ";
  };
  if (h.dtype() == DType::I4) {
    // Packed two per byte, element 2k in the low nibble.
    const uint8_t* p = h.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      sep(i);
      int v = (p[i / 2] >> (4 * (i % 2))) & 0xf;
      out += std::to_string(v >= 8 ? v - 16 : v);
    }
    return out + "]";
  }
  visit_dtype(h.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = h.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      sep(i);
      if constexpr (std::is_same_v<T, bool>) {
        out += p[i] ? "true" : "false";
      } else if constexpr (std::is_same_v<T, c64>) {
        out += '(';
        out += format_float32(p[i].real());
        out += ", ";
        out += format_float32(p[i].imag());
        out += ')';
      } else if constexpr (std::is_same_v<T, double>) {
        out += format_float(p[i]);
      } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
        out += format_float32(float(p[i]));
      } else {
        out += std::to_string(int64_t(p[i]));
      }
    }
  });
  return out + "]";
}

std::string print_attr_value(const AttrValue& v, const TensorType* result) {
  struct V {
    const TensorType* result;
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const { return format_float(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return quote(x); }
    std::string operator()(const std::vector<int64_t>& xs) const {
      std::string s = "[";
      for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + std::to_string(xs[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<double>& xs) const {
      std::string s = "[";
      for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + format_float(xs[i]);
      return s + "]";
    }
    std::string operator()(DType t) const { return dtype_name(t); }
    std::string operator()(const Tensor& t) const {
      if (!t.defined()) throw InternalError("print_graph: a tensor attribute holds no tensor");
      std::string s = "dense<" + print_elements(t) + ">";
      // The shape comes from the result type; a tensor of another type says its own.
      if (!result || !(t.type() == *result)) s += " : " + t.type().str();
      return s;
    }
  };
  return std::visit(V{result}, v);
}

// Is `v` the op's default for this attribute? Defaults are left out of the text; the
// parser's Graph::add fills them back in.
bool is_default(const OpDef& op, const std::string& name, const AttrValue& v) {
  const AttrSpec* spec = op.attr_spec(name);
  if (!spec || spec->required || spec->fallback.index() != v.index()) return false;
  if (std::holds_alternative<Tensor>(v)) return false;
  if (auto* d = std::get_if<double>(&v)) {
    double f = std::get<double>(spec->fallback);
    return *d == f ? std::signbit(*d) == std::signbit(f) : (std::isnan(*d) && std::isnan(f));
  }
  return std::visit(
      [&](const auto& a) -> bool {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, Tensor>) return false;
        else return a == std::get<T>(spec->fallback);
      },
      v);
}

std::string print_loc(const Location& l) {
  if (!l.known() || l.implicit) return {};
  std::string s = " loc(";
  if (!l.file.empty()) s += quote(l.file) + ":" + std::to_string(l.line);
  if (!l.name.empty()) s += (l.file.empty() ? "" : ", ") + quote(l.name);
  return s + ")";
}

std::string print_types(const std::vector<TensorType>& ts) {
  if (ts.size() == 1) return ts[0].str();
  std::string s = "(";
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].str();
  return s + ")";
}

// A graph's parameters and body; `head` is `graph @main` or a region's label.
void print_body(std::string& out, const Graph& g, const std::string& head, int indent) {
  ValueNames names(g);
  std::string pad(size_t(indent), ' ');
  std::vector<std::string> params;
  size_t width = pad.size() + head.size() + 4;
  for (Value v : g.params) {
    params.push_back(print_param(g, names, g.node(v)));
    width += params.back().size() + 2;
  }
  // A long signature puts one parameter on a line, aligned after the '('.
  std::string sep = width > 100 ? ",\n" + std::string(pad.size() + head.size() + 1, ' ') : ", ";
  out += pad + head + "(";
  for (size_t i = 0; i < params.size(); ++i) out += (i ? sep : "") + params[i];
  out += ") {\n";
  for (const Node& n : g.nodes)
    if (!names.is_param(n.id)) print_node(out, g, names, n, indent + 2);
  out += pad + "  return";
  for (size_t i = 0; i < g.results.size(); ++i) out += (i ? ", " : " ") + names.ref(g.results[i]);
  out += "\n" + pad + "}\n";
}

}  // namespace

bool is_identifier(std::string_view s) {
  auto head = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto tail = [&](char c) { return head(c) || (c >= '0' && c <= '9') || c == '.'; };
  if (s.empty() || !head(s[0])) return false;
  for (char c : s)
    if (!tail(c)) return false;
  return true;
}

std::string format_float(double v) { return shortest(v); }

std::string quote(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string r = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': r += "\\\""; break;
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\t': r += "\\t"; break;
      case '\r': r += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          r += "\\x";
          r += hex[u >> 4];
          r += hex[u & 0xf];
        } else {
          r += c;  // printable ASCII, and UTF-8 bytes as they are
        }
    }
  }
  return r + "\"";
}

ValueNames::ValueNames(const Graph& g) : g_(g), names_(g.nodes.size()), param_index_(g.nodes.size(), -1) {
  std::set<std::string> taken;
  for (size_t i = 0; i < g.params.size(); ++i) taken.insert(g.param_name(i));
  // Empty parameter names get one from the graph's name (c0, c1 in a `cond` region).
  std::string prefix = is_identifier(g.name) ? g.name.substr(0, 1) : "p";
  for (size_t i = 0; i < g.params.size(); ++i) {
    size_t id = size_t(g.params[i].node);
    param_index_.at(id) = int(i);
    std::string name = g.param_name(i);
    if (name.empty()) {
      name = prefix + std::to_string(i);
      while (taken.count(name)) name += "_";
      taken.insert(name);
    }
    names_[id] = sigil_name('%', name);
  }
  for (const Node& n : g.nodes)
    if (param_index_[size_t(n.id)] < 0) names_[size_t(n.id)].append("%").append(std::to_string(n.id));
}

std::string ValueNames::ref(Value v) const {
  const std::string& base = names_.at(size_t(v.node));
  if (g_.nodes.at(size_t(v.node)).outputs.size() == 1 && v.index == 0) return base;
  return base + "#" + std::to_string(v.index);
}

std::string ValueNames::def(const Node& n) const {
  const std::string& base = names_.at(size_t(n.id));
  if (n.outputs.size() == 1) return base;
  return base + ":" + std::to_string(n.outputs.size());
}

std::string print_param(const Graph& g, const ValueNames& names, const Node& n) {
  return names.ref(Value{n.id, 0}) + ": " + n.out().str() + print_loc(n.loc);
}

void print_node(std::string& out, const Graph& g, const ValueNames& names, const Node& n, int indent,
                std::string_view note, bool regions) {
  std::string pad(size_t(indent), ' ');
  out += pad + names.def(n) + " = " + (n.host ? "host " : "") + n.op->name + "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) out += (i ? ", " : "") + names.ref(n.inputs[i]);
  out += ")";
  std::string attrs;
  for (const auto& [name, v] : n.attrs.items()) {
    if (is_default(*n.op, name, v)) continue;
    attrs += (attrs.empty() ? "" : ", ") + name + "=" + print_attr_value(v, n.outputs.empty() ? nullptr : &n.out());
  }
  if (!attrs.empty()) out += " {" + attrs + "}";
  out += " : " + print_types(n.outputs);
  out += print_loc(n.loc);
  out += note;
  if (regions && !n.regions.empty()) {
    out += " {\n";
    for (const auto& r : n.regions) {
      if (!r) throw InternalError("print_graph: node %" + std::to_string(n.id) + " has an empty region");
      print_body(out, *r, name_or_quoted(r->name), indent + 2);
    }
    out += pad + "}";
  }
  out += "\n";
}

}  // namespace text

std::string print_graph(const Graph& g) {
  std::string out;
  text::print_body(out, g, "graph " + text::sigil_name('@', g.name), 0);
  return out;
}

}  // namespace rlx::ir
