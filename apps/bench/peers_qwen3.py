#!/usr/bin/env python3
"""Qwen3 generation throughput next to its peers, in one run, on the same ids and model:

  rlx             build/bin/rlx-bench generate (nn/models/qwen3.hpp), run as a subprocess on
                  the folder (f32) and on each --gguf file (its quantized weights kept packed);
  torch-eager     transformers' Qwen3ForCausalLM.generate, greedy, the dynamic cache, eager
                  attention, under torch.inference_mode();
  torch-compiled  the same with a static cache (one StaticCache of prompt + new positions,
                  emptied before each call, so every call has the shapes and buffers the first
                  compiled) and the forward under torch.compile (mode "reduce-overhead" on
                  cuda: CUDA graphs).

--dtype f32 (default) or bf16 for transformers' weights and activations; with bf16, rlx runs
with --weights bf16 (bf16 weights, f32 activations and cache: the op's f32 contract; with
RLX_CUDA_BF16=1 in the environment, which rlx-bench inherits, its products of more than 8 rows
round the activations to bf16 as the peers do). --batch B copies of a --prompt of P tokens ((i * 37 + 11) mod vocab, the
formula of apps/bench/generate.cpp) and --new tokens. Prefill tokens/s = B P / (time of
generate with one new token); decode tokens/s = B (new - 1) / (time of generate with --new
tokens - that time). Medians of --reps runs after a warm-up run; RESULT lines as rlx-bench
prints them.

Run: python3 apps/bench/make_qwen3_random.py --out build/qwen3-0.6b-random --gguf Q8_0,Q4_0
     python3 apps/bench/peers_qwen3.py --model build/qwen3-0.6b-random --rlx build/bin/rlx-bench \
         --gguf build/qwen3-0.6b-random/qwen3-q8_0.gguf,build/qwen3-0.6b-random/qwen3-q4_0.gguf [--batch 16] [--device cuda]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM, StaticCache


def timed(f, device, reps):
    # Two warm-up calls: the compiled peer compiles on the first and recompiles on the second
    # (the static cache's first call initialises its buffers, which a guard watches).
    f()
    f()
    t = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        if device == "cuda":
            torch.cuda.synchronize()
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def result(peer, device, prompt, new, batch, pre, dec, reps):
    print(f"RESULT generate model=qwen3 peer={peer} device={device} prompt={prompt} new={new} batch={batch} "
          f"prefill_tokens_per_s={pre:.2f} decode_tokens_per_s={dec:.3f} reps={reps}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a Qwen3 folder (config.json + model.safetensors)")
    ap.add_argument("--rlx", default=None, help="rlx-bench to run beside the peers (left out when not given)")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1, help="copies of the prompt generated together")
    ap.add_argument("--gguf", default="", help="comma-separated GGUF copies of the model's weights for rlx (Q8_0, Q4_0, ...)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads and RLX_NUM_THREADS (cpu)")
    ap.add_argument("--peers", default="torch-eager,torch-compiled")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"], help="transformers' dtype; bf16: rlx --weights bf16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for path in ([a.model] + [g for g in a.gguf.split(",") if g]) if a.rlx else []:
        out = subprocess.run([a.rlx, "generate", "--model", path, "--prompt", str(a.prompt), "--new", str(a.new),
                              "--batch", str(a.batch), "--reps", str(a.reps), "--device", a.device]
                             + (["--weights", "bf16"] if a.dtype == "bf16" and not path.endswith(".gguf") else []),
                             capture_output=True,
                             text=True, env=dict(os.environ, RLX_NUM_THREADS=str(a.threads)))
        if out.returncode != 0:
            sys.exit(f"rlx-bench generate failed:\n{out.stdout}{out.stderr}")
        for line in out.stdout.splitlines():
            print(line if line.startswith("RESULT") else f"rlx ({os.path.basename(path)}): " + line, flush=True)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="eager").to(a.device).eval()
    vocab = model.config.vocab_size
    ids = torch.tensor([[(i * 37 + 11) % vocab for i in range(a.prompt)]] * a.batch, device=a.device)
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), model {a.model}, {a.dtype}", flush=True)
    for peer in a.peers.split(","):
        kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
        static = peer == "torch-compiled"
        if peer not in ("torch-eager", "torch-compiled"):
            sys.exit(f"unknown peer {peer}")
        with torch.inference_mode():
            # One static cache for every call, emptied before each: the compiled graphs (CUDA
            # graphs on cuda) keep the addresses of the buffers they were recorded with, so a
            # fresh cache per call would make every call record anew.
            cache = StaticCache(config=model.config, max_cache_len=a.prompt + a.new) if static else None
            if static:
                # The cache allocates its buffers on first use: one eager call does it outside the
                # compiled region (allocated inside, they would be CUDA-graph outputs, which the
                # next replay overwrites — "accessing tensor output of CUDAGraphs that has been
                # overwritten"), then the forward is compiled; each step marks a new CUDA-graph
                # step, as generate reads a step's logits before it runs the next.
                model.generate(ids, max_new_tokens=1, min_new_tokens=1, past_key_values=cache, **kw)
                compiled = torch.compile(model.forward, mode="reduce-overhead" if a.device == "cuda" else "default",
                                         dynamic=False)

                def forward(*args, **kwargs):
                    if a.device == "cuda":
                        torch.compiler.cudagraph_mark_step_begin()
                    return compiled(*args, **kwargs)
                model.forward = forward

            def run(n):
                def f():
                    extra = {}
                    if static:
                        cache.reset()
                        extra["past_key_values"] = cache
                    return model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw, **extra)
                return f
            t0 = time.perf_counter()
            t1 = timed(run(1), a.device, a.reps)
            tn = timed(run(a.new), a.device, a.reps)
            total = time.perf_counter() - t0
        # (with few new tokens the difference can drown in the noise: no decode figure then)
        pre, dec = a.batch * a.prompt / t1, (a.batch * (a.new - 1) / (tn - t1) if tn > t1 else float("nan"))
        print(f"{peer:15s} batch {a.batch}: prefill {a.prompt} tokens {pre:.1f} tokens/s, decode {a.new} tokens "
              f"{dec:.2f} tokens/s ({1e3 * a.batch / dec:.1f} ms/step); {total:.0f} s in all (compiles included)", flush=True)
        result(peer + ("-bf16" if a.dtype == "bf16" else ""), a.device, a.prompt, a.new, a.batch, pre, dec, a.reps)


if __name__ == "__main__":
    main()
