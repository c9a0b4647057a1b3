#include "dist/ops.hpp"

#include <atomic>

#include "ir/op_registry.hpp"

namespace rlx::dist {

Var all_reduce(const Var& x, const Communicator& c, ReduceOp op, SrcLoc loc) {
  return rlx::op("all_reduce", {x}, {{"comm", c.id()}, {"op", std::string(reduce_op_name(op))}}, loc);
}

namespace {
std::atomic<int64_t> g_next_slot{1};
}  // namespace

int64_t new_reduction_slot() { return g_next_slot.fetch_add(1); }

Var all_reduce_begin(const Var& x, const Communicator& c, int64_t slot, ReduceOp op, SrcLoc loc) {
  return rlx::op("all_reduce_begin", {x}, {{"comm", c.id()}, {"op", std::string(reduce_op_name(op))}, {"slot", slot}}, loc);
}

Var all_reduce_end(const Var& token, const Communicator& c, int64_t slot, SrcLoc loc) {
  return rlx::op("all_reduce_end", {token}, {{"comm", c.id()}, {"slot", slot}}, loc);
}

Var all_reduce_begin(const Var& x, const Communicator& c, ReduceOp op, SrcLoc loc) {
  return all_reduce_begin(x, c, new_reduction_slot(), op, loc);
}

Var all_reduce_end(const Var& token, const Communicator& c, SrcLoc loc) {
  const ir::Node& begin = token.graph()->nodes[size_t(token.value().node)];
  if (begin.op->name != "all_reduce_begin") throw InputError("all_reduce_end takes all_reduce_begin's result, got " + begin.op->name + "'s");
  return rlx::op("all_reduce_end", {token}, {{"comm", c.id()}, {"slot", begin.attrs.get_int("slot")}}, loc);
}

Var all_gather(const Var& x, const Communicator& c, SrcLoc loc) {
  return rlx::op("all_gather", {x}, {{"comm", c.id()}, {"ranks", int64_t(c.size())}}, loc);
}

Var reduce_scatter(const Var& x, const Communicator& c, ReduceOp op, SrcLoc loc) {
  return rlx::op("reduce_scatter", {x},
                 {{"comm", c.id()}, {"ranks", int64_t(c.size())}, {"op", std::string(reduce_op_name(op))}}, loc);
}

Var broadcast(const Var& x, const Communicator& c, int root, SrcLoc loc) {
  return rlx::op("broadcast", {x}, {{"comm", c.id()}, {"root", int64_t(root)}}, loc);
}

namespace {
ir::Attrs halo_attrs(const HaloExchange& h) {
  return {{"plan", h.id()}, {"sends", h.pattern().sends()}, {"receives", h.pattern().receives()}};
}
}  // namespace

Var halo_begin(const Var& x, const HaloExchange& h, SrcLoc loc) { return rlx::op("halo_begin", {x}, halo_attrs(h), loc); }
Var halo_begin_packed(const Var& entries, const HaloExchange& h, SrcLoc loc) {
  ir::Attrs a = halo_attrs(h);
  a.set("packed", true);
  return rlx::op("halo_begin", {entries}, a, loc);
}
Var halo_end(const Var& begun, const HaloExchange& h, SrcLoc loc) { return rlx::op("halo_end", {begun}, halo_attrs(h), loc); }

}  // namespace rlx::dist
