#!/usr/bin/env bash
# Runs every fuzz target on its corpus for N seconds (default 60):
#   tests/fuzz/run.sh [seconds-per-target] [build-dir]      (build-dir: build-san/, from tests/sanitize.sh)
#   TARGETS="npy ir_text" tests/fuzz/run.sh 30               (a subset)
#   JOBS=1 tests/fuzz/run.sh                                 (targets at once; default 2, one per core here)
#   FUZZ_FLAGS="-fork=16 -ignore_timeouts=0 -ignore_ooms=0" JOBS=1 tests/fuzz/run.sh 600
#                                                            (extra libFuzzer flags: the long run on 16 cores;
#                                                             fork mode ignores hangs and OOMs unless told not to)
#   FUZZ_SEED=1 tests/fuzz/run.sh 60                         (a fixed mutation seed: CI's, so a run repeats)
# New interesting inputs go to <build-dir>/fuzz-corpus/<target>/ (kept between local runs,
# never committed); the seed corpus tests/fuzz/corpus/<target>/ is only read. A crash, a
# sanitizer report, a leak, a hang (-timeout=10 s), an input that uses more than 2 GiB or
# a single allocation above 1 GiB is a finding: its input is saved in tests/fuzz/findings/
# (Inputs are mutated up to 8 KiB: longer seeds, like ir_text's 30,000 nested brackets,
# are cut there while fuzzing; the sanitizer suite's corpus replay runs them whole.)
# and the script exits 1 once every target has run. Each target's log: <build-dir>/fuzz-<target>.log.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SECONDS_PER_TARGET=${1:-60}
BUILD=${2:-$ROOT/build-san}
# (default: every fuzz_<name>.cpp beside this script)
TARGETS=${TARGETS:-$(cd "$HERE" && ls fuzz_*.cpp | sed -E 's/^fuzz_(.*)\.cpp$/\1/' | tr '\n' ' ')}
JOBS=${JOBS:-2}
FINDINGS="$HERE/findings"
mkdir -p "$FINDINGS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
       LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/tests/lsan.supp}
[ -x /usr/lib/llvm-16/bin/llvm-symbolizer ] && export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-16/bin/llvm-symbolizer

fuzz_one() {  # target -> exit 0 (nothing found) or 1 (a finding), with a summary on stdout
  local t=$1 bin="$BUILD/tests/fuzz/fuzz_$1" work="$BUILD/fuzz-corpus/$1" log="$BUILD/fuzz-$1.log"
  mkdir -p "$work"
  local before after rc
  before=$(ls "$FINDINGS" | grep -c "^$t-")
  # shellcheck disable=SC2086
  "$bin" "$work" "$HERE/corpus/$t" -dict="$HERE/$t.dict" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=8192 -artifact_prefix="$FINDINGS/$t-" -print_final_stats=1 \
    ${FUZZ_SEED:+-seed=$FUZZ_SEED} \
    ${FUZZ_FLAGS:-} >"$log" 2>&1
  rc=$?
  after=$(ls "$FINDINGS" | grep -c "^$t-")
  # The closing figures: executions, speed, coverage.
  # (fork mode prints no stat:: lines; its parent's last "#N: cov:" line has the totals)
  echo "fuzz $t: $(grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" | tr '\n' ' ')" \
       "$(grep -E '(DONE|INITED|pulse|NEW|REDUCE) +cov|^#[0-9]+: cov' "$log" | tail -1 | sed -E 's/^#([0-9]+)\s+\S+\s+/#\1 /')"
  if [ $rc -ne 0 ] || [ "$after" -gt "$before" ]; then
    echo "fuzz $t: FINDING (exit $rc), input in $FINDINGS/:"
    grep -E -A25 "^==[0-9]+==ERROR|runtime error|rlx fuzz finding|ALARM|out-of-memory|Test unit written" "$log" | head -60
    return 1
  fi
  return 0
}

# (fuzz_onnx exists only where the ONNX importer is built: libonnx-dev and protobuf found)
if [ ! -x "$BUILD/tests/fuzz/fuzz_onnx" ] && [[ " $TARGETS " == *" onnx "* ]]; then
  echo "fuzz: onnx skipped: $BUILD was configured without the ONNX importer (onnx=OFF)"
  TARGETS=$(echo " $TARGETS " | sed 's/ onnx / /')
fi
for t in $TARGETS; do
  if [ ! -x "$BUILD/tests/fuzz/fuzz_$t" ]; then
    echo "fuzz: $BUILD/tests/fuzz/fuzz_$t is missing (build it with tests/sanitize.sh)" >&2
    exit 2
  fi
done
echo "== fuzz: $TARGETS, ${SECONDS_PER_TARGET} s each, $JOBS at a time"
status=0
running=0
for t in $TARGETS; do
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
[ $status -eq 0 ] && echo "== fuzz: no findings" || echo "== fuzz: FINDINGS in $FINDINGS/" >&2
exit $status
