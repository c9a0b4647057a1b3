#!/usr/bin/env python3
"""Where the MiniLM peers spend their time on the cpu, to set beside rlx's own profile
(`RLX_PROFILE=1 rlx-bench embed --batches 8`); docs/benchmarks.md, "all-MiniLM-L6-v2 on the cpu:
an Intel Xeon host".

  gemm     the encoder's two large products with their bias, [B*L, 384]·[384, 1536] and
           [B*L, 1536]·[1536, 384], timed alone: NumPy (its OpenBLAS), torch.addmm, and a
           MatMul+Add ONNX model in onnxruntime (MLAS); medians of 30, ms and GFLOP/s.
  ort      onnxruntime's own per-operator profile (SessionOptions.enable_profiling) of the
           export peers_minilm.py caches (--onnx), summed per operator type and per run.

  python3 apps/bench/profile_minilm_peers.py [--batch 8] [--length 128] [--threads 2]
                                             [--onnx build/minilm-peers/minilm.onnx]
"""
import argparse
import collections
import json
import os
import time

import numpy as np


def median_ms(f, n=30):
    for _ in range(3):
        f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[n // 2] * 1e3


def gemm(rows, threads):
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper, numpy_helper

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    for k, n in ((384, 1536), (1536, 384)):
        a = rng.standard_normal((rows, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        ta, tb, tbias = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(bias)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"]), helper.make_node("Add", ["c", "bias"], ["y"])], "gemm",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
            initializer=[numpy_helper.from_array(b, "b"), numpy_helper.from_array(bias, "bias")])
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        s = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
        gflop = 2 * rows * k * n / 1e9
        times = {"numpy": median_ms(lambda: a @ b + bias), "torch": median_ms(lambda: torch.addmm(tbias, ta, tb)),
                 "onnxruntime": median_ms(lambda: s.run(None, {"a": a}))}
        print("gemm [%d, %d]·[%d, %d] + bias: " % (rows, k, k, n) +
              "  ".join("%s %.2f ms (%.0f GFLOP/s)" % (p, t, gflop / t * 1e3) for p, t in times.items()), flush=True)


def ort_profile(path, batch, length, threads, runs=13):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {}
    for i in s.get_inputs():
        if "mask" in i.name:
            feed[i.name] = np.ones((batch, length), np.int64)
        elif "type" in i.name:
            feed[i.name] = np.zeros((batch, length), np.int64)
        else:
            feed[i.name] = rng.integers(1000, 2000, (batch, length), dtype=np.int64)
    for _ in range(runs):
        s.run(None, feed)
    log = s.end_profiling()
    with open(log) as f:
        events = json.load(f)
    os.remove(log)
    total, count = collections.defaultdict(float), collections.Counter()
    n = sum(1 for e in events if e.get("cat") == "Session" and e["name"] == "model_run")
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"].get("op_name")
            total[op] += e["dur"]
            count[op] += 1
    print("onnxruntime profile, batch %d x %d, %d runs (ms per run, kernels per run):" % (batch, length, n))
    for op, t in sorted(total.items(), key=lambda x: -x[1]):
        print("  %-26s %8.2f ms  %5.1f" % (op, t / 1e3 / n, count[op] / n))
    print("  sum %.2f ms per run" % (sum(total.values()) / 1e3 / n))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--onnx", default="build/minilm-peers/minilm.onnx", help="the export peers_minilm.py caches")
    a = ap.parse_args()
    gemm(a.batch * a.length, a.threads)
    if os.path.exists(a.onnx):
        ort_profile(a.onnx, a.batch, a.length, a.threads)
    else:
        print("no %s: run apps/bench/peers_minilm.py first (it exports the model there)" % a.onnx)


if __name__ == "__main__":
    main()
