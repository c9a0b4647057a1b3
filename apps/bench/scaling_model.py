#!/usr/bin/env python3
"""Latency-bandwidth model of one distributed PCG iteration on the 3D 7-point Poisson N^3.

    T(p) = T_fixed + T_local(p) + T_halo(p) + T_reduce(p)

T_local   bytes one rank streams per iteration / that rank's share of the node's STREAM
          bandwidth (measured on the 16-core machine of docs/benchmarks.md);
T_halo    the neighbour exchange of the SpMV: a latency plus the bytes sent and received;
T_reduce  the all_reduce of the dot products: one latency per stage of a binary tree,
          ceil(log2 p) stages, the stages inside a node at the intra-node latency;
T_fixed   the per-iteration cost that does not depend on the rows (kernel dispatch).

The model, every constant and the tables it prints are explained in docs/scaling.md.
Standard library only; prints Markdown.

    python3 apps/bench/scaling_model.py                    # every table of docs/scaling.md
    python3 apps/bench/scaling_model.py --section calibrate
    python3 apps/bench/scaling_model.py --section strong --alpha-inter-us 5
"""
import argparse
import functools
import math

# ---------------------------------------------------------------------------- constants

# STREAM triad, GB/s, one process per core on the 16-core Xeon (tests/gpu/stream.c,
# docs/benchmarks.md "strong scaling on 16 cores"). Measured.
STREAM_GBS = {1: 13.1, 2: 25.5, 4: 48.0, 8: 82.2, 16: 91.9}

F64, I32 = 8, 4  # bytes of a value and of an index (poisson3d's CSR: f64 values, i32 indices)

# Measured solve times (s) and iteration counts, docs/benchmarks.md, sections "Distributed PCG
# against PETSc: strong scaling on 16 cores" and "Block Jacobi with ILU(0)'s factors stored
# apart". Each point records the code it timed, since the code changed between tables:
#   offd   "full": rlx's off-diagonal product was an out-of-place pass over every local row;
#          "inplace": it visits only the rows with ghost entries (PETSc's way, and rlx's now)
#   skew   True: rank 0's clock started before the other ranks had their rows (the timing
#          fixed later by a barrier), so the time includes part of the others' setup
#   where  which table, for the doc's calibration table
MEASURED = [
    # code, pc, N, p, seconds, iterations, offd, skew, where
    ("rlx", "jacobi", 128, 1, 11.09, 319, "inplace", False, "16-core table"),
    ("rlx", "jacobi", 128, 2, 6.92, 319, "full", True, "16-core table"),
    ("rlx", "jacobi", 128, 4, 3.79, 319, "full", True, "16-core table"),
    ("rlx", "jacobi", 128, 8, 3.12, 319, "full", True, "16-core table"),
    ("rlx", "jacobi", 128, 16, 1.07, 319, "full", False, "16-core table, after the barrier"),
    ("rlx", "jacobi", 128, 8, 2.183, 319, "inplace", False, "in-place re-run, other machine"),
    ("rlx", "jacobi", 128, 16, 1.701, 319, "inplace", False, "in-place re-run, other machine"),
    ("rlx", "jacobi", 200, 1, 68.23, 494, "inplace", False, "16-core table"),
    ("rlx", "jacobi", 200, 2, 38.09, 494, "full", False, "16-core table"),
    ("rlx", "jacobi", 200, 4, 24.51, 494, "full", True, "16-core table"),
    ("rlx", "jacobi", 200, 8, 15.67, 494, "full", True, "16-core table"),
    ("rlx", "jacobi", 200, 16, 9.05, 494, "full", True, "16-core table"),
    ("rlx", "bjacobi", 128, 1, 7.82, 120, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 128, 2, 5.11, 156, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 128, 4, 2.74, 146, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 128, 8, 1.38, 145, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 128, 16, 1.05, 150, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 200, 2, 36.55, 241, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 200, 4, 13.95, 220, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 200, 8, 10.80, 221, "inplace", False, "factors apart"),
    ("rlx", "bjacobi", 200, 16, 6.96, 234, "inplace", False, "factors apart"),
    ("petsc", "jacobi", 128, 1, 12.71, 319, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 128, 2, 5.69, 319, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 128, 4, 2.92, 319, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 128, 8, 2.02, 319, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 128, 16, 1.21, 319, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 128, 16, 0.90, 319, "inplace", False, "16-core table, later run"),
    ("petsc", "jacobi", 128, 8, 2.457, 319, "inplace", False, "re-run, other machine"),
    ("petsc", "jacobi", 128, 16, 1.346, 319, "inplace", False, "re-run, other machine"),
    ("petsc", "jacobi", 200, 1, 88.28, 494, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 200, 2, 41.32, 494, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 200, 4, 27.72, 494, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 200, 8, 14.05, 494, "inplace", False, "16-core table"),
    ("petsc", "jacobi", 200, 16, 8.80, 494, "inplace", False, "16-core table"),
    ("petsc", "bjacobi", 128, 1, 9.07, 120, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 128, 2, 4.80, 156, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 128, 4, 2.69, 146, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 128, 8, 1.48, 145, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 128, 16, 0.87, 150, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 200, 2, 32.39, 241, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 200, 4, 20.37, 220, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 200, 8, 10.11, 221, "inplace", False, "factors apart"),
    ("petsc", "bjacobi", 200, 16, 5.95, 234, "inplace", False, "factors apart"),
]

