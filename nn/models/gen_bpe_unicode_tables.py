#!/usr/bin/env python3
"""Writes nn/models/bpe_unicode_tables.cpp: the Unicode data the byte-level BPE tokenizer
(bpe.cpp) needs, read from the reference implementation itself (Hugging Face `tokenizers`,
which Qwen's, Llama 3's and GPT-2's tokenizer.json files run), so the C++ side classifies and
normalises as the reference does:
  - the character classes of its pre-tokenizer regular expressions, each code point put
    through the reference's own regex engine: \\p{L} (Letter), \\p{N} (Number), \\s (Space);
  - NFC, the normaliser of Qwen's files: each code point's full canonical decomposition (the
    reference's NFD); the canonical combining classes as the reference orders marks (it
    exposes no classes, and its Unicode data is older than Python's: marks added since are
    starters to it), found by reordering each mark against one probe mark of every class;
    and the canonical compositions (a code point whose decomposition is a pair and which the
    reference's NFC gives back: the primary composites). Hangul is arithmetic.
The script then runs the C++ algorithm's Python twin on every code point and on random
strings of combining sequences and checks it against the reference's NFC.

Run: python3 nn/models/gen_bpe_unicode_tables.py  (pip install tokenizers)
"""
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import Regex, normalizers, pre_tokenizers

HANGUL_S, HANGUL_COUNT = 0xAC00, 11172
L_BASE, V_BASE, T_BASE, V_COUNT, T_COUNT = 0x1100, 0x1161, 0x11A7, 21, 28


def scalars():
    return (cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)


def classes():
    tests = [("Letter", pre_tokenizers.Split(Regex(r"\p{L}"), behavior="removed")),
             ("Number", pre_tokenizers.Split(Regex(r"\p{N}"), behavior="removed")),
             ("Space", pre_tokenizers.Split(Regex(r"\s"), behavior="removed"))]
    out = {}
    for cp in scalars():
        c = chr(cp)
        hits = [name for name, split in tests if split.pre_tokenize_str(c) == []]
        if len(hits) > 1:
            sys.exit(f"U+{cp:04X} is in {hits}")
        if hits:
            out[cp] = hits[0]
    return out


def is_hangul(cp):
    return HANGUL_S <= cp < HANGUL_S + HANGUL_COUNT


def reference_class(m, probes, nfd):
    """The reference's combining class of m: 0 when it never reorders m against a mark;
    else the class of the probe it keeps in both orders (an equal class)."""
    def reordered(a, b):
        return nfd.normalize_str("a" + a + b) != "a" + a + b
    c = chr(m)
    flips = {v: (reordered(c, chr(p)), reordered(chr(p), c)) for v, p in probes.items()}
    if not any(x or y for x, y in flips.values()):
        return 0
    equal = [v for v, (x, y) in flips.items() if not x and not y]
    for v in equal:  # consistent: m after every lower class, before every higher one
        if all(flips[w][0] == (w < v) and flips[w][1] == (w > v) for w in probes):
            return v
    sys.exit(f"U+{m:04X}: no probe class fits the reference's order {flips}")


def nfc_tables():
    nfd, nfc = normalizers.NFD(), normalizers.NFC()
    def known(p):  # a mark the reference reorders at all (its data may lack newer ones)
        return nfd.normalize_str("a\u0345" + chr(p)) != "a\u0345" + chr(p) or \
            nfd.normalize_str("a" + chr(p) + "\u0334") != "a" + chr(p) + "\u0334"
    probes = {}  # one mark per class, the lowest code point the reference knows
    for cp in scalars():
        v = unicodedata.combining(chr(cp))
        if v and v not in probes and nfd.normalize_str(chr(cp)) == chr(cp) and known(cp):
            probes[v] = cp
    decomp, ccc, compose = {}, {}, {}
    for cp in scalars():
        c = chr(cp)
        if unicodedata.combining(c) and nfd.normalize_str(c) == c:  # (others decompose first)
            v = reference_class(cp, probes, nfd)
            if v:
                ccc[cp] = v
        if is_hangul(cp):
            continue
        d = nfd.normalize_str(c)
        if d == c:
            continue
        decomp[cp] = [ord(x) for x in d]
        m = unicodedata.decomposition(c)
        if m and not m.startswith("<"):
            parts = [int(x, 16) for x in m.split()]
            if len(parts) == 2 and nfc.normalize_str(d) == c:
                compose[(parts[0], parts[1])] = cp
    return decomp, ccc, compose


