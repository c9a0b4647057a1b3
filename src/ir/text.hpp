// The text form of the IR (docs/ir.md): print a graph, parse it back.
//
//   std::string s = ir::print_graph(g);
//   ir::Graph h = ir::parse_graph(s, "model.rlx");   // print_graph(h) == s
//
// Every parse failure is an rlx::ParseError naming the file, the line, what was expected
// and what was found. The `text` namespace holds the pieces the L3 program form
// (runtime/program_text.cpp) is built from: it prints and parses the same node syntax
// with a note (the buffer slots) after each node's type.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"

namespace rlx::ir {

// What one parse may build from a file's own bytes: the dense<...> constants of the whole
// file together (256 MiB by default; larger data is an input). A reader of untrusted text
// that must stay small (a fuzz target, a service) passes a lower figure.
struct ParseLimits {
  int64_t constant_bytes = int64_t(1) << 28;
};

std::string print_graph(const Graph& g);
Graph parse_graph(std::string_view text, const std::string& filename = "<input>", const ParseLimits& limits = {});

namespace text {

// ---------------------------------------------------------------- printing

bool is_identifier(std::string_view s);  // [A-Za-z_][A-Za-z0-9_.]*
std::string format_float(double v);  // shortest round-trip form, always with '.', 'e' or nan/inf
std::string quote(std::string_view s);  // a string literal: "a\"b\x01"

// How a graph's values print: parameters by name (%x; %"a b" when the name is not an
// identifier; generated when empty), other values by node id (%3, %6#1 for multi-result).
class ValueNames {
 public:
  explicit ValueNames(const Graph& g);
  std::string ref(Value v) const;
  std::string def(const Node& n) const;  // left-hand side of a node: %3, %6:2
  bool is_param(int32_t node) const { return param_index_.at(size_t(node)) >= 0; }

 private:
  const Graph& g_;
  std::vector<std::string> names_;  // per node
  std::vector<int> param_index_;    // per node, -1 when not a graph parameter
};

// One node in the graph form at `indent` spaces, with a trailing newline. `note` (the L3
// buffer slots) goes after the type and location, before the regions (left out with
// regions = false: the L3 form prints a control node's compiled regions instead).
void print_node(std::string& out, const Graph& g, const ValueNames& names, const Node& n, int indent,
                std::string_view note = {}, bool regions = true);
// A parameter as in a signature: `%x: f32[4,8] loc("f":3)`.
std::string print_param(const Graph& g, const ValueNames& names, const Node& n);

// ---------------------------------------------------------------- lexing

struct Token {
  enum Kind { End, Ident, Value, Global, Int, Float, String, Punct };
  Kind kind = End;
  std::string text;  // identifier, name (without % or @), string contents, number spelling, punctuation
  bool quoted = false;  // %"name" / @"name"
  int line = 1;
};
std::string describe(const Token& t);  // for "expected X, found Y": 'foo', end of file, …

class Lexer {
 public:
  Lexer(std::string_view src, std::string file);
  const Token& peek(size_t ahead = 0);
  Token next();
  const std::string& file() const { return file_; }

 private:
  Token scan();
  [[noreturn]] void fail(const std::string& msg) const;
  std::string_view src_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 1;
  int eof_line_ = 1;
  std::deque<Token> ahead_;
};

// ---------------------------------------------------------------- parsing

// Limits that keep a hostile or broken file from exhausting the stack while it is parsed
// (memory: ParseLimits); each is far above what a real program needs, and passing one is a
// ParseError at the line where it happened.
inline constexpr size_t kMaxRank = 64;  // dimensions of a type
inline constexpr int kMaxNesting = 64;  // regions in regions; literals in literals

struct ValueRef {
  std::string name;  // scope key: the name, or "\"name" for a quoted non-identifier
  int index = -1;    // %6#1 -> 1; -1 when absent
  int line = 0;
  std::string str() const;  // as written: %6#1
};

struct ParamSyntax {
  std::string name;  // scope key (see ValueRef)
  std::string param_name;  // the parameter's name attribute
  TensorType type;
  Location loc;
  int line = 0;
};

struct GraphSyntax;
struct NodeSyntax {
  std::string name;  // scope key
  int results = -1;  // %6:2 -> 2; -1 when not written
  bool host = false;  // `%5 = host matmul(...)`: host-staged after dispatch
  const OpDef* op = nullptr;
  std::vector<ValueRef> inputs;
  Attrs attrs;  // already coerced to the op's attribute kinds
  bool typed = false;
  std::vector<TensorType> types;
  Location loc;
  std::vector<GraphSyntax> regions;
  int line = 0;
};

struct GraphSyntax {
  std::string name;
  bool by_ids = false;  // names are node ids, built in id order (a region read from L3)
  std::vector<ParamSyntax> params;
  std::vector<NodeSyntax> nodes;
  std::vector<ValueRef> results;
  int line = 0;
};

// Recursive-descent parser over the token stream; the L3 form calls its pieces.
class Parser {
 public:
  Parser(std::string_view text, std::string file, const ParseLimits& limits = {})
      : lex_(text, std::move(file)), limits_(limits) {}
  const std::string& file() const { return lex_.file(); }