# Jacobi-PCG iterations grow as N (the condition number of the Poisson matrix grows as N^2):
# 319 at N = 128 and 494 at N = 200 measured, 2.49 and 2.47 per grid point. Point Jacobi
# does not depend on the partition, so the count holds at every rank count.
JACOBI_IT = {128: 319, 200: 494}
JACOBI_IT_PER_N = (319 / 128 + 494 / 200) / 2


def jacobi_iterations(N):
    return JACOBI_IT.get(round(N), JACOBI_IT_PER_N * N)


# ---------------------------------------------------------------------------- the bytes

def nnz_per_row(N):
    """Average stored entries per row of the 7-point N^3 matrix (boundary rows have fewer)."""
    return 7.0 - 6.0 / N


def matrix_bytes(nnz_row):
    """One pass over CSR rows: f64 value and i32 column per entry, one i32 row pointer."""
    return nnz_row * (F64 + I32) + I32


def trsv_bytes(entries_row):
    """One triangular solve over a factor stored apart: its entries and row pointers, the
    right-hand side read and the solution written."""
    return matrix_bytes(entries_row) + 2 * F64


# Vector streams (f64 reads + writes per row) of one iteration, outside the matrix and the
# triangular solves, each counted from the passes the code makes:
#   rlx-cg (what rlx's cpu device runs; RLX_PROFILE=1 lists the kernels): SpMV reads p and
#     writes q (2); p.q (2); jacobi: one fused pass x+=a p, r-=a q, z=r*dinv, r.z, r.r reads
#     x p r q dinv and writes x r z (8); bjacobi: x and r updates (6), then r.z and r.r after
#     the solves (2); p = z + b p (3).
#   cg-unfused (the same iteration with every operation its own pass, krylov.cpp's cg as
#     written): 2 + 2 + 3 + 3 + 3 (z = r*dinv) + 3 (r.z, r.r) + 3 = 19 with jacobi.
#   petsc-cg (KSPSolve_CG, unpreconditioned norm): VecAYPX p (3), MatMult (2), VecDot p.w
#     (2), VecAXPY x (3), VecWAXPY r (3), PCApply (3 with jacobi), VecNorm r (1), VecDot z.r (2).
#   pipelined (Ghysels-Vanroose PCG, vectors x r u w m n z q s p): SpMV n = A m (2); m = M w
#     (3 with jacobi); one fused pass updating z q s p x r u w and taking (r,u), (w,u) on the
#     new values: reads n z m q w s u p x r, writes z q s p x r u w (18).
#   single-reduction (Chronopoulos-Gear PCG, vectors x r u w p s): SpMV w = A u (2); (r,u)
#     and (w,u) in one pass (3); one fused pass p = u + b p, s = w + b s, x += a p, r -= a s
#     (reads u p w s x r, writes p s x r: 10), with jacobi also u = r*dinv in it (+2).
# Each entry: (streams with jacobi, streams with bjacobi besides the two solves).
VECTOR_STREAMS = {
    "rlx-cg": (15, 15),
    "cg-unfused": (19, 16),
    "petsc-cg": (19, 16),
    "pipelined": (23, 20),
    "single-reduction": (17, 15),
}