# The algorithm bpe.cpp runs, in Python: decompose, order the marks by class, compose.
def twin_nfc(s, decomp, ccc, compose):
    cps = []
    for ch in s:
        cp = ord(ch)
        if is_hangul(cp):
            i = cp - HANGUL_S
            cps += [L_BASE + i // (V_COUNT * T_COUNT), V_BASE + (i % (V_COUNT * T_COUNT)) // T_COUNT]
            if i % T_COUNT:
                cps.append(T_BASE + i % T_COUNT)
        else:
            cps += decomp.get(cp, [cp])
    i = 0  # (stable) canonical ordering of each run of nonzero classes
    while i < len(cps):
        if ccc.get(cps[i], 0) == 0:
            i += 1
            continue
        j = i
        while j < len(cps) and ccc.get(cps[j], 0) != 0:
            j += 1
        cps[i:j] = sorted(cps[i:j], key=lambda x: ccc[x])
        i = j
    out, starter, last_ccc = [], -1, 0
    for cp in cps:
        c = ccc.get(cp, 0)
        if starter >= 0 and (last_ccc < c or (last_ccc == 0 and len(out) - 1 == starter)):
            a = out[starter]
            composed = None
            if L_BASE <= a < L_BASE + 19 and V_BASE <= cp < V_BASE + V_COUNT:
                composed = HANGUL_S + ((a - L_BASE) * V_COUNT + (cp - V_BASE)) * T_COUNT
            elif is_hangul(a) and (a - HANGUL_S) % T_COUNT == 0 and T_BASE < cp < T_BASE + T_COUNT:
                composed = a + (cp - T_BASE)
            else:
                composed = compose.get((a, cp))
            if composed is not None:
                out[starter] = composed
                continue
        if c == 0:
            starter = len(out)
        last_ccc = c
        out.append(cp)
    return "".join(map(chr, out))


def check_twin(decomp, ccc, compose):
    nfc = normalizers.NFC()
    for cp in scalars():
        c = chr(cp)
        if twin_nfc(c, decomp, ccc, compose) != nfc.normalize_str(c):
            sys.exit(f"U+{cp:04X}: the twin gives {twin_nfc(c, decomp, ccc, compose)!r}, the reference "
                     f"{nfc.normalize_str(c)!r}")
    marks = sorted(ccc)
    bases = [ord(x) for x in "aeiouAEOUnNcCsSzZ"] + [0x3B1, 0x3C9, 0x410, 0x1100, 0x1161, 0x11A8, 0xAC00, 0x928]
    composites = sorted(set(compose.values()))
    rng = random.Random(1)
    for _ in range(200000):
        s = "".join(chr(rng.choice(bases + marks + composites + [0x300, 0x301, 0x308, 0x323, 0x327, 0x345]))
                    for _ in range(rng.randrange(1, 8)))
        if twin_nfc(s, decomp, ccc, compose) != nfc.normalize_str(s):
            sys.exit(f"{s!r}: the twin gives {twin_nfc(s, decomp, ccc, compose)!r}, the reference {nfc.normalize_str(s)!r}")


def ranges(kinds):
    out = []
    for cp in sorted(kinds):
        k = kinds[cp]
        if out and out[-1][2] == k and (out[-1][1] == cp - 1 or (out[-1][1] == 0xD7FF and cp == 0xE000)):
            out[-1][1] = cp
        else:
            out.append([cp, cp, k])
    return out


def grouped(items, per_line):
    return ["    " + ", ".join(items[i:i + per_line]) + "," for i in range(0, len(items), per_line)]


def main():
    cls = ranges(classes())
    decomp, ccc, compose = nfc_tables()
    check_twin(decomp, ccc, compose)
    flat, entries = [], []
    for cp in sorted(decomp):
        entries.append((cp, len(flat), len(decomp[cp])))
        flat += decomp[cp]
    cccr = ranges(ccc)
    lines = [
        "// Generated by nn/models/gen_bpe_unicode_tables.py from Hugging Face tokenizers "
        f"{tokenizers.__version__} (and Python {sys.version_info.major}.{sys.version_info.minor}'s unicodedata "
        f"{unicodedata.unidata_version} for the class probes and the pairs); do not edit.",
        "// The character classes of the BPE pre-tokenizers' patterns and the NFC data (bpe.cpp reads these).",
        '#include "nn/models/bpe_unicode_tables.hpp"',
        "",
        "namespace rlx::nn::detail {",
        "",
        f"const BpeCharRange kBpeCharRanges[{len(cls)}] = {{",
    ]
    lines += grouped([f"{{0x{lo:X}, 0x{hi:X}, BpeCharClass::{k}}}" for lo, hi, k in cls], 3)
    lines += ["};", f"const size_t kBpeCharRangeCount = {len(cls)};", "",
              f"const char32_t kNfdCodePoints[{len(flat)}] = {{"]
    lines += grouped([f"0x{c:X}" for c in flat], 10)
    lines += ["};", "", f"const NfdEntry kNfdEntries[{len(entries)}] = {{"]
    lines += grouped([f"{{0x{cp:X}, {off}, {n}}}" for cp, off, n in entries], 5)
    lines += ["};", f"const size_t kNfdEntryCount = {len(entries)};", "",
              f"const CombiningRange kCombiningRanges[{len(cccr)}] = {{"]
    lines += grouped([f"{{0x{lo:X}, 0x{hi:X}, {k}}}" for lo, hi, k in cccr], 5)
    lines += ["};", f"const size_t kCombiningRangeCount = {len(cccr)};", "",
              f"const Composition kCompositions[{len(compose)}] = {{"]
    lines += grouped([f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for (a, b), c in sorted(compose.items())], 4)
    lines += ["};", f"const size_t kCompositionCount = {len(compose)};", "", "}  // namespace rlx::nn::detail", ""]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bpe_unicode_tables.cpp")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"{path}: {len(cls)} class ranges, {len(entries)} decompositions, {len(cccr)} class ranges, "
          f"{len(compose)} compositions")


if __name__ == "__main__":
    main()
