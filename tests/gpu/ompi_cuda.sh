#!/usr/bin/env bash
# Builds Open MPI with CUDA support, for the CUDA-aware route of cuda collectives
# (docs/distributed.md, "Routes"): Debian's, Ubuntu's and PyPI's Open MPI are built without it
# (`ompi_info`: mpi_built_with_cuda_support:false; the PyPI wheel's mpiext_cuda_c.h says
# MPIX_CUDA_AWARE_SUPPORT 0), so a GPU machine gets one built from Debian's source, with the
# smcuda transport for ranks on one host and libcuda opened at run time (the CUDA headers are
# all it needs to build, so a CPU machine with the toolkit can build it too).
#   tests/gpu/ompi_cuda.sh [OUT.tar.xz]
# Source: .deps/openmpi_4.1.4.orig.tar.xz (or OMPI_SRC; .deps is git-ignored and not carried), from
# http://deb.debian.org/debian/pool/main/o/openmpi/openmpi_4.1.4.orig.tar.xz (6.9 MB, sha256
# ddaee7dbdb01eb4fab1fda5b5e03e8bbff026711806c095c1f39bb410f99f263). Installs to PREFIX
# (/tmp/ompi-cuda); with OUT.tar.xz also packs the install there (unpack with tar -C /tmp).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${OMPI_SRC:-.deps/openmpi_4.1.4.orig.tar.xz}
prefix=${PREFIX:-/tmp/ompi-cuda}
cuda=${CUDA_HOME:-/usr/local/cuda}
out=${1:+$(realpath -m "$1")}  # (absolute: the build runs in another directory)
[ -f "$src" ] || { echo "ompi_cuda: $src is missing (see the header)" >&2; exit 2; }
src=$(realpath "$src")
[ -f "$cuda/include/cuda.h" ] || { echo "ompi_cuda: no $cuda/include/cuda.h (set CUDA_HOME)" >&2; exit 2; }
echo "ddaee7dbdb01eb4fab1fda5b5e03e8bbff026711806c095c1f39bb410f99f263  $src" | sha256sum -c --quiet
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$src"
cd "$work"/openmpi-4.1.4
./configure --prefix="$prefix" --with-cuda="$cuda" --enable-mpi-ext=cuda --disable-mpi-fortran --disable-oshmem \
  --without-ucx --enable-shared --disable-static > "$work/configure.log" 2>&1 || { tail -30 "$work/configure.log"; exit 1; }
make -j"$(nproc)" > "$work/make.log" 2>&1 || { grep -E "error" "$work/make.log" | head -30; exit 1; }
make install > "$work/install.log" 2>&1 || { tail -30 "$work/install.log"; exit 1; }
"$prefix/bin/ompi_info" --parsable --all | grep -E "mpi_built_with_cuda_support:value"
if [ -n "$out" ]; then
  tar -C "$(dirname "$prefix")" -cf - "$(basename "$prefix")" | xz -T0 -6 > "$out"
  echo "ompi_cuda: wrote $out ($(du -h "$out" | cut -f1))"
fi