# all_reduce calls per iteration: rlx's cg completes p.q, then (r.z, r.r) in one message;
# PETSc's KSPCG calls VecDot, VecNorm, VecDot; the two reorganised methods need one.
REDUCTIONS = {"rlx-cg": 2, "cg-unfused": 2, "petsc-cg": 3, "pipelined": 1, "single-reduction": 1}


def bytes_per_row(method, pc, N):
    """Bytes one rank streams per local row per iteration, off-diagonal block excluded."""
    nz = nnz_per_row(N)
    jac, bjac = VECTOR_STREAMS[method]
    if pc == "jacobi":
        return matrix_bytes(nz) + jac * F64
    # ILU(0) of the 7-point matrix: L strictly lower (3 entries in an interior row), U upper
    # with the diagonal (4): 56 and 68 B per row per solve, as docs/benchmarks.md counts.
    lower = (nz - 1) / 2
    return matrix_bytes(nz) + bjac * F64 + trsv_bytes(lower) + trsv_bytes(lower + 1)


# ---------------------------------------------------------------------------- the machine

def node_bandwidth(cores):
    """STREAM GB/s of `cores` busy cores of one node, linear between the measured counts."""
    keys = sorted(STREAM_GBS)
    if cores >= keys[-1]:
        return STREAM_GBS[keys[-1]]
    for lo, hi in zip(keys, keys[1:]):
        if lo <= cores <= hi:
            return STREAM_GBS[lo] + (STREAM_GBS[hi] - STREAM_GBS[lo]) * (cores - lo) / (hi - lo)
    raise ValueError(cores)


def rank_bandwidth(p, a):
    """Bytes/s one rank gets: its share of the node, ranks filling a node before the next."""
    per_node = min(p, a.ranks_per_node)
    return node_bandwidth(per_node) * 1e9 / per_node


# ---------------------------------------------------------------------------- the halo

def divisors(p):
    """Divisors of p from its prime factors (trial division is quick for the powers of two
    and other smooth rank counts used here)."""
    primes, q, f = {}, p, 2
    while f * f <= q:
        while q % f == 0:
            primes[f] = primes.get(f, 0) + 1
            q //= f
        f += 1
    if q > 1:
        primes[q] = primes.get(q, 0) + 1
    divs = [1]
    for prime, k in primes.items():
        divs = [d * prime ** e for d in divs for e in range(k + 1)]
    return sorted(divs)


