#!/usr/bin/env bash
# Build, test and benchmark the cuda device on a machine with an NVIDIA GPU, in one go:
#   tests/gpu/run.sh [quick|sweep|profile]
# Where Boost.Test or nlohmann-json are not installed (the lent GPU machine has neither),
# Debian packages placed in .debs/ are unpacked to /tmp/deps and used (see README.md here).
# Logs and figures go to $OUT (default build-gpu/out). "quick" skips the benchmarks;
# "sweep" times the tuning variants (rlx-bench cuda --only sweep) instead of the benchmarks; "profile" runs the
# suites, then ncu on SpMV (rlx and cuSPARSE, power-law and random rows) instead of the
# benchmarks.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/out}
mkdir -p "$OUT"
export RLX_CACHE_DIR=${RLX_CACHE_DIR:-$(mktemp -d)}
EXTRA=()
if [ -d "$ROOT/.debs" ] && ls "$ROOT"/.debs/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/deps
  for f in "$ROOT"/.debs/*.deb; do dpkg -x "$f" /tmp/deps; done
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  EXTRA+=(-DCMAKE_PREFIX_PATH=/tmp/deps/usr -DBoost_INCLUDE_DIR=/tmp/deps/usr/include)
fi
# CMAKE_ARGS="..." adds configure options (e.g. another MPI's compilers, as for the CUDA-aware route).
read -r -a more <<< "${CMAKE_ARGS:-}"
EXTRA+=("${more[@]}")
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${EXTRA[@]}" \
  >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
grep -E "rlx (features|devices)" "$OUT/configure.log"
# TESTS="test_cuda ..." limits the suites (and what is built) to those named.
TESTS=${TESTS:-test_cuda test_cuda_matmul test_cuda_matmul_tf32 test_cuda_matmul_bf16 test_ops test_krylov test_sparse test_models_qwen3}
[ "$TESTS" = - ] && TESTS=  # (TESTS=-: none)
ninja -C "$BUILD" rlx_cli rlx_bench $(echo "$TESTS" | sed 's/test_cuda_matmul_\(tf32\|bf16\)//g') >"$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
"$BUILD/bin/rlx" devices
rc=0
for t in $TESTS; do
  case $t in
    # RLX_CUDA_TF32 is read once per process: the TF32 case runs in a process of its own.
    test_cuda_matmul_tf32) (cd "$BUILD" && RLX_CUDA_TF32=1 ./tests/cuda/test_cuda_matmul \
        --run_test=tf32_* --log_level=test_suite --report_level=short) ;;
    test_cuda_matmul_bf16) (cd "$BUILD" && RLX_CUDA_BF16=all ./tests/cuda/test_cuda_matmul \
        --run_test=sixteen_bit_products_round_x_once_and_sum_in_f32 --log_level=test_suite --report_level=short) ;;
    *) (cd "$BUILD" && ./tests/*/"$t" --log_level=test_suite --report_level=short) ;;
  esac >"$OUT/$t.log" 2>&1
  r=$?
  echo "$t: exit $r"
  # (Boost.Test's failure lines: "error: in", "fatal error"; not the suites' own "normalized error" figures)
  [ $r -ne 0 ] && { sed 's/\x1b\[[0-9;]*m//g' "$OUT/$t.log" | grep -aE "error: in|fatal error|has failed" | head -${ERRLINES:-40}; rc=1; }
done
[ -f "$OUT/test_ops.log" ] && grep -E "test_ops: device" "$OUT/test_ops.log"
"$BUILD/bin/rlx" solve poisson3d:64 --method pcg --pc jacobi --device cuda --explain --out "$OUT/poisson3d.h5" 2>&1 | tail -12
[ "${1:-}" = quick ] && exit $rc
# MATRIX=NAME[,NAME] limits the sweep's SpMV part (rlx-bench cuda --matrix).
if [ "${1:-}" = sweep ]; then
  "$BUILD/bin/rlx-bench" cuda --only sweep ${MATRIX:+--matrix "$MATRIX"} 2>&1 | tee "$OUT/sweep.txt"
  exit $rc
fi
if [ "${1:-}" = profile ]; then
  # Hardware counters of rlx's SpMV kernel and cuSPARSE's on the two matrices where rlx is
  # closest (MATRIX=... to choose): per matrix, rlx's 4 launches (3 warm-ups + 1) then
  # cuSPARSE's 4 calls (partition + csrmv kernels). Clocks left alone (--clock-control none).
  # NCU_KERNELS (a regex), NCU_COUNT and NCU_ONLY (the rlx-bench part) profile other kernels,
  # e.g. the tiled layout's: NCU_ONLY=sweep NCU_KERNELS='^spmv_rowblock$' NCU_COUNT=32.
  for m in $(echo "${MATRIX:-power-law,random:16}" | tr , ' '); do
    ncu --clock-control none -k regex:"${NCU_KERNELS:-spmv_|csr}" -c ${NCU_COUNT:-12} --metrics \
gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,\
sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,\
lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
lts__t_tag_requests.sum,lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed,lts__t_requests_srcunit_tex_op_read.sum,\
lts__t_requests_srcunit_tex_op_write.sum,smsp__inst_executed.sum \
      "$BUILD/bin/rlx-bench" cuda --only "${NCU_ONLY:-spmv}" --matrix "$m" --reps 1 >"$OUT/ncu-${m//:/_}.txt" 2>&1
    echo "ncu $m: exit $?"
    grep -E "^  [a-z].*\(|duration|sectors_srcunit|requests|hit_rate|lts__throughput|dram__bytes|warps_active|registers" \
      "$OUT/ncu-${m//:/_}.txt" | sed -e 's/(const.*) (/ (/' | tail -40
  done
  exit $rc
fi
"$BUILD/bin/rlx-bench" cuda 2>&1 | tee "$OUT/bench.txt"
RLX_CUDA_TF32=1 "$BUILD/bin/rlx-bench" cuda --only gemm 2>&1 | grep tf32 | tee -a "$OUT/bench.txt"
if [ -f "$ROOT/apps/bench/peers_cuda.py" ]; then
  PYTHONUNBUFFERED=1 python3 "$ROOT/apps/bench/peers_cuda.py" 2>&1 | tee "$OUT/peers.txt"
fi
exit $rc
