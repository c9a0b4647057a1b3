#!/usr/bin/env python3
"""A vectorized PyTorch-CPU Gaussian rasterizer with rlx's conventions, timed on the scenes
`rlx-bench splat --device cpu --dump DIR` wrote (apps/bench/splat.cpp).

    python3 apps/bench/peers_splat_cpu.py DIR [--reps 5] [--threads 2]

The same math as splat_render (docs/splat.md): EWA projection, SH colour, the 16 x 16 tile
rectangle from the 3-sigma radius, (tile, f32 depth, index) order, skip below 1/255, the
transmittance stop at 1e-4, RGB over the background, alpha and expected depth. Written as
PyTorch users write it on a CPU: every stage a batched tensor expression, no Python loop over
Gaussians or pixels. The (Gaussian, tile) pairs are sorted once; each pair is expanded to its
tile's 256 pixels, and the transmittance is a cumulative sum of log(1 - alpha) within each
tile's run of pairs (the stop rule as the mask "log-transmittance after the Gaussian >= log
1e-4", which the order makes equivalent). Pairs are processed in chunks of whole tiles to bound
memory; for forward + backward each chunk is wrapped in torch.utils.checkpoint when the saved
tensors would not fit in --max-gib (its forward then runs twice; the RESULT line says so).
The gradients are autograd's through all of it. Prints RESULT lines like rlx-bench's and the
image's difference from the one rlx rendered (image.f32).
"""
import argparse
import math
import os
import sys

import numpy as np

from peers_splat import load, median_ms  # the scene files rlx-bench splat --dump writes; the timing loop

TILE = 16


SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396)
SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154, -0.4570457994644658,
         1.445305721320277, -0.5900435899266435)


def sh_basis(torch, d, k):
    x, y, z = d.unbind(-1)
    b = [torch.full_like(x, SH_C0)]
    if k > 1:
        b += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if k > 4:
        xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
        b += [SH_C2[0] * xy, SH_C2[1] * yz, SH_C2[2] * (2 * zz - xx - yy), SH_C2[3] * xz, SH_C2[4] * (xx - yy)]
    if k > 9:
        b += [SH_C3[0] * y * (3 * xx - yy), SH_C3[1] * xy * z, SH_C3[2] * y * (4 * zz - xx - yy),
              SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy), SH_C3[4] * x * (4 * zz - xx - yy),
              SH_C3[5] * z * (xx - yy), SH_C3[6] * x * (xx - 3 * yy)]
    return torch.stack(b, -1)  # [N, K]


def project(torch, s, means, log_scales, quats, logits, sh, view):
    """Per-Gaussian screen quantities and the integer tile rectangles (no gradient through those)."""
    R, t = view[:3, :3], view[:3, 3]
    pc = means @ R.T + t
    x, y, z = pc.unbind(-1)
    q = quats / quats.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    w, qx, qy, qz = q.unbind(-1)
    rot = torch.stack([1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - w * qz), 2 * (qx * qz + w * qy),
                       2 * (qx * qy + w * qz), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - w * qx),
                       2 * (qx * qz - w * qy), 2 * (qy * qz + w * qx), 1 - 2 * (qx * qx + qy * qy)], -1).view(-1, 3, 3)
    M = rot * torch.exp(log_scales)[:, None, :]
    zs = torch.where(z > 0.2, z, torch.ones_like(z))  # culled ones get a harmless depth
    zero = torch.zeros_like(zs)
    J = torch.stack([torch.stack([s["fx"] / zs, zero, -s["fx"] * x / (zs * zs)], -1),
                     torch.stack([zero, s["fy"] / zs, -s["fy"] * y / (zs * zs)], -1)], -2)  # [N, 2, 3]
    T = J @ R  # [N, 2, 3]
    TM = T @ M
    cov = TM @ TM.transpose(1, 2)
    a, b, c = cov[:, 0, 0] + 0.3, cov[:, 0, 1], cov[:, 1, 1] + 0.3
    det = a * c - b * b
    conic = torch.stack([c / det, -b / det, a / det], -1)
    u, v = s["fx"] * x / zs + s["cx"], s["fy"] * y / zs + s["cy"]
    centre = -R.T @ t
    d = means - centre
    d = d / d.norm(dim=-1, keepdim=True)
    rgb = torch.clamp((sh_basis(torch, d, sh.shape[1])[:, :, None] * sh).sum(1) + 0.5, min=0)
    opacity = torch.sigmoid(logits)
    with torch.no_grad():
        lam = 0.5 * (a + c) + torch.sqrt(torch.clamp(0.25 * (a + c) ** 2 - det, min=0.1))
        r = torch.ceil(3 * torch.sqrt(lam))
        tiles_x, tiles_y = (s["w"] + TILE - 1) // TILE, (s["h"] + TILE - 1) // TILE
        tx0 = torch.clamp(torch.floor((u - r) / TILE), 0, tiles_x).long()
        tx1 = torch.clamp(torch.floor((u + r) / TILE) + 1, 0, tiles_x).long()
        ty0 = torch.clamp(torch.floor((v - r) / TILE), 0, tiles_y).long()
        ty1 = torch.clamp(torch.floor((v + r) / TILE) + 1, 0, tiles_y).long()
        ok = (z > 0.2) & torch.isfinite(det) & (det > 0) & (det <= 1e30) & (tx1 > tx0) & (ty1 > ty0)
    return dict(u=u, v=v, conic=conic, rgb=rgb, opacity=opacity, z=z, ok=ok, tx0=tx0, tx1=tx1, ty0=ty0, ty1=ty1,
                tiles_x=tiles_x, tiles_y=tiles_y)


