#!/usr/bin/env bash
# Gaussian splatting on a machine with an NVIDIA GPU, in one go (docs/splat.md, "On cuda"):
#   tests/gpu/splat.sh [quick|bench]
# Builds rlx, rlx-bench, test_splat and test_ops in build-gpu/ and runs the two suites through
# tests/gpu/run.sh (which also runs its poisson3d solve): test_splat's every case on reference,
# cpu and cuda, test_ops with splat_render's row and VJP among all ops. Then shows the ops'
# routes, runs test_splat's crowded case under compute-sanitizer (memcheck, racecheck) and two
# cases with the float-atomics backward (RLX_CUDA_SPLAT_ATOMICS=1), fits the example scene's
# views with rlx splat fit --device cuda (with and without --densify), and times rlx-bench splat
# (forward and forward+backward, medians of 20 runs: 100k and 1M Gaussians at 1920x1080, again
# with the atomics backward, 10k at 640x480) with an image check against the cpu device, and
# gsplat on the same scenes (apps/bench/peers_splat.py) where it can be installed from the
# wheels in .whl/ (README.md here). "quick": build and tests only; "bench": build and
# benchmarks only. Logs and figures go to $OUT (default build-gpu/out); the scenes for
# gsplat to $BUILD/scenes*.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export BUILD=${BUILD:-$ROOT/build-gpu}
export OUT=${OUT:-$BUILD/out}
MODE=${1:-all}
# Configure, build and run the suites through run.sh (its flags, its .debs/ handling).
if [ "$MODE" = bench ]; then TESTS=-; else TESTS="test_splat test_ops"; fi
TESTS=$TESTS "$ROOT/tests/gpu/run.sh" quick
rc=$?
grep -q FAILED "$OUT/build.log" && exit 1
[ -d /tmp/deps/usr/lib/x86_64-linux-gnu ] && export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$BUILD/bin/rlx" ops | grep -E "^\| (op|splat)" | tee "$OUT/splat_routes.txt"
if [ "$MODE" != bench ]; then
  grep -E "seed|Leaving test case" "$OUT/test_splat.log" | head -20
  # A render and its gradient under compute-sanitizer (memcheck, then racecheck on the
  # rasterizers' shared memory): the crowded-tiles case has lists longer than one batch.
  if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
      (cd "$BUILD" && compute-sanitizer --tool $tool --error-exitcode 3 ./tests/splat/test_splat \
        --run_test=crowded_tiles_match_the_oracle_and_the_reference) >"$OUT/sanitizer_$tool.log" 2>&1
      r=$?
      echo "compute-sanitizer $tool: exit $r"
      [ $r -ne 0 ] && { grep -E "=====|error" "$OUT/sanitizer_$tool.log" | head -20; rc=1; }
    done
  fi
  # The float-atomics variant of the backward (RLX_CUDA_SPLAT_ATOMICS=1) against reference.
  (cd "$BUILD" && RLX_CUDA_SPLAT_ATOMICS=1 ./tests/splat/test_splat \
    --run_test=crowded_tiles_match_the_oracle_and_the_reference,backward_matches_the_lowering_and_the_reference) \
    >"$OUT/test_splat_atomics.log" 2>&1
  r=$?
  echo "test_splat with RLX_CUDA_SPLAT_ATOMICS=1: exit $r"
  [ $r -ne 0 ] && { sed 's/\x1b\[[0-9;]*m//g' "$OUT/test_splat_atomics.log" | grep -aE "error: in|fatal error|has failed" | head -20; rc=1; }
  # rlx splat fit on cuda (docs/splat.md, "Densification"): the example's four ring views fitted
  # from 200 random Gaussians, without densification, with it, and with a tenfold threshold
  # (the cpu figures are in docs/splat.md).
  mkdir -p "$OUT/fit_views"
  for i in 0 1 2 3; do
    "$BUILD/bin/rlx" splat render "$ROOT/data/splat/scene.ply" --camera "$ROOT/data/splat/ring.json" --view $i \
      -o "$OUT/fit_views/view$i.png" >/dev/null || rc=1
  done
  for extra in "" "--densify" "--densify --grad-threshold 0.002"; do
    echo "== rlx splat fit --device cuda $extra" | tee -a "$OUT/splat_fit.txt"
    "$BUILD/bin/rlx" splat fit --images "$OUT/fit_views" --cameras "$ROOT/data/splat/ring.json" --count 200 \
      --iters 300 --report-every 30 --device cuda $extra -o "$OUT/fit.ply" >>"$OUT/splat_fit.txt" 2>&1 || rc=1
    grep -E "^(iter 300/300|fitted|rlx:)" "$OUT/splat_fit.txt" | tail -2
  done
fi
[ "$MODE" = quick ] && exit $rc
"$BUILD/bin/rlx-bench" splat --device cuda --gaussians 100000,1000000 --size 1920x1080 --reps 20 \
  --dump "$BUILD/scenes" 2>&1 | tee "$OUT/splat_bench.txt"
RLX_CUDA_SPLAT_ATOMICS=1 "$BUILD/bin/rlx-bench" splat --device cuda --gaussians 100000,1000000 --size 1920x1080 \
  --reps 20 2>&1 | sed -e 's/^splat /splat (atomics) /' -e 's/^RESULT splat /RESULT splat_atomics /' |
  tee -a "$OUT/splat_bench.txt"
"$BUILD/bin/rlx-bench" splat --device cuda --gaussians 10000 --size 640x480 --reps 20 --check 1 \
  --dump "$BUILD/scenes_small" 2>&1 | tee -a "$OUT/splat_bench.txt"
"$BUILD/bin/rlx-bench" splat --device cuda --gaussians 100000 --size 1920x1080 --reps 3 --check 1 2>&1 |
  grep -E "check" | tee -a "$OUT/splat_bench.txt"
if [ -d "$ROOT/.whl" ] && ! python3 -c "import gsplat" 2>/dev/null; then
  python3 -m pip install --no-index --no-deps --find-links "$ROOT/.whl" gsplat jaxtyping rich ninja wadler_lindig \
    markdown_it_py mdurl pygments >"$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
fi
if python3 -c "import gsplat" 2>/dev/null; then
  t1=$(date +%s)
  # (gsplat compiles its CUDA extension on first use; the first scene's warm-up pays for it)
  PYTHONUNBUFFERED=1 python3 "$ROOT/apps/bench/peers_splat.py" "$BUILD/scenes_small" 2>&1 | tee "$OUT/splat_peers.txt"
  echo "gsplat first use (extension build + 640x480): $(( $(date +%s) - t1 )) s" | tee -a "$OUT/splat_peers.txt"
  PYTHONUNBUFFERED=1 python3 "$ROOT/apps/bench/peers_splat.py" "$BUILD/scenes" 2>&1 | tee -a "$OUT/splat_peers.txt"
else
  echo "gsplat not importable: no peer figures"
fi
exit $rc
