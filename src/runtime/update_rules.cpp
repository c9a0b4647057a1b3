#include "runtime/update_rules.hpp"

#include "ir/graph.hpp"
#include "runtime/kernel_table.hpp"

namespace rlx::update {

SgdParams sgd_params(const ir::Node& n) {
  return {n.attrs.get_float("momentum"), n.attrs.get_float("dampening"), n.attrs.get_float("weight_decay"),
          n.attrs.get_bool("nesterov")};
}

AdamParams adam_params(const ir::Node& n) {
  return {n.attrs.get_float("beta1"), n.attrs.get_float("beta2"), n.attrs.get_float("eps"),
          n.attrs.get_float("weight_decay"), n.attrs.get_bool("decoupled")};
}

void add_update_kernels(KernelTable& t, UpdateKernel sgd_f32, UpdateKernel sgd_f64, UpdateKernel adam_f32,
                        UpdateKernel adam_f64) {
  const DTypeSet floats = bit(DType::F32) | bit(DType::F64);
  auto by_dtype = [](UpdateKernel f32, UpdateKernel f64) -> KernelFn {
    return [f32, f64](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
      (in[0].dtype() == DType::F64 ? f64 : f32)(n, in, out);
    };
  };
  t.add({"sgd_update", floats, 0, by_dtype(sgd_f32, sgd_f64)});
  t.add({"adam_update", floats, 0, by_dtype(adam_f32, adam_f64)});
}

}  // namespace rlx::update
