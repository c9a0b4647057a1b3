// The L3 text form, built on the graph form's node syntax (ir/text.hpp): each node
// carries its buffer slots after `->`, nodes are grouped into kernels in execution
// order, and control kernels nest their compiled regions as programs.
#include "runtime/program_text.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "ir/op_registry.hpp"
#include "ir/text.hpp"
#include "passes/schedule.hpp"
#include "runtime/device.hpp"

namespace rlx {
namespace {

using ir::text::GraphBuilder;
using ir::text::GraphSyntax;
using ir::text::NodeSyntax;
using ir::text::Parser;
using ir::text::ParamSyntax;
using ir::text::Token;
using ir::text::ValueNames;
using ir::text::ValueRef;

constexpr std::pair<Kernel::Kind, const char*> kKernelKinds[] = {
    {Kernel::Fused, "fused"},         {Kernel::Single, "single"},
    {Kernel::Control, "control"},     {Kernel::HostStaged, "host_staged"},
    {Kernel::MatmulEpilogue, "matmul_epilogue"}};

const char* kernel_kind_name(Kernel::Kind k) {
  for (auto& [kind, name] : kKernelKinds)
    if (kind == k) return name;
  return "?";
}

int64_t natural_bytes(const TensorType& t) { return int64_t(dtype_storage_bytes(t.dtype, numel(t.shape))); }

// ---------------------------------------------------------------- printing

// `arena 0+256`, `param 1`, `view %3`, …; fields the short form leaves out are written as
// `name=value` when they differ from their defaults (bytes: the value's own size).
std::string print_slot(const BufferSlot& s, const ValueNames& names, const TensorType* type) {
  bool offset = s.offset != 0, bytes = !type || s.bytes != natural_bytes(*type), index = s.index != -1,
       alias = s.alias.valid();
  std::string r;
  switch (s.kind) {
    case BufferSlot::Param: r = "param " + std::to_string(s.index); index = false; break;
    case BufferSlot::Const: r = "const " + std::to_string(s.index); index = false; break;
    case BufferSlot::Result: r = "result " + std::to_string(s.index); index = false; break;
    case BufferSlot::Arena:
      r = "arena " + std::to_string(s.offset) + "+" + std::to_string(s.bytes);
      offset = bytes = false;
      break;
    case BufferSlot::View: r = "view " + names.ref(s.alias); alias = false; break;
    case BufferSlot::Internal: r = "internal"; break;
  }
  if (offset) r += " offset=" + std::to_string(s.offset);
  if (bytes) r += " bytes=" + std::to_string(s.bytes);
  if (index) r += " index=" + std::to_string(s.index);
  if (alias) r += " alias=" + names.ref(s.alias);
  return r;
}

std::string print_slots(const Program& p, const ValueNames& names, const ir::Node& n) {
  if (size_t(n.id) >= p.slots.size() || p.slots[size_t(n.id)].empty()) return {};
  const auto& slots = p.slots[size_t(n.id)];
  std::string r = " -> ";
  if (slots.size() != 1) r += "(";
  for (size_t o = 0; o < slots.size(); ++o) {
    r += (o ? ", " : "") + print_slot(slots[o], names, o < n.outputs.size() ? &n.outputs[o] : nullptr);
    // (a result that may take a parameter's buffer: Program::donations)
    if (slots[o].kind == BufferSlot::Result)
      for (auto [param, result] : p.donations)
        if (result == slots[o].index) r += " donor=" + std::to_string(param);
  }
  if (slots.size() != 1) r += ")";
  return r;
}

std::string print_refs(const ValueNames& names, const std::vector<ir::Value>& vs) {
  std::string r = "(";
  for (size_t i = 0; i < vs.size(); ++i) r += (i ? ", " : "") + names.ref(vs[i]);
  return r + ")";
}

void print_program_into(std::string& out, const Program& p, int indent) {
  const ir::Graph& g = p.graph;
  ValueNames names(g);
  std::string pad(size_t(indent), ' ');
  out += pad + "program @" + (ir::text::is_identifier(g.name) ? g.name : ir::text::quote(g.name)) + " device " +
         ir::text::quote(p.device) + " arena " + std::to_string(p.arena_bytes) + " {\n";

  std::vector<int> kernel_of(g.nodes.size(), -1);
  for (size_t k = 0; k < p.kernels.size(); ++k)
    for (int32_t id : p.kernels[k].nodes) {
      int& owner = kernel_of.at(size_t(id));
      if (owner >= 0)
        throw InternalError("print_program: node %" + std::to_string(id) + " is in kernels " + std::to_string(owner) +
                            " and " + std::to_string(k));
      owner = int(k);
    }
  // A control node's regions are printed once, as the compiled programs its kernel holds
  // (printing the graph regions too would repeat every nested level at every level above).
  auto define = [&](const ir::Node& n, int at, bool regions = true) {
    std::string note = print_slots(p, names, n);
    if (names.is_param(n.id))
      out += std::string(size_t(at), ' ') + "param " + ir::text::print_param(g, names, n) + note + "\n";
    else
      ir::text::print_node(out, g, names, n, at, note, regions);
  };
  // Parameters, constants and views belong to no kernel: each is printed before the
  // first kernel that reaches past its id, once what it reads has been printed.
  std::vector<char> printed(g.nodes.size(), 0);
  auto define_outside_below = [&](size_t limit) {
    for (size_t id = 0; id < g.nodes.size() && id < limit; ++id) {
      const ir::Node& n = g.nodes[id];
      if (printed[id] || kernel_of[id] >= 0) continue;
      bool ready = true;
      for (ir::Value v : n.inputs) ready = ready && printed.at(size_t(v.node));
      if (!ready) continue;
      define(n, indent + 2);
      printed[id] = 1;
    }
  };
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kn = p.kernels[k];
    if (!kn.nodes.empty()) define_outside_below(size_t(*std::max_element(kn.nodes.begin(), kn.nodes.end())));
    out += pad + "  kernel " + std::to_string(k) + " " + kernel_kind_name(kn.kind) + print_refs(names, kn.inputs) +
           " -> " + print_refs(names, kn.outputs) + " {\n";
    for (int32_t id : kn.nodes) {
      define(g.nodes.at(size_t(id)), indent + 4, kn.kind != Kernel::Control);
      printed[size_t(id)] = 1;
    }
    for (const auto& sub : p.regions_of(kn)) {
      if (!sub) throw InternalError("print_program: kernel " + std::to_string(k) + " has an empty sub-program");
      print_program_into(out, *sub, indent + 4);
    }
    out += pad + "  }\n";
  }
  // What is left (in id order, so a view follows what it views).
  for (size_t id = 0; id < g.nodes.size(); ++id)
    if (!printed[id] && kernel_of[id] < 0) define(g.nodes[id], indent + 2);
  out += pad + "  return";
  for (size_t i = 0; i < g.results.size(); ++i) out += (i ? ", " : " ") + names.ref(g.results[i]);
  out += "\n" + pad + "}\n";
}

// ---------------------------------------------------------------- parsing

struct SlotSyntax {
  BufferSlot slot;
  bool has_bytes = false;
  std::optional<ValueRef> alias;
  std::optional<int32_t> donor;  // a result's donor parameter (Program::donations)
  int line = 0;
};

struct ProgramSyntax;
struct KernelSyntax {
  Kernel::Kind kind = Kernel::Single;
  std::vector<ValueRef> inputs, outputs;
  std::vector<std::pair<std::string, int>> nodes;  // scope keys, with their lines
  std::vector<ProgramSyntax> sub;
  int line = 0;
};

struct ProgramSyntax {
  std::string device;
  int64_t arena = 0;
  GraphSyntax graph;
  std::vector<KernelSyntax> kernels;
  std::map<std::string, std::vector<SlotSyntax>> slots;  // by node scope key
  int line = 0;
};

int32_t parse_i32(Parser& p, std::string_view what) {
  int line = p.peek().line;
  int64_t v = p.parse_int(what);
  if (v < INT32_MIN || v > INT32_MAX) p.fail(line, std::string(what) + " " + std::to_string(v) + " is out of range");
  return int32_t(v);
}

SlotSyntax parse_slot(Parser& p) {
  SlotSyntax s;
  const Token& t = p.peek();
  s.line = t.line;
  std::string kind = t.kind == Token::Ident ? t.text : "";
  if (kind == "param" || kind == "const" || kind == "result") {
    p.next();
    s.slot.kind = kind == "param" ? BufferSlot::Param : kind == "const" ? BufferSlot::Const : BufferSlot::Result;
    s.slot.index = parse_i32(p, "the slot's index");
  } else if (kind == "arena") {
    p.next();
    s.slot.kind = BufferSlot::Arena;
    s.slot.offset = p.parse_int("the arena offset");
    p.expect("+", "between the arena offset and the byte count");
    s.slot.bytes = p.parse_int("the byte count");
    s.has_bytes = true;
  } else if (kind == "view") {
    p.next();
    s.slot.kind = BufferSlot::View;
    s.alias = p.parse_value_ref();
  } else if (kind == "internal") {
    p.next();
    s.slot.kind = BufferSlot::Internal;
  } else {
    p.fail_expected("a buffer slot (param N, const N, arena OFFSET+BYTES, view %v, result N or internal)");
  }
  for (;;) {
    // The line is copied: next() pops the token that peek() referred to.
    const int line = p.peek().line;
    if (p.peek().kind != Token::Ident || !p.at("=", 1)) break;
    std::string field = p.next().text;
    p.next();
    if (field == "offset") {
      s.slot.offset = p.parse_int("the offset");
    } else if (field == "bytes") {
      s.slot.bytes = p.parse_int("the byte count");
      s.has_bytes = true;
    } else if (field == "index") {
      s.slot.index = parse_i32(p, "the index");
    } else if (field == "alias") {
      s.alias = p.parse_value_ref();
    } else if (field == "donor" && s.slot.kind == BufferSlot::Result) {
      s.donor = parse_i32(p, "the donor parameter's index");
    } else {
      p.fail(line, "unknown slot field '" + field + "' (expected offset, bytes, index or alias; donor on a result)");
    }
  }
  return s;
}

// `-> slot` or `-> (slot, slot)`; nothing when the node has no slots.
std::vector<SlotSyntax> parse_slots(Parser& p) {
  std::vector<SlotSyntax> slots;
  if (!p.accept("->")) return slots;
  if (p.accept("(")) {
    if (!p.at(")")) {
      do slots.push_back(parse_slot(p));
      while (p.accept(","));
    }
    p.expect(")", "to close the slot list");
  } else {
    slots.push_back(parse_slot(p));
  }
  return slots;
}

ProgramSyntax parse_program_syntax(Parser& p);

// A `param` line or a node: its definition goes to the graph, its slots to the program.
// Returns its scope key.
std::string parse_definition(Parser& p, ProgramSyntax& s) {
  if (p.accept("param")) {
    ParamSyntax param = p.parse_param();
    s.slots[param.name] = parse_slots(p);
    s.graph.params.push_back(std::move(param));
    return s.graph.params.back().name;
  }
  std::vector<SlotSyntax> slots;
  NodeSyntax n = p.parse_node([&](Parser& q, NodeSyntax&) { slots = parse_slots(q); });
  s.slots[n.name] = std::move(slots);
  s.graph.nodes.push_back(std::move(n));
  return s.graph.nodes.back().name;
}

void parse_kernel(Parser& p, ProgramSyntax& s) {
  KernelSyntax k;
  k.line = p.expect("kernel").line;
  int line = p.peek().line;
  int64_t index = p.parse_int("the kernel's index");
  if (index != int64_t(s.kernels.size()))
    p.fail(line, "expected kernel " + std::to_string(s.kernels.size()) + ", found kernel " + std::to_string(index));
  const Token& kt = p.peek();
  bool known = false;
  for (auto& [kind, name] : kKernelKinds)
    if (kt.kind == Token::Ident && kt.text == name) {
      k.kind = kind;
      known = true;
    }
  if (!known) p.fail_expected("a kernel kind (fused, single, control, host_staged or matmul_epilogue)");
  p.next();
  k.inputs = p.parse_value_list("with the kernel's inputs");
  p.expect("->", "between the kernel's inputs and outputs");
  k.outputs = p.parse_value_list("with the kernel's outputs");
  p.expect("{", "to open the kernel");
  for (;;) {
    if (p.accept("}")) break;
    if (p.at("program")) {
      k.sub.push_back(parse_program_syntax(p));
    } else if (p.at("param") || p.peek().kind == Token::Value) {
      int at = p.peek().line;
      k.nodes.emplace_back(parse_definition(p, s), at);
    } else {
      p.fail_expected("a node, a sub-program or '}' to close kernel " + std::to_string(index));
    }
  }
  // A control node's regions are its kernel's programs (the L3 form prints them once).
  if (k.kind == Kernel::Control && k.nodes.size() == 1 && !k.sub.empty())
    for (NodeSyntax& n : s.graph.nodes)
      if (n.name == k.nodes[0].first && n.regions.empty())
        for (const ProgramSyntax& sub : k.sub) {
          n.regions.push_back(sub.graph);
          n.regions.back().by_ids = true;
        }
  s.kernels.push_back(std::move(k));
}

ProgramSyntax parse_program_syntax(Parser& p) {
  ProgramSyntax s;
  s.line = p.peek().line;
  p.expect("program", "to start an L3 program");
  s.graph.line = s.line;
  s.graph.name = p.parse_global("a program name (like @main)");
  p.expect("device", "after the program name");
  s.device = p.parse_string("the device name as a string");
  p.expect("arena", "after the device name");
  s.arena = p.parse_int("the arena size in bytes");
  p.expect("{", "to open the program");
  for (;;) {
    if (p.at("param") || p.peek().kind == Token::Value) {
      parse_definition(p, s);
    } else if (p.at("kernel")) {
      parse_kernel(p, s);
    } else if (p.accept("return")) {
      if (p.peek().kind == Token::Value) {
        do s.graph.results.push_back(p.parse_value_ref());
        while (p.accept(","));
      }
      p.expect("}", "after the returned values");
      return s;
    } else {
      p.fail_expected("a node, 'param', 'kernel' or 'return'");
    }
  }
}

Program build_program(const ProgramSyntax& s, const std::string& file) {
  auto fail = [&](int line, const std::string& msg) -> void { throw ParseError(file, line, msg); };
  Program p;
  p.device = s.device;
  p.arena_bytes = s.arena;
  p.report.device = s.device;
  GraphBuilder b(file);
  p.graph = b.build(s.graph, GraphBuilder::Order::Ids);
  const ir::Graph& g = p.graph;

  p.slots.assign(g.nodes.size(), {});
  std::vector<std::pair<std::pair<int32_t, int32_t>, int>> donors;  // ((param, result), line)
  for (const auto& [key, slots] : s.slots) {
    const ir::Node& n = g.nodes.at(size_t(b.node_id(key)));
    if (!slots.empty() && slots.size() != n.outputs.size())
      fail(slots[0].line, "%" + std::to_string(n.id) + " has " + std::to_string(n.outputs.size()) +
                              " result(s) but the text gives " + std::to_string(slots.size()) + " slot(s)");
    for (size_t o = 0; o < slots.size(); ++o) {
      BufferSlot slot = slots[o].slot;
      if (!slots[o].has_bytes) slot.bytes = natural_bytes(n.outputs[o]);
      if (slots[o].alias) slot.alias = b.resolve(*slots[o].alias);
      if (slots[o].donor) donors.push_back({{*slots[o].donor, slot.index}, slots[o].line});
      if (slot.kind == BufferSlot::Const) {
        if (n.op->name != "constant")
          fail(slots[o].line, "a const slot needs a constant node, found op '" + n.op->name + "'");
        if (slot.index < 0) fail(slots[o].line, "constant-pool index " + std::to_string(slot.index) + " is negative");
        if (size_t(slot.index) >= p.constants.size()) p.constants.resize(size_t(slot.index) + 1);
        p.constants[size_t(slot.index)] = n.attrs.get_tensor("value");
      }
      p.slots[size_t(n.id)].push_back(slot);
    }
  }
  // Constants go to the named device where it can run here, as compile() places them (a
  // GPU's kernels cannot read host memory); elsewhere they stay on the host.
  if (Device* d = DeviceRegistry::get().find(s.device); d && d->unavailable().empty())
    for (Tensor& c : p.constants)
      if (c.defined()) c = c.to(d->allocator());

  for (const KernelSyntax& ks : s.kernels) {
    Kernel k;
    k.kind = ks.kind;
    for (const auto& [key, line] : ks.nodes) k.nodes.push_back(b.node_id(key));
    for (const ValueRef& r : ks.inputs) k.inputs.push_back(b.resolve(r));
    for (const ValueRef& r : ks.outputs) k.outputs.push_back(b.resolve(r));
    if (k.kind == Kernel::Control) {
      if (k.nodes.size() != 1 || g.nodes[size_t(k.nodes[0])].regions.size() != ks.sub.size())
        fail(ks.line, "a control kernel runs one while/if node and holds one program per region");
    } else if (!ks.sub.empty()) {
      fail(ks.sub[0].line, "only control kernels hold sub-programs");
    }
    for (const ProgramSyntax& sub : ks.sub)
      p.regions[k.nodes.at(0)].push_back(std::make_shared<Program>(build_program(sub, file)));
    if (k.kind == Kernel::MatmulEpilogue) {
      // The nodes must be a matmul with its epilogue, the inputs its operands, bias[, zero].
      std::optional<MatmulEpilogue> e;
      if (!k.nodes.empty()) e = passes::find_matmul_epilogue(g, k.nodes[0]);
      if (e && e->relu >= 0 && k.nodes.size() == 2) e->drop_activation();  // bias taken, relu left out
      if (!e || e->nodes() != k.nodes)
        fail(ks.line, "a matmul_epilogue kernel holds a matmul, the add of its bias and optionally the maximum with zero");
      std::vector<ir::Value> want = {g.nodes[size_t(e->matmul)].inputs[0], g.nodes[size_t(e->matmul)].inputs[1], e->bias};
      if (e->relu >= 0) want.push_back(e->zero);
      if (k.inputs != want || k.outputs != std::vector<ir::Value>{{k.nodes.back(), 0}})
        fail(ks.line, "a matmul_epilogue kernel reads the matmul's operands, the bias and (with relu) the zero, "
                      "and writes the last node's result");
      k.epilogue = *e;
    }
    if (k.kind == Kernel::Fused) {
      k.region.graph = &p.graph;
      k.region.nodes = k.nodes;
      k.region.inputs = k.inputs;
      k.region.outputs = k.outputs;
      if (!k.nodes.empty() && !g.nodes[size_t(k.nodes[0])].outputs.empty())
        k.region.shape = g.nodes[size_t(k.nodes[0])].out().shape;
    }
    p.kernels.push_back(std::move(k));
  }
  // A donor is taken only where the kernels allow it: a text that claims more would let a
  // run write a result over an input something still reads.
  const auto safe = passes::safe_donations(p);
  for (const auto& [d, line] : donors) {
    if (std::find(safe.begin(), safe.end(), d) == safe.end() || p.donates(size_t(d.first), size_t(d.second)))
      fail(line, "result " + std::to_string(d.second) + " cannot take parameter " + std::to_string(d.first) +
                     "'s buffer (it must be made by the elementwise kernel that reads the parameter last, at its shape)");
    p.donations.push_back(d);
  }
  return p;
}

}  // namespace

std::string print_program(const Program& p) {
  std::string out;
  print_program_into(out, p, 0);
  return out;
}

Program parse_program(std::string_view text, const std::string& filename, const ir::ParseLimits& limits) {
  Parser p(text, filename, limits);
  ProgramSyntax s = parse_program_syntax(p);
  p.expect_end();
  return build_program(s, filename);
}

}  // namespace rlx
