#!/usr/bin/env python3
"""rlx's byte-level BPE tokenizer beside Hugging Face tokenizers (its Rust core, the reference)
on the same tokenizer.json and the same text, in the same run: the time to read the file and
encode's throughput on the whole text in one call, one thread each (TOKENIZERS_PARALLELISM
off; a single encode is one thread in tokenizers anyway), medians of --reps after a warm-up,
taken in turn. The ids' count and sum must agree, or the script says so and exits 1.

  python3 apps/bench/peers_tokenize.py --rlx build/bin/rlx-bench --tokenizer tokenizer.json --text FILE [--reps 5]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8").read()
    rlx_encode, rlx_load, hf_encode, hf_load = [], [], [], []
    for _ in range(a.rounds):
        out = subprocess.run([a.rlx, "tokenize", "--tokenizer", a.tokenizer, "--text", a.text, "--reps", str(a.reps)],
                             check=True, capture_output=True, text=True).stdout
        r = dict(kv.split("=") for kv in re.search(r"^RESULT tokenize (.*)$", out, re.M).group(1).split())
        rlx_encode.append(float(r["encode_s"]))
        rlx_load.append(float(r["load_s"]))
        t0 = time.perf_counter()
        tok = Tokenizer.from_file(a.tokenizer)
        hf_load.append(time.perf_counter() - t0)
        ids = tok.encode(text, add_special_tokens=False).ids  # (warm-up)
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            ids = tok.encode(text, add_special_tokens=False).ids
            times.append(time.perf_counter() - t0)
        hf_encode.append(statistics.median(times))
        if int(r["ids"]) != len(ids) or int(r["id_sum"]) != sum(ids):
            print(f"the ids differ: rlx {r['ids']} ids (sum {r['id_sum']}), tokenizers {len(ids)} (sum {sum(ids)})")
            sys.exit(1)
    mb = len(text.encode("utf-8")) / 1e6
    re_, he = statistics.median(rlx_encode), statistics.median(hf_encode)
    rl, hl = statistics.median(rlx_load), statistics.median(hf_load)
    print(f"text {a.text}: {mb:.3f} MB, {len(ids)} ids (the same ids from both); medians of {a.rounds} rounds")
    print(f"{'':12} {'load s':>8} {'encode s':>10} {'MB/s':>8}")
    print(f"{'rlx':12} {rl:8.3f} {re_:10.4f} {mb / re_:8.2f}")
    print(f"{'tokenizers':12} {hl:8.3f} {he:10.4f} {mb / he:8.2f}")
    print(f"rlx / tokenizers time: load {rl / hl:.2f}, encode {re_ / he:.2f}")


if __name__ == "__main__":
    main()
