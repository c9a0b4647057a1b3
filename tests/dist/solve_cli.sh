#!/usr/bin/env bash
# `mpirun -n N rlx solve` end to end: a Matrix Market file read in parallel (contiguous), the
# same matrix in an HDF5 file read in parallel, read by rank 0 for METIS and Scotch and in
# parallel for PT-Scotch, each
# solution file equal to the serial run's (h5_compare: x and b in the user's order within
# 1e-8, `ranks` = N), the summary line naming ranks and partition,
# and a malformed file refused by every rank with exit 2 and the offending line, no hang.
# HDF5 is parallel or serial as the build's: with parallel HDF5 the ranks write the file
# together ("parallel HDF5" in rank 0's line), else rank 0 writes what it gathered.
#   solve_cli.sh MPIEXEC RLX H5_COMPARE serial|parallel
set -u
mpiexec=$1 rlx=$2 compare=$3 hdf5=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
np=3
"$rlx" gen poisson --dim 2 --n 30 -o "$dir/A.mtx" >/dev/null || fail "gen"
opts="--method pcg --pc jacobi --rhs random --rtol 1e-10"
"$rlx" solve "$dir/A.mtx" $opts --out "$dir/serial.h5" >"$dir/serial.log" 2>&1 || { cat "$dir/serial.log"; fail "serial solve"; }

# Contiguous, every rank reading its share: the Matrix Market file, and the same matrix in
# rlx's HDF5 CSR layout (each rank its own rows); both the serial .mtx run's solution.
"$rlx" gen poisson --dim 2 --n 30 -o "$dir/A.h5" >/dev/null || fail "gen .h5"
for m in A.mtx A.h5; do
  out="$dir/contiguous_${m%.*}.h5" log="$dir/c_${m%.*}.log"
  "$mpiexec" -n $np --oversubscribe "$rlx" solve "$dir/$m" $opts --out "$out" >"$log" 2>&1 || { cat "$log"; fail "contiguous solve of $m"; }
  cat "$log"
  grep -q "^matrix: $dir/$m (900 x 900, 4380 nonzeros, f64; read in parallel)" "$log" || fail "$m was not read in parallel"
  grep -Eq "^ranks: $np  partition: contiguous  rows per rank: 300-300  halo per SpMV: [1-9]" "$log" || fail "summary line ($m)"
  "$compare" "$dir/serial.h5" "$out" 1e-8 $np || fail "the contiguous result of $m differs from the serial one"
  if [ "$hdf5" = parallel ]; then
    grep -q "^wrote $out (parallel HDF5, $np ranks)" "$log" || fail "not written with parallel HDF5"
  else
    grep -q "^wrote $out\$" "$log" || fail "not written by rank 0"
  fi
done

# The graph partitioners: for METIS and Scotch rank 0 reads the file and partitions, for
# PT-Scotch every rank reads its share and they partition together; the solution comes back
# in the user's order. A build without one refuses it, saying so.
for part in metis scotch ptscotch; do
  if "$mpiexec" -n $np --oversubscribe "$rlx" solve "$dir/A.mtx" $opts --partition $part --out "$dir/$part.h5" >"$dir/$part.log" 2>&1; then
    cat "$dir/$part.log"
    if [ $part = ptscotch ]; then
      grep -q "read in parallel, partitioned in parallel)" "$dir/$part.log" || fail "ptscotch: not read and partitioned in parallel"
    else
      grep -q "read by rank 0" "$dir/$part.log" || fail "$part needs rank 0's read"
    fi
    grep -Eq "^ranks: $np  partition: $part  rows per rank: " "$dir/$part.log" || fail "summary line ($part)"
    "$compare" "$dir/serial.h5" "$dir/$part.h5" 1e-8 $np || fail "$part result differs from the serial one"
  else
    cat "$dir/$part.log"
    grep -qi "built without $part" "$dir/$part.log" || fail "$part solve failed"
    echo "(this build has no $part: refused as expected)"
  fi
done

# Rows numbered at random: the halo METIS, Scotch and PT-Scotch report is far smaller than
# the contiguous split's.
halo() { sed -n 's/.*halo per SpMV: \([0-9]*\) bytes sent in all.*/\1/p' "$1"; }
"$rlx" gen poisson --dim 2 --n 30 --shuffle 5 -o "$dir/R.mtx" >/dev/null || fail "gen --shuffle"
"$mpiexec" -n $np --oversubscribe "$rlx" solve "$dir/R.mtx" $opts >"$dir/rc.log" 2>&1 || { cat "$dir/rc.log"; fail "shuffled, contiguous"; }
for part in metis scotch ptscotch; do
  if "$mpiexec" -n $np --oversubscribe "$rlx" solve "$dir/R.mtx" $opts --partition $part >"$dir/r$part.log" 2>&1; then
    hc=$(halo "$dir/rc.log") hp=$(halo "$dir/r$part.log")
    echo "shuffled poisson2d 30x30 on $np ranks: halo per SpMV $hc bytes contiguous, $hp bytes $part"
    [ -n "$hc" ] && [ -n "$hp" ] && [ "$hp" -lt $((hc / 2)) ] || fail "$part halo $hp is not below half the contiguous $hc"
  fi
done

# A malformed entry near the end of the file: the last rank finds it, every rank exits 2.
lines=$(wc -l <"$dir/A.mtx")
sed "${lines}s/\$/ x/" "$dir/A.mtx" >"$dir/bad.mtx"
timeout 60 "$mpiexec" -n $np --oversubscribe "$rlx" solve "$dir/bad.mtx" $opts >"$dir/bad.log" 2>&1
rc=$?
cat "$dir/bad.log"
[ $rc -eq 2 ] || fail "malformed file: exit $rc, expected 2"
grep -q "bad.mtx:$lines: unexpected text 'x'" "$dir/bad.log" || fail "the error does not name line $lines"
[ "$(grep -c "unexpected text" "$dir/bad.log")" -eq 1 ] || fail "the error is printed more than once"
echo "PASS"
