// Gaussian-splatting scenes as PLY files, in the layout the 3DGS reference and the tools
// around it (viewers, editors, trainers) write: one `vertex` element per Gaussian with the
// float properties
//   x y z  nx ny nz  f_dc_0..2  f_rest_0..M-1  opacity  scale_0..2  rot_0..3
// where opacity is a logit, scale_* are natural logs, rot_* is a quaternion w x y z, and the
// M = 3·((degree+1)² − 1) higher SH coefficients are stored channel-major (all of red's,
// then green's, then blue's). docs/io.md lists what is accepted and refused.
#pragma once
#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace rlx::io {

// The parameters of the op splat_render, in its layout (docs/splat.md):
//   means [N, 3], log_scales [N, 3], quats [N, 4] (w, x, y, z), opacity_logits [N],
//   sh [N, K, 3] with K = (degree+1)² and sh[n, k, c] coefficient k of colour channel c.
// Read as f32; written from f32 or f64.
struct SplatScene {
  Tensor means, log_scales, quats, opacity_logits, sh;
  int64_t size() const { return means.shape().at(0); }
  int sh_degree() const;
};

// Reads a PLY file of Gaussians: binary_little_endian, binary_big_endian or ascii 1.0; any
// scalar property type; normals optional; extra properties and elements other than `vertex`
// ignored. Throws InputError (ParseError for the header and ascii data: file:line) naming
// the file and what is wrong.
SplatScene read_splat_ply(const std::string& path);
// The same checks on bytes in memory; `name` stands for the file in messages.
SplatScene parse_splat_ply(std::string_view bytes, const std::string& name);

// Writes binary_little_endian float32 in the standard order above (normals zero), through a
// temporary file renamed into place. InputError when the tensors do not form a scene.
void write_splat_ply(const std::string& path, const SplatScene& scene);

}  // namespace rlx::io
