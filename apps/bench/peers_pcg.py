#!/usr/bin/python3
# SciPy's CG with a Jacobi preconditioner on the same problem as `rlx-bench pcg`:
# 3D 7-point Poisson n^3, b = ones, x0 = 0, stop at ||r|| <= rtol ||b||. Median of --reps.
# Run with Debian's python (python3-scipy): /usr/bin/python3 apps/bench/peers_pcg.py --n 100
import argparse, time
import numpy as np
import scipy, scipy.sparse as sp, scipy.sparse.linalg as spla

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=100)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--rtol", type=float, default=1e-8)
a = ap.parse_args()
n = a.n
T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
I = sp.identity(n)
A = (sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T)).tocsr()
b = np.ones(A.shape[0])
dinv = 1.0 / A.diagonal()
M = spla.LinearOperator(A.shape, matvec=lambda r: dinv * r)
times, iters = [], 0
for _ in range(a.reps):
    count = [0]
    def cb(xk):
        count[0] += 1
    t0 = time.perf_counter()
    try:
        x, info = spla.cg(A, b, rtol=a.rtol, M=M, maxiter=100000, callback=cb)
    except TypeError:  # SciPy < 1.12 calls it tol
        x, info = spla.cg(A, b, tol=a.rtol, M=M, maxiter=100000, callback=cb)
    times.append(time.perf_counter() - t0)
    iters = count[0]
times.sort()
t = times[len(times) // 2]
print(f"  SciPy {scipy.__version__} cg+jacobi       {t:9.3f} s  {iters:5d} iterations  {1e3 * t / max(iters, 1):7.3f} ms/iteration")
print(f"RESULT pcg_scipy n={n} s={t:.4f} it={iters}")
