// Shared pieces of the op suite: random inputs, host-side element access, the
// normalized-error comparison, and compiling/running a graph on one device.
// Everything here reads and writes memory itself; none of it uses a device's code.
#pragma once
#include <boost/test/unit_test.hpp>
#include <complex>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "runtime/runtime.hpp"

namespace rlx::test {

using cd = std::complex<double>;

// The run's base seed: RLX_TEST_SEED when set, else the clock. Printed at start.
uint64_t base_seed();
// A case's seed: the base seed mixed with the case's name, so one case repeats alone.
uint64_t case_seed(const std::string& name);
std::string seed_note();  // "seed=N (RLX_TEST_SEED=N repeats this run)"

// How to draw random input values (the ops' examples ask with the same type).
using Range = ir::ValueRange;

// Element i of a contiguous host tensor, any dtype (bool read as its byte).
cd value_at(const Tensor& t, int64_t i);
int64_t int_at(const Tensor& t, int64_t i);  // bool and integer dtypes, exactly
void put(const Tensor& t, int64_t i, cd v);  // v must be representable (ints in range)
std::vector<double> reals(const Tensor& t);
std::vector<cd> complexes(const Tensor& t);
Tensor make_tensor(DType t, Shape s, const std::vector<cd>& values);
Tensor random_tensor(std::mt19937_64& rng, DType t, const Shape& s, const Range& r);
// The same values as t in a strided view (every other element of a wider buffer whose
// gaps hold garbage), or t itself when it cannot be strided (i4, rank 0, empty).
Tensor strided_copy(const Tensor& t);

// Normalized error tolerance of an op's result, by dtype (0: exact).
double tolerance(DType t);
// "" when got matches want: exact for bool/ints, else max|got - want| / max|want| <= tol
// (NaN must meet NaN, infinities must be equal). Otherwise says where and by how much.
std::string mismatch(const Tensor& got, const Tensor& want, double tol);
std::string mismatch(const Tensor& got, const std::vector<cd>& want, double tol);

// Builds one test graph and its random inputs.
// The inputs of an op's example (ir::ExampleInputs) and of the suite's own cases.
struct Build : ir::ExampleInputs {
  explicit Build(uint64_t seed) : rng(seed) {}
  std::mt19937_64 rng;
  ir::Graph g;
  std::vector<Tensor> inputs;
  ir::Graph& graph() override { return g; }
  Var in(DType t, Shape s, const Range& r = {}) override;
  Var index(DType t, Shape s, int64_t extent) override;  // uniform in [0, extent)
  Var fixed(const Tensor& value) override;               // an input with these exact values
};

CompileOptions test_options();  // no constant folding: the device itself must run every node
// Compiles g for d and runs it. nullopt with *why set when d cannot compile it
// (LegalizeError); other errors propagate.
std::optional<std::vector<Tensor>> compile_and_run(Device& d, const ir::Graph& g, const std::vector<Tensor>& in,
                                                   std::string* why, bool strided_inputs = false);
// Per-device tallies printed at the end of the run.
void count(const Device& d, bool skipped);

// Runs b's graph on every device that can compile it and calls check(ctx, results); with
// `tally`, each device's run (or refusal) counts in the tallies above.
template <class F>
void on_every_device(const std::string& what, Build& b, F&& check, bool tally = false) {
  for (Device* d : DeviceRegistry::get().runnable()) {
    const std::string ctx = what + " device=" + d->name();
    try {
      std::string why;
      auto got = compile_and_run(*d, b.g, b.inputs, &why);
      if (tally) count(*d, !got);
      if (!got) {
        BOOST_TEST_MESSAGE("skip " << ctx << ": " << why);
        continue;
      }
      check(ctx, *got);
    } catch (const std::exception& e) {
      BOOST_ERROR(ctx << ": " << e.what() << "; " << seed_note());
    }
  }
}

}  // namespace rlx::test
