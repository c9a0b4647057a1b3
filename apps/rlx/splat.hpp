// What `rlx splat render` and `rlx splat fit` share (apps/rlx/splat.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "args.hpp"
#include "core/tensor.hpp"
#include "io/camera_json.hpp"
#include "io/ply.hpp"
#include "ir/frontend.hpp"

namespace rlx::cli {

// splat_render's camera attributes for c.
ir::Attrs camera_attrs(const io::Camera& c);
// c's world-to-camera matrix as the op's f32 [4, 4] input.
Tensor view_matrix(const io::Camera& c);
// splat_render of the seven inputs (means, log_scales, quats, opacity_logits, sh, viewmat,
// background) for camera c: image, alpha, depth.
std::vector<Var> render_outputs(const std::vector<Var>& inputs, const io::Camera& c);
// A graph whose inputs are a scene of n Gaussians with k SH coefficients, the view matrix and
// the background (f32), and whose outputs are splat_render's for camera c.
void render_graph(ir::Graph& g, int64_t n, int64_t k, const io::Camera& c);
// An image [H, W, 3] as 8-bit RGB (clamped to [0, 1], rounded; NaN is 0).
std::vector<uint8_t> to_rgb8(const Tensor& image);

int splat_fit(const Args& a);

}  // namespace rlx::cli
