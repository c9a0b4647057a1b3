#!/usr/bin/env bash
# Strong scaling of distributed PCG, rlx against PETSc's KSPCG, on the CPU cores of a GPU
# machine (docs/benchmarks.md, "strong scaling on 16 cores"). PETSc comes from
# tests/gpu/pack_petsc.sh's tarball (carry .gpu and .debs); rlx is built by run.sh.
#   OUT=dir [SIZES="128 200"] [NPS="16 8 4 2 1" | NPS=-] [PCS="jacobi bjacobi"] [BUDGET=540] \
#     [PETSC_TAR=.gpu/petsc.tar.xz] [NOBUILD=1] [STREAM=1] [PROFILE=1 [PROFILE_PCS=..]] \
#     [SPMVS="auto scalar"] [PFS="512 128"] [PF_PROFILE=1 [PF_VARIANTS="A=1 A=2,B=0"] [PF_MAXIT=60] [PF_ROUNDS=3]]
#     [METHODS="pcg pipecg"] tests/gpu/scaling.sh
# Lines "RLX n= pc= np= rep= ... time: setup S s, solve S s" and "PETSC ... KSPSolve" go to
# $OUT/log.txt; STREAM=1 adds the triad bandwidth on 1..16 processes; PROFILE=1 the per-kernel
# profile of rlx (RLX_PROFILE=1) and PETSc's -log_view at 16 ranks on 128^3, for each
# preconditioner of PROFILE_PCS (default jacobi). SPMVS: the cpu SpMV row forms rlx runs with
# (RLX_CPU_SPMV, each a line "RLX ... spmv=MODE"; default auto only); PFS the SpMV prefetch
# distances (RLX_CPU_SPMV_PREFETCH, "pf=N"; default the built-in one). PF_PROFILE=1 first logs,
# on one rank and each size, rlx's per-kernel times of a CG iteration (RLX_PROFILE) under each
# setting of PF_VARIANTS (default: each distance of PFS) and PETSc's MatMult and vector times
# (-log_view), alternating, PF_ROUNDS rounds (3); PF_MAXIT caps both solves' iterations. METHODS: rlx's --method
# (default pcg), each against PETSc's KSP of that name (pcg: cg, pipecg: pipecg), "method=M".
set -u
cd "$(dirname "$0")/../.."
: "${OUT:?OUT=dir}"
T0=$(date +%s)
L=$OUT/log.txt
log() { echo "$@" >> "$L"; }
P=/tmp/petsc/petscroot
if [ ! -e $P/rlx-bench-petsc ]; then
  log "== machine"; lscpu | grep -E "Model name|Socket|Core|Thread|NUMA|L3|^CPU\(s\)" >> "$L"; free -g | head -2 >> "$L"
  ompi_info --parsable --all 2>/dev/null | grep -i "cuda_support:value" >> "$L"; ompi_info | grep -i "open mpi:" >> "$L"
  mkdir -p /tmp/petsc && tar -C /tmp/petsc -xJf "${PETSC_TAR:-.gpu/petsc.tar.xz}"
  mkdir -p $P/use
  for l in $(LD_LIBRARY_PATH=$P/lib ldd $P/rlx-bench-petsc | awk '/not found/{print $1}'); do
    [ -e $P/sys/$l ] && ln -sf $P/sys/$l $P/use/$l
  done
fi
PLD=$P/lib:$P/use
LD_LIBRARY_PATH=$PLD ldd $P/rlx-bench-petsc | grep "not found" >> "$L"
[ -n "${NOBUILD:-}" ] || { OUT=$OUT TESTS=- timeout 250 tests/gpu/run.sh quick > "$OUT/build.txt" 2>&1; log "run.sh exit $? at $(($(date +%s)-T0)) s"; }
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 RLX_NUM_THREADS=1 OMP_NUM_THREADS=1
CORES=$(lscpu -p=core | grep -v '^#' | sort -u | wc -l)
if [ "$CORES" -ge 16 ]; then BIND="--bind-to core --map-by core"; else BIND="--use-hwthread-cpus --bind-to hwthread --map-by hwthread"; fi
M="mpirun --oversubscribe $BIND"
if [ -n "${STREAM:-}" ]; then
  mpicc -O3 -march=native -o /tmp/stream tests/gpu/stream.c
  for np in 1 2 4 8 16; do $M -n $np /tmp/stream >> "$L" 2>&1; done
