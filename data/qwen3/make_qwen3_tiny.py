"""Builds the tiny Qwen3 parity data of tests/models/test_qwen3.cpp with transformers.

A randomly initialised Qwen3ForCausalLM (seeded; hidden 64, 2 layers, 4 heads, 2 key/value
heads, head_dim 16, intermediate 128, vocab 512, tied embeddings) is saved as config.json +
model.safetensors (f32). For a fixed prompt it writes transformers' logits (f32 .npy,
[prompt, vocab]) and its greedy continuation (reference.json), and the same weights as GGUF
at F16, Q8_0 and Q4_0 (norms stay F32, as llama.cpp's converter keeps 1-D tensors), named and keyed
as llama.cpp names a qwen3 model (no q/k permutation: the converter permutes only llama's),
with transformers' logits for the weights each file holds (logits_f16.npy, logits_q8_0.npy,
logits_q4_0.npy: the model run on the file's weights decoded back to f32).

    python3 data/qwen3/make_qwen3_tiny.py [OUT_DIR]      # default: this script's folder
"""
import json
import os
import sys

import numpy as np
import torch
import gguf
from transformers import Qwen3Config, Qwen3ForCausalLM

SEED = 20261202
PROMPT = [17, 301, 5, 96, 444, 250, 3, 128, 77, 510, 42, 9]
MAX_NEW = 16


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    cfg, model = random_qwen3(SEED, 0.08, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    model.save_pretrained(out, safe_serialization=True)
    for junk in ("generation_config.json",):
        p = os.path.join(out, junk)
        if os.path.exists(p):
            os.remove(p)

    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = model(ids).logits[0].float().numpy()
        gen = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=None, pad_token_id=0)
    np.save(os.path.join(out, "logits.npy"), logits.astype(np.float32))
    new = gen[0, len(PROMPT):].tolist()
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"prompt": PROMPT, "greedy": new, "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__, "seed": SEED}, f, indent=1)
        f.write("\n")

    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}  # (not views: the loop loads other weights)
    for qtype in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
        name = qtype.name.lower()
        stored = write_gguf(os.path.join(out, f"qwen3-tiny-{name}.gguf"), cfg, sd, qtype)
        # transformers' logits with the weights the GGUF file holds (decoded back to f32):
        # what a correct reader of the file computes, up to f32 rounding.
        model.load_state_dict({k: torch.from_numpy(v) for k, v in stored.items()}, strict=False)
        with torch.no_grad():
            np.save(os.path.join(out, f"logits_{name}.npy"), model(ids).logits[0].float().numpy().astype(np.float32))


def random_qwen3(seed, scale, **sizes):
    """A seeded random Qwen3ForCausalLM (f32, eval) of the given sizes: weights N(0, scale^2),
    norms 1 + N(0, 0.04) — the default init leaves the norms at one, and a wrong norm weight must
    change the logits. Tied embeddings, 128 positions, eps 1e-6, theta 10^4."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
                      hidden_act="silu", attention_bias=False, use_sliding_window=False, bos_token_id=1, eos_token_id=2,
                      **sizes)
    model = Qwen3ForCausalLM(cfg).eval().to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if name.endswith("norm.weight") else torch.randn_like(p) * scale)
    return cfg, model


def rope_theta(cfg):
    # (transformers 5 keeps it in rope_parameters, earlier versions as rope_theta)
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def write_gguf(path, cfg, sd, qtype, encode=None):
    """Writes sd as GGUF; 2-D tensors in qtype, by gguf-py or by encode(a) -> uint8 blocks."""
    w = gguf.GGUFWriter(path, "qwen3")
    w.add_name("qwen3-tiny-random")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(rope_theta(cfg))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
                 "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
                 "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(cfg.num_hidden_layers):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    if not cfg.tie_word_embeddings:
        names["lm_head.weight"] = "output.weight"
    stored = {}
    for hf, gg in names.items():
        a = sd[hf]
        if a.ndim == 1:
            w.add_tensor(gg, a.astype(np.float32))
            stored[hf] = a.astype(np.float32)
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(gg, a.astype(np.float16))
            stored[hf] = a.astype(np.float16).astype(np.float32)
        else:
            q = encode(a) if encode else gguf.quants.quantize(a, qtype)
            w.add_tensor(gg, q, raw_dtype=qtype)
            stored[hf] = gguf.quants.dequantize(q, qtype).reshape(a.shape).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


if __name__ == "__main__":
    main()
