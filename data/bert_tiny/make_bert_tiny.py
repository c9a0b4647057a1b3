#!/usr/bin/env python3
"""A small random BERT (2 layers, hidden 32, 2 heads, feed-forward 64, 40 positions, 405 tokens of
all-MiniLM-L6-v2's vocabulary) in the three forms `rlx embed` reads, and its embeddings computed
here in float64 with NumPy, an oracle independent of rlx (docs/models.md, "BERT from GGUF"):

  config.json, vocab.txt, model.safetensors   the model folder (f32)
  model-f32.gguf, model-q8_0.gguf             data/minilm/export_gguf.py of that folder
  ids.npy, types.npy, mask.npy                int64 [3, 12]: three rows of ids, padded (lengths 12, 7, 3)
  embeddings.npy                              float64 [3, 32]: mean-pooled, L2-normalised, from the f32 weights
  embeddings_q8_0.npy                         the same from the weights model-q8_0.gguf holds (decoded by gguf-py)

Seeded; needs NumPy, safetensors and gguf (pip). Run from the repository root:
  python3 data/bert_tiny/make_bert_tiny.py
"""
import json
import math
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "minilm"))
from export_gguf import export, gguf_name  # noqa: E402

CONFIG = {"model_type": "bert", "hidden_act": "gelu", "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 40,
          "type_vocab_size": 2, "layer_norm_eps": 1e-12, "position_embedding_type": "absolute"}


def vocabulary():
    """[PAD] [unused0] [UNK] [CLS] [SEP] [MASK], then MiniLM's ASCII punctuation, digits and
    letters (its lines 999-1094) and its first words and '##' pieces (lines 1996-2299)."""
    with open(os.path.join(HERE, "..", "minilm", "vocab.txt"), encoding="utf-8") as f:
        full = [line.rstrip("\n") for line in f]
    return ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + full[999:1094] + full[1996:2300]


def weights(rng, vocab_size):
    c = CONFIG
    h, f = c["hidden_size"], c["intermediate_size"]
    w = {}

    def dense(name, out, inp):
        w[name + ".weight"] = rng.normal(0, 0.3, (out, inp)).astype(np.float32)
        w[name + ".bias"] = rng.normal(0, 0.1, (out,)).astype(np.float32)

    def norm(name):
        w[name + ".weight"] = (1 + rng.normal(0, 0.1, (h,))).astype(np.float32)
        w[name + ".bias"] = rng.normal(0, 0.1, (h,)).astype(np.float32)

    w["embeddings.word_embeddings.weight"] = rng.normal(0, 1, (vocab_size, h)).astype(np.float32)
    w["embeddings.position_embeddings.weight"] = rng.normal(0, 1, (c["max_position_embeddings"], h)).astype(np.float32)
    w["embeddings.token_type_embeddings.weight"] = rng.normal(0, 1, (c["type_vocab_size"], h)).astype(np.float32)
    norm("embeddings.LayerNorm")
    for i in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            dense(p + m, h, h)
        norm(p + "attention.output.LayerNorm")
        dense(p + "intermediate.dense", f, h)
        dense(p + "output.dense", h, f)
        norm(p + "output.LayerNorm")
    return w


def embed(w, ids, types, mask):
    """BERT's forward in float64, mean pooling over the mask, L2 normalisation."""
    c = CONFIG
    h, heads, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
    d = h // heads
    g = {k: v.astype(np.float64) for k, v in w.items()}
    erf = np.vectorize(math.erf)

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g[name + ".weight"] + g[name + ".bias"]

    def lin(x, name):
        return x @ g[name + ".weight"].T + g[name + ".bias"]

    b, n = ids.shape
    x = g["embeddings.word_embeddings.weight"][ids] + g["embeddings.position_embeddings.weight"][np.arange(n)] + \
        g["embeddings.token_type_embeddings.weight"][types]
    x = ln(x, "embeddings.LayerNorm")
    bias = np.where(mask[:, None, None, :] == 0, -np.inf, 0.0)
    for i in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        split = lambda t: t.reshape(b, n, heads, d).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(lin(x, p + "attention.self." + s)) for s in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
        s = np.exp(s - s.max(-1, keepdims=True))
        o = (s / s.sum(-1, keepdims=True)) @ v
        x = ln(x + lin(o.transpose(0, 2, 1, 3).reshape(b, n, h), p + "attention.output.dense"), p + "attention.output.LayerNorm")
        t = lin(x, p + "intermediate.dense")
        t = 0.5 * t * (1 + erf(t / math.sqrt(2)))
        x = ln(x + lin(t, p + "output.dense"), p + "output.LayerNorm")
    m = mask[:, :, None].astype(np.float64)
    pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def main():
    rng = np.random.default_rng(20261203)
    vocab = vocabulary()
    with open(os.path.join(HERE, "config.json"), "w") as f:
        json.dump(dict(CONFIG, vocab_size=len(vocab)), f, indent=1)
    with open(os.path.join(HERE, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))
    w = weights(rng, len(vocab))
    save_file(w, os.path.join(HERE, "model.safetensors"))
    for t in ("f32", "q8_0"):
        export(HERE, os.path.join(HERE, f"model-{t}.gguf"), t)

    lengths = [12, 7, 3]
    ids = np.zeros((3, 12), np.int64)
    types = np.zeros((3, 12), np.int64)
    mask = np.zeros((3, 12), np.int64)
    for r, n in enumerate(lengths):
        ids[r, :n] = rng.integers(6, len(vocab), n)
        ids[r, 0], ids[r, n - 1] = vocab.index("[CLS]"), vocab.index("[SEP]")
        mask[r, :n] = 1
    types[0, 6:] = 1  # (a second segment in the first row)
    for name, a in (("ids", ids), ("types", types), ("mask", mask)):
        np.save(os.path.join(HERE, f"{name}.npy"), a)
    np.save(os.path.join(HERE, "embeddings.npy"), embed(w, ids, types, mask))

    # The weights the q8_0 file holds, as gguf-py decodes them.
    r = gguf.GGUFReader(os.path.join(HERE, "model-q8_0.gguf"))
    stored = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(list(reversed([int(d) for d in t.shape])))
              for t in r.tensors}
    wq = {name: stored[gguf_name(name)].astype(np.float32) for name in w}
    np.save(os.path.join(HERE, "embeddings_q8_0.npy"), embed(wq, ids, types, mask))
    print("wrote", HERE)


if __name__ == "__main__":
    main()
