// Kernel scheduling (elementwise fusion, matmul epilogues) and memory planning: schedule.hpp.
#include <algorithm>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "ir/op_registry.hpp"
#include "passes/schedule.hpp"

namespace rlx {

std::vector<int32_t> MatmulEpilogue::nodes() const {
  std::vector<int32_t> r = {matmul, add};
  if (relu >= 0) r.push_back(relu);
  return r;
}

void MatmulEpilogue::drop_activation() {
  relu = -1;
  activation = None;
  zero = {};
}

}  // namespace rlx

namespace rlx::passes {

namespace {

bool is_runtime_value(const ir::Node& n) {
  const std::string& o = n.op->name;
  return o == "param" || o == "constant" || o == "reshape";
}

int64_t bytes_of(const TensorType& t) { return int64_t(dtype_storage_bytes(t.dtype, numel(t.shape))); }

// Who reads each node's first result: reader node ids (one per operand slot), and -1 for
// each time it is a graph result.
using Readers = std::vector<std::vector<int32_t>>;

Readers readers_of(const ir::Graph& g) {
  Readers r(g.nodes.size());
  for (auto& n : g.nodes)
    for (auto v : n.inputs)
      if (v.index == 0) r[size_t(v.node)].push_back(n.id);
  for (auto v : g.results)
    if (v.index == 0) r[size_t(v.node)].push_back(-1);
  return r;
}

bool all_zero_bytes(const Tensor& t) {
  if (!t.is_host() || !t.is_contiguous()) return false;
  const auto* b = static_cast<const unsigned char*>(t.raw());
  return std::all_of(b, b + t.nbytes(), [](unsigned char c) { return c == 0; });
}

// The one node that reads node id's result, when it is read once and is no graph result.
const ir::Node* only_reader(const ir::Graph& g, const Readers& r, int32_t id) {
  const auto& rs = r[size_t(id)];
  if (rs.size() != 1 || rs[0] < 0 || g.nodes[size_t(id)].outputs.size() != 1) return nullptr;
  return &g.nodes[size_t(rs[0])];
}

// The operand of binary node n that is not `v` (nothing when both are, or neither).
std::optional<ir::Value> other_operand(const ir::Node& n, ir::Value v) {
  if (n.inputs.size() != 2 || (n.inputs[0] == v) == (n.inputs[1] == v)) return std::nullopt;
  return n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
}

// Whether value v exists by the time node `at` runs: parameters and constants (and views
// of them) always do, computed values when they come before it.
bool ready_before(const ir::Graph& g, ir::Value v, int32_t at) {
  const ir::Node& n = g.nodes[size_t(v.node)];
  if (n.op->name == "param" || n.op->name == "constant") return true;
  if (n.op->name == "reshape") return ready_before(g, n.inputs[0], at);
  return v.node < at;
}

std::optional<MatmulEpilogue> find_epilogue(const ir::Graph& g, const Readers& readers, int32_t id) {
  const ir::Node& mm = g.nodes.at(size_t(id));
  if (mm.op->name != "matmul" || mm.host || mm.outputs.size() != 1) return std::nullopt;
  const TensorType& y = mm.out();
  if (!is_float(y.dtype) || y.shape.size() < 2) return std::nullopt;
  const ir::Node* add = only_reader(g, readers, id);
  if (!add || add->op->name != "add" || add->host || add->out() != y) return std::nullopt;
  const auto bias = other_operand(*add, {id, 0});
  if (!bias || !ready_before(g, *bias, id)) return std::nullopt;  // (the kernel runs where the matmul stood)
  const TensorType& b = g.type(*bias);
  if (b.dtype != y.dtype || b.shape.empty() || b.shape.size() > y.shape.size() || b.shape.back() != y.shape.back())
    return std::nullopt;
  for (size_t d = 0; d + 1 < b.shape.size(); ++d)
    if (b.shape[d] != 1) return std::nullopt;
  MatmulEpilogue e;
  e.matmul = id;
  e.add = add->id;
  e.bias = *bias;
  if (const ir::Node* mx = only_reader(g, readers, add->id); mx && mx->op->name == "maximum" && !mx->host && mx->out() == y) {
    const auto zero = other_operand(*mx, {add->id, 0});
    const ir::Node* z = zero ? &g.nodes[size_t(zero->node)] : nullptr;
    if (z && z->op->name == "constant" && numel(g.type(*zero).shape) == 1 && g.type(*zero).dtype == y.dtype &&
        all_zero_bytes(z->attrs.get_tensor("value"))) {
      e.relu = mx->id;
      e.activation = MatmulEpilogue::Relu;
      e.zero = *zero;
    }
  }
  return e;
}

void close_kernel(Schedule& p, Kernel& k) {
  if (k.nodes.empty()) return;
  p.kernels.push_back(std::move(k));
  k = Kernel{};
}

}  // namespace

std::optional<MatmulEpilogue> find_matmul_epilogue(const ir::Graph& g, int32_t id) {
  return find_epilogue(g, readers_of(g), id);
}

void schedule_kernels(Schedule& p, bool fuse, bool fuse_reductions, const FusesEpilogue& epilogues) {
  const ir::Graph& g = p.graph;
  p.kernels.clear();
  // Nodes a MatmulEpilogue kernel has taken (they run where its matmul stood).
  std::vector<char> taken(g.nodes.size(), 0);
  Readers readers;
  if (epilogues) readers = readers_of(g);
  Kernel open;
  open.kind = Kernel::Fused;
  std::vector<char> in_open(g.nodes.size(), 0);
  auto flush = [&] {
    if (open.nodes.empty()) return;
    for (int32_t id : open.nodes) in_open[size_t(id)] = 0;
    close_kernel(p, open);
    open.kind = Kernel::Fused;
  };
  for (auto& n : g.nodes) {
    if (taken[size_t(n.id)]) continue;
    if (is_runtime_value(n)) {
      for (auto v : n.inputs)
        if (in_open[size_t(v.node)]) flush();  // a view of a value still being computed
      continue;
    }
    // A full sum of a value the open region computes joins it (a dot product rides on
    // the pass that makes its operands); its result exists only when the region ends.
    bool red = fuse && fuse_reductions && n.op->name == "sum" && !n.host && !open.nodes.empty() &&
               in_open[size_t(n.inputs[0].node)] == 1 && numel(n.out().shape) == 1 &&
               g.type(n.inputs[0]).shape == g.nodes[size_t(open.nodes[0])].out().shape &&
               (n.out().dtype == DType::F32 || n.out().dtype == DType::F64);
    if (red) {
      open.nodes.push_back(n.id);
      in_open[size_t(n.id)] = 2;
      continue;
    }
    bool ew = fuse && n.op->cls == ir::OpClass::Elementwise && !n.host && n.outputs.size() == 1;
    if (ew) {
      for (auto v : n.inputs)
        if (in_open[size_t(v.node)] == 2) flush();  // reads a sum still being accumulated
      if (!open.nodes.empty() && g.nodes[size_t(open.nodes[0])].out().shape != n.out().shape) flush();
      open.nodes.push_back(n.id);
      in_open[size_t(n.id)] = 1;
      continue;
    }
    flush();
    if (epilogues && n.op->name == "matmul") {
      std::optional<MatmulEpilogue> e = find_epilogue(g, readers, n.id);
      if (e && e->relu >= 0 && !epilogues(*e, g)) {
        e->drop_activation();  // the device may take the bias without the relu
      }
      if (e && epilogues(*e, g)) {
        Kernel k;
        k.kind = Kernel::MatmulEpilogue;
        k.nodes = e->nodes();
        k.inputs = {n.inputs[0], n.inputs[1], e->bias};
        if (e->relu >= 0) k.inputs.push_back(e->zero);
        k.outputs = {{k.nodes.back(), 0}};
        k.epilogue = *e;
        for (int32_t id : k.nodes) taken[size_t(id)] = 1;
        p.kernels.push_back(std::move(k));
        continue;
      }
    }
    Kernel k;
    k.kind = n.op->cls == ir::OpClass::Control ? Kernel::Control : n.host ? Kernel::HostStaged : Kernel::Single;
    k.nodes = {n.id};
    p.kernels.push_back(std::move(k));
  }
  flush();

  // Inputs: values read but not defined in the kernel. Outputs: values defined in it
  // and used outside it (by another node or as a graph result).
  std::vector<int32_t> kernel_of(g.nodes.size(), -1);
  for (size_t ki = 0; ki < p.kernels.size(); ++ki)
    for (int32_t id : p.kernels[ki].nodes) kernel_of[size_t(id)] = int32_t(ki);
  std::vector<std::vector<char>> used_outside(g.nodes.size());
  for (auto& n : g.nodes) used_outside[size_t(n.id)].assign(n.outputs.size(), 0);
  for (auto& n : g.nodes)
    for (auto v : n.inputs)
      if (kernel_of[size_t(v.node)] >= 0 && kernel_of[size_t(v.node)] != kernel_of[size_t(n.id)])
        used_outside[size_t(v.node)][size_t(v.index)] = 1;
  for (auto v : g.results) used_outside[size_t(v.node)][size_t(v.index)] = 1;
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    Kernel& k = p.kernels[ki];
    if (k.kind == Kernel::MatmulEpilogue) continue;  // inputs and outputs set when formed
    for (int32_t id : k.nodes) {
      const ir::Node& n = g.nodes[size_t(id)];
      for (auto v : n.inputs)
        if (kernel_of[size_t(v.node)] != int32_t(ki) &&
            std::find(k.inputs.begin(), k.inputs.end(), v) == k.inputs.end())
          k.inputs.push_back(v);
      for (size_t o = 0; o < n.outputs.size(); ++o)
        if (k.kind != Kernel::Fused || used_outside[size_t(id)][o]) k.outputs.push_back({id, int32_t(o)});
    }
    if (k.kind == Kernel::Fused) {
      if (k.nodes.size() == 1) k.kind = Kernel::Single;
      k.region.graph = &p.graph;
      k.region.nodes = k.nodes;
      k.region.inputs = k.inputs;
      k.region.outputs = k.outputs;
      k.region.shape = g.nodes[size_t(k.nodes[0])].out().shape;
    }
  }
}

