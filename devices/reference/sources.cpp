// Source kernels: iota and the counter-based RNG of src/core/rng.hpp.
#include "core/rng.hpp"
#include "devices/reference/access.hpp"

namespace rlx::reference {
namespace {

void iota_kernel(const ir::Node& n, std::span<const Tensor>, std::span<Tensor> out) {
  const Tensor& y = out[0];
  std::vector<int64_t> along(size_t(y.rank()), 0);
  if (y.rank() > 0) along[size_t(normalize_axis(n.attrs.get_int("axis"), y.rank()))] = 1;
  for_each_offset(y.shape(), {along}, [&](int64_t i, const int64_t* o) { store_int(y, i, o[0]); });
}

// The seed of a draw: the attribute, mixed with the key input when there is one.
uint64_t seed_of(const ir::Node& n, std::span<const Tensor> in) {
  const uint64_t seed = uint64_t(n.attrs.get_int("seed"));
  return in.empty() ? seed : rng_keyed_seed(seed, load_int(in[0], 0));
}

// Element i = low + (high - low) * u(seed, i).
void rng_uniform_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const uint64_t seed = seed_of(n, in);
  const double low = n.attrs.get_float("low"), high = n.attrs.get_float("high");
  for (int64_t i = 0; i < out[0].numel(); ++i) store_real(out[0], i, low + (high - low) * rng_unit(seed, uint64_t(i)));
}

// Element i = mean + stddev * n(seed, i).
void rng_normal_kernel(const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const uint64_t seed = seed_of(n, in);
  const double mean = n.attrs.get_float("mean"), stddev = n.attrs.get_float("stddev");
  for (int64_t i = 0; i < out[0].numel(); ++i) store_real(out[0], i, mean + stddev * rng_std_normal(seed, uint64_t(i)));
}

}  // namespace

void add_source_kernels(KernelTable& t) {
  t.add({"iota", kRealNumeric, -1, iota_kernel, {}});
  t.add({"rng_uniform", kFloats, -1, rng_uniform_kernel, {}});
  t.add({"rng_normal", kFloats, -1, rng_normal_kernel, {}});
}

}  // namespace rlx::reference