fi
if [ -n "${PROFILE:-}" ]; then
  for pc in ${PROFILE_PCS:-jacobi}; do
    RLX_PROFILE=1 $M -n 16 build-gpu/bin/rlx solve poisson3d:128 --method pcg --pc $pc --rtol 1e-8 > "$OUT/prof_rlx16_$pc.txt" 2>&1
    LD_LIBRARY_PATH=$PLD $M -n 16 $P/rlx-bench-petsc -n 128 -reps 1 -pc_type $pc -log_view > "$OUT/prof_petsc16_$pc.txt" 2>&1
  done
fi
if [ -n "${PF_PROFILE:-}" ]; then
  # Each of PF_VARIANTS is a comma-separated list of settings (default: each distance of PFS);
  # the line holds the first program's kernels (the iteration's), ms per run.
  vs=${PF_VARIANTS:-$(for pf in ${PFS:-512}; do printf 'RLX_CPU_SPMV_PREFETCH=%s ' $pf; done)}
  for n in ${SIZES:-128 200}; do for r in $(seq ${PF_ROUNDS:-3}); do
    for v in $vs; do
      o=$(env ${v//,/ } RLX_PROFILE=1 timeout 200 $M -n 1 build-gpu/bin/rlx solve poisson3d:$n --method pcg --pc jacobi \
          --rtol 1e-8 ${PF_MAXIT:+--max-it $PF_MAXIT} 2>&1)
      log "PFPROF n=$n $v rep=$r $(echo "$o" | awk '/^rlx profile/{b++} b==1 && /^  k/{printf "%s %s ", $4, $3}') $(echo "$o" | grep -E "^time")"
    done
    o=$(LD_LIBRARY_PATH=$PLD timeout 200 $M -n 1 $P/rlx-bench-petsc -n $n -reps 1 -pc_type jacobi \
        ${PF_MAXIT:+-ksp_max_it $PF_MAXIT} -log_view 2>&1)
    log "PFPROF n=$n petsc rep=$r $(echo "$o" | grep -E "^(MatMult|VecTDot|VecAXPY|VecAYPX|VecPointwiseMult|KSPSolve) " | tr -s ' ' | cut -d' ' -f1-4 | tr '\n' ' ')"
  done; done
fi
[ "${NPS:-}" = - ] && NPS=" "  # (NPS=-: no scaling runs, e.g. after PF_PROFILE)
for n in ${SIZES:-128 200}; do for pc in ${PCS:-jacobi bjacobi}; do for np in ${NPS:-16 8 4 2 1}; do
  reps=1; [ $np -ge 4 ] && reps=3
  for r in $(seq $reps); do
    el=$(($(date +%s)-T0)); [ $el -gt ${BUDGET:-540} ] && { log "budget: skip n=$n pc=$pc np=$np at $el s"; continue; }
    for me in ${METHODS:-pcg}; do
    for sp in ${SPMVS:-auto}; do for pf in ${PFS:-512}; do
      o=$(RLX_CPU_SPMV=$sp RLX_CPU_SPMV_PREFETCH=$pf timeout 200 $M -n $np build-gpu/bin/rlx solve poisson3d:$n --method $me --pc $pc --rtol 1e-8 2>&1)
      log "RLX n=$n pc=$pc np=$np rep=$r method=$me spmv=$sp pf=$pf $(echo "$o" | grep -E "^reason|^time" | tr '\n' ' ')"
    done; done
    o=$(LD_LIBRARY_PATH=$PLD timeout 200 $M -n $np $P/rlx-bench-petsc -n $n -reps 1 -pc_type $pc -ksp_type ${me/pcg/cg} 2>&1)
    log "PETSC n=$n pc=$pc np=$np rep=$r method=$me $(echo "$o" | grep -E "PETSc KSP" | tr '\n' ' ')"
    done
  done
done; done; done
log "== scaling end $(($(date +%s)-T0)) s"
