// 3D Gaussian splatting as a pipeline of stage ops (docs/splat.md, "The stages as ops"):
// the user-facing builder of splat_render's tiled pipeline in IR. Each stage is an op of
// the registry with kernels on every device and, where differentiable, a VJP, so grad over
// the result works as for any other op and `rlx compile --explain` lists every stage.
#pragma once
#include <cstdint>

#include "ir/frontend.hpp"
#include "ir/ops/splat_stages.hpp"

namespace rlx::splat {

// The pinhole camera of splat_render's attributes (docs/splat.md, "Camera").
struct Intrinsics {
  int64_t width = 0, height = 0;
  double fx = 1, fy = 1, cx = 0, cy = 0;
  ir::Attrs attrs() const;
};

struct StagedRenderOptions {
  // Length of the (Gaussian, tile) intersection list. 0: N x tiles, which no scene exceeds
  // but which grows with both; a scene with more intersections than a given capacity fails
  // at run time with an InputError naming the count it needs.
  int64_t capacity = 0;
};

// splat_render's results through the stages; `stages` holds every intermediate value
// (screen-space Gaussians, colours, keys, the sorted list, tile ranges).
struct StagedRender {
  Var image, alpha, depth;  // [H, W, 3], [H, W], [H, W]
  ir::SplatStages stages;
};

StagedRender render_staged(const Var& means, const Var& log_scales, const Var& quats, const Var& opacity_logits,
                           const Var& sh, const Var& viewmat, const Var& background, const Intrinsics& camera,
                           const StagedRenderOptions& options = {});

}  // namespace rlx::splat