namespace {

// Whether kernel k may write its output `out` into the buffer of its input `in`: an
// elementwise kernel reading `in` at out's shape and element size (element i is read before
// element i is written), or the in-place input of a single node (OpDef::inplace_input) that
// reads it as no other operand. The memory plan's reuse of a dying arena buffer and a
// program's donations (l3.hpp) both ask this.
bool may_write_over(const ir::Graph& g, const Kernel& k, ir::Value in, ir::Value out) {
  const ir::Node& first = g.nodes[size_t(k.nodes[0])];
  const TensorType &it = g.type(in), &ot = g.type(out);
  if (k.kind == Kernel::Fused || (k.kind == Kernel::Single && first.op->cls == ir::OpClass::Elementwise))
    return it.shape == ot.shape && dtype_size(it.dtype) == dtype_size(ot.dtype) && it.dtype != DType::I4;
  const int ip = k.kind == Kernel::Single ? first.op->inplace_input : -1;
  return ip >= 0 && size_t(ip) < first.inputs.size() && out.node == first.id && first.inputs[size_t(ip)] == in &&
         std::count(first.inputs.begin(), first.inputs.end(), in) == 1 && it.shape == ot.shape && it.dtype == ot.dtype;
}

}  // namespace

// Donations (l3.hpp): a result the kernel reading a parameter last may write over it.
std::vector<std::pair<int32_t, int32_t>> safe_donations(const Schedule& p) {
  const ir::Graph& g = p.graph;
  auto base_of = [&](ir::Value v) {
    while (p.slot(v).kind == BufferSlot::View) v = p.slot(v).alias;
    return v;
  };
  // The last kernel to read each parameter (through views too); a returned one lives on.
  std::vector<int64_t> last(g.params.size(), -1);
  auto touch = [&](ir::Value v, int64_t at) {
    const BufferSlot& s = p.slot(base_of(v));
    if (s.kind == BufferSlot::Param && s.index >= 0 && size_t(s.index) < last.size())
      last[size_t(s.index)] = std::max(last[size_t(s.index)], at);
  };
  const size_t nk = p.kernels.size();
  for (size_t ki = 0; ki < nk; ++ki)
    for (auto v : p.kernels[ki].inputs) touch(v, int64_t(ki));
  for (auto v : g.results) touch(v, int64_t(nk));
  // Every safe pair first; then one parameter per result and one result per parameter, taken
  // in result order, each result the lowest parameter still free: a loop step whose results
  // mirror its state inputs in order (x, r, p -> x', r', p') then gets each state vector's own
  // buffer back, whatever order the kernel lists its outputs and inputs in.
  std::vector<std::pair<int32_t, int32_t>> safe;
  for (size_t ki = 0; ki < nk; ++ki) {
    const Kernel& k = p.kernels[ki];
    for (auto v : k.outputs) {
      const BufferSlot& rs = p.slot(v);
      if (rs.kind != BufferSlot::Result || std::count(g.results.begin(), g.results.end(), v) != 1) continue;
      for (const ir::Value in : k.inputs) {
        const BufferSlot& ps = p.slot(in);
        if (ps.kind != BufferSlot::Param || ps.index < 0 || size_t(ps.index) >= last.size() ||
            last[size_t(ps.index)] != int64_t(ki) || !may_write_over(g, k, in, v))
          continue;
        safe.push_back({ps.index, rs.index});
      }
    }
  }
  std::sort(safe.begin(), safe.end(), [](auto a, auto b) { return std::pair(a.second, a.first) < std::pair(b.second, b.first); });
  std::vector<std::pair<int32_t, int32_t>> out;
  for (auto d : safe) {
    const bool taken = std::any_of(out.begin(), out.end(), [&](auto e) { return e.first == d.first || e.second == d.second; });
    if (!taken) out.push_back(d);
  }
  return out;
}

