// Adaptive density control of the 3DGS paper (docs/splat.md, "Densification"): between
// optimisation steps, Gaussians whose view-space positional gradient is large on average are
// cloned (small ones) or split in two (large ones), and faint or oversized ones are pruned.
// Host code on the scene's tensors; `rlx splat fit --densify` calls it every few iterations
// with the gradient statistics its step program accumulates.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.hpp"
#include "io/ply.hpp"

namespace rlx::splat {

struct DensifyOptions {
  // Clone or split where the mean norm of the view-space (2D mean) gradient, in normalised
  // device coordinates (pixels scaled by width / 2 and height / 2), over the views that saw
  // the Gaussian is at least this (the paper's 0.0002).
  double grad_threshold = 0.0002;
  double extent = 1;            // the scene's size: 1.1 x the largest camera distance from their mean
  double percent_dense = 0.01;  // clone when the largest scale is at most this x extent, else split
  double min_opacity = 0.005;   // prune below this opacity
  // Prune larger ones (0: off): a screen radius above max_screen_radius pixels in some view,
  // a largest scale above max_world_scale x extent. The paper turns both on after the first
  // opacity reset.
  double max_screen_radius = 0, max_world_scale = 0;
};

struct DensifyStats {
  int64_t before = 0, cloned = 0, split = 0, pruned = 0, after = 0;
};

// The new scene and, per new Gaussian, the old one it comes from and whether it is new (a
// clone or a split copy: its optimiser state starts at zero; a kept Gaussian keeps its own).
// Order: the kept old Gaussians in their order, then the clones, then the split copies (two
// per split Gaussian, next to each other), pruning applied to all.
struct Densified {
  io::SplatScene scene;
  std::vector<int64_t> from;
  std::vector<uint8_t> fresh;
  DensifyStats stats;
};

// scene: f32 tensors in their own units (means, log-scales, quaternions, opacity logits, SH).
// grad_sum [N]: the summed view-space gradient norms; seen [N]: the number of views that saw
// each Gaussian (radius > 0); max_radius [N]: its largest screen radius in pixels (all f32).
// Split copies are drawn from the Gaussian itself (mean + R (s ⊙ z), z ~ N(0, I)) with rng;
// their scales are the original's divided by 1.6.
Densified densify(const io::SplatScene& scene, const Tensor& grad_sum, const Tensor& seen, const Tensor& max_radius,
                  const DensifyOptions& options, std::mt19937_64& rng);

// Rows of t ([N, ...], f32) by `from`, zero where `zero` is set: a parameter's optimiser
// state carried over to the densified scene.
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& from, const std::vector<uint8_t>& zero);

}  // namespace rlx::splat
