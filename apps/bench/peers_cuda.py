#!/usr/bin/env python3
"""Peers of `rlx-bench cuda` on the same GPU, same sizes: PyTorch and CuPy.

  copy   torch device-to-device copy of 1 GiB (read + write bytes)
  fused  gelu(x*a+b) f32 2^28: PyTorch eager (three kernels) and torch.compile (one)
  gemm   8192^3 f32 (TF32 off) and bf16 through torch.matmul
  spmv   f64 CSR 3D Poisson 160^3 through cupyx.scipy.sparse (cuSPARSE)
  pcg    cupyx.scipy.sparse.linalg.cg with a Jacobi preconditioner on 3D Poisson 128^3,
         a fixed 200 iterations (tol=0), time per iteration
  sort   torch.sort(stable=True) of f32 [2^24] and of the rows of f32 [4096, 4096]
`peers_cuda.py [SECTION ...]` runs only those sections (default: all).
Medians of 20 timed runs after 3 warm-ups, CUDA events. Inputs are random, not zeros.
"""
import statistics
import sys
import time

import torch


def bench(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b))
    return statistics.median(t)


def poisson3d(n):
    import cupy as cp
    import cupyx.scipy.sparse as sp
    e = cp.ones(n, dtype=cp.float64)
    t = sp.diags([-e[:-1], 2 * e, -e[:-1]], [-1, 0, 1], format="csr")
    i = sp.identity(n, dtype=cp.float64, format="csr")
    a = sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(i, i), t)
    return a.tocsr()


def main():
    only = set(sys.argv[1:])
    unknown = only - {"copy", "fused", "gemm", "replay", "spmv", "pcg", "sort"}
    if unknown:
        sys.exit(f"peers_cuda.py: unknown section(s) {sorted(unknown)}")
    want = lambda name: not only or name in only
    dev = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
    if want("copy"):
        nbytes = 1 << 30
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev).random_()
        dst = torch.empty_like(src)
        ms = bench(lambda: dst.copy_(src))
        copy = 2 * nbytes / (ms * 1e-3) / 1e9
        print(f"copy    torch 1 GiB                      {ms:8.3f} ms  {copy:7.0f} GB/s")
        del src, dst
    if want("fused"):
        fused(dev)
    if want("gemm"):
        torch.backends.cuda.matmul.allow_tf32 = False
        m = 8192
        for dt in (torch.float32, torch.bfloat16):
            A = (torch.rand(m, m, device=dev) * 2 - 1).to(dt)
            B = (torch.rand(m, m, device=dev) * 2 - 1).to(dt)
            ms = bench(lambda: torch.matmul(A, B), reps=5)
            print(f"gemm    torch {str(dt):15s} 8192^3      {ms:8.3f} ms {2 * m**3 / ms / 1e9:6.1f} TFLOP/s")
            del A, B
    if want("replay"):
        replay(dev)
    if want("sort"):
        for shape in ((1 << 24,), (4096, 4096)):
            x = torch.rand(*shape, device=dev) * 2 - 1
            ms = bench(lambda: torch.sort(x, dim=-1, stable=True))
            name = "x".join(str(d) for d in shape)
            print(f"sort    torch f32 [{name}] stable       {ms:8.3f} ms  {x.numel() / (ms * 1e-3) / 1e9:6.2f} G elements/s")
    if want("spmv") or want("pcg"):
        sparse(want)


def fused(dev):
    n = 1 << 28
    x = torch.rand(n, device=dev) * 2 - 1
    a = torch.rand((), device=dev)
    b = torch.rand((), device=dev)
    f = lambda: torch.nn.functional.gelu(x * a + b)
    ms = bench(f)
    print(f"fused   torch eager gelu(x*a+b)          {ms:8.3f} ms  {8 * n / (ms * 1e-3) / 1e9:7.0f} GB/s (effective)")
    try:
        g = torch.compile(lambda x, a, b: torch.nn.functional.gelu(x * a + b))
        ms = bench(lambda: g(x, a, b))
        print(f"fused   torch.compile gelu(x*a+b)        {ms:8.3f} ms  {8 * n / (ms * 1e-3) / 1e9:7.0f} GB/s")
    except Exception as e:  # noqa: BLE001 - report and go on
        print("fused   torch.compile unavailable:", type(e).__name__, str(e)[:120])


def replay(dev):
    # The 100-op program of `rlx-bench cuda` (replay): 20 rounds of y = tanh(y W + b) * 0.5 + y.
    m = 256
    x0 = torch.rand(m, m, device=dev) * 2 - 1
    ws = [torch.rand(m, m, device=dev) * 2 - 1 for _ in range(20)]
    bs = [torch.rand(m, device=dev) * 2 - 1 for _ in range(20)]

    def prog():
        y = x0
        for w, b in zip(ws, bs):
            y = torch.tanh(y @ w + b) * 0.5 + y
        return y
    ms = bench(prog)
    print(f"replay  torch eager 100-op program        {ms:8.3f} ms")
    try:
        gr = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                prog()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(gr):
            prog()
        ms = bench(gr.replay)
        print(f"replay  torch CUDA graph 100-op program   {ms:8.3f} ms")
    except Exception as e:  # noqa: BLE001
        print("replay  torch CUDA graph unavailable:", type(e).__name__, str(e)[:120])


def sparse(want):
    try:
        import cupy as cp
        import cupyx.scipy.sparse.linalg as la
    except ImportError as e:
        print("cupy unavailable:", e)
        return
    if want("spmv"):
        A = poisson3d(160)
        xv = cp.random.rand(A.shape[1]) * 2 - 1
        ms = bench(lambda: A @ xv)
        nnz, rows = A.nnz, A.shape[0]
        byts = nnz * 12 + (rows + 1) * 4 + 16 * rows
        print(f"spmv    cupyx f64 poisson3d:160 ({rows} rows, {nnz} nnz) {ms:7.3f} ms {byts / ms / 1e6:6.0f} GB/s")
    if not want("pcg"):
        return

    A = poisson3d(128)
    bvec = cp.ones(A.shape[0])
    dinv = 1.0 / A.diagonal()
    M = la.LinearOperator(A.shape, matvec=lambda v: dinv * v, dtype=cp.float64)
    def cg(it):
        try:
            return la.cg(A, bvec, rtol=0, atol=0, maxiter=it, M=M)
        except TypeError:  # older CuPy: tol instead of rtol
            return la.cg(A, bvec, tol=0, atol=0, maxiter=it, M=M)
    cg(5)
    cp.cuda.runtime.deviceSynchronize()
    per = []
    for _ in range(3):
        t0 = time.perf_counter()
        cg(200)
        cp.cuda.runtime.deviceSynchronize()
        per.append((time.perf_counter() - t0) / 200)
    print(f"pcg     cupyx cg+jacobi poisson3d:128, 200 iterations: {1e3 * statistics.median(per):.3f} ms per iteration")


if __name__ == "__main__":
    main()
