#!/usr/bin/env bash
# Where a training step's time goes on the GPU: `rlx train mnist` (the MLP, batch 128, the
# data set held on the device, each step one graph replay) timed for two epochs, then one
# epoch under Nsight Systems with the replayed graphs traced node by node. Prints the
# kernels' time per step, the memory copies per step, and how busy the GPU was over the
# epoch (the sum of kernel and copy times over the time from the first to the last).
#   BUILD=build-gpu OUT=dir tests/gpu/profile_train.sh [extra rlx train options]
set -uo pipefail
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/out}
mkdir -p "$OUT"
RLX="$BUILD/bin/rlx"
"$RLX" train mnist --device cuda --epochs 2 --json "$OUT/train.json" "$@" | tail -3
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -z "$NSYS" ]; then
  echo "profile_train: no nsys on this machine"
  exit 0
fi
rm -f "$OUT/train.nsys-rep" "$OUT/train.sqlite"
"$NSYS" profile --trace=cuda --cuda-graph-trace=node -o "$OUT/train" --force-overwrite true \
  "$RLX" train mnist --device cuda --epochs 1 "$@" >"$OUT/nsys.log" 2>&1 || { tail -20 "$OUT/nsys.log"; exit 1; }
"$NSYS" stats --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_api_sum --format csv \
  --output "$OUT/train" "$OUT/train.nsys-rep" >/dev/null 2>&1
"$NSYS" export --type sqlite --output "$OUT/train.sqlite" --force-overwrite true "$OUT/train.nsys-rep" >/dev/null 2>&1
python3 - "$OUT/train.sqlite" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
def rows(q):
    try: return db.execute(q).fetchall()
    except sqlite3.Error: return []
names = dict(rows("select id, value from StringIds"))
k = rows("select start, end, shortName from CUPTI_ACTIVITY_KIND_KERNEL order by start")
m = rows("select start, end, copyKind, bytes from CUPTI_ACTIVITY_KIND_MEMCPY order by start")
if not k:
    print("profile_train: no kernels in the trace"); sys.exit(0)
# The epoch's steady state: the second half of the trace (compilation and capture come first).
t0, t1 = k[0][0], k[-1][1]
mid = t0 + (t1 - t0) // 2
ks = [r for r in k if r[0] >= mid]
ms = [r for r in m if r[0] >= mid]
span = ks[-1][1] - ks[0][0]
busy = sum(e - s for s, e, _ in ks) + sum(e - s for s, e, _, _ in ms)
per = {}
for s, e, n in ks:
    per.setdefault(names.get(n, str(n)), []).append(e - s)
# Steps in the window: one loss-scalar kernel per step would be fragile to name; count the
# most frequent kernel's launches instead (each step runs it the same number of times).
counts = sorted(len(v) for v in per.values())
top = max(per.items(), key=lambda kv: len(kv[1]))
print(f"steady half of the epoch: {len(ks)} kernels, {len(ms)} copies over {span/1e3:.1f} us; GPU busy {100*busy/span:.1f} %")
print(f"{'kernel':60s} {'launches':>8s} {'median us':>10s} {'total us':>10s}")
for n, v in sorted(per.items(), key=lambda kv: -sum(kv[1]))[:30]:
    v = sorted(v)
    print(f"{n[:60]:60s} {len(v):8d} {v[len(v)//2]/1e3:10.2f} {sum(v)/1e3:10.1f}")
kinds = {}
for s, e, c, b in ms:
    kinds.setdefault(c, []).append((e - s, b))
for c, v in kinds.items():
    print(f"copy kind {c}: {len(v)} copies, median {sorted(x for x, _ in v)[len(v)//2]/1e3:.2f} us, {sum(b for _, b in v)} bytes")
EOF
