#!/usr/bin/env python3
"""Load time and peak memory of each model format, rlx beside the loader a Python user would reach for,
each load in a fresh process (peak memory = the process's VmHWM above its VmRSS before the load):

  safetensors  rlx-bench load --model DIR [--read yes]  |  safetensors.torch.load_file (tensors over a mapping of the file,
               read lazily), and the same with every tensor then read once (sum) so its bytes are in memory
  GGUF         rlx-bench load --model F.gguf (quantized tensors stay packed)
               |  gguf.GGUFReader + a copy of every tensor's bytes (its tensors are views of a mapping)
  ONNX         rlx-bench load --model F.onnx (imported as IR, weights read)
               |  onnx.load, and onnxruntime.InferenceSession (which also optimizes the graph)

Medians of --reps processes per loader; the files are read once before timing so every loader sees
them in the page cache. Figures and the command: docs/benchmarks.md ("Model load time").

  python3 apps/bench/peers_load.py --rlx build/bin/rlx-bench --model DIR|F.gguf|F.onnx [--model ...] [--reps 3]
"""
import argparse
import os
import statistics
import subprocess
import sys

CHILD = r'''
import sys, time
def kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
kind, path = sys.argv[1], sys.argv[2]
if kind in ("safetensors", "safetensors-read"):
    import safetensors.torch, torch
elif kind == "gguf":
    import gguf, numpy
elif kind in ("onnx", "onnxruntime"):
    import onnx, onnxruntime
rss0 = kb("VmRSS")
t0 = time.perf_counter()
if kind in ("safetensors", "safetensors-read"):
    import glob, os
    files = [path] if path.endswith(".safetensors") else sorted(glob.glob(os.path.join(path, "*.safetensors")))
    tensors = {}
    for f in files:
        tensors.update(safetensors.torch.load_file(f))
    if kind == "safetensors-read":
        total = sum(float(v.float().sum()) if v.is_floating_point() else 0.0 for v in tensors.values())
elif kind == "gguf":
    r = gguf.GGUFReader(path)
    held = [numpy.array(t.data, copy=True) for t in r.tensors]
elif kind == "onnx":
    m = onnx.load(path)
elif kind == "onnxruntime":
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 2
    s = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
t = time.perf_counter() - t0
print("RESULT load peer=%s seconds=%.4f peak_mb=%.1f" % (kind, t, (kb("VmHWM") - rss0) / 1024.0))
'''


def result(line_text):
    for line in line_text.splitlines():
        if line.startswith("RESULT load"):
            return dict(kv.split("=", 1) for kv in line.split()[2:])
    raise RuntimeError("no RESULT line in:\n" + line_text)


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + p.stdout + p.stderr)
    return result(p.stdout)


def warm(path):
    files = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def is_qwen3(path):
    if path.endswith(".gguf"):  # (a BERT file is a sentence embedder's)
        import gguf
        field = gguf.GGUFReader(path).fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode() != "bert"
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        return False
    import json
    with open(config) as f:
        return json.load(f).get("model_type") == "qwen3"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True, help="rlx-bench")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    env = dict(os.environ, RLX_NUM_THREADS=os.environ.get("RLX_NUM_THREADS", "2"))
    print("load average %s" % open("/proc/loadavg").read().split()[0], flush=True)
    for path in a.model:
        warm(path)
        if path.endswith(".gguf"):
            peers = ["gguf"]
        elif path.endswith(".onnx"):
            peers = ["onnx", "onnxruntime"]
        else:
            peers = ["safetensors", "safetensors-read"]
        rows = {"rlx": [run([a.rlx, "load", "--model", path], env) for _ in range(a.reps)]}
        if is_qwen3(path):  # rlx's weights over the mapping read lazily too: also with every page read once
            rows["rlx-read"] = [run([a.rlx, "load", "--model", path, "--read", "yes"], env) for _ in range(a.reps)]
        for p in peers:
            rows[p] = [run([sys.executable, "-c", CHILD, p, path]) for _ in range(a.reps)]
        for name, rs in rows.items():
            s = statistics.median(float(r["seconds"]) for r in rs)
            m = statistics.median(float(r["peak_mb"]) for r in rs)
            print("%-40s %-12s %8.3f s  peak %8.1f MB above the start" % (os.path.basename(path.rstrip("/")), name, s, m))
            print("RESULT load model=%s peer=%s seconds=%.4f peak_mb=%.1f reps=%d" % (path, name, s, m, a.reps), flush=True)


if __name__ == "__main__":
    main()
