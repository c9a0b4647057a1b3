#!/usr/bin/python3
"""Peer figures for rlx-bench: the same fused expression, the same GEMMs and the same sorts
in NumPy (+ scipy.special.erf) and PyTorch, with 2 threads, medians of repeated runs.

Run with Debian's interpreter (python3-numpy, python3-scipy, python3-torch):
    /usr/bin/python3 apps/bench/peers.py [--only fused,gemm,sort] [--reps N]
OpenBLAS picks its kernels at load time; compare OPENBLAS_CORETYPE unset and
OPENBLAS_CORETYPE=SkylakeX (the script prints the core each library reports).
"""
import argparse
import ctypes
import math
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import scipy.special  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


def median_time(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def blas_cores():
    """The BLAS libraries mapped into this process and the kernel core each reports."""
    seen = {}
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            base = os.path.basename(path)
            if path.startswith("/") and path not in seen and (
                    base.startswith(("libopenblas", "libblas", "libmkl", "libblis", "libdnnl"))):
                core = "?"
                try:
                    lib = ctypes.CDLL(path)
                    fn = lib.openblas_get_corename
                    fn.restype = ctypes.c_char_p
                    core = fn().decode()
                except (OSError, AttributeError):
                    pass
                seen[path] = core
    return seen


def bench_fused(log2s, reps):
    sqrt1_2 = 1.0 / math.sqrt(2.0)
    for lg in log2s:
        n = 1 << lg
        rng = np.random.default_rng(1)
        x = rng.uniform(-3, 3, n).astype(np.float32)
        a, b = np.float32(0.75), np.float32(0.125)
        y = np.empty_like(x)
        t = np.empty_like(x)
        dst = np.empty_like(x)
        dst.fill(0)
        y.fill(0)
        t.fill(0)
        r = reps or (15 if lg >= 24 else 200)

        def numpy_gelu():  # into preallocated buffers, no temporaries: the fastest NumPy form
            np.multiply(x, a, out=y)
            np.add(y, b, out=y)
            np.multiply(y, sqrt1_2, out=t)
            scipy.special.erf(t, out=t)
            np.add(t, 1.0, out=t)
            np.multiply(t, y, out=t)
            np.multiply(t, 0.5, out=t)

        xt = torch.from_numpy(x)
        at, bt = torch.tensor(0.75), torch.tensor(0.125)

        def torch_gelu():
            return torch.nn.functional.gelu(xt * at + bt)

        def copy():
            np.copyto(dst, x)

        tn = median_time(numpy_gelu, r)
        tt = median_time(torch_gelu, r)
        tc = median_time(copy, r)
        gb = lambda s: 8.0 * n / s / 1e9  # noqa: E731  (8 bytes per element: read + write)
        print(f"fused gelu(x*a+b) erf form, n=2^{lg} f32")
        print(f"  numpy+scipy.erf  {tn * 1e3:9.3f} ms  {gb(tn):7.2f} GB/s")
        print(f"  torch gelu       {tt * 1e3:9.3f} ms  {gb(tt):7.2f} GB/s")
        print(f"  numpy copyto     {tc * 1e3:9.3f} ms  {gb(tc):7.2f} GB/s")
        print(f"RESULT peer_fused log2n={lg} numpy_ms={tn * 1e3:.3f} torch_ms={tt * 1e3:.3f} "
              f"numpy_gbps={gb(tn):.2f} torch_gbps={gb(tt):.2f} copy_gbps={gb(tc):.2f}", flush=True)


def bench_gemm(sizes, reps):
    for dt, tdt, name in [(np.float32, torch.float32, "f32"), (np.float64, torch.float64, "f64")]:
        for n in sizes:
            rng = np.random.default_rng(2)
            A = rng.uniform(-3, 3, (n, n)).astype(dt)
            B = rng.uniform(-3, 3, (n, n)).astype(dt)
            C = np.empty((n, n), dt)
            At, Bt = torch.from_numpy(A), torch.from_numpy(B)
            Ct = torch.empty((n, n), dtype=tdt)
            r = reps or (5 if n >= 4096 else 7 if n >= 2048 else 15)
            tn = median_time(lambda: np.matmul(A, B, out=C), r, warmup=1)
            tt = median_time(lambda: torch.mm(At, Bt, out=Ct), r, warmup=1)
            fl = lambda s: 2.0 * n ** 3 / s / 1e9  # noqa: E731
            print(f"{name} n={n:<5} numpy {tn * 1e3:9.3f} ms {fl(tn):7.1f} GFLOP/s   torch {tt * 1e3:9.3f} ms {fl(tt):7.1f} GFLOP/s")
            print(f"RESULT peer_gemm dtype={name} n={n} numpy_gflops={fl(tn):.1f} torch_gflops={fl(tt):.1f}", flush=True)


def bench_sort(reps):
    """Values and indices, stable, as rlx-bench --only sort (same shapes, uniform(-3, 3))."""
    r = reps or 5
    rng = np.random.default_rng(5)
    for shape, dt, name in [((1 << 24,), np.float32, "f32"), ((4096, 4096), np.float32, "f32"),
                            ((1 << 22,), np.float64, "f64")]:
        x = rng.uniform(-3, 3, shape).astype(dt)
        xt = torch.from_numpy(x)

        def numpy_sort():
            i = np.argsort(x, axis=-1, kind="stable")
            return np.take_along_axis(x, i, axis=-1), i
        tn = median_time(numpy_sort, r, warmup=1)
        tt = median_time(lambda: torch.sort(xt, dim=-1, stable=True), r, warmup=1)
        label = "x".join(str(d) for d in shape)
        print(f"sort {name} [{label}] values + indices: numpy argsort(stable)+take {tn * 1e3:9.1f} ms   "
              f"torch.sort(stable) {tt * 1e3:9.1f} ms")
        print(f"RESULT peer_sort dtype={name} shape={label} numpy_ms={tn * 1e3:.1f} torch_ms={tt * 1e3:.1f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="fused,gemm")
    p.add_argument("--reps", type=int, default=0)
    p.add_argument("--fused-log2", default="26,20")
    p.add_argument("--gemm-sizes", default="512,1024,2048,4096")
    a = p.parse_args()
    only = a.only.split(",")
    print(f"numpy {np.__version__}, scipy {scipy.__version__}, torch {torch.__version__} "
          f"(torch threads {torch.get_num_threads()}), OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    # Touch both BLAS users so their libraries are mapped, then report the cores.
    np.ones((64, 64), np.float32) @ np.ones((64, 64), np.float32)
    torch.ones(64, 64) @ torch.ones(64, 64)
    for path, core in blas_cores().items():
        print(f"  BLAS mapped: {path} (openblas_get_corename: {core})")
    if "fused" in only:
        bench_fused([int(s) for s in a.fused_log2.split(",")], a.reps)
    if "gemm" in only:
        bench_gemm([int(s) for s in a.gemm_sizes.split(",")], a.reps)
    if "sort" in only:
        bench_sort(a.reps)


if __name__ == "__main__":
    main()
