#!/usr/bin/env bash
# A rank killed with SIGKILL in the middle of a distributed solve ends the whole job within
# 10 seconds, with a message naming the rank (OpenMPI's default, which rlx keeps).
#   rank_killed.sh MPIEXEC RLX
set -u
mpiexec=$1 rlx=$2
log=$(mktemp)
# rtol 0: the solve runs until --max-it, far longer than the test.
"$mpiexec" -n 2 --oversubscribe "$rlx" solve poisson3d:40 --method cg --rtol 0 --max-it 100000000 >"$log" 2>&1 &
job=$!
for _ in $(seq 100); do  # wait for both ranks
  pids=$(pgrep -P "$job" -f "solve poisson3d:40" || true)
  [ "$(echo "$pids" | wc -w)" -ge 2 ] && break
  sleep 0.1
done
victim=$(echo "$pids" | tail -1)
[ -n "$victim" ] || { echo "FAIL: the ranks did not start"; cat "$log"; exit 1; }
sleep 1
kill -9 "$victim"
start=$(date +%s)
while kill -0 "$job" 2>/dev/null; do
  if (( $(date +%s) - start > 10 )); then
    echo "FAIL: the job still runs 10 s after rank pid $victim was killed"
    kill -9 "$job"
    exit 1
  fi
  sleep 0.1
done
wait "$job"
rc=$?
cat "$log"
[ "$rc" -ne 0 ] || { echo "FAIL: mpirun returned 0"; exit 1; }
grep -Eq "rank [0-9]+ .*(signal 9|Killed)" "$log" || { echo "FAIL: no message naming the killed rank"; exit 1; }
echo "PASS: the job ended $(( $(date +%s) - start )) s after the kill, exit $rc"
