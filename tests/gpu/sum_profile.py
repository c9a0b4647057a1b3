#!/usr/bin/env python3
"""Sums RLX_PROFILE output by op: for each program's block ("rlx profile: N kernels, ..."), the
time of its kernels grouped by kind and op list, largest first.

  RLX_PROFILE=1 build/bin/rlx-bench generate ... 2> prof.txt
  tests/gpu/sum_profile.py prof.txt [TOP]

The executor synchronises after every kernel in that mode, so a small kernel's figure is
mostly that synchronisation (on the H200 about 11 us a kernel): compare counts as well as
times, and take a replayed run's wall clock for the total."""
import collections
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    blocks = []
    line_re = re.compile(r"\s+k(\d+)\s+(\S+)\s+([\d.]+)\s+(\S+)\s+(\S+)\s+([\d.]+)")
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            if line.startswith("rlx profile:"):
                blocks.append((line.strip(), collections.defaultdict(lambda: [0.0, 0])))
                continue
            m = line_re.match(line)
            if m and blocks:
                entry = blocks[-1][1][m.group(2) + " " + m.group(4)]
                entry[0] += float(m.group(3))
                entry[1] += 1
    for head, ops in blocks:
        print(f"{head}  total {sum(v[0] for v in ops.values()):.3f} ms")
        for key, (ms, n) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"  {ms:9.3f} ms {n:5d}x  {key[:110]}")


if __name__ == "__main__":
    main()