  const Token& peek(size_t ahead = 0) { return lex_.peek(ahead); }
  Token next() { return lex_.next(); }
  // Is the next token the punctuation or keyword `s`?
  bool at(std::string_view s, size_t ahead = 0);
  bool accept(std::string_view s);
  // Consumes `s` or fails with "expected 's' <context>, found …".
  Token expect(std::string_view s, std::string_view context = {});
  [[noreturn]] void fail(int line, const std::string& msg) const;
  [[noreturn]] void fail_expected(std::string_view what);  // at the next token
  void expect_end();

  int64_t parse_int(std::string_view what);
  std::string parse_string(std::string_view what);
  std::string parse_global(std::string_view what);  // @name
  ValueRef parse_value_ref();
  TensorType parse_type();
  std::vector<ValueRef> parse_value_list(std::string_view context);  // ( %a, %b )
  bool parse_loc(Location& loc);  // optional loc(...)
  ParamSyntax parse_param();      // %x: f32[4] loc(...)
  // Counts `bytes` of a constant at `line` against the file's ParseLimits::constant_bytes,
  // or fails naming the constant's type and what the file's earlier constants used.
  void charge_constant(int line, const TensorType& type, int64_t bytes);

  // Reads a note after a node's type and location (nothing when absent).
  using NoteFn = std::function<void(Parser&, NodeSyntax&)>;
  NodeSyntax parse_node(const NoteFn& note = {});
  GraphSyntax parse_graph();  // graph @name(params) { nodes return ... }

  // Held while parsing something nested (a region, a list literal); fails past kMaxNesting.
  class Nest {
   public:
    Nest(Parser& p, int line);
    ~Nest() { --p_.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

 private:
  void parse_body(GraphSyntax& g);  // nodes, then `return …`, then '}'
  GraphSyntax parse_region();
  Lexer lex_;
  int depth_ = 0;
  ParseLimits limits_;
  int64_t constant_bytes_ = 0;  // of the dense<...> constants read so far
};

// Builds a Graph from its syntax through Graph::add_param / add_multi, which check arity and
// attributes and infer types; their errors come back as ParseErrors at the node's line.
// Nodes whose names are all node ids (%0, %1, … increasing, parameters in the gaps) keep
// those ids, so print(parse(print(g))) == print(g); otherwise parameters come first.
class GraphBuilder {
 public:
  enum class Order {
    Text,  // SSA order as written
    Ids,   // names must be node ids; nodes are added in id order (the L3 form lists them by kernel)
  };
  explicit GraphBuilder(std::string file) : file_(std::move(file)) {}
  Graph build(const GraphSyntax& s, Order order = Order::Text);
  // After build: a name of the built graph's outermost scope.
  Value resolve(const ValueRef& r) const;
  int32_t node_id(const std::string& name) const;

 private:
  struct Defined {
    int32_t node = -1;
    int results = 0;
  };
  [[noreturn]] void fail(int line, const std::string& msg) const;
  Location at_line(const Location& written, int line) const;
  std::string file_;
  const GraphBuilder* outer_ = nullptr;  // the graph whose node owns this region
  std::map<std::string, Defined> scope_;
  std::map<std::string, int> lines_;  // every name of the graph, with its line
};

}  // namespace text
}  // namespace rlx::ir