@functools.lru_cache(maxsize=None)
def best_grid(p):
    """px >= py >= pz with px*py*pz = p and the least surface of an N^3 box cut so."""
    best = None
    divs = divisors(p)
    for px in divs:
        for py in divs:
            if py > px or (p // px) % py:
                continue
            pz = p // (px * py)
            if pz > py:
                continue
            s = 1 / (px * py) + 1 / (py * pz) + 1 / (px * pz)
            if best is None or s < best[0]:
                best = (s, (px, py, pz))
    return best[1]


def box_faces(N, grid):
    """Values on the faces an interior sub-box of an N^3 grid cut by `grid` exchanges, and
    how many neighbours it has (a dimension cut in two gives one face, in more two)."""
    px, py, pz = grid
    dims = (N / px, N / py, N / pz)
    values, neighbours = 0.0, 0
    for d, pd in enumerate(grid):
        faces = 0 if pd == 1 else (1 if pd == 2 else 2)
        other = [dims[i] for i in range(3) if i != d]
        values += faces * other[0] * other[1]
        neighbours += faces
    return values, neighbours


def halo(N, p, decomposition):
    """(values one interior rank sends, neighbours, note) for one SpMV's exchange."""
    if p == 1:
        return 0.0, 0, ""
    if decomposition == "slab":
        rows = N ** 3 / p
        if p <= N:
            # Contiguous row blocks of whole planes: one N x N plane to each side.
            return (1 if p == 2 else 2) * N * N, 1 if p == 2 else 2, ""
        # A block thinner than one plane: every row's neighbours above and below belong to
        # other ranks (its whole block each way, from one or two ranks per side), and the
        # in-plane neighbours at its ends too: the surface is as large as the volume.
        return 2 * rows + 2 * min(N, rows), 6, "slab < 1 plane"
    values, neighbours = box_faces(N, best_grid(p))
    return values, neighbours, ""


def t_halo(N, p, decomposition, a):
    """Latency of the exchange (persistent messages posted together overlap their
    latencies) plus its bytes at the rank's memory share, or at the node's network link
    when that is the narrower, for the node's off-node traffic."""
    values, neighbours, _ = halo(N, p, decomposition)
    if neighbours == 0:
        return 0.0
    rank_bytes = 2 * values * F64  # sent and received, each copied through the rank's memory
    t_mem = rank_bytes / rank_bandwidth(p, a)
    if p <= a.ranks_per_node:
        return a.alpha_intra_us * 1e-6 + t_mem
    nodes = math.ceil(p / a.ranks_per_node)
    if decomposition == "slab":
        # A node holds consecutive slabs: only its outer two planes leave it.
        node_values = 2 * min(N * N, values)
    else:
        node_values, _ = box_faces(N, best_grid(nodes))
    t_net = node_values * F64 / (a.nic_gbs * 1e9)
    return a.alpha_inter_us * 1e-6 + max(t_mem, t_net)


# ---------------------------------------------------------------------------- one iteration

def reduce_stages(p, a):
    """(intra-node, inter-node) stages of a tree all_reduce over p ranks."""
    inside = min(p, a.ranks_per_node)
    nodes = math.ceil(p / a.ranks_per_node)
    return math.ceil(math.log2(inside)), math.ceil(math.log2(nodes)) if nodes > 1 else 0


def t_reduce_one(p, a, payload=16):
    """One all_reduce of two f64 scalars: per stage a latency plus the payload at the stage's
    bandwidth (picoseconds: the latency is the whole cost)."""
    if p == 1:
        return 0.0
    si, se = reduce_stages(p, a)
    intra = a.alpha_intra_us * 1e-6 + payload / rank_bandwidth(p, a)
    inter = a.alpha_inter_us * 1e-6 + payload / (a.nic_gbs * 1e9)
    return si * intra + se * inter


def offd_bytes(N, p, decomposition, offd):
    """The off-diagonal block's product y += O ghosts: per ghost entry its value, column,
    the ghost read and y read and written (+ row pointer); "full" also passes over every
    local row (read y, row pointer, write y)."""
    values, _, _ = halo(N, p, decomposition)
    b = values * (F64 + I32 + F64 + 2 * F64 + I32)
    if offd == "full":
        b += (N ** 3 / p) * (2 * F64 + I32)
    return b


def precond_bytes(pc, N):
    """Bytes per row of the preconditioner's apply: z = r * inv_diag, or the two solves."""
    if pc == "jacobi":
        return 3 * F64
    lower = (nnz_per_row(N) - 1) / 2
    return trsv_bytes(lower) + trsv_bytes(lower + 1)


def iteration(N, p, code, pc, a, method=None, decomposition="slab", offd="inplace"):
    """The model's terms (seconds) for one iteration on p ranks."""
    method = method or ("petsc-cg" if code == "petsc" else "rlx-cg")
    rows = N ** 3 / p
    bw = rank_bandwidth(p, a)
    # The bytes a node streams per iteration stand for its working set: each is touched once.
    node_bytes = N ** 3 / math.ceil(p / a.ranks_per_node) * bytes_per_row(method, pc, N)
    if a.cache_speedup != 1 and node_bytes <= a.cache_mib * 2**20:
        bw *= a.cache_speedup  # it fits in the node's cache (an assumption, off by default)
    local_bytes = rows * bytes_per_row(method, pc, N)
    if p > 1:
        local_bytes += offd_bytes(N, p, decomposition, offd)
    t_local = local_bytes / bw
    t_h = t_halo(N, p, decomposition, a) if p > 1 else 0.0
    t_r = REDUCTIONS[method] * t_reduce_one(p, a)
    t_fixed = (a.fixed_us_petsc if code == "petsc" else a.fixed_us_rlx) * 1e-6
    if method == "pipelined":
        # The one reduction runs while the preconditioner and the SpMV (and its halo) run;
        # the fused vector pass waits for it.
        overlapped = rows * (matrix_bytes(nnz_per_row(N)) + 2 * F64 + precond_bytes(pc, N))
        t_overlap = overlapped / bw + t_h
        total = t_fixed + (t_local - overlapped / bw) + max(t_r, t_overlap)
    else:
        t_overlap = 0.0
        total = t_fixed + t_local + t_h + t_r
    return dict(rows=rows, local=t_local, halo=t_h, reduce=t_r, fixed=t_fixed, total=total,
                overlap=t_overlap, note=halo(N, p, decomposition)[2])


# ---------------------------------------------------------------------------- printing

def ms(t):
    return f"{t * 1e3:.3f}"


def us(t):
    return f"{t * 1e6:.1f}"


def table(head, rows):
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    print()


def powers(limit):
    p, out = 1, []
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def section_bytes(a):
    print("### Bytes per row per iteration (f64 values, i32 indices, N = 200)\n")
    rows = []
    for m in VECTOR_STREAMS:
        rows.append([m, REDUCTIONS[m], VECTOR_STREAMS[m][0], f"{bytes_per_row(m, 'jacobi', 200):.1f}",
                     VECTOR_STREAMS[m][1], f"{bytes_per_row(m, 'bjacobi', 200):.1f}"])
    table(["iteration", "all_reduce", "vector streams (jacobi)", "B/row jacobi",
           "vector streams (bjacobi, besides the solves)", "B/row bjacobi"], rows)


def section_calibrate(a):
    print("### Model against the 16-core measurements (ms per iteration)\n")
    rows, logs = [], {}
    for code, pc, N, p, s, it, offd, skew, where in MEASURED:
        m = iteration(N, p, code, pc, a, offd=offd)
        meas = s / it
        ratio = m["total"] / meas
        for key in ("all points", f"{code} {pc}", f"{p} rank" + ("s" if p > 1 else "")) + \
                (() if skew else ("without the clock-before-barrier points",)):
            logs.setdefault(key, []).append(math.log(ratio))
        flag = where + ("; clock before the barrier" if skew else "") + ("; off-diagonal over every row" if offd == "full" and p > 1 else "")
        rows.append([code, pc, f"{N}^3", p, it, ms(meas), ms(m["local"]), ms(m["halo"]), us(m["reduce"]),
                     ms(m["total"]), f"{ratio:.2f}", flag])
    table(["code", "pc", "N^3", "ranks", "it.", "measured", "T_local", "T_halo", "T_reduce (µs)",
           "model", "model / measured", "point"], rows)
    print("### Calibration error (model / measured)\n")
    srows = []
    order = lambda k: (k != "all points", not k.startswith("without"), "rank" in k, int(k.split()[0]) if "rank" in k else 0, k)
    for key, v in sorted(logs.items(), key=lambda kv: order(kv[0])):
        g = math.exp(sum(v) / len(v))
        worst = max(v, key=abs)
        rms = math.sqrt(sum(x * x for x in v) / len(v))
        srows.append([key, len(v), f"{g:.2f}", f"{math.exp(rms) - 1:.0%}",
                      f"{math.exp(worst):.2f}"])
    table(["points", "n", "geometric mean", "rms of log error (as %)", "worst"], srows)
    # What the data say about the latency: the error at 2-16 ranks (barrier-timed points)
    # as the intra-node latency varies. The reductions are 2-12 stages of it per iteration
    # against 3-150 ms of streaming, so the data bound it only from above.
    print("### The same points at 2-16 ranks (barrier-timed) against the intra-node latency\n")
    arows = []
    for alpha in (0.0, 1.0, 10.0, 100.0, 300.0, 1000.0):
        b = argparse.Namespace(**vars(a))
        b.alpha_intra_us = alpha
        v = [math.log(iteration(N, p, code, pc, b, offd=offd)["total"] / (s / it))
             for code, pc, N, p, s, it, offd, skew, where in MEASURED if p > 1 and not skew]
        arows.append([f"{alpha:g}", len(v), f"{math.exp(sum(v) / len(v)):.2f}",
                      f"{math.exp(math.sqrt(sum(x * x for x in v) / len(v))) - 1:.0%}"])
    table(["α_intra µs", "n", "geometric mean of model / measured", "rms of log error (as %)"], arows)


def strong_rows(N, code, pc, a, limit):
    base = iteration(N, 1, code, pc, a)["total"]
    rows = []
    for p in powers(limit):
        s = iteration(N, p, code, pc, a, decomposition="slab")
        c = iteration(N, p, code, pc, a, decomposition="cube")
        best = c if c["total"] < s["total"] else s
        node = min(iteration(N, min(p, a.ranks_per_node), code, pc, a, decomposition=d)["total"]
                   for d in ("slab", "cube"))
        vs_node = f"{node / best['total'] / (p / a.ranks_per_node):.0%}" if p >= a.ranks_per_node else ""
        rows.append([p, f"{s['rows']:.0f}", ms(s["local"]), us(s["halo"]) + (" (" + s["note"] + ")" if s["note"] else ""),
                     us(c["halo"]), us(s["reduce"]), ms(s["total"]), ms(c["total"]),
                     f"{base / best['total']:.1f}", f"{base / best['total'] / p:.0%}", vs_node])
    return rows


def section_strong(a):
    for N in (200, 128):
        for pc in ("jacobi", "bjacobi"):
            print(f"### Strong scaling, rlx, {N}^3, {pc} (per iteration; slab = contiguous rows, cube = 3D blocks)\n")
            table(["ranks", "rows/rank", "T_local ms", "T_halo slab µs", "T_halo cube µs", "T_reduce µs",
                   "T slab ms", "T cube ms", "speedup", "efficiency", "efficiency vs one node"], strong_rows(N, "rlx", pc, a, a.max_ranks))
    N = 200
    print(f"### Time to solution, {N}^3, jacobi ({jacobi_iterations(N):.0f} iterations at every rank count), "
          f"the better decomposition\n")
    rows = []
    for p in powers(a.max_ranks):
        r = min(iteration(N, p, "rlx", "jacobi", a, decomposition=d)["total"] for d in ("slab", "cube"))
        q = min(iteration(N, p, "petsc", "jacobi", a, decomposition=d)["total"] for d in ("slab", "cube"))
        it = jacobi_iterations(N)
        rows.append([p, f"{r * it:.3f}", f"{q * it:.3f}"])
    table(["ranks", "rlx s", "PETSc s (3 all_reduce, 4 µs fixed)"], rows)


def section_weak(a):
    for per_rank in (128 ** 3 // 16, 1_000_000):
        for pc in ("jacobi", "bjacobi"):
            print(f"### Weak scaling, rlx, {per_rank:,} rows per rank, {pc} (per iteration)\n")
            rows = []
            base = node = None
            for p in powers(a.max_ranks):
                N = (per_rank * p) ** (1 / 3)
                s = iteration(N, p, "rlx", pc, a, decomposition="slab")
                c = iteration(N, p, "rlx", pc, a, decomposition="cube")
                best = min(s["total"], c["total"])
                base = base or best
                if p == a.ranks_per_node:
                    node = best
                extra = [f"{jacobi_iterations(N):.0f}", f"{jacobi_iterations(N) * best:.2f}"] if pc == "jacobi" else []
                rows.append([p, f"{N:.0f}", ms(s["local"]), us(s["halo"]) + (" (" + s["note"] + ")" if s["note"] else ""),
                             us(c["halo"]), us(s["reduce"]), ms(s["total"]), ms(c["total"]),
                             f"{base / best:.0%}", f"{node / best:.0%}" if node else ""] + extra)
            head = ["ranks", "N", "T_local ms", "T_halo slab µs", "T_halo cube µs", "T_reduce µs", "T slab ms",
                    "T cube ms", "efficiency vs 1 rank", "vs one node"]
            if pc == "jacobi":
                head += ["iterations", "time to solution s"]
            table(head, rows)


def crossover(case, a, method="rlx-cg", limit_log2=40):
    """Smallest power of two p at which T_reduce exceeds T_local, the 3D block split; for
    pipelined CG, at which its reduction exceeds the work it hides behind (SpMV, halo and
    preconditioner)."""
    kind, size, pc = case
    for k in range(0, limit_log2 + 1):
        p = 2 ** k
        N = size if kind == "strong" else (size * p) ** (1 / 3)
        if kind == "strong" and p > N ** 3:
            return None
        m = iteration(N, p, "rlx", pc, a, method=method, decomposition="cube")
        if m["reduce"] > (m["overlap"] if method == "pipelined" else m["local"]):
            return p
    return None


def crossover_cases():
    return [("strong", 200, "jacobi"), ("strong", 200, "bjacobi"), ("strong", 128, "jacobi"),
            ("strong", 128, "bjacobi"), ("weak", 128 ** 3 // 16, "jacobi"), ("weak", 1_000_000, "jacobi")]


def fmt_p(p):
    return f"{p:,}" if p else "none below 2^40"


def section_crossover(a):
    print("### Where T_reduce exceeds T_local (rlx's cg, 2 all_reduce per iteration)\n")
    alphas = (2.0, 3.0, 5.0)
    speedups = (1.0, 4.0)
    head = ["case"] + [f"α_inter {x:g} µs" + ("" if f == 1 else f", cache ×{f:g}") for f in speedups for x in alphas]
    rows = []
    for case in crossover_cases():
        row = [f"{case[0]} {case[1]:,}{'^3' if case[0] == 'strong' else ' rows/rank'} {case[2]}"]
        for f in speedups:
            for x in alphas:
                b = argparse.Namespace(**vars(a))
                b.alpha_inter_us, b.cache_speedup = x, f
                row.append(fmt_p(crossover(case, b)))
        rows.append(row)
    table(head, rows)
    # The same crossover as a size: below how many rows per rank the reductions cost more
    # than streaming the rows (off-diagonal bytes left out), at a given rank count.
    print("### Rows per rank below which T_reduce exceeds T_local (rlx's cg, α as given)\n")
    rows = []
    for p in (64, 256, 1024, 4096, 16384, 2**20):
        t_r = REDUCTIONS["rlx-cg"] * t_reduce_one(p, a)
        rows.append([f"{p:,}", us(t_r)] + [f"{t_r * rank_bandwidth(p, a) / bytes_per_row('rlx-cg', pc, 200):,.0f}"
                                            for pc in ("jacobi", "bjacobi")])
    table(["ranks", "T_reduce µs", "rows/rank, jacobi", "rows/rank, bjacobi"], rows)


def section_helps(a):
    print("### What helps at large p: the same model for three iterations (rlx, cube split, per iteration µs)\n")
    for N, pc in ((200, "jacobi"), (128, "jacobi"), (128, "bjacobi")):
        print(f"{N}^3, {pc}:\n")
        rows = []
        for p in [x for x in powers(max(a.max_ranks, 16384)) if x >= 64]:
            t = {m: iteration(N, p, "rlx", pc, a, method=m, decomposition="cube") for m in
                 ("rlx-cg", "single-reduction", "pipelined")}
            rows.append([p, us(t["rlx-cg"]["local"]), us(t["rlx-cg"]["reduce"]), us(t["rlx-cg"]["total"]),
                         us(t["single-reduction"]["total"]), us(t["pipelined"]["total"]),
                         f"{t['rlx-cg']['total'] / t['pipelined']['total']:.2f}"])
        table(["ranks", "T_local (CG)", "T_reduce (CG)", "CG (2 all_reduce)", "single-reduction CG (1)",
               "pipelined CG (1, overlapped)", "CG / pipelined"], rows)
    print("### Crossover rank counts by iteration (α_inter as given)\n")
    rows = []
    for case in crossover_cases()[:4]:
        rows.append([f"{case[1]}^3 {case[2]}"] + [fmt_p(crossover(case, a, method=m)) for m in
                                                   ("rlx-cg", "single-reduction", "pipelined")])
    table(["case", "CG", "single-reduction CG", "pipelined CG (its reduction against the work it hides)"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", default="all",
                    choices=["all", "bytes", "calibrate", "strong", "weak", "crossover", "helps"])
    ap.add_argument("--alpha-intra-us", type=float, default=1.0,
                    help="latency of a message or a reduction stage inside a node (assumed; default 1)")
    ap.add_argument("--alpha-inter-us", type=float, default=3.0,
                    help="latency of a message or a reduction stage between nodes (assumed; default 3)")
    ap.add_argument("--nic-gbs", type=float, default=12.5,
                    help="network bandwidth of a node, GB/s each way (assumed: 100 Gb/s; default 12.5)")
    ap.add_argument("--ranks-per-node", type=int, default=16)
    ap.add_argument("--fixed-us-rlx", type=float, default=30.0,
                    help="rlx's per-iteration cost independent of rows (derived; default 30)")
    ap.add_argument("--fixed-us-petsc", type=float, default=4.0,
                    help="PETSc's per-iteration cost independent of rows (measured; default 4)")
    ap.add_argument("--cache-speedup", type=float, default=1.0,
                    help="bandwidth factor once a node's working set fits in --cache-mib (assumed; default 1: off)")
    ap.add_argument("--cache-mib", type=float, default=300.0, help="a node's last-level cache (default 300)")
    ap.add_argument("--max-ranks", type=int, default=1024)
    a = ap.parse_args()
    print(f"Constants: STREAM {STREAM_GBS} GB/s per node of {a.ranks_per_node} cores; α_intra {a.alpha_intra_us:g} µs, "
          f"α_inter {a.alpha_inter_us:g} µs, network {a.nic_gbs:g} GB/s per node, fixed {a.fixed_us_rlx:g} µs (rlx) / "
          f"{a.fixed_us_petsc:g} µs (PETSc), cache speedup {a.cache_speedup:g} below {a.cache_mib:g} MiB per node.\n")
    sections = {"bytes": section_bytes, "calibrate": section_calibrate, "strong": section_strong,
                "weak": section_weak, "crossover": section_crossover, "helps": section_helps}
    for name, f in sections.items():
        if a.section in ("all", name):
            f(a)


if __name__ == "__main__":
    main()
