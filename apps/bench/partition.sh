#!/usr/bin/env bash
# The distributed solve's partitioners side by side on a 3D Poisson matrix whose unknowns are
# numbered at random (rlx gen --shuffle: a contiguous split of it cuts nearly every edge):
# contiguous (every rank reads its share), metis and scotch (rank 0 reads the whole file
# and partitions), ptscotch (every rank reads its share, then PT-Scotch partitions in
# parallel). For each: setup (read + partition + build, rank 0's clock), solve, iterations,
# halo bytes per SpMV, and the largest and smallest peak resident memory of the ranks (GNU
# time), medians of ROUNDS runs taken in turn.
#   N=64 NP=2 ROUNDS=3 apps/bench/partition.sh [build/bin/rlx]
set -eu
rlx=${1:-build/bin/rlx}
N=${N:-64} NP=${NP:-2} ROUNDS=${ROUNDS:-3} PARTS=${PARTS:-"contiguous metis scotch ptscotch"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 RLX_NUM_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$rlx" gen poisson --dim 3 --n "$N" --shuffle 1 -o "$dir/A.mtx"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $NP ranks; $(mpirun --version | head -1)"
for round in $(seq "$ROUNDS"); do
  for part in $PARTS; do
    mpirun --oversubscribe -n "$NP" /usr/bin/time -f "maxrss_kb %M" "$rlx" solve "$dir/A.mtx" --method pcg --pc jacobi \
      --rtol 1e-8 --partition "$part" >"$dir/$part.$round.log" 2>&1 || { cat "$dir/$part.$round.log"; exit 1; }
  done
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
printf "%-11s %9s %9s %6s %14s %15s %15s\n" partition setup_s solve_s its halo_bytes rss_largest_MB rss_smallest_MB
for part in $PARTS; do
  logs=("$dir/$part".*.log)
  setup=$(sed -n 's/^time: setup \([0-9.]*\) s.*/\1/p' "${logs[@]}" | median)
  solve=$(sed -n 's/^time: .*solve \([0-9.]*\) s/\1/p' "${logs[@]}" | median)
  its=$(sed -n 's/.*iterations: \([0-9]*\).*/\1/p' "${logs[0]}")
  halo=$(sed -n 's/.*halo per SpMV: \([0-9]*\) bytes.*/\1/p' "${logs[0]}")
  # GNU time's lines come in no rank order: the largest is rank 0's where rank 0 reads the
  # whole file; reported as the largest and the smallest.
  hi=$(for l in "${logs[@]}"; do sed -n 's/^maxrss_kb //p' "$l" | sort -g | tail -1; done | median)
  lo=$(for l in "${logs[@]}"; do sed -n 's/^maxrss_kb //p' "$l" | sort -g | head -1; done | median)
  printf "%-11s %9s %9s %6s %14s %15.0f %15.0f\n" "$part" "$setup" "$solve" "$its" "$halo" "$(echo "$hi / 1024" | bc -l)" "$(echo "$lo / 1024" | bc -l)"
done
