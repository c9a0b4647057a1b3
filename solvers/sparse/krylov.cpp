#include "solvers/sparse/krylov.hpp"

#include <cmath>
#include <complex>
#include <limits>
#include <map>
#include <memory>

#include "dist/ops.hpp"
#include "runtime/executor.hpp"
#include "runtime/runtime.hpp"

namespace rlx::sparse {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::ConvergedRtol: return "converged-rtol";
    case StopReason::ConvergedAtol: return "converged-atol";
    case StopReason::DivergedMaxIt: return "diverged-max-it";
    case StopReason::DivergedBreakdown: return "diverged-breakdown";
    case StopReason::DivergedIndefinite: return "diverged-indefinite";
    case StopReason::DivergedNan: return "diverged-nan";
    case StopReason::DivergedStagnation: return "diverged-stagnation";
  }
  return "?";
}

namespace {

using cd = std::complex<double>;

// The intermediates' arena that all of a method's steps share (Step::finish takes it): they
// run one at a time, so one buffer as large as the largest step's serves them all (GMRES(m) compiles up to 2m + 1
// steps, each with vectors of n rows in its arena). A step larger than the buffer replaces
// it with one a quarter larger than the step needs (the next steps of a cycle are a few
// bytes larger); steps made before keep the old buffer.
class SharedArena {
 public:
  explicit SharedArena(Device& d) : d_(d) {}
  Tensor fit(int64_t bytes) {
    if (!t_.defined() || t_.numel() < bytes) t_ = Tensor::empty(DType::U8, {std::max<int64_t>(1, bytes + bytes / 4)}, d_.allocator());
    return t_;
  }

 private:
  Device& d_;
  Tensor t_;
};

// One compiled program of a method: graph + bound tensors + executor on the device.
class Step {
 public:
  BoundGraph g;
  void finish(const std::vector<Var>& outs, Device& d, const KrylovOptions& o, SharedArena& arena) {
    output(g.graph, outs);
    CompileOptions co;
    co.policy = o.policy;
    prog_ = std::make_unique<Program>(compile(g.graph, d, co));
    g.move_bound_to(d.allocator());
    ex_ = std::make_unique<Executor>(*prog_, d, arena.fit(prog_->arena_bytes));
  }
  std::vector<Tensor> run(const std::vector<Tensor>& free) { return ex_->run(g.inputs(free)); }
  void run_into(const std::vector<Tensor>& free, std::vector<Tensor>& out) { ex_->run_into(g.inputs(free), out); }
  const DispatchReport& report() const { return prog_->report; }
  // Whether result `result` may be written over the caller's input `free` (Program::donations).
  bool in_place(size_t free, size_t result) const {
    const int64_t param = g.param_of_free(free);
    return param >= 0 && prog_->donates(size_t(param), result);
  }

 private:
  std::unique_ptr<Program> prog_;
  std::unique_ptr<Executor> ex_;
};

// conj(a) . b as a rank-0 value of a's dtype.
Var dot(const Var& a, const Var& b) { return a.dtype() == DType::C64 ? sum(conj(a) * b) : sum(a * b); }
Var as1(const Var& s) { return reshape(s, {1}); }
Var pack(const std::vector<Var>& scalars) {
  std::vector<Var> v;
  for (auto& s : scalars) v.push_back(as1(s));
  return concat(v, 0);
}

// Sums over the whole vector. A distributed operator's vectors are each rank's part, so a
// dot product is a local sum completed by an all_reduce over the operator's communicator;
// on one process (no communicator, or a communicator of one rank) the graphs are exactly the
// serial ones — no collective, so nothing a device lacks a kernel for (cuda's collectives are
// host-staged) and nothing to pay per iteration. Every rank holds the same scalars and takes
// the same decisions: stop reasons agree across ranks.
struct Global {
  explicit Global(const dist::Communicator* c) : comm(c && c->size() > 1 ? c : nullptr) {}
  const dist::Communicator* comm;
  Var sum(const Var& local) const { return comm ? dist::all_reduce(local, *comm) : local; }
  Var dot(const Var& a, const Var& b) const { return sum(sparse::dot(a, b)); }
  // Several dot products in one all_reduce (one message instead of one per product).
  std::vector<Var> dots(const std::vector<std::pair<Var, Var>>& pairs) const {
    if (!comm) return local_dots(pairs);
    return unpack(sum(pack(local_dots(pairs))));
  }
  double sum(double local) const { return comm ? comm->all_reduce(local, ReduceOp::Sum) : local; }
  // Dot products summed by a reduction one program starts under `slot` and the next one
  // finishes (end_dots on the begin's result, passed on as an input); on one process the
  // "token" is the sums themselves.
  Var begin_dots(const std::vector<std::pair<Var, Var>>& pairs, int64_t slot) const {
    Var packed = pack(local_dots(pairs));
    return comm ? dist::all_reduce_begin(packed, *comm, slot) : packed;
  }
  std::vector<Var> end_dots(const Var& token, int64_t slot) const {
    return unpack(comm ? dist::all_reduce_end(token, *comm, slot) : token);
  }

