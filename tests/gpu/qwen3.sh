#!/usr/bin/env bash
# Qwen3 0.6B (random weights of its shape, bf16) on the GPU machine against transformers, in
# one go (docs/benchmarks.md, "Qwen3 on the H200 ..."):
#   tests/gpu/qwen3.sh [peers|modes|profile|ncu ...]      (default: modes peers)
#     modes    rlx-bench generate at batch 1 and 16 with RLX_CUDA_BF16 each of MODES (default
#              "0 1"), alternated, ROUNDS rounds (default 2): the 16-bit tensor-core products
#              against the f32 ones;
#     peers    apps/bench/peers_qwen3.py (rlx, transformers eager, transformers static cache +
#              torch.compile) at each of BATCHES (default "1 16"), RLX_CUDA_BF16=${PEER_BF16:-1};
#     profile  RLX_PROFILE=1 generate at each of BATCHES, summed per op (tests/gpu/sum_profile.py);
#     ncu      Nsight Compute over a replayed decode step's kernels (--graph-profiling node,
#              the duration only), batch ${NCU_BATCH:-16}: the per-kernel times that the host
#              clock cannot see inside a CUDA graph.
# Builds rlx and rlx-bench in build-gpu through run.sh (TESTS decides the suites; default
# none). RLX_CUDA_TF32=1 throughout (the prefill's f32 products). Output in $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export BUILD=${BUILD:-$ROOT/build-gpu}
export OUT=${OUT:-$BUILD/out}
mkdir -p "$OUT"
if [ ! -x "$BUILD/bin/rlx-bench" ] || [ -n "${TESTS:-}" ]; then
  TESTS=${TESTS:--} "$ROOT/tests/gpu/run.sh" quick || exit 1
fi
[ -d /tmp/deps/usr/lib/x86_64-linux-gnu ] && export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODEL=${MODEL:-/tmp/qwen3-0.6b-bf16}
[ -f "$MODEL/model.safetensors" ] || python3 "$ROOT/apps/bench/make_qwen3_random.py" --out "$MODEL" --dtype bf16 >"$OUT/make_model.log" 2>&1 ||
  { tail -5 "$OUT/make_model.log"; exit 1; }
export RLX_CUDA_TF32=1
GEN=("$BUILD/bin/rlx-bench" generate --model "$MODEL" --device cuda --weights bf16 --prompt 512)
rc=0
for what in ${*:-modes peers}; do
  case $what in
    modes)
      for round in $(seq "${ROUNDS:-2}"); do
        for mode in ${MODES:-0 1}; do
          for b in 16 1; do
            r=$(RLX_CUDA_BF16=$mode "${GEN[@]}" --new 64 --batch "$b" --reps 3 2>&1 | grep RESULT |
                grep -oE 'prefill_tokens_per_s=[0-9.]+ decode_tokens_per_s=[0-9.]+')
            echo "round $round RLX_CUDA_BF16=$mode batch $b: ${r:-failed}"
          done
        done
      done | tee "$OUT/qwen3_modes.txt" ;;
    peers)
      for b in ${BATCHES:-1 16}; do
        RLX_CUDA_BF16=${PEER_BF16:-1} PYTHONUNBUFFERED=1 timeout "${PEER_TIMEOUT:-300}" python3 "$ROOT/apps/bench/peers_qwen3.py" \
          --model "$MODEL" --rlx "$BUILD/bin/rlx-bench" --device cuda --dtype bf16 --batch "$b" --reps 3 >"$OUT/qwen3_peers_b$b.log" 2>&1 ||
          { echo "peers at batch $b failed:"; tail -12 "$OUT/qwen3_peers_b$b.log"; rc=1; }
        grep RESULT "$OUT/qwen3_peers_b$b.log"
      done ;;
    profile)
      for b in ${BATCHES:-1 16}; do
        RLX_PROFILE=1 RLX_CUDA_BF16=${PEER_BF16:-1} "${GEN[@]}" --new 2 --batch "$b" --reps 2 >"$OUT/qwen3_profile_b$b.txt" 2>&1
        echo "== profile, batch $b"
        python3 "$ROOT/tests/gpu/sum_profile.py" "$OUT/qwen3_profile_b$b.txt" "${TOP:-20}"
      done ;;
    ncu)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      # A 64-token prompt (the prefill's kernels are profiled too, each replayed by ncu: a short
      # one keeps that cheap; a decode step's kernels are those of a 512-token prompt but for
      # the attention's cache length) and at most NCU_COUNT kernels.
      RLX_CUDA_BF16=${PEER_BF16:-1} timeout 400 "$NCU" --graph-profiling node --metrics gpu__time_duration.sum --csv \
        --launch-count "${NCU_COUNT:-3000}" \
        "$BUILD/bin/rlx-bench" generate --model "$MODEL" --device cuda --weights bf16 --prompt 64 --new 3 \
        --batch "${NCU_BATCH:-16}" --reps 1 >"$OUT/qwen3_ncu.csv" 2>"$OUT/qwen3_ncu.log" || { tail -5 "$OUT/qwen3_ncu.log"; rc=1; }
      python3 - "$OUT/qwen3_ncu.csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if len(r) > 5]
if not rows:
    sys.exit("no ncu rows")
head = rows[0]
name, value = head.index("Kernel Name"), head.index("Metric Value")
unit = head.index("Metric Unit") if "Metric Unit" in head else None
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
total = collections.defaultdict(lambda: [0.0, 0])
for r in rows[1:]:
    try:
        total[r[name][:90]][0] += float(r[value].replace(",", "")) * scale.get(r[unit] if unit is not None else "nsecond", 1e-3)
        total[r[name][:90]][1] += 1
    except ValueError:
        pass
print(f"kernels timed: {sum(v[1] for v in total.values())}, {sum(v[0] for v in total.values()):.1f} us in all")
for k, (us, n) in sorted(total.items(), key=lambda kv: -kv[1][0])[:25]:
    print(f"{us:10.1f} us {n:5d}x  {k}")
PY
      ;;
    *) echo "tests/gpu/qwen3.sh: unknown step '$what' (modes, peers, profile, ncu)" >&2; exit 2 ;;
  esac
done
exit $rc
