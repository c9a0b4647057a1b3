// The IR: an SSA graph of nodes. Every node names an op from the registry, reads
// values produced by earlier nodes, carries typed attributes and a source location,
// and produces one or more typed values. Control-flow nodes own sub-graphs (regions).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/shape.hpp"
#include "core/tensor.hpp"

namespace rlx::ir {

struct OpDef;
struct Graph;

// The index-th result of node `node`.
struct Value {
  int32_t node = -1;
  int32_t index = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const Value&) const = default;
};

enum class AttrKind { Int, Float, Bool, String, Ints, Floats, DType, Tensor };
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>, DType, Tensor>;
const char* attr_kind_name(AttrKind k);
AttrKind attr_kind_of(const AttrValue& v);

// Attributes, kept sorted by name so printing and hashing are canonical.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> init);
  bool has(const std::string& name) const { return find(name) != nullptr; }
  const AttrValue* find(const std::string& name) const;
  void set(const std::string& name, AttrValue v);
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;  // accepts Int too
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
  DType get_dtype(const std::string& name) const;
  const Tensor& get_tensor(const std::string& name) const;
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool operator==(const Attrs& o) const;
  size_t hash() const;

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

struct Location {
  std::string file;
  int line = 0;
  std::string name;  // an imported model's node name, or the user's function
  bool implicit = false;  // the text line a node was parsed from (no loc(...) written); not printed
  bool known() const { return !file.empty() || !name.empty(); }
  std::string str() const;  // "file:line" or name or "?"
};

struct Node {
  int32_t id = -1;
  const OpDef* op = nullptr;
  std::vector<Value> inputs;
  Attrs attrs;
  std::vector<TensorType> outputs;
  Location loc;
  std::vector<std::shared_ptr<Graph>> regions;  // while: {cond, body}; if: {then, else}
  bool host = false;  // L2/L3 after dispatch: host-staged (runs on the host with explicit copies)
  const TensorType& out(int i = 0) const { return outputs.at(size_t(i)); }
};

struct Graph {
  std::string name = "main";
  std::vector<Node> nodes;    // SSA order: every input is defined by an earlier node
  std::vector<Value> params;  // values of `param` nodes, in call order
  std::vector<Value> results;

  // Appends a node after checking arity and attributes and running the op's
  // shape/dtype rule; throws ShapeError/InputError naming the op and location.
  Value add(const OpDef* op, std::vector<Value> inputs, Attrs attrs, Location loc = {},
            std::vector<std::shared_ptr<Graph>> regions = {});
  // As add, for ops with several results.
  std::vector<Value> add_multi(const OpDef* op, std::vector<Value> inputs, Attrs attrs, Location loc = {},
                               std::vector<std::shared_ptr<Graph>> regions = {});
  Value add_param(const std::string& name, TensorType t, Location loc = {});
  const TensorType& type(Value v) const { return nodes.at(size_t(v.node)).outputs.at(size_t(v.index)); }
  const Node& node(Value v) const { return nodes.at(size_t(v.node)); }
  std::string param_name(size_t i) const;
};

// Checks a node's arity and attributes against its op, fills defaulted attributes, and
// returns the result types from the op's rule. Used by Graph::add and the verifier.
std::vector<TensorType> check_and_infer(const OpDef& op, const std::vector<TensorType>& in, Attrs& attrs,
                                        const std::vector<std::shared_ptr<Graph>>& regions, const Location& loc);

}  // namespace rlx::ir