def bin_pairs(torch, p):
    """(Gaussian, tile) pairs sorted by tile, then f32 depth, then Gaussian index."""
    idx = torch.nonzero(p["ok"]).squeeze(1)
    wx = (p["tx1"] - p["tx0"])[idx]
    wy = (p["ty1"] - p["ty0"])[idx]
    counts = wx * wy
    g = torch.repeat_interleave(idx, counts)
    start = torch.cumsum(counts, 0) - counts
    local = torch.arange(g.numel()) - torch.repeat_interleave(start, counts)
    wxg = torch.repeat_interleave(wx, counts)
    tile = (p["ty0"][g] + local // wxg) * p["tiles_x"] + p["tx0"][g] + local % wxg
    order = torch.sort(p["z"].detach()[g], stable=True).indices  # g ascending, so ties stay by index
    g, tile = g[order], tile[order]
    order = torch.sort(tile, stable=True).indices
    return g[order], tile[order]


def composite_chunk(torch, s, u, v, conic, rgb, opacity, z, g, tile, tiles_x):
    """The pixels of the tiles of one chunk of sorted pairs: [tiles, 256] rgb, log T, depth sums."""
    uniq, seg = torch.unique_consecutive(tile, return_inverse=True)
    lane = torch.arange(TILE * TILE)
    px = ((uniq % tiles_x) * TILE)[:, None] + lane % TILE  # [tiles, 256]
    py = ((uniq // tiles_x) * TILE)[:, None] + lane // TILE
    dx = u[g][:, None] - (px[seg] + 0.5)
    dy = v[g][:, None] - (py[seg] + 0.5)
    A, B, C = conic[g].unbind(-1)
    power = 0.5 * (A[:, None] * dx * dx + C[:, None] * dy * dy) + B[:, None] * dx * dy
    alpha = torch.clamp(opacity[g][:, None] * torch.exp(-power), max=0.99)
    used = alpha >= 1.0 / 255
    alpha = torch.where(used, alpha, torch.zeros_like(alpha))
    log1m = torch.log1p(-alpha)
    cs = torch.cumsum(log1m, 0)
    first = torch.searchsorted(tile, uniq)  # each tile's first pair in this chunk
    base = torch.where((first > 0)[:, None], cs[(first - 1).clamp_min(0)], torch.zeros_like(cs[first]))
    incl = cs - base[seg]
    added = used & (incl >= math.log(1e-4))
    w = torch.where(added, alpha * torch.exp(incl - log1m), torch.zeros_like(alpha))
    n = uniq.numel()
    out_rgb = torch.zeros(n, TILE * TILE, 3).index_add(0, seg, w[:, :, None] * rgb[g][:, None, :])
    log_t = torch.zeros(n, TILE * TILE).index_add(0, seg, torch.where(added, log1m, torch.zeros_like(log1m)))
    wsum = torch.zeros(n, TILE * TILE).index_add(0, seg, w)
    wz = torch.zeros(n, TILE * TILE).index_add(0, seg, w * z[g][:, None])
    return uniq, out_rgb, log_t, wsum, wz


def render(torch, s, prm, view, max_pairs, checkpoint):
    p = project(torch, s, prm["means"], prm["log_scales"], prm["quats"], prm["logits"], prm["sh"], view)
    g, tile = bin_pairs(torch, p)
    tiles_x, tiles_y = p["tiles_x"], p["tiles_y"]
    n_tiles = tiles_x * tiles_y
    rgb_t = torch.zeros(n_tiles, TILE * TILE, 3)
    log_t = torch.zeros(n_tiles, TILE * TILE)
    wsum = torch.zeros(n_tiles, TILE * TILE)
    wz = torch.zeros(n_tiles, TILE * TILE)
    # Chunks of whole tiles, at most max_pairs pairs each (a tile with more is a chunk of its own).
    ends = torch.searchsorted(tile, torch.arange(n_tiles), right=True).tolist()
    lo = 0
    while lo < g.numel():
        hi = lo
        first_tile = int(tile[lo])
        t = first_tile
        while t < n_tiles and (ends[t] - lo <= max_pairs or hi == lo):
            hi = ends[t]
            t += 1
        args = (p["u"], p["v"], p["conic"], p["rgb"], p["opacity"], p["z"])
        gi, ti = g[lo:hi], tile[lo:hi]
        if checkpoint:
            import torch.utils.checkpoint as cp
            # (gi, ti bound now: the backward recomputes this chunk after the loop has moved on)
            uniq, a, b, c, d = cp.checkpoint(lambda *x, gi=gi, ti=ti: composite_chunk(torch, s, *x, gi, ti, tiles_x),
                                             *args, use_reentrant=False)
        else:
            uniq, a, b, c, d = composite_chunk(torch, s, *args, gi, ti, tiles_x)
        rgb_t = rgb_t.index_add(0, uniq, a)
        log_t = log_t.index_add(0, uniq, b)
        wsum = wsum.index_add(0, uniq, c)
        wz = wz.index_add(0, uniq, d)
        lo = hi

    def image_of(x, ch):  # [tiles, 256, ch] -> [H, W, ch]
        x = x.view(tiles_y, tiles_x, TILE, TILE, ch).permute(0, 2, 1, 3, 4).reshape(tiles_y * TILE, tiles_x * TILE, ch)
        return x[: s["h"], : s["w"]]

    T = torch.exp(log_t)
    image = image_of(rgb_t + T[:, :, None] * prm["background"], 3)
    alpha = image_of(1 - T[:, :, None], 1)[..., 0]
    depth = image_of(torch.where(wsum > 0, wz / torch.where(wsum > 0, wsum, torch.ones_like(wsum)),
                                 torch.zeros_like(wsum))[:, :, None], 1)[..., 0]
    return image, alpha, depth, g.numel()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-pairs", type=int, default=16384, help="pairs per chunk (x 256 pixels)")
    ap.add_argument("--max-gib", type=float, default=8.0, help="checkpoint chunks when the saved tensors exceed this")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__} (CPU, {torch.get_num_threads()} threads)", flush=True)
    for sub in sorted(os.listdir(a.dir), key=lambda x: int(x[1:]) if x[1:].isdigit() else 0):
        s = load(os.path.join(a.dir, sub))
        prm = {k: torch.from_numpy(np.ascontiguousarray(s[k])) for k in
               ("means", "log_scales", "quats", "logits", "sh", "background")}
        view = torch.eye(4)
        with torch.no_grad():
            image, alpha, depth, pairs = render(torch, s, prm, view, a.max_pairs, False)
        mine = image.numpy()
        rlx_image = os.path.join(a.dir, sub, "image.f32")
        if os.path.exists(rlx_image):
            theirs = np.fromfile(rlx_image, dtype="<f4").reshape(mine.shape)
            diff = np.abs(mine - theirs)
            print(f"torch-cpu vs rlx image n={s['n']}: max |difference| {diff.max():.3g}, mean {diff.mean():.3g}, "
                  f"{(diff > 1e-3).mean() * 100:.4f}% of values beyond 1e-3", flush=True)
            print(f"RESULT splat_torchcpu_vs_rlx gaussians={s['n']} max_diff={diff.max():.4g} "
                  f"mean_diff={diff.mean():.4g} beyond_1e-3={(diff > 1e-3).mean():.6f}", flush=True)

        def forward():
            with torch.no_grad():
                render(torch, s, prm, view, a.max_pairs, False)

        tf = median_ms(a.reps, forward)
        # ~14 saved [pairs, 256] f32 tensors per chunk under autograd
        saved_gib = pairs * 256 * 4 * 14 / 2**30
        ckpt = saved_gib > a.max_gib
        params = {k: v.clone().requires_grad_(k != "background") for k, v in prm.items()}

        def forward_backward():
            for v in params.values():
                v.grad = None
            image, alpha, depth, _ = render(torch, s, params, view, a.max_pairs, ckpt)
            (image.sum() + alpha.sum() + depth.sum()).div(s["w"] * s["h"]).backward()

        tb = median_ms(a.reps, forward_backward)
        print(f"torch-cpu n={s['n']} {s['w']}x{s['h']} pairs={pairs}  forward {tf:9.1f} ms   "
              f"forward+backward {tb:9.1f} ms{'   (chunks checkpointed)' if ckpt else ''}", flush=True)
        print(f"RESULT splat_torchcpu gaussians={s['n']} width={s['w']} height={s['h']} pairs={pairs} "
              f"forward_ms={tf:.3f} forward_backward_ms={tb:.3f} checkpointed={int(ckpt)} threads={a.threads} "
              f"reps={a.reps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