 private:
  static std::vector<Var> local_dots(const std::vector<std::pair<Var, Var>>& pairs) {
    std::vector<Var> local;
    for (auto& [a, b] : pairs) local.push_back(sparse::dot(a, b));
    return local;
  }
  static std::vector<Var> unpack(const Var& all) {
    std::vector<Var> r;
    for (int64_t i = 0; i < all.shape()[0]; ++i) r.push_back(reshape(slice(all, {i}, {i + 1}), {}));
    return r;
  }
};

// Reads a small device tensor into complex<double> values on the host.
std::vector<cd> host_values(const Tensor& t) {
  Tensor h = t.is_host() ? t : t.to(host_allocator());
  std::vector<cd> r(size_t(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) {
    switch (h.dtype()) {
      case DType::F32: r[size_t(i)] = h.data<float>()[i]; break;
      case DType::F64: r[size_t(i)] = h.data<double>()[i]; break;
      case DType::C64: r[size_t(i)] = cd(h.data<c64>()[i].real(), h.data<c64>()[i].imag()); break;
      default: throw InternalError("krylov: unexpected scalar dtype");
    }
  }
  return r;
}

// A rank-0 tensor on the device's allocator.
Tensor scalar_on(DType t, double v, Allocator* a) {
  Tensor h = scalar_tensor(t, v);
  return a == host_allocator() ? h : h.to(a);
}

Tensor zeros_on(DType t, Shape s, Allocator* a) {
  Tensor z = Tensor::zeros(t, std::move(s));
  return a == host_allocator() ? z : z.to(a);
}

bool finite(double x) { return std::isfinite(x); }
// sqrt of a computed squared norm: tiny negative rounding becomes 0, but NaN stays NaN
// (std::max(0.0, NaN) would hide it).
double norm_of(double sq) { return std::isnan(sq) ? sq : std::sqrt(std::max(0.0, sq)); }

// Shared stop test: history, monitor, thresholds, and the true-residual check.
//
// record() takes the residual norm the method tracks (its recursion) after an iteration
// and returns true when the solve should stop. When it stops because the tracked norm met
// the threshold, claimed() is true and the caller computes ||b - A x|| for the current x
// (on the device) and hands it to confirm(), which decides: converged, restart from x, or
// stop (stagnation, iterations spent, NaN). See kTrueResidualSlack in krylov.hpp.
class Monitor {
 public:
  Monitor(const KrylovOptions& o, double bnorm, KrylovResult& r)
      : o_(o), tol_(std::max(o.rtol * bnorm, o.atol)), threshold_(tol_), r_(r) {}
  bool record(double rnorm) {
    claimed_ = false;
    r_.history.push_back(rnorm);
    r_.residual = rnorm;
    if (o_.monitor) o_.monitor(r_.iterations, rnorm);
    if (!finite(rnorm)) return stop(StopReason::DivergedNan);
    if (rnorm <= threshold_) {
      claimed_ = true;
      claim_ = rnorm <= o_.atol ? StopReason::ConvergedAtol : StopReason::ConvergedRtol;
      tracked_ = rnorm;
      return true;
    }
    if (r_.iterations >= o_.max_it) return stop(StopReason::DivergedMaxIt);
    return false;
  }
  bool claimed() const { return claimed_; }
  // The true residual of the x the method starts (or restarts) from.
  void started(double true_norm) {
    last_true_ = true_norm;
    last_it_ = r_.iterations;
  }
  // After a claim: true_norm = ||b - A x|| of the current x. Returns true when the solve
  // stops (converged, or not: reason set), false when the method should restart from x.
  bool confirm(double true_norm) {
    claimed_ = false;
    r_.true_residual = true_norm;
    true_known_ = true;
    if (!finite(true_norm)) return stop(StopReason::DivergedNan);
    if (true_norm <= kTrueResidualSlack * tol_) return stop(claim_);
    // A false claim. Iterations since the last check must have at least halved the true
    // residual, or the method is going nowhere (a claim right at a (re)start only lowers
    // the threshold: MINRES's preconditioned norm may sit far below ||r||).
    if (r_.iterations > last_it_ && !(true_norm <= 0.5 * last_true_)) return stop(StopReason::DivergedStagnation);
    if (r_.iterations >= o_.max_it) return stop(StopReason::DivergedMaxIt);
    // Restart from x with the threshold lowered by the factor the true residual missed by.
    threshold_ = tracked_ * (tol_ / true_norm);
    true_known_ = false;
    started(true_norm);
    return false;
  }
  bool stop(StopReason why) {
    r_.reason = why;
    return true;
  }
  double tol() const { return tol_; }
  // Whether r.true_residual already holds ||b - A x|| of the final x.
  bool true_known() const { return true_known_; }
  void set_true(double v) {
    r_.true_residual = v;
    true_known_ = true;
  }

 private:
  const KrylovOptions& o_;
  double tol_, threshold_;
  KrylovResult& r_;
  bool claimed_ = false, true_known_ = false;
  StopReason claim_ = StopReason::ConvergedRtol;
  double tracked_ = 0, last_true_ = 0;
  int last_it_ = 0;
};

void cg(const LinearOperator& A, const Tensor& b, const Preconditioner& M, const KrylovOptions& o, Device& d,
        Tensor x, KrylovResult& res, double bnorm) {
  DType t = b.dtype();
  int64_t n = A.rows();
  const Global G{A.communicator()};
  // The two programs share one arena; the step, the larger, is compiled first so that the
  // start fits in its buffer.
  SharedArena shared(d);
  Step init, step;
  {
    Var x = step.g.input("x", t, {n}), r = step.g.input("r", t, {n}), p = step.g.input("p", t, {n});
    Var rz = step.g.input("rz", t, {});
    Var q = A.apply(step.g, p);
    Var pq = G.dot(p, q);
    Var alpha = rz / pq;
    Var x1 = x + alpha * p;
    Var r1 = r - alpha * q;
    Var z1 = M.apply(step.g, r1);
    auto rz_rr = G.dots({{r1, z1}, {r1, r1}});
    Var rz1 = rz_rr[0];
    Var p1 = z1 + (rz1 / rz) * p;
    step.finish({x1, r1, p1, rz1, pack({rz_rr[1], pq})}, d, o, shared);
  }
  {
    Var bb = init.g.input("b", t, {n}), x0 = init.g.input("x0", t, {n});
    Var r = bb - A.apply(init.g, x0);
    Var z = M.apply(init.g, r);
    auto rz_rr = G.dots({{r, z}, {r, r}});
    init.finish({r, z, rz_rr[0], pack({rz_rr[1]})}, d, o, shared);
  }
  res.report = step.report();
  Monitor mon(o, bnorm, res);
  std::vector<Tensor> cur = {x, Tensor{}, Tensor{}, Tensor{}};
  // (Re)starts from cur[0]: r = b - A x computed afresh (the true residual), z = M r, p = z.
  auto start = [&] {
    auto s0 = init.run({b, cur[0]});
    for (size_t i = 0; i < 3; ++i) cur[i + 1] = s0[i];
    return norm_of(host_values(s0[3])[0].real());
  };
  const double r0 = start();
  mon.started(r0);
  bool done = mon.record(r0) && (!mon.claimed() || mon.confirm(r0));
  std::vector<Tensor> next = {Tensor::empty(t, {n}, d.allocator()), Tensor::empty(t, {n}, d.allocator()),
                              Tensor::empty(t, {n}, d.allocator()), Tensor::empty(t, {}, d.allocator()),
                              Tensor::empty(t, {2}, d.allocator())};
  // r and p are updated in place where the step allows it (one buffer each, rewritten where
  // it is read, instead of a fresh one each step); x keeps two, so the iterate before a step
  // that breaks down is the one returned (start() rebuilds r and p from it).
  const bool r_in_place = step.in_place(1, 1), p_in_place = step.in_place(2, 2);
  while (!done) {
    if (r_in_place) next[1] = cur[1];
    if (p_in_place) next[2] = cur[2];
    step.run_into(cur, next);
    auto sc = host_values(next[4]);
    double pq = sc[1].real();
    if (std::abs(sc[1]) == 0.0) {  // p^H A p = 0: no step can be taken
      mon.stop(StopReason::DivergedBreakdown);
      break;
    }
    if (!finite(pq) || !finite(sc[0].real())) {
      mon.stop(StopReason::DivergedNan);
      break;
    }
    if (pq < 0) {
      mon.stop(StopReason::DivergedIndefinite);
      break;
    }
    for (size_t i = 0; i < 4; ++i) std::swap(cur[i], next[i]);
    ++res.iterations;
    if (!mon.record(norm_of(sc[0].real()))) continue;
    if (!mon.claimed()) break;
    done = mon.confirm(start());  // start() also sets up the restart, should the claim be false
  }
  if (!mon.true_known()) mon.set_true(start());
  res.x = cur[0];
}

// Pipelined CG (Ghysels and Vanroose, 2014; PETSc's KSPPIPECG): the same Krylov space as
// preconditioned CG, rearranged so that an iteration makes one global reduction -- the three
// dot products (r,u), (w,u) and (r,r) in one all_reduce -- instead of CG's two, and so that
// nothing else in the iteration waits for it but the scalar recurrences: the products
// m = M w and n = A m depend only on the previous iteration's vectors. The price is four
// more vectors (z = A q, q = M s, s = A p, with w = A u) updated by recurrence, which drift
// from the true products in finite precision; the true-residual check at a claim (Monitor)
// catches that as it does for every method. The step's reduction is of the iterate it is
// given (x_i), so the norm the host reads after step i is ||r_i|| while the step has already
// made x_{i+1}: a step that shows convergence hands back its input, and pipelined CG runs
// one product more than CG to stop.
void pipecg(const LinearOperator& A, const Tensor& b, const Preconditioner& M, const KrylovOptions& o, Device& d,
            Tensor x, KrylovResult& res, double bnorm) {
  DType t = b.dtype();
  if (is_complex(t)) throw InputError("pipecg takes real dtypes (use cg for complex Hermitian systems)");
  int64_t n = A.rows();
  const Global G{A.communicator()};
  // The reduction runs from one step into the next: a step's update pass also sums the dots
  // of the vectors it makes and starts their all_reduce under `slot`; the next step runs
  // M w and A m meanwhile and then finishes it. So the dots cost no pass of their own, and
  // the reduction travels over the host's turn between steps as well as the products. One
  // reduction is always in flight between steps (the start program begins the first); it is
  // drained before a restart and at the end.
  const int64_t slot = dist::new_reduction_slot();
  SharedArena shared(d);
  Step init, step;
  {
    // State in: x, r, u = M r, w = A u (the iterate i) and z, q, s, p (iteration i - 1's),
    // with old = [gamma_{i-1}, alpha_{i-1}, keep] (keep = 0 on the first step after a
    // (re)start: beta = 0, so the previous z, q, s, p and alpha play no part) and the token of
    // the reduction of (r,u), (w,u), (r,r) in flight.
    std::vector<Var> in;
    for (const char* name : {"x", "r", "u", "w", "z", "q", "s", "p"}) in.push_back(step.g.input(name, t, {n}));
    Var old = step.g.input("old", t, {3});
    Var token = step.g.input("dots", t, {3});
    Var gamma_old = reshape(slice(old, {0}, {1}), {}), alpha_old = reshape(slice(old, {1}, {2}), {});
    Var keep = reshape(slice(old, {2}, {3}), {});
    const Var &x0 = in[0], &r = in[1], &u = in[2], &w = in[3], &z0 = in[4], &q0 = in[5], &s0 = in[6], &p0 = in[7];
    Var m = M.apply(step.g, w);
    Var nn = A.apply(step.g, m);
    const std::vector<Var> g_d_rr = G.end_dots(token, slot);  // started by the previous program
    Var gamma = g_d_rr[0], delta = g_d_rr[1];
    Var beta = keep * (gamma / gamma_old);
    Var denom = delta - beta * gamma / alpha_old;
    Var alpha = gamma / denom;
    Var z = nn + beta * z0, q = m + beta * q0, s = w + beta * s0, p = u + beta * p0;
    Var x1 = x0 + alpha * p, r1 = r - alpha * s, u1 = u - alpha * q, w1 = w - alpha * z;
    Var next_token = G.begin_dots({{r1, u1}, {w1, u1}, {r1, r1}}, slot);
    Var one = broadcast_to(scalar(step.g.graph, 1.0, t), {1});
    step.finish({x1, r1, u1, w1, z, q, s, p, concat({as1(gamma), as1(alpha), one}, 0), next_token,
                 pack({g_d_rr[0], g_d_rr[1], g_d_rr[2], denom})},
                d, o, shared);
  }
  {
    // z, q, s, p and old come out of the start program too: fresh buffers on every (re)start,
    // never aliasing the loop's state. It returns ||r|| at once (a blocking sum) and starts
    // the first step's reduction.
    Var bb = init.g.input("b", t, {n}), x0 = init.g.input("x0", t, {n});
    Var r = bb - A.apply(init.g, x0);
    Var u = M.apply(init.g, r);
    Var w = A.apply(init.g, u);
    Var zero = broadcast_to(scalar(init.g.graph, 0.0, t), {n});
    Var old = concat({broadcast_to(scalar(init.g.graph, 1.0, t), {2}), broadcast_to(scalar(init.g.graph, 0.0, t), {1})}, 0);
    Var rr = pack({G.dot(r, r)});
    init.finish({r, u, w, zero, zero, zero, zero, old, G.begin_dots({{r, u}, {w, u}, {r, r}}, slot), rr}, d, o, shared);
  }
  res.report = step.report();
  Monitor mon(o, bnorm, res);
  std::vector<Tensor> cur(10), next(10);
  cur[0] = x;
  bool in_flight = false;  // a reduction under `slot` was started and not finished
  auto drain = [&] {
    if (!in_flight) return;
    in_flight = false;
    if (G.comm) {
      std::vector<char> sink(dtype_storage_bytes(t, 3));
      G.comm->all_reduce_wait(slot, sink.data(), 3, t);
    }
  };
  // (Re)starts from cur[0]: r = b - A x afresh (the true residual), u = M r, w = A u; z, q,
  // s, p zero and keep = 0.
  auto start = [&] {
    drain();
    auto s0 = init.run({b, cur[0]});
    in_flight = true;
    for (size_t i = 0; i < 9; ++i) cur[i + 1] = s0[i];
    return norm_of(host_values(s0[9])[0].real());
  };
  const double r0 = start();
  mon.started(r0);
  bool done = mon.record(r0) && (!mon.claimed() || mon.confirm(r0));
  // r, u, w, z, q, s and p are updated in place where the step allows it (one buffer each
  // instead of two: less memory, and the update pass writes lines it has just read instead
  // of fetching fresh ones); x keeps two, since a step that shows convergence or breaks down
  // hands back its input x_i.
  std::vector<bool> in_place(10, false);
  for (size_t i = 1; i < 8; ++i) in_place[i] = step.in_place(i, i);
  for (size_t i = 0; i < 8; ++i)
    if (!in_place[i]) next[i] = Tensor::empty(t, {n}, d.allocator());
  next[8] = Tensor::empty(t, {3}, d.allocator());
  next[9] = Tensor::empty(t, {3}, d.allocator());
  Tensor red = Tensor::empty(t, {4}, d.allocator());
  bool fresh_start = true;  // the next step's reduction is of an iterate already recorded
  int restart_it = 0;         // the iterations at the last (re)start,
  double restart_true = r0;   // and its true residual
  // A sign or a zero the recurrences should not have is the matrix's or the preconditioner's
  // when no step has been taken since a (re)start, where every quantity is a fresh product.
  // After progress it is more often rounding -- pipelined CG's recurrences drift from the
  // true products as the residual falls -- so the solve restarts from x_i with the true
  // residual (as a false convergence claim does) and stops with the reason only when that
  // makes no progress: no step since the last restart, or a true residual not halved.
  auto recover = [&](StopReason why) {  // true: the solve stops
    if (res.iterations == restart_it) return mon.stop(why);
    const double tn = start();
    if (!(tn <= 0.5 * restart_true)) {
      mon.set_true(tn);
      return mon.stop(why);
    }
    restart_it = res.iterations;
    restart_true = tn;
    fresh_start = true;
    mon.started(tn);
    return mon.record(tn) && (!mon.claimed() || mon.confirm(tn));
  };
  while (!done) {
    for (size_t i = 1; i < 8; ++i)
      if (in_place[i]) next[i] = cur[i];
    std::vector<Tensor> outs = next;
    outs.push_back(red);
    step.run_into(cur, outs);  // finishes the reduction in flight, starts the next
    auto sc = host_values(red);
    const double gamma = sc[0].real(), delta = sc[1].real(), rr = sc[2].real(), denom = sc[3].real();
    if (!fresh_start) {
      // ||r_i|| of the step's input x_i (cur[0]): a stop hands back x_i, not the step's x_{i+1}.
      if (mon.record(norm_of(rr))) {
        if (!mon.claimed()) break;
        const double tn = start();  // also sets up the restart, should the claim be false
        done = mon.confirm(tn);
        restart_it = res.iterations;
        restart_true = tn;
        fresh_start = true;
        continue;
      }
    }
    if (!finite(gamma) || !finite(delta) || !finite(denom)) {
      mon.stop(StopReason::DivergedNan);
      break;
    }
    StopReason why = StopReason::ConvergedRtol;  // (none)
    bool sign = false;
    if (gamma < 0) {  // (r, M r) < 0: M is not positive definite
      why = StopReason::DivergedIndefinite, sign = true;
    } else if (gamma == 0 && rr > 0) {  // M r = 0 for r != 0: no direction to step in
      why = StopReason::DivergedBreakdown, sign = true;
    } else if (denom == 0) {  // p^T A p = 0: no step can be taken (alpha divides by it)
      why = StopReason::DivergedBreakdown, sign = true;
    } else if (denom < 0 || delta < 0) {  // p^T A p < 0 or u^T A u < 0: A is not positive definite
      why = StopReason::DivergedIndefinite, sign = true;
    }
    if (sign) {
      if (recover(why)) break;
      continue;
    }
    std::swap(cur, next);
    fresh_start = false;
    ++res.iterations;
  }
  if (!mon.true_known()) mon.set_true(start());
  drain();
  res.x = cur[0];
}

void bicgstab(const LinearOperator& A, const Tensor& b, const Preconditioner& M, const KrylovOptions& o, Device& d,
              Tensor x, KrylovResult& res, double bnorm) {
  DType t = b.dtype();
  int64_t n = A.rows();
  const Global G{A.communicator()};
  SharedArena shared(d);
  Step init, step;
  {
    Var bb = init.g.input("b", t, {n}), x0 = init.g.input("x0", t, {n});
    Var r = bb - A.apply(init.g, x0);
    init.finish({r, pack({G.dot(r, r)})}, d, o, shared);
  }
  {
    auto& g = step.g;
    Var x = g.input("x", t, {n}), r = g.input("r", t, {n}), p = g.input("p", t, {n}), v = g.input("v", t, {n});
    Var rho = g.input("rho", t, {}), alpha = g.input("alpha", t, {}), omega = g.input("omega", t, {});
    Var rhat = g.input("rhat", t, {n});
    Var rho1 = G.dot(rhat, r);
    Var beta = (rho1 / rho) * (alpha / omega);
    Var p1 = r + beta * (p - omega * v);
    Var ph = M.apply(g, p1);
    Var v1 = A.apply(g, ph);
    Var rv = G.dot(rhat, v1);
    Var alpha1 = rho1 / rv;
    Var s = r - alpha1 * v1;
    Var sh = M.apply(g, s);
    Var tv = A.apply(g, sh);
    auto tt_ts = G.dots({{tv, tv}, {tv, s}});
    Var tt = tt_ts[0], ts = tt_ts[1];
    // omega = (t, s) / (t, t); when s is already zero, t is too: take omega = 0.
    Var nonzero = t == DType::C64 ? gt(abs(tt), scalar(g.graph, 0.0, DType::F32)) : gt(tt, scalar_like(tt, 0.0));
    Var omega1 = where(nonzero, ts / where(nonzero, tt, scalar_like(tt, 1.0)), scalar_like(tt, 0.0));
    Var x1 = x + alpha1 * ph + omega1 * sh;
    Var r1 = s - omega1 * tv;
    step.finish({x1, r1, p1, v1, rho1, alpha1, omega1, pack({G.dot(r1, r1), rho1, rv, omega1})}, d, o, shared);
  }
  res.report = step.report();
  Monitor mon(o, bnorm, res);
  Allocator* a = d.allocator();
  std::vector<Tensor> cur(8);
  cur[0] = x;
  // (Re)starts from cur[0]: r = b - A x computed afresh (the true residual), r^ = r.
  // Every state tensor gets its own buffer: the iteration recycles them as outputs.
  auto start = [&] {
    auto s0 = init.run({b, cur[0]});
    cur = {cur[0], s0[0], zeros_on(t, {n}, a), zeros_on(t, {n}, a), scalar_on(t, 1.0, a),
           scalar_on(t, 1.0, a), scalar_on(t, 1.0, a), s0[0].clone()};
    return norm_of(host_values(s0[1])[0].real());
  };
  const double r0 = start();
  mon.started(r0);
  bool done = mon.record(r0) && (!mon.claimed() || mon.confirm(r0));
  std::vector<Tensor> next;
  for (int i = 0; i < 4; ++i) next.push_back(Tensor::empty(t, {n}, a));
  for (int i = 0; i < 3; ++i) next.push_back(Tensor::empty(t, {}, a));
  next.push_back(Tensor::empty(t, {4}, a));
  while (!done) {
    step.run_into(cur, next);
    auto sc = host_values(next[7]);
    if (std::abs(sc[1]) == 0.0 || std::abs(sc[2]) == 0.0) {  // rho or (rhat, v) vanished
      mon.stop(StopReason::DivergedBreakdown);
      break;
    }
    if (!finite(std::abs(sc[0])) || !finite(std::abs(sc[2]))) {
      mon.stop(StopReason::DivergedNan);
      break;
    }
    for (size_t i = 0; i < 7; ++i) std::swap(cur[i], next[i]);
    ++res.iterations;
    if (mon.record(norm_of(sc[0].real()))) {
      if (!mon.claimed()) break;
      done = mon.confirm(start());
      continue;
    }
    if (std::abs(sc[3]) == 0.0) {  // omega = 0 with a nonzero residual: cannot continue
      mon.stop(StopReason::DivergedBreakdown);
      break;
    }
  }
  if (!mon.true_known()) mon.set_true(start());
  res.x = cur[0];
}

// Restarted GMRES(m) with right preconditioning (so the residual it tracks is the true
// one) and classical Gram-Schmidt applied twice (or once, on request). The Hessenberg least-squares problem
// (at most m+1 numbers per step) is solved on the host with Givens rotations.
// A GMRES(m) cycle that reduces the true residual by less than this (relative) has
// stagnated: at that rate a tenfold reduction would take 10^10 cycles, and a cycle that
// leaves x in place only moves the computed residual by rounding (~1e-15).
constexpr double kCycleProgress = 1e-10;

void gmres(const LinearOperator& A, const Tensor& b, const Preconditioner& M, const KrylovOptions& o, Device& d,
           Tensor x, KrylovResult& res, double bnorm) {
  DType t = b.dtype();
  int64_t n = A.rows();
  int m = std::max(1, o.restart);
  Allocator* a = d.allocator();
  const Global G{A.communicator()};
  SharedArena shared(d);
  std::map<int, std::unique_ptr<Step>> arnoldi, update;
  const bool twice = o.orthogonalization == "cgs2";
  // The basis lives in one device tensor [m + 1, n], a vector a row: a step reads its first
  // rows as one matrix (a view, not a copy of every vector into a new one) and writes the
  // next vector into the row after them.
  const Tensor basis = Tensor::empty(t, {int64_t(m) + 1, n}, a);
  const int64_t row_bytes = int64_t(dtype_storage_bytes(t, n));
  auto rows = [&](int64_t first, int64_t count) {
    return Tensor::view_of(static_cast<char*>(basis.raw()) + first * row_bytes, a, t, {count, n});
  };
  auto row = [&](int64_t i) { return rows(i, 1).reshape({n}); };
  // Arnoldi step j: w = A M v_j orthogonalized against v_0..v_j (V: the basis's first j + 1
  // rows; vj: its row j).
  auto arnoldi_step = [&](int j) -> Step& {
    auto& s = arnoldi[j];
    if (!s) {
      s = std::make_unique<Step>();
      Var V = s->g.input("V", t, {j + 1, n});
      Var vj = s->g.input("vj", t, {n});
      Var Vc = t == DType::C64 ? conj(V) : V;
      Var w = reshape(A.apply(s->g, M.apply(s->g, vj)), {n, 1});
      Var h = G.sum(matmul(Vc, w));  // [j+1, 1]
      if (twice) {
        // The first pass's update and the second pass's projections as one op (a device may
        // do both in one read of V: the cpu does).
        Projected p = project_out(V, w, h);
        Var h2 = G.sum(p.c);
        w = p.u - matmul(V, h2, true, false);
        h = h + h2;
      } else {
        w = w - matmul(V, h, true, false);
      }
      h = reshape(h, {j + 1});
      Var hn2 = G.dot(w, w);
      Var hn = sqrt(t == DType::C64 ? real(hn2) : hn2);
      Var inv = where(gt(hn, scalar_like(hn, 0.0)), 1.0 / where(gt(hn, scalar_like(hn, 0.0)), hn, scalar_like(hn, 1.0)),
                      scalar_like(hn, 0.0));
      Var vnext = reshape(w, {n}) * (t == DType::C64 ? make_complex(inv, scalar_like(inv, 0.0)) : inv);
      s->finish({vnext, concat({h, as1(hn2)}, 0)}, d, o, shared);
    }
    return *s;
  };
  // x + M (V_k^T y)
  auto update_step = [&](int k) -> Step& {
    auto& s = update[k];
    if (!s) {
      s = std::make_unique<Step>();
      Var xin = s->g.input("x", t, {n});
      Var V = s->g.input("V", t, {k, n});
      Var y = s->g.input("y", t, {1, k});
      Var dx = reshape(matmul(y, V), {n});
      s->finish({xin + M.apply(s->g, dx)}, d, o, shared);
    }
    return *s;
  };

  // The residual step is compiled after the first Arnoldi step, the larger, so that the
  // shared arena is sized by the latter and the residual fits in it.
  arnoldi_step(0);
  Step resid;
  {
    Var bb = resid.g.input("b", t, {n}), x0 = resid.g.input("x", t, {n});
    Var r = bb - A.apply(resid.g, x0);
    resid.finish({r, pack({G.dot(r, r)})}, d, o, shared);
  }
  res.report = resid.report();
  Monitor mon(o, bnorm, res);
  bool first = true, claimed = false;
  double last_beta = 0;
  Tensor x_start;  // x at the start of the last cycle, its true residual last_beta
  // On stagnation GMRES returns the better of the last cycle's start and end: a cycle whose
  // Hessenberg matrix is singular (A singular) can throw x far off while its estimate says 0.
  auto keep_better = [&](double beta) {
    if (res.reason == StopReason::DivergedStagnation && x_start.defined() && beta > last_beta) {
      x = x_start;
      mon.set_true(last_beta);
    }
  };
  while (true) {
    // Every cycle starts from the true residual b - A x, computed on the device.
    auto r0 = resid.run({b, x});
    double beta = norm_of(host_values(r0[1])[0].real());
    if (first) {
      first = false;
      mon.started(beta);
      if (mon.record(beta)) {
        if (mon.claimed()) mon.confirm(beta);
        break;
      }
    } else if (claimed) {  // the last cycle's estimate said converged: the true residual decides
      claimed = false;
      if (mon.confirm(beta)) {
        keep_better(beta);
        break;
      }
    } else if (!finite(beta)) {
      mon.stop(StopReason::DivergedNan);
      mon.set_true(beta);
      break;
    } else if (beta <= mon.tol()) {
      // The true residual after a restart confirms convergence.
      res.residual = beta;
      res.reason = beta <= o.atol ? StopReason::ConvergedAtol : StopReason::ConvergedRtol;
      mon.set_true(beta);
      break;
    } else if (!(beta < last_beta * (1 - kCycleProgress))) {
      // GMRES minimizes ||b - A x|| over the cycle's Krylov space: a cycle that did not
      // reduce it leaves x where it was (up to rounding), and the next would repeat it.
      mon.stop(StopReason::DivergedStagnation);
      mon.set_true(beta);
      keep_better(beta);
      break;
    } else {
      mon.started(beta);
    }
    last_beta = beta;
    x_start = x;
    {
      Tensor h = r0[0].is_host() ? r0[0] : r0[0].to(host_allocator());
      Tensor v0 = Tensor::empty(t, {n});
      for (int64_t i = 0; i < n; ++i) {
        if (t == DType::F32) v0.data<float>()[i] = float(h.data<float>()[i] / beta);
        else if (t == DType::F64) v0.data<double>()[i] = h.data<double>()[i] / beta;
        else v0.data<c64>()[i] = h.data<c64>()[i] / float(beta);
      }
      a->copy_from_host(basis.raw(), v0.raw(), size_t(row_bytes));
    }
    std::vector<std::vector<cd>> H;  // columns, rotated
    std::vector<cd> cs, sn, g = {beta};
    int k = 0;
    bool stop = false;
    for (int j = 0; j < m; ++j) {
      std::vector<Tensor> out = {row(j + 1), Tensor::empty(t, {int64_t(j) + 2}, a)};
      arnoldi_step(j).run_into({rows(0, j + 1), row(j)}, out);
      auto hv = host_values(out[1]);
      double hn = norm_of(hv.back().real());
      std::vector<cd> col(hv.begin(), hv.end() - 1);
      col.push_back(hn);
      for (int i = 0; i < j; ++i) {  // apply previous rotations
        cd t1 = std::conj(cs[size_t(i)]) * col[size_t(i)] + std::conj(sn[size_t(i)]) * col[size_t(i) + 1];
        cd t2 = -sn[size_t(i)] * col[size_t(i)] + cs[size_t(i)] * col[size_t(i) + 1];
        col[size_t(i)] = t1;
        col[size_t(i) + 1] = t2;
      }
      double den = std::sqrt(std::norm(col[size_t(j)]) + hn * hn);
      cd c = den == 0 ? 1.0 : col[size_t(j)] / den, s = den == 0 ? 0.0 : cd(hn / den);
      cs.push_back(c);
      sn.push_back(s);
      col[size_t(j)] = std::conj(c) * col[size_t(j)] + std::conj(s) * col[size_t(j) + 1];
      col.pop_back();
      g.push_back(-s * g[size_t(j)]);
      g[size_t(j)] = std::conj(c) * g[size_t(j)];
      H.push_back(col);
      k = j + 1;
      ++res.iterations;
      double est = std::abs(g[size_t(j) + 1]);
      if (!finite(est) || !finite(hn)) {
        mon.stop(StopReason::DivergedNan);
        stop = true;
        break;
      }
      if (den == 0) {
        mon.stop(StopReason::DivergedBreakdown);
        stop = true;
        break;
      }
      if (mon.record(est)) {
        claimed = mon.claimed();
        stop = !claimed;
        break;
      }
      // hn == 0: the Krylov space is invariant. With A nonsingular the solution is in it and
      // est is 0; on a singular A it need not be: the restart's true residual decides.
      if (hn == 0) break;
    }
    if (stop && (res.reason == StopReason::DivergedNan || res.reason == StopReason::DivergedBreakdown)) break;
    // y = R^{-1} g on the host; x += M V y.
    std::vector<cd> y(static_cast<size_t>(k));
    for (int i = k - 1; i >= 0; --i) {
      cd acc = g[size_t(i)];
      for (int l = i + 1; l < k; ++l) acc -= H[size_t(l)][size_t(i)] * y[size_t(l)];
      y[size_t(i)] = acc / H[size_t(i)][size_t(i)];
    }
    Tensor yt = Tensor::empty(t, {1, k});
    for (int i = 0; i < k; ++i) {
      if (t == DType::F32) yt.data<float>()[i] = float(y[size_t(i)].real());
      else if (t == DType::F64) yt.data<double>()[i] = y[size_t(i)].real();
      else yt.data<c64>()[i] = c64(float(y[size_t(i)].real()), float(y[size_t(i)].imag()));
    }
    x = update_step(k).run({x, rows(0, k), a == host_allocator() ? yt : yt.to(a)})[0];
    if (stop) break;
  }
  if (!mon.true_known()) mon.set_true(norm_of(host_values(resid.run({b, x})[1])[0].real()));
  res.x = x;
}

// MINRES (Paige and Saunders) for symmetric, possibly indefinite A, with a symmetric
// positive definite preconditioner. Real dtypes only.
void minres(const LinearOperator& A, const Tensor& b, const Preconditioner& M, const KrylovOptions& o, Device& d,
            Tensor x, KrylovResult& res, double bnorm) {
  DType t = b.dtype();
  if (t == DType::C64) throw InputError("minres supports f32 and f64 (use gmres for complex systems)");
  int64_t n = A.rows();
  Allocator* a = d.allocator();
  const Global G{A.communicator()};
  SharedArena shared(d);
  Step init, lanczos, upd;
  {
    Var bb = init.g.input("b", t, {n}), x0 = init.g.input("x0", t, {n});
    Var r = bb - A.apply(init.g, x0);
    Var y = M.apply(init.g, r);
    init.finish({r, y, pack(G.dots({{r, y}, {r, r}}))}, d, o, shared);
  }
  {
    auto& g = lanczos.g;
    Var y = g.input("y", t, {n}), r1 = g.input("r1", t, {n}), r2 = g.input("r2", t, {n});
    Var s = g.input("s", t, {}), c1 = g.input("c1", t, {});
    Var v = s * y;
    Var y1 = A.apply(g, v) - c1 * r1;
    Var alfa = G.dot(v, y1);
    Var y2 = y1 - (alfa * s) * r2;
    Var ynew = M.apply(g, y2);
    lanczos.finish({v, y2, ynew, pack({alfa, G.dot(y2, ynew)})}, d, o, shared);
  }
  {
    auto& g = upd.g;
    Var v = g.input("v", t, {n}), w1 = g.input("w1", t, {n}), w2 = g.input("w2", t, {n}), x0 = g.input("x", t, {n});
    Var oldeps = g.input("oldeps", t, {}), delta = g.input("delta", t, {}), denom = g.input("denom", t, {});
    Var phi = g.input("phi", t, {});
    Var w = (v - oldeps * w1 - delta * w2) * denom;
    upd.finish({w, x0 + phi * w}, d, o, shared);
  }
  res.report = lanczos.report();
  Monitor mon(o, bnorm, res);
  Tensor r1, r2, y, w, w2;
  double oldb = 0, beta = 0, dbar = 0, epsln = 0, phibar = 0, cs = -1, sn = 0;
  // (Re)starts from x: r = b - A x computed afresh, y = M r; returns ||r|| (the true
  // residual), or -1 when r^T M r < 0 (the preconditioner is not positive definite).
  auto start = [&]() -> double {
    auto s0 = init.run({b, x});
    auto s = host_values(s0[2]);
    double beta1sq = s[0].real();
    r1 = r2 = s0[0];
    y = s0[1];
    w = zeros_on(t, {n}, a);
    w2 = zeros_on(t, {n}, a);
    beta = phibar = beta1sq < 0 ? 0.0 : std::sqrt(beta1sq);
    oldb = dbar = epsln = sn = 0;
    cs = -1;
    return beta1sq < 0 ? -1.0 : norm_of(s[1].real());
  };
  auto sc = [&](double v) { return scalar_on(t, v, a); };
  const double r0 = start();
  bool done = false;
  if (r0 < 0) {
    done = mon.stop(StopReason::DivergedIndefinite);
  } else {
    mon.started(r0);
    // MINRES tracks the preconditioned residual norm; with M = I it is ||r||.
    done = mon.record(phibar) && (!mon.claimed() || mon.confirm(r0));
  }
  while (!done) {
    auto out = lanczos.run({y, r1, r2, sc(1.0 / beta), sc(oldb == 0 ? 0.0 : beta / oldb)});
    auto s = host_values(out[3]);
    double alfa = s[0].real(), bnew2 = s[1].real();
    if (!finite(alfa) || !finite(bnew2)) {
      mon.stop(StopReason::DivergedNan);
      break;
    }
    if (bnew2 < 0) {
      mon.stop(StopReason::DivergedIndefinite);
      break;
    }
    r1 = r2;
    r2 = out[1];
    y = out[2];
    oldb = beta;
    beta = std::sqrt(bnew2);
    double oldeps = epsln;
    double delta = cs * dbar + sn * alfa;
    double gbar = sn * dbar - cs * alfa;
    epsln = sn * beta;
    dbar = -cs * beta;
    double gamma = std::max(std::hypot(gbar, beta), std::numeric_limits<double>::min());
    cs = gbar / gamma;
    sn = beta / gamma;
    double phi = cs * phibar;
    phibar = sn * phibar;
    auto u = upd.run({out[0], w2, w, x, sc(oldeps), sc(delta), sc(1.0 / gamma), sc(phi)});
    w2 = w;
    w = u[0];
    x = u[1];
    ++res.iterations;
    if (mon.record(phibar)) {
      if (!mon.claimed()) break;
      double tr = start();
      if (tr < 0) {
        mon.stop(StopReason::DivergedIndefinite);
        break;
      }
      done = mon.confirm(tr);
      continue;
    }
    if (beta == 0) {  // invariant subspace: x is as good as this Krylov space allows
      double tr = start();
      mon.set_true(tr);
      mon.stop(tr >= 0 && tr <= kTrueResidualSlack * mon.tol()
                   ? (tr <= kTrueResidualSlack * o.atol ? StopReason::ConvergedAtol : StopReason::ConvergedRtol)
                   : StopReason::DivergedBreakdown);
      break;
    }
  }
  if (!mon.true_known()) {
    double tr = start();
    mon.set_true(tr < 0 ? std::nan("") : tr);
  }
  res.x = x;
}

}  // namespace

bool known_orthogonalization(const std::string& name) { return name == "cgs2" || name == "cgs"; }

KrylovResult krylov_solve(const LinearOperator& A, const Tensor& b0, const Preconditioner& M, const KrylovOptions& o,
                          const Tensor& x0) {
  if (A.rows() != A.cols()) throw InputError("krylov solvers need a square operator, got " + std::to_string(A.rows()) + "x" + std::to_string(A.cols()));
  if (b0.type() != TensorType{A.dtype(), {A.rows()}})
    throw InputError("right-hand side must be " + TensorType{A.dtype(), {A.rows()}}.str() + ", got " + b0.type().str());
  if (x0.defined() && x0.type() != b0.type())
    throw InputError("initial guess must be " + b0.type().str() + ", got " + x0.type().str());
  if (!(o.rtol >= 0) || !(o.atol >= 0)) throw InputError("rtol and atol must be >= 0");
  if (o.max_it < 0) throw InputError("max_it must be >= 0");
  if (!known_orthogonalization(o.orthogonalization))
    throw InputError("unknown orthogonalization '" + o.orthogonalization + "' (expected cgs2 or cgs)");
  Device& d = DeviceRegistry::get().runnable_at(o.device);
  Allocator* a = d.allocator();
  Tensor b = b0.allocator() == a ? b0 : b0.to(a);
  Tensor x = x0.defined() ? x0.to(a) : zeros_on(b0.dtype(), b0.shape(), a);
  double bnorm = 0;
  for (cd v : host_values(b0)) bnorm += std::norm(v);
  bnorm = std::sqrt(Global{A.communicator()}.sum(bnorm));

  KrylovResult res;
  std::string m = o.method;
  if (m == "cg" || m == "pcg") cg(A, b, M, o, d, x, res, bnorm);
  else if (m == "pipecg") pipecg(A, b, M, o, d, x, res, bnorm);
  else if (m == "bicgstab") bicgstab(A, b, M, o, d, x, res, bnorm);
  else if (m == "gmres") gmres(A, b, M, o, d, x, res, bnorm);
  else if (m == "minres") minres(A, b, M, o, d, x, res, bnorm);
  else throw InputError("unknown method '" + m + "' (expected cg, pcg, pipecg, bicgstab, gmres or minres)");
  if (!res.x.is_host()) res.x = res.x.to(host_allocator());
  if (o.error_if_not_converged && !converged(res.reason))
    throw SolveError(o.method + " did not converge: " + stop_reason_name(res.reason) + " after " +
                         std::to_string(res.iterations) + " iterations (residual " + std::to_string(res.residual) + ")",
                     res);
  return res;
}

}  // namespace rlx::sparse