void plan_memory(Schedule& p) {
  const ir::Graph& g = p.graph;
  p.slots.assign(g.nodes.size(), {});
  for (auto& n : g.nodes) p.slots[size_t(n.id)].assign(n.outputs.size(), BufferSlot{});
  const size_t nk = p.kernels.size();

  // Parameters, constants, views, results.
  int32_t nconst = 0;
  for (auto& n : g.nodes) {
    BufferSlot& s = p.slots[size_t(n.id)][0];
    if (n.op->name == "param") {
      s.kind = BufferSlot::Param;
      s.index = int32_t(std::find(g.params.begin(), g.params.end(), ir::Value{n.id, 0}) - g.params.begin());
    } else if (n.op->name == "constant") {
      s.kind = BufferSlot::Const;
      s.index = nconst++;
    } else if (n.op->name == "reshape") {
      s.kind = BufferSlot::View;
      s.alias = n.inputs[0];
    }
    for (auto& sl : p.slots[size_t(n.id)]) sl.bytes = 0;
    for (size_t o = 0; o < n.outputs.size(); ++o) p.slots[size_t(n.id)][o].bytes = bytes_of(n.outputs[o]);
  }
  for (auto& k : p.kernels)
    for (auto v : k.outputs) p.slots[size_t(v.node)][size_t(v.index)].kind = BufferSlot::Arena;
  for (size_t r = 0; r < g.results.size(); ++r) {
    BufferSlot& s = p.slots[size_t(g.results[r].node)][size_t(g.results[r].index)];
    if (s.kind == BufferSlot::Arena) {
      s.kind = BufferSlot::Result;
      s.index = int32_t(r);
    }
  }

  // Liveness over kernel positions. A view keeps its base alive; results live to the end.
  auto base_of = [&](ir::Value v) {
    while (p.slot(v).kind == BufferSlot::View) v = p.slot(v).alias;
    return v;
  };
  std::vector<std::vector<int64_t>> last(g.nodes.size());
  for (auto& n : g.nodes) last[size_t(n.id)].assign(n.outputs.size(), -1);
  auto touch = [&](ir::Value v, int64_t at) {
    int64_t& l = last[size_t(v.node)][size_t(v.index)];
    l = std::max(l, at);
  };
  for (size_t ki = 0; ki < nk; ++ki) {
    for (auto v : p.kernels[ki].outputs) touch(v, int64_t(ki));  // unread outputs die where made
    for (auto v : p.kernels[ki].inputs) touch(base_of(v), int64_t(ki));
  }
  for (auto v : g.results) touch(base_of(v), int64_t(nk));
  std::vector<std::vector<ir::Value>> dies_at(nk + 1);
  for (auto& n : g.nodes)
    for (size_t o = 0; o < n.outputs.size(); ++o)
      if (last[size_t(n.id)][o] >= 0) dies_at[size_t(last[size_t(n.id)][o])].push_back({n.id, int32_t(o)});

  p.donations = safe_donations(p);

  // Greedy best-fit over free blocks; elementwise kernels write in place over an input
  // that dies there and has the output's shape and element size.
  struct Block { int64_t off, size; };
  std::vector<Block> free_blocks;
  int64_t top = 0;
  auto align = [](int64_t b) { return (b + 63) / 64 * 64; };
  auto allocate = [&](int64_t bytes) {
    bytes = align(std::max<int64_t>(bytes, 1));
    int best = -1;
    for (size_t i = 0; i < free_blocks.size(); ++i)
      if (free_blocks[i].size >= bytes && (best < 0 || free_blocks[i].size < free_blocks[size_t(best)].size)) best = int(i);
    if (best < 0) {
      int64_t off = top;
      top = checked_add(top, bytes, "arena bytes of the memory plan");
      return off;
    }
    Block b = free_blocks[size_t(best)];
    free_blocks.erase(free_blocks.begin() + best);
    if (b.size > bytes) free_blocks.push_back({b.off + bytes, b.size - bytes});
    return b.off;
  };
  auto release = [&](int64_t off, int64_t bytes) {
    free_blocks.push_back({off, align(std::max<int64_t>(bytes, 1))});
    // Merge neighbours so large buffers can reuse the space of several small ones.
    std::sort(free_blocks.begin(), free_blocks.end(), [](auto& a, auto& b) { return a.off < b.off; });
    std::vector<Block> merged;
    for (auto& b : free_blocks)
      if (!merged.empty() && merged.back().off + merged.back().size == b.off)
        merged.back().size += b.size;
      else
        merged.push_back(b);
    free_blocks = std::move(merged);
  };

  for (size_t ki = 0; ki < nk; ++ki) {
    Kernel& k = p.kernels[ki];
    std::vector<ir::Value> donated;
    for (auto v : k.outputs) {
      BufferSlot& s = p.slots[size_t(v.node)][size_t(v.index)];
      if (s.kind != BufferSlot::Arena) continue;
      bool placed = false;
      for (auto in : k.inputs) {
        const BufferSlot& is = p.slot(in);
        if (is.kind != BufferSlot::Arena || last[size_t(in.node)][size_t(in.index)] != int64_t(ki)) continue;
        if (std::find(donated.begin(), donated.end(), in) != donated.end() || !may_write_over(g, k, in, v)) continue;
        s.offset = is.offset;
        donated.push_back(in);
        placed = true;
        break;
      }
      if (!placed) s.offset = allocate(s.bytes);
    }
    // Release what dies here (donated buffers now belong to the outputs).
    for (ir::Value v : dies_at[ki]) {
      const BufferSlot& s = p.slot(v);
      if (s.kind != BufferSlot::Arena) continue;
      if (std::find(donated.begin(), donated.end(), v) != donated.end()) continue;
      release(s.offset, s.bytes);
    }
  }
  p.arena_bytes = top;
}

}  // namespace rlx::passes
