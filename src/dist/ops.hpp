// Front-end functions for the collectives (ops declared in src/ir/ops/dist.cpp):
//
//   auto comm = rlx::dist::Communicator::world();
//   Var local = sum(x * y);                         // this rank's part of a dot product
//   Var dot = rlx::dist::all_reduce(local, comm);   // the whole dot product, on every rank
//
// Each records the caller's file and line on its node, like every front-end call.
#pragma once
#include "dist/communicator.hpp"
#include "ir/frontend.hpp"

namespace rlx::dist {

Var all_reduce(const Var& x, const Communicator& c, ReduceOp op = ReduceOp::Sum, SrcLoc loc = SrcLoc::current());
// all_reduce in two halves: begin starts the reduction and returns a token (x); end, given
// that token, waits and returns the reduced values. Work emitted between them runs while the
// reduction is in flight (pipelined CG's preconditioner and product).
Var all_reduce_begin(const Var& x, const Communicator& c, ReduceOp op = ReduceOp::Sum, SrcLoc loc = SrcLoc::current());
Var all_reduce_end(const Var& token, const Communicator& c, SrcLoc loc = SrcLoc::current());
// The same with a slot the caller holds (new_reduction_slot), for a reduction that one
// program starts and the next one finishes: the end then takes any tensor of the token's
// type as its token (the previous program's begin result, passed on as an input).
int64_t new_reduction_slot();
Var all_reduce_begin(const Var& x, const Communicator& c, int64_t slot, ReduceOp op = ReduceOp::Sum,
                     SrcLoc loc = SrcLoc::current());
Var all_reduce_end(const Var& token, const Communicator& c, int64_t slot, SrcLoc loc = SrcLoc::current());
Var all_gather(const Var& x, const Communicator& c, SrcLoc loc = SrcLoc::current());
Var reduce_scatter(const Var& x, const Communicator& c, ReduceOp op = ReduceOp::Sum, SrcLoc loc = SrcLoc::current());
Var broadcast(const Var& x, const Communicator& c, int root = 0, SrcLoc loc = SrcLoc::current());
// The two halves of plan h's exchange of the distributed vector x: begin returns the
// entries sent ([sends]); end, given begin's result, the entries received ([receives]).
// Work emitted between the two runs while the messages travel.
Var halo_begin(const Var& x, const HaloExchange& h, SrcLoc loc = SrcLoc::current());
// halo_begin over entries already gathered in send order (h.send_order()): [sends].
Var halo_begin_packed(const Var& entries, const HaloExchange& h, SrcLoc loc = SrcLoc::current());
Var halo_end(const Var& begun, const HaloExchange& h, SrcLoc loc = SrcLoc::current());

}  // namespace rlx::dist
