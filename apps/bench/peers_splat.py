#!/usr/bin/env python3
"""gsplat's rasterization on the scenes `rlx-bench splat --dump DIR` wrote (apps/bench/splat.cpp).

    python3 apps/bench/peers_splat.py DIR [--reps 20]

For each DIR/n*/ scene: the median time of gsplat.rasterization forward (under no_grad) and of
forward + backward (gradients of means, log-scales, quaternions, opacity logits and SH, as
rlx's splat_render_backward computes them), f32, SH degree 3, 16 x 16 tiles, 0.3 px^2 blur,
near plane 0.2, expected depth rendered beside RGB ("RGB+ED") over the same background; peak
device memory from torch.cuda.max_memory_allocated beyond the inputs. packed=False and
packed=True both. Also compares gsplat's image with the one rlx rendered (image.f32): the two
follow the same conventions (docs/splat.md), so they differ by rounding, threshold tests decided
differently in f32, and gsplat's own choices where they differ (e.g. its screen radius).
Prints RESULT lines like rlx-bench's.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np


def load(d):
    with open(os.path.join(d, "camera.txt")) as f:
        n, k, w, h, fx, fy, cx, cy = f.read().split()
    n, k, w, h = int(n), int(k), int(w), int(h)
    fx, fy, cx, cy = float(fx), float(fy), float(cx), float(cy)

    def arr(name, shape):
        return np.fromfile(os.path.join(d, name), dtype="<f4").reshape(shape)

    return dict(n=n, k=k, w=w, h=h, fx=fx, fy=fy, cx=cx, cy=cy, means=arr("means.f32", (n, 3)),
                log_scales=arr("log_scales.f32", (n, 3)), quats=arr("quats.f32", (n, 4)),
                logits=arr("opacity_logits.f32", (n,)), sh=arr("sh.f32", (n, k, 3)),
                background=arr("background.f32", (3,)))


def median_ms(reps, f, sync=lambda: None):
    """Median milliseconds of f over reps runs after a warm-up; sync() waits for the device."""
    f()
    sync()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        sync()
        t.append(time.perf_counter() - t0)
    return statistics.median(t) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    try:
        import torch
        import gsplat
    except ImportError as e:
        print(f"peers_splat: {e}: gsplat not timed", file=sys.stderr)
        return 0
    dev = torch.device("cuda")
    print(f"gsplat {gsplat.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    for sub in sorted(os.listdir(a.dir), key=lambda s: int(s[1:]) if s[1:].isdigit() else 0):
        s = load(os.path.join(a.dir, sub))
        t = {k: torch.from_numpy(np.ascontiguousarray(s[k])).to(dev)
             for k in ("means", "log_scales", "quats", "logits", "sh", "background")}
        viewmat = torch.eye(4, device=dev)[None]
        K = torch.tensor([[s["fx"], 0, s["cx"]], [0, s["fy"], s["cy"]], [0, 0, 1]], device=dev, dtype=torch.float32)[None]
        # The background is composited here (C + (1 - alpha) bg, what gsplat's `backgrounds` does)
        # rather than passed in: gsplat 1.5.3's packed path asserts on the background's shape
        # in the RGB+ED mode. One small elementwise kernel more in gsplat's time.
        def render(p, packed):
            colors, alphas, _ = gsplat.rasterization(
                p["means"], p["quats"], torch.exp(p["log_scales"]), torch.sigmoid(p["logits"]), p["sh"], viewmat, K,
                s["w"], s["h"], near_plane=0.2, eps2d=0.3, sh_degree=3, packed=packed, tile_size=16,
                render_mode="RGB+ED")
            rgb = colors[..., :3] + (1 - alphas) * p["background"]
            return torch.cat([rgb, colors[..., 3:]], dim=-1), alphas

        rlx_image = os.path.join(a.dir, sub, "image.f32")
        if os.path.exists(rlx_image):
            with torch.no_grad():
                colors, _ = render(t, False)
            mine = colors[0, ..., :3].float().cpu().numpy()
            theirs = np.fromfile(rlx_image, dtype="<f4").reshape(mine.shape)
            d = np.abs(mine - theirs)
            print(f"gsplat vs rlx image n={s['n']}: max |difference| {d.max():.3g}, mean {d.mean():.3g}, "
                  f"{(d > 1e-2).mean() * 100:.3f}% of values beyond 1e-2", flush=True)
            print(f"RESULT splat_gsplat_vs_rlx gaussians={s['n']} max_diff={d.max():.4g} mean_diff={d.mean():.4g} "
                  f"beyond_1e-2={(d > 1e-2).mean():.6f}", flush=True)
        for packed in (False, True):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()

            def forward():
                with torch.no_grad():
                    render(t, packed)

            tf = median_ms(a.reps, forward, torch.cuda.synchronize)
            peak_f = (torch.cuda.max_memory_allocated() - base) / 2**20
            params = {k: v.clone().requires_grad_(k != "background") for k, v in t.items()}
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()

            def forward_backward():
                for v in params.values():
                    v.grad = None
                colors, alphas = render(params, packed)
                (colors.sum() + alphas.sum()).div(s["w"] * s["h"]).backward()

            tb = median_ms(a.reps, forward_backward, torch.cuda.synchronize)
            peak_b = (torch.cuda.max_memory_allocated() - base) / 2**20
            print(f"gsplat n={s['n']} {s['w']}x{s['h']} packed={packed}  forward {tf:9.3f} ms   "
                  f"forward+backward {tb:9.3f} ms   peak memory beyond the inputs {peak_f:.0f} / {peak_b:.0f} MiB",
                  flush=True)
            print(f"RESULT splat_gsplat gaussians={s['n']} width={s['w']} height={s['h']} packed={int(packed)} "
                  f"forward_ms={tf:.4f} forward_backward_ms={tb:.4f} peak_forward_mib={peak_f:.1f} "
                  f"peak_backward_mib={peak_b:.1f} reps={a.reps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
