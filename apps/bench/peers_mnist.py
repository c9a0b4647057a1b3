#!/usr/bin/env python3
"""The peers of `rlx train mnist` (docs/benchmarks.md): the same 784-128-10 ReLU MLP (or LeNet with --model cnn),
inputs standardised with (0.1307, 0.3081), SGD with momentum 0.9, batch 128, the last
partial batch dropped, trained with PyTorch (eager, and on CUDA also replayed as a CUDA
graph) and with a hand-written NumPy forward/backward. Prints one JSON line per peer:
training images per second (median of the epochs after the first) and test accuracy.

    python3 apps/bench/peers_mnist.py [--data data/mnist] [--epochs 2] [--threads 2] [--device cpu|cuda]
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np


def idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(d):
    x = idx(os.path.join(d, "train-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255
    y = idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    tx = idx(os.path.join(d, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255
    ty = idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    norm = lambda a: (a - 0.1307) / 0.3081
    return norm(x).astype(np.float32), y, norm(tx).astype(np.float32), ty


def numpy_mlp(x, y, tx, ty, epochs, batch, lr, seed):
    rng = np.random.default_rng(seed)
    b1, b2 = 1 / np.sqrt(784), 1 / np.sqrt(128)
    W1 = rng.uniform(-b1, b1, (128, 784)).astype(np.float32)
    c1 = rng.uniform(-b1, b1, 128).astype(np.float32)
    W2 = rng.uniform(-b2, b2, (10, 128)).astype(np.float32)
    c2 = rng.uniform(-b2, b2, 10).astype(np.float32)
    params = [W1, c1, W2, c2]
    bufs = [np.zeros_like(p) for p in params]
    rates = []
    for e in range(epochs):
        order = rng.permutation(len(x))
        t0 = time.perf_counter()
        steps = len(x) // batch
        for k in range(steps):
            i = order[k * batch:(k + 1) * batch]
            xb, yb = x[i], y[i]
            h = xb @ W1.T + c1
            a = np.maximum(h, 0)
            z = a @ W2.T + c2
            z = z - z.max(1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(1, keepdims=True)
            p[np.arange(batch), yb] -= 1
            dz = p / batch
            gW2 = dz.T @ a
            gc2 = dz.sum(0)
            da = dz @ W2
            dh = da * (h > 0)
            gW1 = dh.T @ xb
            gc1 = dh.sum(0)
            for prm, g, buf in zip(params, [gW1, gc1, gW2, gc2], bufs):
                buf *= 0.9
                buf += g
                prm -= lr * buf
        rates.append(steps * batch / (time.perf_counter() - t0))
    acc = float(((np.maximum(tx @ W1.T + c1, 0) @ W2.T + c2).argmax(1) == ty).mean())
    return rates, acc


def lenet():
    import torch
    n = torch.nn
    return n.Sequential(n.Unflatten(1, (1, 28, 28)), n.Conv2d(1, 6, 5, padding=2), n.ReLU(), n.MaxPool2d(2),
                        n.Conv2d(6, 16, 5), n.ReLU(), n.MaxPool2d(2), n.Flatten(), n.Linear(400, 120), n.ReLU(),
                        n.Linear(120, 84), n.ReLU(), n.Linear(84, 10))


def torch_mlp(x, y, tx, ty, epochs, batch, lr, seed, device, graph, arch="mlp"):
    import torch
    torch.manual_seed(seed)
    if arch == "cnn":
        model = lenet().to(device)
    else:
        model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    X = torch.from_numpy(x).to(device)
    Y = torch.from_numpy(y).to(device)
    steps = len(x) // batch
    sync = (lambda: torch.cuda.synchronize()) if device == "cuda" else (lambda: None)
    if graph:
        # The whole step captured once and replayed: static inputs, the data resident on the device.
        sx = torch.zeros(batch, 784, device=device)
        sy = torch.zeros(batch, dtype=torch.int64, device=device)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                loss_fn(model(sx), sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = loss_fn(model(sx), sy)
            static_loss.backward()
            opt.step()
    rates = []
    gen = torch.Generator(device=device).manual_seed(seed)
    for e in range(epochs):
        order = torch.randperm(len(x), device=device, generator=gen)
        sync()
        t0 = time.perf_counter()
        for k in range(steps):
            i = order[k * batch:(k + 1) * batch]
            if graph:
                sx.copy_(X[i])
                sy.copy_(Y[i])
                g.replay()
            else:
                opt.zero_grad(set_to_none=True)
                loss_fn(model(X[i]), Y[i]).backward()
                opt.step()
        sync()
        rates.append(steps * batch / (time.perf_counter() - t0))
    with torch.no_grad():
        acc = float((model(torch.from_numpy(tx).to(device)).argmax(1).cpu().numpy() == ty).mean())
    return rates, acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "data", "mnist"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-numpy", action="store_true")
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    a = ap.parse_args()
    x, y, tx, ty = load(a.data)
    med = lambda r: float(np.median(r[1:] if len(r) > 1 else r))
    import torch
    torch.set_num_threads(a.threads)
    runs = [("pytorch-eager", False)] + ([("pytorch-cuda-graph", True)] if a.device == "cuda" else [])
    for name, graph in runs:
        r, acc = torch_mlp(x, y, tx, ty, a.epochs, a.batch, a.lr, a.seed, a.device, graph, a.model)
        print(json.dumps({"peer": name, "model": a.model, "device": a.device, "threads": a.threads, "img_per_s": med(r),
                          "test_accuracy": acc, "torch": torch.__version__}))
    if not a.skip_numpy and a.model == "mlp":
        r, acc = numpy_mlp(x, y, tx, ty, a.epochs, a.batch, a.lr, a.seed)
        print(json.dumps({"peer": "numpy", "img_per_s": med(r), "test_accuracy": acc, "numpy": np.__version__}))


if __name__ == "__main__":
    main()
