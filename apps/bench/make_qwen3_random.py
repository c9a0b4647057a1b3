#!/usr/bin/env python3
"""A randomly initialised Qwen3 for benchmarks (not committed: --out is git-ignored space):
Qwen3-0.6B's shape by default (hidden 1024, 28 layers, 16 heads, 8 key/value heads, head_dim
128, intermediate 3072, vocab 151936, tied embeddings; 596M parameters), f32 weights drawn
N(0, 0.02) with norms at one, saved as config.json + model.safetensors (2.4 GB) for
`rlx-bench generate --model DIR` and apps/bench/peers_qwen3.py. --gguf Q8_0,Q4_0 also writes
the same weights as DIR/qwen3-q8_0.gguf, DIR/qwen3-q4_0.gguf (llama.cpp's qwen3 layout, norms in
F32: data/qwen3/make_qwen3_tiny.py's writer). --dtype bf16 saves the safetensors weights in bf16
(1.2 GB; the same draws rounded to nearest even), as Qwen3-0.6B is published.

    python3 apps/bench/make_qwen3_random.py --out build/qwen3-0.6b-random [--layers 28] [--seed 0] [--gguf Q8_0,Q4_0]
        [--dtype f32|bf16]
"""
import argparse
import importlib.util
import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"], help="the safetensors weights' dtype")
    ap.add_argument("--gguf", default="", help="comma-separated GGUF types to write beside the folder (Q8_0, Q4_0, F16, ...)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=a.layers,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, hidden_act="silu")
    model = Qwen3ForCausalLM(cfg).to(torch.float32)  # (transformers' init: N(0, 0.02), norms at one)
    os.makedirs(a.out, exist_ok=True)
    saved = model.to(torch.bfloat16) if a.dtype == "bf16" else model
    saved.save_pretrained(a.out, safe_serialization=True, max_shard_size="100GB")
    model = model.to(torch.float32)  # (the GGUF copies below: from the saved values)
    print(f"{a.out}: {sum(p.numel() for p in model.parameters())} parameters")
    if a.gguf:
        import gguf
        here = os.path.dirname(os.path.abspath(__file__))
        spec = importlib.util.spec_from_file_location("make_qwen3_tiny", os.path.join(here, "../../data/qwen3/make_qwen3_tiny.py"))
        tiny = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tiny)
        sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
        for t in a.gguf.split(","):
            path = os.path.join(a.out, f"qwen3-{t.lower()}.gguf")
            tiny.write_gguf(path, cfg, sd, gguf.GGMLQuantizationType[t])
            print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
