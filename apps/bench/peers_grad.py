#!/usr/bin/env python3
"""PyTorch's side of `rlx-bench grad` (docs/benchmarks.md): forward and forward+backward time
of the same two models, eager, f32, medians of --reps runs after warm-up.
    python3 apps/bench/peers_grad.py [--threads 2] [--reps 30] [--device cpu|cuda]
"""
import argparse
import json
import statistics
import time

import torch


class Block(torch.nn.Module):
    def __init__(self, d=384, heads=6):
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q, self.k, self.v, self.proj = (torch.nn.Linear(d, d) for _ in range(4))
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        L, D = x.shape
        h = self.ln1(x)
        split = lambda t: t.reshape(L, self.h, D // self.h).permute(1, 0, 2)
        a = torch.nn.functional.scaled_dot_product_attention(split(self.q(h)), split(self.k(h)), split(self.v(h)),
                                                             is_causal=True)
        x1 = x + self.proj(a.permute(1, 0, 2).reshape(L, D))
        return x1 + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x1))))


def timeit(f, reps, sync):
    for _ in range(3):
        f()
    sync()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        sync()
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = a.device
    sync = (lambda: torch.cuda.synchronize()) if dev == "cuda" else (lambda: None)
    mlp = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
    x, y = torch.randn(128, 784, device=dev), torch.randint(0, 10, (128,), device=dev)
    ce = torch.nn.CrossEntropyLoss()
    stack = torch.nn.Sequential(*[Block() for _ in range(4)]).to(dev)
    xs = torch.randn(128, 384, device=dev)
    models = {"mlp": (mlp, lambda: ce(mlp(x), y)), "transformer": (stack, lambda: stack(xs).mean())}
    for name, (model, loss) in models.items():
        with torch.no_grad():
            tf = timeit(loss, a.reps, sync)

        def fb():
            model.zero_grad(set_to_none=True)
            loss().backward()

        tb = timeit(fb, a.reps, sync)
        print(json.dumps({"peer": "pytorch-eager", "model": name, "device": dev, "threads": a.threads,
                          "forward_ms": tf * 1e3, "forward_backward_ms": tb * 1e3, "ratio": tb / tf,
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
