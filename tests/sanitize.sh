#!/usr/bin/env bash
# The CPU suites under a sanitizer, in a build of their own (CI runs the address mode):
#   tests/sanitize.sh [address|thread] [build-dir]
#     address (default): clang 16 with -DRLX_FUZZ=ON: AddressSanitizer + UndefinedBehavior-
#       Sanitizer (UB fatal) and libFuzzer's coverage instrumentation on every object; runs
#       every suite, then replays every fuzz corpus (tests/fuzz) once; build-san/. The same
#       folder holds the fuzz targets that tests/fuzz/run.sh runs. Installs clang-16 and its
#       runtimes when missing (Debian 12, as root or with sudo). Not clang 14: it lacks
#       __builtin_source_location, so libstdc++ 12's <source_location> (ir/frontend.hpp) is empty.
#     thread: GCC with ThreadSanitizer and tests/tsan.supp (uninstrumented third-party
#       threads); build-tsan/. Under ThreadSanitizer the cpu kernels are built without
#       target_clones (ifunc resolvers run before its runtime starts).
# Cold, on 2 cores: see tests/README.md. No case is left out any more: the one that asked
# for 2^53 bytes on purpose (test_sparse's impossible_sizes_are_errors_not_crashes) now gets
# a ParseError before anything is allocated.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=${1:-address}
JOBS=${JOBS:-2}
export CCACHE_BASEDIR="$ROOT"
case $MODE in
  address)
    BUILD=${2:-$ROOT/build-san}
    # libclang-rt-16-dev: ASan, UBSan and libFuzzer; llvm-16: llvm-symbolizer.
    PACKAGES=(clang-16 libclang-rt-16-dev llvm-16)
    missing=()
    for p in "${PACKAGES[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
      echo "sanitize: installing ${missing[*]}"
      SUDO=""
      [ "$(id -u)" -eq 0 ] || SUDO="sudo"
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
    # -O1 and line tables only: the build is the slow part on 2 cores (tests/README.md).
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLX_FUZZ=ON \
      -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      >/dev/null
    # (HDF5 handles a failed malloc of a damaged file's claimed sizes: let it see one)
    export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
           UBSAN_OPTIONS=print_stacktrace=1 \
           ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-16/bin/llvm-symbolizer \
           LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp"
    ;;
  thread)
    BUILD=${2:-$ROOT/build-tsan}
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLX_CUDA=OFF \
      -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
    export TSAN_OPTIONS="suppressions=$ROOT/tests/tsan.supp"
    ;;
  *) echo "tests/sanitize.sh: unknown mode '$MODE' (address or thread)" >&2; exit 2 ;;
esac
# address: what the tests run (suites, CLI, examples, fuzz targets), not apps/bench (a tenth of the build)
if [ "$MODE" = address ]; then ninja -C "$BUILD" -j "$JOBS" tests/all examples/all; else ninja -C "$BUILD" -j "$JOBS"; fi
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 1500
