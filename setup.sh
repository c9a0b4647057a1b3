#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root), configures, builds with ccache, and runs
# the main job on its embedded default: a 3D Poisson problem (64^3 unknowns) solved with
# Jacobi-preconditioned CG on the cpu device, the solution written to build/poisson3d.h5.
# Re-running is cheap: apt is skipped when nothing is missing and the build is incremental.
#   ./setup.sh            build into ./build and run the main job
#   BUILD_DIR=dir ./setup.sh
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=${BUILD_DIR:-build}

PACKAGES=(g++ cmake ninja-build pkg-config ccache libopenblas-dev libboost-test-dev nlohmann-json3-dev libhdf5-dev libsuitesparse-dev libeigen3-dev zlib1g-dev libpng-dev libopenmpi-dev openmpi-bin libonnx-dev libprotobuf-dev protobuf-compiler libmetis-dev libscotch-dev libptscotch-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Paths relative to the checkout in ccache's keys: a fresh clone elsewhere still hits the cache.
export CCACHE_BASEDIR="$PWD"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
cmake --build "$BUILD_DIR" -j "$(nproc)"
"$BUILD_DIR/bin/rlx" solve poisson3d:64 --method pcg --pc jacobi --rtol 1e-8 --explain --out "$BUILD_DIR/poisson3d.h5"
