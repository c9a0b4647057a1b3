"""Builds the Q4_K case of tests/models/test_qwen3.cpp: a randomly initialised Qwen3 whose rows
are whole Q4_K blocks (hidden 256, 1 layer, 4 heads of 64, 2 key/value heads, intermediate 512,
vocab 512, tied embeddings; seeded), written as GGUF with every 2-D tensor in Q4_K
(qwen3-q4k.gguf; norms F32), and transformers' logits for the weights the file holds
(logits_q4k.npy: the model run on the file's Q4_K blocks decoded back to f32 by gguf-py).

gguf-py decodes Q4_K but does not encode it, so the blocks are made here (encode_q4_k): per
256 values, eight sub-blocks of 32 with a 6-bit scale and a 6-bit minimum each, relative to an
f16 super-scale and super-minimum, and 4-bit quants — ggml's block_q4_K layout, filled by a plain
min/max fit (not llama.cpp's search for the best scales; any valid block serves the test).

    python3 data/qwen3/make_qwen3_q4k.py [OUT_DIR]      # default: this script's folder
"""
import os
import sys

import numpy as np
import torch
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qwen3_tiny import PROMPT, random_qwen3, write_gguf  # noqa: E402

SEED = 20261203


def encode_q4_k(a):
    """float32 [rows, K] (K a multiple of 256) -> uint8 [rows, K / 256 * 144], ggml's block_q4_K."""
    rows, k = a.shape
    x = a.reshape(-1, 8, 32).astype(np.float64)              # [blocks, sub-block, value]
    lo = np.minimum(x.min(axis=2), 0.0)                      # each sub-block's minimum (at most 0)
    scale = (x.max(axis=2) - lo) / 15.0                      # its step
    d = np.maximum(scale.max(axis=1), 1e-30) / 63.0          # super-scale and super-minimum (f16)
    dmin = np.maximum((-lo).max(axis=1), 1e-30) / 63.0
    d16, dmin16 = d.astype(np.float16), dmin.astype(np.float16)
    d, dmin = d16.astype(np.float64), dmin16.astype(np.float64)
    sc = np.clip(np.rint(scale / d[:, None]), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(-lo / dmin[:, None]), 0, 63).astype(np.uint8)
    step = d[:, None] * sc                                   # the decoded step and minimum
    low = dmin[:, None] * m
    q = np.where(step[:, :, None] > 0, np.rint((x + low[:, :, None]) / np.where(step > 0, step, 1)[:, :, None]), 0)
    q = np.clip(q, 0, 15).astype(np.uint8)
    nb = x.shape[0]
    scales = np.zeros((nb, 12), np.uint8)                    # 6-bit scales and minimums, packed
    scales[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)  # sub-blocks 2j (low nibble), 2j+1 (high)
    blocks = np.concatenate([d16.view(np.uint8).reshape(nb, 2), dmin16.view(np.uint8).reshape(nb, 2), scales, qs], axis=1)
    return blocks.reshape(rows, k // 256 * 144)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    cfg, model = random_qwen3(SEED, 0.05, vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    q4k = gguf.GGMLQuantizationType.Q4_K
    # The encoder's blocks decode (gguf-py) close to the values they encode.
    probe = sd["model.layers.0.mlp.up_proj.weight"]
    back = gguf.quants.dequantize(encode_q4_k(probe), q4k).reshape(probe.shape)
    assert np.abs(back - probe).max() < 0.1 * np.abs(probe).max(), "Q4_K encoder"
    stored = write_gguf(os.path.join(out, "qwen3-q4k.gguf"), cfg, sd, q4k, encode=encode_q4_k)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in stored.items()}, strict=False)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0].float().numpy().astype(np.float32)
    np.save(os.path.join(out, "logits_q4k.npy"), logits)
    print("wrote", os.path.join(out, "qwen3-q4k.gguf"), "max |decoded - f32| of up_proj", float(np.abs(back - probe).max()))


if __name__ == "__main__":
    main()
