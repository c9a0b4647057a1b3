// The stages of the tiled splat rasterizer as IR (docs/splat.md, "The stages as ops"):
// the pipeline splat_render's native kernels run inside one op, built from the stage ops
// (splat_project, splat_sh_to_rgb, splat_tile_counts, cumsum, splat_tile_keys, sort,
// gather, splat_tile_ranges, splat_composite). The `splat-stages` rewrite
// (src/dispatch/rewrites.cpp) and solvers/splat build it; grad differentiates it through
// the stages' VJPs.
#pragma once
#include <vector>

#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"

namespace rlx::ir {

// Every value of the staged pipeline, in processing order.
struct SplatStages {
  Var xy, conics, depths, opacities, radii;  // splat_project: [N,2], [N,3], [N], [N], [N] i64
  Var rgb;                                   // splat_sh_to_rgb: [N,3]
  Var counts, ends;                          // tiles per Gaussian, their inclusive cumsum ([N] i64)
  Var keys, ids;                             // splat_tile_keys: [capacity] i64 each
  Var sorted_keys, list;                     // sort of the keys; the Gaussian of each sorted entry
  Var ranges;                                // splat_tile_ranges: [tiles, 2] i64
  Var image, alpha, depth;                   // splat_composite: [H,W,3], [H,W], [H,W]
};

// splat_render's inputs (means, log_scales, quats, opacity_logits, sh, viewmat, background)
// and camera attributes (width, height, fx, fy, cx, cy) through the stages. capacity: the
// length of the intersection list; a scene with more intersections is an InputError at run
// time naming the count needed.
SplatStages splat_stages(const std::vector<Var>& in, const Attrs& camera, int64_t capacity);

// A capacity that always suffices: N x tiles (each Gaussian in every tile), at least 1;
// an InputError when it exceeds `limit`.
int64_t splat_capacity_bound(int64_t n, int64_t width, int64_t height, int64_t limit);

// The examples' scene and camera (the op suite's inputs for every splat op).
std::vector<Var> splat_example_scene(ExampleInputs& x, DType t, int64_t n);
const Attrs& splat_example_camera();

}  // namespace rlx::ir
