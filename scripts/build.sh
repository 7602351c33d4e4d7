#!/usr/bin/env bash
# Configures and builds ctune (Release) into ./build, or the directory given as $1.
# Extra CMake arguments follow the directory, e.g. scripts/build.sh build-asan -DCTUNE_SANITIZE=ON
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
# ccache (CMakeLists.txt) keys compilations by paths relative to the checkout, so a fresh clone
# elsewhere (CI's) reuses what an earlier build of the same sources compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
shift || true
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
else
  cmake -S . -B "$BUILD_DIR" "$@" >/dev/null
fi
JOBS=${CTUNE_JOBS:-$(nproc)}
cmake --build "$BUILD_DIR" -j "$JOBS" ${CTUNE_TARGETS:+--target $CTUNE_TARGETS}
