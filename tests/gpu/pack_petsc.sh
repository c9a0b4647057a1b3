#!/usr/bin/env bash
# Packs PETSc for a GPU machine that has OpenMPI but no PETSc (the lent H200: Ubuntu, OpenMPI
# 4.1.6): rlx-bench-petsc (built here against Debian's petsc-dev) and the shared libraries it
# needs except MPI's and the C/C++ runtime's, which the machine's own serve (same sonames, ABI
# kept within OpenMPI 4.1). Libraries a machine usually has (TLS, Kerberos, X11, ...) go to
# sys/, which tests/gpu/scaling.sh links in only where the machine lacks them.
#   tests/gpu/pack_petsc.sh [OUT.tar.xz]        (default .gpu/petsc.tar.xz; ~34 MB, ~1.5 min)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.gpu/petsc.tar.xz}
bin=build/bin/rlx-bench-petsc
[ -x "$bin" ] || { echo "pack_petsc: $bin is missing (install petsc-dev, reconfigure, build rlx_bench_petsc)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/petscroot/lib" "$tmp/petscroot/sys"
for f in $(ldd "$bin" | awk '{print $3}' | grep -v '^$'); do
  b=$(basename "$f")
  case $b in
    libmpi*|libopen-rte*|libopen-pal*|libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl.so*|librt.so*|ld-linux*|libhwloc*|libevent*|libz.so*|libudev*|libresolv*) ;;
    libpetsc*|libHYPRE*|libspqr*|libumfpack*|libamd*|libcholmod*|libklu*|libdmumps*|libmumps*|libscalapack*|libsuperlu*|libtrilinos*|libfftw*|liblapack*|libblas*|libopenblas*|libptscotch*|libscotch*|libhdf5*|libyaml*|libgfortran*|libsuitesparse*|libcolamd*|libccolamd*|libcamd*|libmetis*|libgomp*|libbtf*|libCombBLAS*|libquadmath*|libsz*|libaec*)
      cp -L "$f" "$tmp/petscroot/lib/$b" ;;
    *) cp -L "$f" "$tmp/petscroot/sys/$b" ;;
  esac
done
cp "$bin" "$tmp/petscroot/"
mkdir -p "$(dirname "$out")"
tar -C "$tmp" -cf - petscroot | xz -T2 -6 > "$out"
echo "pack_petsc: wrote $out ($(du -h "$out" | cut -f1))"
