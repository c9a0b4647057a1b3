// The op suite's grad mode: every differentiable op's VJP (passes/autodiff.hpp) on its
// registry example, checked
//   1. against central finite differences of the op itself on the reference device, in
//      f64 (c64 where the op is complex-only), on fresh random inputs and cotangents, and
//      again in c64 for the ops that have both;
//   2. on every device and float dtype, against the reference device's gradients.
// The scalar whose gradient is checked is L(x) = sum_k Re <u_k, y_k(x)> for the example's
// results y_k and random cotangents u_k; for a complex input z = a + ib the expected
// gradient is dL/da + i dL/db (docs/autodiff.md).
#include <algorithm>
#include <cmath>
#include <map>

#include "harness.hpp"
#include "passes/autodiff.hpp"
#include "runtime/executor.hpp"

namespace rlx::test {
namespace {

// Inputs inside each op's domain (real logarithms, roots and powers of positive numbers);
// other ops take the default range, [-2, 2].
const std::map<std::string, Range>& domains() {
  static const std::map<std::string, Range> m = {
      {"log", {.lo = 0.5, .hi = 2}},  {"sqrt", {.lo = 0.5, .hi = 2}}, {"rsqrt", {.lo = 0.5, .hi = 2}},
      {"recip", {.lo = 0.5, .hi = 2}}, {"pow", {.lo = 0.5, .hi = 2}}, {"div", {.lo = 0.5, .hi = 2}},
  };
  return m;
}

struct DomainBuild final : Build {
  DomainBuild(uint64_t seed, std::optional<Range> d) : Build(seed), domain(d) {}
  std::optional<Range> domain;
  Var in(DType t, Shape s, const Range& r = {}) override {
    return Build::in(t, std::move(s), domain && is_inexact(t) ? *domain : r);
  }
};

bool has_gradient(const ir::OpDef& d) {
  return !d.not_differentiable && (d.vjp || (d.level == ir::Level::L1 && d.lower));
}

// The example's inexact results y_k, cotangent inputs u_k and the VJP with respect to every
// inexact input, as one graph: results [y..., dL/dx...].
struct GradCase {
  GradCase(const ir::OpDef& def, DType t, uint64_t seed) : b(seed, domain_of(def)) {
    for (const Var& y : ir::example_of(def)(b, t))
      if (is_inexact(y.dtype())) outs.push_back(y);
    for (size_t i = 0; i < b.g.params.size(); ++i)
      if (is_inexact(b.g.type(b.g.params[i]).dtype)) {
        wrt.emplace_back(&b.g, b.g.params[i]);
        wrt_input.push_back(i);
      }
    std::vector<Var> cts;
    for (const Var& y : outs) {
      cts.push_back(b.in(y.dtype(), y.shape()));
      ct_input.push_back(b.inputs.size() - 1);
    }
    grads = outs.empty() || wrt.empty() ? std::vector<Var>{} : rlx::vjp(outs, cts, wrt);
    rlx::output(b.g, outs);
    rlx::output(b.g, grads);
  }
  static std::optional<Range> domain_of(const ir::OpDef& def) {
    auto it = domains().find(def.name);
    return it == domains().end() ? std::nullopt : std::optional<Range>(it->second);
  }
  DomainBuild b;
  std::vector<Var> outs, wrt, grads;
  std::vector<size_t> wrt_input, ct_input;
};

// L = sum_k Re <u_k, y_k> from a run's results.
double objective(const GradCase& c, const std::vector<Tensor>& res, const std::vector<Tensor>& in) {
  double l = 0;
  for (size_t k = 0; k < c.outs.size(); ++k) {
    const Tensor& y = res[k];
    const Tensor& u = in[c.ct_input[k]];
    for (int64_t i = 0; i < y.numel(); ++i) l += std::real(std::conj(value_at(u, i)) * value_at(y, i));
  }
  return l;
}

Tensor copy_of(const Tensor& t) { return t.contiguous().to(host_allocator()); }

bool declares(const ir::OpDef& def, DType d) { return std::find(def.dtypes.begin(), def.dtypes.end(), d) != def.dtypes.end(); }

// In dtype t (by default f64 where the op has it, else its complex or single-precision type).
void check_against_finite_differences(const ir::OpDef& def, std::optional<DType> in_dtype = std::nullopt) {
  auto has = [&](DType d) { return declares(def, d); };
  const DType t = in_dtype ? *in_dtype : has(DType::F64) ? DType::F64 : has(DType::C64) ? DType::C64 : DType::F32;
  const std::string name = def.name + " grad dtype=" + dtype_name(t);
  GradCase c(def, t, case_seed(name));
  if (c.grads.empty()) {
    BOOST_ERROR(name << ": has a VJP but its example has no float input or result to differentiate");
    return;
  }
  // Every input and output single precision (c64, or f32 results) needs a coarser step.
  bool single = false;
  for (const Var& y : c.outs) single |= y.dtype() != DType::F64;
  for (const Var& x : c.wrt) single |= x.dtype() != DType::F64;
  const double h = single ? 1e-3 : 1e-6, tol = single ? 2e-2 : 1e-6;
  Device& ref = DeviceRegistry::get().at("reference");
  Program p = compile(c.b.g, ref, test_options());
  Executor ex(p, ref);
  std::vector<Tensor> base = ex.run(c.b.inputs);
  std::mt19937_64 pick(case_seed(name + " elements"));
  for (size_t j = 0; j < c.wrt.size(); ++j) {
    const Tensor grad = copy_of(base[c.outs.size() + j]);
    const Tensor& x0 = c.b.inputs[c.wrt_input[j]];
    const bool cplx = x0.dtype() == DType::C64;
    // At most 24 elements of each input, drawn at random.
    std::vector<int64_t> elems(size_t(x0.numel()));
    for (int64_t i = 0; i < x0.numel(); ++i) elems[size_t(i)] = i;
    std::shuffle(elems.begin(), elems.end(), pick);
    elems.resize(std::min<size_t>(elems.size(), 24));
    double worst = 0, scale = 0;
    std::string where;
    for (int64_t i : elems)
      for (int part = 0; part < (cplx ? 2 : 1); ++part) {
        double side[2];
        for (int s = 0; s < 2; ++s) {
          std::vector<Tensor> in = c.b.inputs;
          in[c.wrt_input[j]] = copy_of(x0);
          cd v = value_at(x0, i) + (part ? cd(0, 1) : cd(1, 0)) * (s ? -h : h);
          put(in[c.wrt_input[j]], i, v);
          side[s] = objective(c, ex.run(in), in);
        }
        const double fd = (side[0] - side[1]) / (2 * h);
        const double got = part ? value_at(grad, i).imag() : value_at(grad, i).real();
        scale = std::max({scale, std::abs(fd), std::abs(got)});
        if (std::abs(fd - got) > worst || std::isnan(got) != std::isnan(fd)) {
          worst = std::isnan(got) || std::isnan(fd) ? INFINITY : std::abs(fd - got);
          where = "element " + std::to_string(i) + (cplx ? (part ? " imag" : " real") : "") + ": vjp " +
                  std::to_string(got) + ", finite difference " + std::to_string(fd);
        }
      }
    BOOST_TEST_MESSAGE(name << " input " << c.wrt_input[j] << ": normalized error " << worst / std::max(scale, 1e-3));
    BOOST_CHECK_MESSAGE(worst <= tol * std::max(scale, 1e-3),
                        name << " input " << c.wrt_input[j] << ": " << where << " (normalized error "
                             << worst / std::max(scale, 1e-3) << " > " << tol << "); " << seed_note());
  }
}

void check_devices_against_reference(const ir::OpDef& def) {
  Device& ref = DeviceRegistry::get().at("reference");
  for (DType t : {DType::F32, DType::F64, DType::C64}) {
    if (std::find(def.dtypes.begin(), def.dtypes.end(), t) == def.dtypes.end()) continue;
    const std::string name = def.name + " grad dtype=" + dtype_name(t);
    GradCase c(def, t, case_seed(name));
    if (c.grads.empty()) continue;  // (the finite-difference check reports it)
    std::string why;
    auto want = compile_and_run(ref, c.b.g, c.b.inputs, &why);
    if (!want) {
      BOOST_ERROR(name << ": the reference device cannot run the gradient: " << why);
      continue;
    }
    for (Device* d : DeviceRegistry::get().runnable()) {
      if (d == &ref) continue;
      const std::string ctx = name + " device=" + d->name();
      try {
        auto got = compile_and_run(*d, c.b.g, c.b.inputs, &why);
        if (!got) {
          BOOST_TEST_MESSAGE("skip " << ctx << ": " << why);
          continue;
        }
        // Gradients chain several ops: a hundred times one op's tolerance.
        for (size_t j = 0; j < c.grads.size(); ++j) {
          const size_t k = c.outs.size() + j;
          std::string bad = mismatch((*got)[k], (*want)[k], 100 * tolerance(c.grads[j].dtype()));
          BOOST_CHECK_MESSAGE(bad.empty(), ctx << " gradient " << j << ": " << bad << "; " << seed_note());
        }
      } catch (const std::exception& e) {
        BOOST_ERROR(ctx << ": " << e.what() << "; " << seed_note());
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(grad)

BOOST_AUTO_TEST_CASE(every_vjp_matches_finite_differences) {
  int checked = 0;
  for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
    if (!has_gradient(*def)) continue;
    BOOST_TEST_CONTEXT(def->name) {
      try {
        check_against_finite_differences(*def);
        ++checked;
      } catch (const std::exception& e) {
        BOOST_ERROR(def->name << ": " << e.what() << "; " << seed_note());
      }
    }
  }
  BOOST_TEST_MESSAGE(checked << " ops' VJPs checked against finite differences");
  BOOST_TEST(checked > 40);
}

// The complex rules (the conjugate convention, phases, Hermitian parts), which the f64 check
// above does not reach: in c64 as well for every op that has both.
BOOST_AUTO_TEST_CASE(every_complex_vjp_matches_finite_differences) {
  int checked = 0;
  for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
    if (!has_gradient(*def) || !declares(*def, DType::C64) || !declares(*def, DType::F64)) continue;
    BOOST_TEST_CONTEXT(def->name) {
      try {
        check_against_finite_differences(*def, DType::C64);
        ++checked;
      } catch (const std::exception& e) {
        BOOST_ERROR(def->name << ": " << e.what() << "; " << seed_note());
      }
    }
  }
  BOOST_TEST_MESSAGE(checked << " ops' complex VJPs checked against finite differences");
}

BOOST_AUTO_TEST_CASE(every_device_matches_the_reference_gradients) {
  for (const ir::OpDef* def : ir::OpRegistry::get().all())
    if (has_gradient(*def)) BOOST_TEST_CONTEXT(def->name) { check_devices_against_reference(*def); }
}

// Each op says how it differentiates: a VJP (or, for L1, its lowering), "not
// differentiable", or it has no inputs; control flow (if, while) has rules of its own in the
// grad pass (tests/passes/test_autodiff.cpp).
BOOST_AUTO_TEST_CASE(every_op_declares_its_derivative) {
  for (const ir::OpDef* def : ir::OpRegistry::get().all()) {
    const bool source = def->max_inputs == 0, control = def->cls == ir::OpClass::Control;
    BOOST_CHECK_MESSAGE(has_gradient(*def) || def->not_differentiable || source || control,
                        def->name << " neither has a VJP nor says it is not differentiable");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace rlx::test
