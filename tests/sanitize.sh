#!/usr/bin/env bash
# The CPU suites under AddressSanitizer + UndefinedBehaviorSanitizer, in a build of their own:
#   tests/sanitize.sh [build-dir]      (default build-asan; a cold build takes ~10 min on 2 cores)
# Not part of CI (one build there). UB aborts the test (-fno-sanitize-recover). One case is
# left out: test_sparse's impossible_sizes_are_errors_not_crashes asks for 2^53 bytes on
# purpose and expects std::bad_alloc, which ASan's allocator reports as a fatal error instead.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build-asan}
FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLX_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C "$BUILD"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
ctest --test-dir "$BUILD" --output-on-failure -j 2 -E '^test_sparse$'
"$BUILD"/tests/sparse/test_sparse --run_test='!matrix_market/impossible_sizes_are_errors_not_crashes'
