#!/usr/bin/python3
"""SciPy's figure for `rlx-bench spmv`: y = A @ x in f64 with A the 3D 7-point Poisson
matrix with n^3 rows, generated exactly as solvers/sparse/poisson.cpp does (grid point
(x, y, z) is row x + n*y + n*n*z; 6 on the diagonal, -1 per grid neighbour; int32
indices, sorted columns) and x[i] = 1 + (i % 7) / 8, so `sum y` matches rlx-bench's.

Run with Debian's interpreter (python3-scipy):
    /usr/bin/python3 apps/bench/peers_sparse.py [--sizes 100,200] [--reps N]
scipy.sparse's CSR matvec (csr_matvec in sparsetools) runs on one thread. GB/s counts
the bytes as rlx-bench does: values + col_idx + row_ptr + x + y, each once. Timing is
warm, as in rlx-bench: bursts of 4 back-to-back products, the first of each dropped.
"""
import argparse
import statistics
import time

import numpy as np
import scipy
import scipy.sparse as sp


def poisson3d(n):
    """The 7-point Laplacian: kron sums with the x index varying fastest."""
    t = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")
    eye = sp.identity(n, format="csr")
    a = (sp.kron(eye, sp.kron(eye, t)) + sp.kron(eye, sp.kron(t, eye)) + sp.kron(t, sp.kron(eye, eye))).tocsr()
    a.sum_duplicates()
    a.sort_indices()
    a.indptr = a.indptr.astype(np.int32)
    a.indices = a.indices.astype(np.int32)
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,200")
    ap.add_argument("--reps", type=int, default=0, help="warm runs (default 60, or 20 above 50M nonzeros)")
    args = ap.parse_args()
    print(f"scipy {scipy.__version__}, numpy {np.__version__}: csr_matrix @ vector (one thread)")
    for n in [int(s) for s in args.sizes.split(",") if s]:
        t0 = time.perf_counter()
        a = poisson3d(n)
        gen = time.perf_counter() - t0
        rows, nnz = a.shape[0], a.nnz
        expect = rows + 2 * 3 * (n - 1) * n * n
        assert nnz == expect, (nnz, expect)
        x = 1.0 + (np.arange(rows) % 7) * 0.125
        nbytes = nnz * (8 + 4) + (rows + 1) * 4 + rows * 8 + rows * 8
        reps = args.reps or (20 if nnz > 50_000_000 else 60)
        times = []
        y = None
        while len(times) < reps:
            for b in range(4):
                t0 = time.perf_counter()
                y = a @ x
                t = time.perf_counter() - t0
                if b > 0:
                    times.append(t)
            time.sleep(0.001)
        med = statistics.median(times)
        print(f"spmv f64 3D Poisson n={n}: {rows} rows, {nnz} nnz, {nbytes / 1e6:.1f} MB moved per product "
              f"(built in {gen:.2f} s), {len(times)} warm runs")
        print(f"  scipy csr @ x   {med * 1e3:9.3f} ms  {nbytes / med / 1e9:7.2f} GB/s  (sum y = {y.sum():.10g})")
        print(f"RESULT scipy_spmv n={n} rows={rows} nnz={nnz} ms={med * 1e3:.3f} gbps={nbytes / med / 1e9:.2f} "
              f"checksum={y.sum():.10g}", flush=True)


if __name__ == "__main__":
    main()
