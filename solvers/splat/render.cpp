#include "solvers/splat/render.hpp"

#include <limits>

namespace rlx::splat {

ir::Attrs Intrinsics::attrs() const {
  return {{"width", width}, {"height", height}, {"fx", fx}, {"fy", fy}, {"cx", cx}, {"cy", cy}};
}

StagedRender render_staged(const Var& means, const Var& log_scales, const Var& quats, const Var& opacity_logits,
                           const Var& sh, const Var& viewmat, const Var& background, const Intrinsics& camera,
                           const StagedRenderOptions& options) {
  const int64_t capacity =
      options.capacity > 0
          ? options.capacity
          : ir::splat_capacity_bound(means.shape().at(0), camera.width, camera.height,
                                     std::numeric_limits<int64_t>::max());
  StagedRender r;
  r.stages = ir::splat_stages({means, log_scales, quats, opacity_logits, sh, viewmat, background}, camera.attrs(),
                              capacity);
  r.image = r.stages.image, r.alpha = r.stages.alpha, r.depth = r.stages.depth;
  return r;
}

}  // namespace rlx::splat
